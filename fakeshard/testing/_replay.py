"""Replaying a saved trace: its steps run again on fresh engines, with no search.

Each machine's trace replays with its own step runner; a ``parallel`` trace runs its
program again, a ``concurrent`` one its scenario.  A ``program`` trace needs its program,
and replays with :func:`fakeshard.testing._program.replay_program`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from fakeshard.testing._concurrent import replay_concurrent
from fakeshard.testing._coordinator_machine import CoordinatorRunner
from fakeshard.testing._failover import FailoverRunner
from fakeshard.testing._parallel import replay_parallel
from fakeshard.testing._runner import EngineRunner
from fakeshard.testing._trace import Trace

__all__ = ["RUNNERS", "ReplayResult", "replay"]


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


def replay(trace: Trace, factory: Callable[..., Any], factory_name: str,
           tolerance: float = 0.0, stop_at_failure: bool = True,
           observe: Optional[Callable[[int, Any], None]] = None) -> ReplayResult:
    """Run ``trace``'s steps on a fresh engine and model; the new trace and where it diverged.

    A ``parallel`` trace runs its program again, several times, on fresh
    engines; it fails when a history is not linearizable.  ``observe(i, runner)``, if given, is
    called before the first step (``i = 0``) and after each step ``i`` (a sequential trace only).
    """
    if trace.machine == "parallel":
        again = replay_parallel(trace, factory)
        return ReplayResult(trace, again.failed, 1 if again.failed else None, again.message,
                            "NotLinearizable" if again.failed else None)
    if trace.machine == "concurrent":
        run = replay_concurrent(trace, factory, tolerance=tolerance).run
        return ReplayResult(trace, run.failure is not None, 1 if run.failure else None, run.failure,
                            "ConcurrentFailure" if run.failure else None)
    if trace.machine == "program":
        raise ValueError("a program machine's trace replays with its program: fakeshard replay TRACE "
                         "--coordinator-cmd CMD")
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
