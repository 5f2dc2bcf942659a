"""The one catalogue of what the harness does with each machine's saved traces.

For every machine a :class:`Kind` says how its trace replays to a verdict (the saved-trace
tests, ``stateful/test_regressions.py``), how ``fakeshard replay`` runs it again and says so in
words, and how its timeline page is drawn.  This is the only place that looks at
``trace.machine`` to choose: the sequential machines (``sessions``, ``faults``, ``surface``,
``failover``, ``coordinator``) replay step by step (:mod:`fakeshard.testing._replay`); a
``parallel`` trace runs its program again and its history is checked again; a ``concurrent``
one runs its scenario again on virtual time; a ``program`` one needs its program.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Optional

from fakeshard.testing._concurrent import replay_concurrent
from fakeshard.testing._history import sequential_history
from fakeshard.testing._parallel import fill_history, replay_parallel
from fakeshard.testing._program import replay_program
from fakeshard.testing._replay import ReplayResult, replay_steps
from fakeshard.testing._reports import concurrent_report, parallel_report, program_report, replay_table
from fakeshard.testing._trace import Trace
from fakeshard.testing._view import page_history, saved_history

__all__ = ["KINDS", "SEQUENTIAL", "Again", "Kind", "Observer", "Replaying", "history", "history_of", "kind_of",
           "replay", "run_again"]


#: Called before the first step of a sequential replay (``i = 0``) and after each step ``i``.
Observer = Callable[[int, Any], None]


@dataclass(frozen=True)
class Replaying:
    """What a saved trace runs again with: an engine factory and its name and tolerance; for a
    coordinator's trace, another coordinator than the one it names (``coordinator``); for a
    program's, the program to run (``coordinator_cmd``; ``None``: the one it names)."""

    factory: Callable[..., Any]
    factory_name: str
    tolerance: float = 0.0
    coordinator: Optional[str] = None
    coordinator_cmd: Optional[str] = None


@dataclass(frozen=True)
class Again:
    """A saved trace run again: whether it failed, and the run in words."""

    failed: bool
    report: str


@dataclass(frozen=True)
class Kind:
    """What the harness does with one machine's traces."""

    #: The trace replayed to a verdict: ``replay(trace, replaying, stop_at_failure, observe)``
    #: (the last two as :func:`fakeshard.testing._replay.replay_steps` takes them; a trace that
    #: is not a sequence of steps has no step to stop at or observe).
    replay: Callable[[Trace, Replaying, bool, Optional[Observer]], ReplayResult]
    #: The trace run again as ``fakeshard replay`` runs it (``path``: where it was read from).
    again: Callable[[Path, Trace, Replaying], Again]
    #: The history its timeline page draws (:mod:`fakeshard.testing._view`).
    history: Callable[[Trace, Replaying], dict[str, Any]]


def _sequential_replay(trace: Trace, r: Replaying, stop_at_failure: bool = True,
                       observe: Optional[Observer] = None) -> ReplayResult:
    return replay_steps(trace, r.factory, r.factory_name, r.tolerance, stop_at_failure, observe)


def _sequential_again(path: Path, trace: Trace, r: Replaying) -> Again:
    result = replay_steps(trace, r.factory, r.factory_name, r.tolerance, stop_at_failure=False)
    return Again(result.failed, replay_table(path, trace, result))


def _parallel_replay(trace: Trace, r: Replaying, stop_at_failure: bool = True,
                     observe: Optional[Observer] = None) -> ReplayResult:
    again = replay_parallel(trace, r.factory)
    return ReplayResult(trace, again.failed, 1 if again.failed else None, again.message,
                        "NotLinearizable" if again.failed else None)


def _parallel_again(path: Path, trace: Trace, r: Replaying) -> Again:
    again = replay_parallel(trace, r.factory)
    return Again(again.failed, parallel_report(path, trace, r.factory_name, again))


def _concurrent_replay(trace: Trace, r: Replaying, stop_at_failure: bool = True,
                       observe: Optional[Observer] = None) -> ReplayResult:
    run = replay_concurrent(trace, r.factory, r.coordinator, tolerance=r.tolerance).run
    return ReplayResult(trace, run.failure is not None, 1 if run.failure else None, run.failure,
                        "ConcurrentFailure" if run.failure else None)


