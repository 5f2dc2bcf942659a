"""Shared pytest wiring: which engine factories the contract suite and machines run on.

``--engine module:callable`` (repeatable) or ``FAKESHARD_ENGINE`` (comma-separated)
names the factories; every test that takes ``engine_factory`` runs once per
factory and is marked ``fixture`` or ``real_model`` by that engine's evidence class.
"""

from __future__ import annotations

import os

import pytest

from fakeshard.factory import (
    DEFAULT_FACTORY,
    ENV_VAR,
    FactoryError,
    evidence_class_of,
    load_factory,
    makes_fixture_choices,
)
from stateful import profiles

# The default profile; `--hypothesis-profile NAME` (Hypothesis's own option) overrides it.
profiles.load_default()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--engine", action="append", default=None,
        help=f"engine factory as module:callable, repeatable (default: ${ENV_VAR}, "
        f"comma-separated, else {DEFAULT_FACTORY})",
    )


def pytest_configure(config: pytest.Config) -> None:
    names = config.getoption("--engine") or \
        [n.strip() for n in os.environ.get(ENV_VAR, "").split(",") if n.strip()] or [DEFAULT_FACTORY]
    factories = {}
    for name in names:
        try:
            factories[name] = load_factory(name)
        except FactoryError as exc:
            raise pytest.UsageError(str(exc)) from None
    config.fakeshard_factories = factories  # type: ignore[attr-defined]
    config.fakeshard_classes = {n: evidence_class_of(f) for n, f in factories.items()}  # type: ignore[attr-defined]
    # The first factory's name and class, for reports that name one engine.
    config.fakeshard_factory_name = names[0]  # type: ignore[attr-defined]
    config.fakeshard_evidence_class = config.fakeshard_classes[names[0]]  # type: ignore[attr-defined]


def pytest_report_header(config: pytest.Config) -> list[str]:
    return [f"fakeshard engine factory: {name} (evidence class: {cls}; judged by "
            + ("the contract and the fixture's choices)" if makes_fixture_choices(factory)
               else "the contract alone)")
            for (name, cls), factory in zip(config.fakeshard_classes.items(),  # type: ignore[attr-defined]
                                            config.fakeshard_factories.values())]  # type: ignore[attr-defined]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Checks of a fixture choice skip, naming the choice, on engines judged by the contract alone."""
    names = {id(f): n for n, f in config.fakeshard_factories.items()}  # type: ignore[attr-defined]
    for item in items:
        marker = item.get_closest_marker("fixture_choice")
        callspec = getattr(item, "callspec", None)
        if marker is None or callspec is None or "engine_factory" not in callspec.params:
            continue
        factory = callspec.params["engine_factory"]
        if not makes_fixture_choices(factory):
            item.add_marker(pytest.mark.skip(
                reason=f"fixture choice, not the contract: {marker.args[0]} "
                       f"({names.get(id(factory), factory)} is judged by the contract alone)"))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run every test that takes ``engine_factory`` once per named factory, marked by class."""
    if "engine_factory" not in metafunc.fixturenames:
        return
    config = metafunc.config
    params = []
    for name, factory in config.fakeshard_factories.items():  # type: ignore[attr-defined]
        marker = "real_model" if config.fakeshard_classes[name] == "real-model" else "fixture"  # type: ignore[attr-defined]
        params.append(pytest.param(factory, id=name if len(config.fakeshard_factories) > 1 else None,  # type: ignore[attr-defined]
                                   marks=getattr(pytest.mark, marker)))
    metafunc.parametrize("engine_factory", params, scope="session")


@pytest.fixture(scope="session")
def engine_factory_name(request: pytest.FixtureRequest, engine_factory) -> str:
    """The ``module:callable`` name of the factory under test."""
    for name, factory in request.config.fakeshard_factories.items():
        if factory is engine_factory:
            return name
    raise LookupError("engine_factory is not one of the named factories")  # pragma: no cover
