"""Engine factories: how the suites are pointed at an implementation.

A factory is any callable with :class:`FakeShardEngine`'s signature,
``factory(spec, *, seed=0, capacity_tokens=None, clock=None, faults=None)``,
named on the command line as ``module:callable``.
"""

from __future__ import annotations

import importlib
import os
from typing import Any, Callable, overload

from fakeshard._contract import ShardSpec
from fakeshard._protocol import ShardEngine

__all__ = [
    "DEFAULT_FACTORY",
    "ENV_VAR",
    "EngineFactory",
    "FactoryError",
    "evidence_class_of",
    "import_callable",
    "load_factory",
    "makes_fixture_choices",
    "option_or_env",
    "resolve_factory_name",
]

EngineFactory = Callable[..., Any]

#: The factory used when none is named.
DEFAULT_FACTORY = "fakeshard:FakeShardEngine"
#: The environment variable that names a factory.
ENV_VAR = "FAKESHARD_ENGINE"
_EVIDENCE_CLASSES = ("fixture", "real-model")


class FactoryError(Exception):
    """A factory name that cannot be imported, called, or yields no engine (an engine host the
    factory cannot use included: :class:`fakeshard.remote.HostError`)."""


@overload
def option_or_env(option: str | None, variable: str, default: str) -> str: ...
@overload
def option_or_env(option: str | None, variable: str, default: None = None) -> str | None: ...
def option_or_env(option: str | None, variable: str, default: str | None = None) -> str | None:
    """An option given on the command line, even empty (its reader refuses an empty one, rather
    than put something else in its place); else ``$variable`` if set to something; else
    ``default``."""
    if option is not None:
        return option
    return os.environ.get(variable) or default


def resolve_factory_name(option: str | None) -> str:
    """The option if given, else ``$FAKESHARD_ENGINE``, else the default."""
    return option or os.environ.get(ENV_VAR) or DEFAULT_FACTORY


def import_callable(name: str, what: str, error: type[Exception] = FactoryError) -> Any:
    """Import ``module:callable`` (the callable may be dotted), or raise ``error`` naming
    ``what`` it was meant to be and what went wrong, in one line."""
    module_name, sep, attr = name.partition(":")
    looks_like = ("a URL" if "://" in name else
                  "a path" if "/" in name or "\\" in name or name.endswith((".py", ".json", ".mjs")) else "")
    if looks_like:
        raise error(f"{what} {name!r} looks like {looks_like}; it takes a Python callable as module:callable "
                    "(a module on the import path, such as mypkg.adapter:make)")
    if not sep or not module_name or not attr:
        raise error(f"{what} {name!r} is not of the form module:callable")
    try:
        found: Any = importlib.import_module(module_name)
    except Exception as exc:  # an import can fail in any way; report it in one line
        raise error(f"{what} {name!r}: cannot import {module_name!r}: {type(exc).__name__}: {exc}") from None
    for part in attr.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise error(f"{what} {name!r}: {module_name!r} has no {attr!r}") from None
    if not callable(found):
        raise error(f"{what} {name!r} is not callable")
    return found


def load_factory(name: str) -> EngineFactory:
    """Import ``module:callable`` and check that it builds a contract engine.

    The check builds one small FULL engine and looks for every attribute of
    the :class:`~fakeshard.ShardEngine` protocol and a known
    ``evidence_class``; any failure is a :class:`FactoryError` naming it.
    """
    factory = import_callable(name, "engine factory")
    probe_spec = ShardSpec("factory-probe", n_layers=2, start_layer=0, end_layer=2)
    try:
        engine = factory(probe_spec, seed=0, capacity_tokens=None, clock=None, faults=None)
    except Exception as exc:
        raise FactoryError(f"engine factory {name!r} failed to build an engine: "
                           f"{type(exc).__name__}: {exc}") from None
    missing = [a for a in ("spec", "evidence_class", "capacity_tokens", "used_tokens", "prefill",
                           "decode", "cancel", "release", "restart", "session")
               if not hasattr(engine, a)]
    if missing or not isinstance(engine, ShardEngine):
        raise FactoryError(f"engine factory {name!r} builds {type(engine).__name__}, which lacks "
                           f"{', '.join(missing) or 'the ShardEngine protocol'}")
    if engine.evidence_class not in _EVIDENCE_CLASSES:
        raise FactoryError(f"engine factory {name!r}: evidence_class {engine.evidence_class!r} "
                           f"is not one of {_EVIDENCE_CLASSES}")
    return factory


def evidence_class_of(factory: EngineFactory) -> str:
    """The evidence class of the engines ``factory`` builds."""
    spec = ShardSpec("factory-probe", n_layers=2, start_layer=0, end_layer=2)
    return str(factory(spec).evidence_class)


def makes_fixture_choices(factory: EngineFactory) -> bool:
    """Whether ``factory``'s engines make the fixture's choices where the contract is silent.

    A factory states it with a true ``fixture_choices`` attribute (the
    project's own factories do: ``FakeShardEngine``, ``fakeshard.real``'s
    ``tiny_engine``, ``fakeshard.remote``'s served factories). The suites run
    their checks of those choices (error wording, ``fault_log``, exactly how
    a ``Malformed`` kind breaks an output, constructor argument checks) only
    on such engines; every other engine is judged by the contract alone.
    """
    return getattr(factory, "fixture_choices", False) is True
