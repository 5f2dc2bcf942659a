"""Every saved counterexample, replayed step by step on the engine under test (no search)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fakeshard._factory import import_callable
from fakeshard.testing._registry import replay
from fakeshard.testing._trace import Trace

#: The checkout's saved counterexamples (``fakeshard.testing._trace.REGRESSIONS`` in a checkout).
REGRESSIONS = Path(__file__).with_name("regressions")
TRACES = sorted(REGRESSIONS.glob("*.json"))


@pytest.mark.parametrize("path", TRACES, ids=[p.stem for p in TRACES])
def test_saved_trace_replays(engine_factory, engine_factory_name, path):
    trace = Trace.load(path)
    problem = _needs(trace)
    if problem:
        pytest.skip(problem)
    result = replay(trace, engine_factory, engine_factory_name,
                    tolerance=getattr(engine_factory, "tolerance", 0.0))
    assert not result.failed, (
        f"{path.name} ({trace.note or 'no note'}) diverges at step {result.first_divergence}: "
        f"{result.message}")


def _needs(trace: Trace) -> str:
    """Why ``trace`` cannot replay on the engine alone (``""``: it can): a program's trace needs
    its program, and a coordinator's trace its coordinator, importable here."""
    if trace.machine == "program":
        return (f"a program machine's trace replays with its program "
                f"(fakeshard replay TRACE --coordinator-cmd {trace.config.get('coordinator_cmd', 'CMD')!r})")
    name = trace.config.get("coordinator") if trace.machine in ("coordinator", "concurrent") else None
    if name:
        try:
            import_callable(name, "coordinator factory", ImportError)
        except ImportError as exc:
            return f"its coordinator cannot be loaded here: {exc}"
    return ""


def test_there_are_saved_traces():
    assert TRACES, f"no regression traces under {REGRESSIONS}"
