"""Where traces are saved by default, and which saved traces the checkout's regressions replay."""

from __future__ import annotations

from pathlib import Path

import pytest

from fakeshard import FakeShardEngine, FaultPlan
from fakeshard.testing._campaign import USER_TRACES, traces_dir
from fakeshard.testing._concurrent import Client, Round, Scenario, make_trace, run_scenario
from fakeshard.testing._registry import replay
from fakeshard.testing._trace import REGRESSIONS, Trace
from stateful.test_regressions import _needs

ENGINE = "fakeshard:FakeShardEngine"
SCENARIO = Scenario(seed=1, stages=1, replicas=1, capacity=None, plans=(FaultPlan(),),
                    clients=(Client("a", 0.0, (Round([1, 2], 2),)),))


def _concurrent_trace(coordinator: str) -> Trace:
    run = run_scenario(FakeShardEngine, SCENARIO, _reference())
    return make_trace(SCENARIO, run, factory_name=ENGINE, coordinator_name=coordinator, evidence_class="fixture")


def _reference():
    from fakeshard.testing._async_coordinator import reference_async

    return reference_async


def test_traces_of_a_users_coordinator_go_to_the_working_folder_unless_asked(monkeypatch):
    monkeypatch.delenv("FAKESHARD_TRACES_DIR", raising=False)
    assert traces_dir() == REGRESSIONS and traces_dir(users_coordinator=True) == Path(".fakeshard", "traces")
    assert USER_TRACES != REGRESSIONS
    monkeypatch.setenv("FAKESHARD_TRACES_DIR", "/tmp/mine")
    assert traces_dir() == traces_dir(users_coordinator=True) == Path("/tmp/mine")


def test_a_program_trace_is_skipped_with_its_reason_and_replay_says_what_it_needs():
    trace = Trace(machine="program", engine_factory=ENGINE, evidence_class="fixture",
                  config={"scenario": SCENARIO.to_dict(), "coordinator_cmd": "node router.mjs", "check": "stream"})
    assert "replays with its program" in _needs(trace) and "'node router.mjs'" in _needs(trace)
    with pytest.raises(ValueError, match="--coordinator-cmd"):
        replay(trace, FakeShardEngine, ENGINE)


def test_a_concurrent_trace_replays_with_its_coordinator_or_is_skipped_when_it_cannot_be_loaded():
    kit = _concurrent_trace("fakeshard.testing._async_coordinator:reference_async")
    assert _needs(kit) == ""
    again = replay(kit, FakeShardEngine, ENGINE)
    assert not again.failed
    theirs = _concurrent_trace("mycompany_router.adapter:make")
    assert "its coordinator cannot be loaded here" in _needs(theirs) and "mycompany_router" in _needs(theirs)
