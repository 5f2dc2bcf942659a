"""Replaying a sequential trace: its steps run again on fresh engines, with no search.

Each sequential machine's trace (``sessions``, ``faults``, ``surface``, ``failover``,
``coordinator``) replays with its own step runner.  The other machines' traces replay as
:mod:`fakeshard.testing._registry` says.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from fakeshard.testing._coordinator_machine import CoordinatorRunner
from fakeshard.testing._failover import FailoverRunner
from fakeshard.testing._runner import EngineRunner
from fakeshard.testing._trace import Trace

__all__ = ["RUNNERS", "ReplayResult", "replay_steps"]


@dataclass
class ReplayResult:
    trace: Trace
    failed: bool
    #: 1-based index of the first step that diverged (or raised), if any.
    first_divergence: Optional[int]
    message: Optional[str]
    #: The type of what was raised there (``Divergence``, or an engine's stray exception).
    error_type: Optional[str] = None


#: The step runner that replays each machine's sequential traces; every runner has
#: ``from_trace(trace, factory, factory_name, tolerance)``.  A machine missing here replays with
#: the engine machines' runner (sessions, faults, surface).
RUNNERS: dict[str, Any] = {"failover": FailoverRunner, "coordinator": CoordinatorRunner}


def _runner_for(trace: Trace, factory: Callable[..., Any], factory_name: str, tolerance: float) -> Any:
    return RUNNERS.get(trace.machine, EngineRunner).from_trace(trace, factory, factory_name, tolerance)


def replay_steps(trace: Trace, factory: Callable[..., Any], factory_name: str,
                 tolerance: float = 0.0, stop_at_failure: bool = True,
                 observe: Optional[Callable[[int, Any], None]] = None) -> ReplayResult:
    """Run a sequential ``trace``'s steps on a fresh engine and model; the new trace and where it
    diverged.  ``observe(i, runner)``, if given, is called before the first step (``i = 0``) and
    after each step ``i``.  Any machine's trace: :func:`fakeshard.testing._registry.replay`."""
    runner = _runner_for(trace, factory, factory_name, tolerance)
    first: Optional[int] = None
    message: Optional[str] = None
    error_type: Optional[str] = None
    if observe is not None:
        observe(0, runner)
    for i, step in enumerate(trace.steps, 1):
        try:
            runner.run(step)
        except Exception as exc:  # a divergence, or the engine broke in a way the model never allows
            if first is None:
                first, message, error_type = i, f"{type(exc).__name__}: {exc}", type(exc).__name__
            if stop_at_failure:
                break
        finally:
            if observe is not None:
                observe(i, runner)
    if first is None:
        try:
            runner.finish()
        except Exception as exc:
            first, message = len(trace.steps), f"{type(exc).__name__}: {exc}"
            error_type = type(exc).__name__
    out = runner.trace
    out.note = trace.note
    out.failure = message
    return ReplayResult(out, first is not None, first, message, error_type)
