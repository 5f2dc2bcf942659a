"""Every saved counterexample, replayed step by step on the engine under test (no search)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fakeshard.testing._regress import replay
from fakeshard.testing._trace import Trace

#: The checkout's saved counterexamples (``fakeshard.testing._trace.REGRESSIONS`` in a checkout).
REGRESSIONS = Path(__file__).with_name("regressions")
TRACES = sorted(REGRESSIONS.glob("*.json"))


@pytest.mark.parametrize("path", TRACES, ids=[p.stem for p in TRACES])
def test_saved_trace_replays(engine_factory, engine_factory_name, path):
    trace = Trace.load(path)
    result = replay(trace, engine_factory, engine_factory_name,
                    tolerance=getattr(engine_factory, "tolerance", 0.0))
    assert not result.failed, (
        f"{path.name} ({trace.note or 'no note'}) diverges at step {result.first_divergence}: "
        f"{result.message}")


def test_there_are_saved_traces():
    assert TRACES, f"no regression traces under {REGRESSIONS}"