def _concurrent_again(path: Path, trace: Trace, r: Replaying) -> Again:
    again = replay_concurrent(trace, r.factory, r.coordinator, tolerance=r.tolerance)
    return Again(again.run.failure is not None, concurrent_report(path, trace, r.factory_name, again))


def _program_replay(trace: Trace, r: Replaying, stop_at_failure: bool = True,
                    observe: Optional[Observer] = None) -> ReplayResult:
    raise ValueError("a program machine's trace replays with its program: fakeshard replay TRACE "
                     "--coordinator-cmd CMD")


def _program_again(path: Path, trace: Trace, r: Replaying) -> Again:
    again = replay_program(trace, r.factory, r.coordinator_cmd, tolerance=r.tolerance)
    return Again(again.run.failure is not None,
                 program_report(path, trace, r.factory_name, again, r.coordinator_cmd))


def _sequential_history(trace: Trace, r: Replaying) -> dict[str, Any]:
    return sequential_history(trace, r.factory, r.factory_name, r.tolerance)


def _naming(trace: Trace, r: Replaying) -> Trace:
    """A ``coordinator`` machine's trace naming ``r.coordinator``, where given, for its own."""
    return trace if r.coordinator is None else replace(trace, config={**trace.config, "coordinator": r.coordinator})


#: The sequential machines' kind: every machine not in :data:`KINDS`.
SEQUENTIAL = Kind(replay=_sequential_replay, again=_sequential_again, history=_sequential_history)

#: The machines whose traces are not replayed as the sequential machines' are, by name.
KINDS: dict[str, Kind] = {
    "coordinator": Kind(replay=lambda trace, r, stop, observe: _sequential_replay(_naming(trace, r), r, stop, observe),
                        again=lambda path, trace, r: _sequential_again(path, _naming(trace, r), r),
                        history=lambda trace, r: _sequential_history(_naming(trace, r), r)),
    "parallel": Kind(replay=_parallel_replay, again=_parallel_again,
                     history=lambda trace, r: page_history(trace, lambda b: fill_history(trace, r.factory, b))),
    "concurrent": Kind(replay=_concurrent_replay, again=_concurrent_again,
                       history=lambda trace, r: saved_history(trace)),
    # A program's run is kept whole, as a concurrent one is: its page reads it as saved.
    "program": Kind(replay=_program_replay, again=_program_again, history=lambda trace, r: saved_history(trace)),
}


def kind_of(trace: Trace) -> Kind:
    """What the harness does with ``trace``, by its machine."""
    return KINDS.get(trace.machine, SEQUENTIAL)


def replay(trace: Trace, factory: Callable[..., Any], factory_name: str, tolerance: float = 0.0,
           stop_at_failure: bool = True, observe: Optional[Observer] = None) -> ReplayResult:
    """Run ``trace`` again on ``factory``'s engines, with no search; the new trace and where it
    diverged.

    A sequential trace replays step by step on a fresh engine and model; ``observe(i, runner)``,
    if given, is called before the first step (``i = 0``) and after each step ``i``, and
    ``stop_at_failure=False`` runs the steps after a divergence too.  A ``parallel`` trace runs
    its program again, several times, on fresh engines, and fails when a history is not
    linearizable; a ``concurrent`` one runs its scenario again.  A ``program`` trace needs its
    program (``ValueError``; ``fakeshard replay TRACE --coordinator-cmd CMD``).
    """
    return kind_of(trace).replay(trace, Replaying(factory, factory_name, tolerance), stop_at_failure, observe)


def run_again(path: Path, trace: Trace, replaying: Replaying) -> Again:
    """``trace`` (read from ``path``) run again as ``fakeshard replay`` runs it, and in words."""
    return kind_of(trace).again(path, trace, replaying)


def history(trace: Trace, replaying: Replaying) -> dict[str, Any]:
    """The history a page draws for ``trace`` (sequential traces are replayed to read the model's
    state; parallel ones re-checked; concurrent and program ones read as saved)."""
    return kind_of(trace).history(trace, replaying)


def history_of(trace: Trace, factory: Callable[..., Any], factory_name: str,
               tolerance: float = 0.0) -> dict[str, Any]:
    """:func:`history` on ``factory``'s engines."""
    return history(trace, Replaying(factory, factory_name, tolerance))
