"""Testing the tester: every planted coordinator is caught by the coordinator machine, and
every sound variant of the reference passes it.

Each runs under the ``ci`` profile's settings without Hypothesis's shrink phase
(the machine's own step reduction still runs), as the planted engines do.  The
reduced trace must be a short story, and it must pass with the reference
coordinator, so that it pins the planted mistake and nothing else.
"""

from __future__ import annotations

import re

import pytest

from fakeshard import FakeShardEngine, FaultPlan, FaultRule, MemoryPressure
from fakeshard.testing._coordinator_machine import CoordinatorMachine, CoordinatorRunner, call_budget, load_coordinator
from fakeshard.testing._machines import MachineConfig
from fakeshard.testing._registry import replay
from fakeshard.testing._regress import run_machine
from fakeshard.testing._runner import Divergence
from fakeshard.testing._trace import Trace
from planted import CI_NO_SHRINK
from planted.coordinators import PLANTED
from tests.sound_coordinators import SOUND
from tests.test_planted import MAX_STEPS

ENGINE = "fakeshard:FakeShardEngine"
REFERENCE = "fakeshard.testing:reference"


def _config(name: str) -> MachineConfig:
    return MachineConfig.for_factory(FakeShardEngine, ENGINE, coordinator=load_coordinator(name),
                                     coordinator_name=name)


@pytest.mark.parametrize("planted", PLANTED, ids=[p.name for p in PLANTED])
def test_planted_coordinator_is_caught(planted, tmp_path):
    name = f"planted.coordinators:{planted.name}"
    config = _config(name)
    with pytest.raises(AssertionError):
        run_machine(CoordinatorMachine, config, settings=CI_NO_SHRINK, save_dir=tmp_path)
    trace = Trace.load(config.saved[-1])
    assert trace.config["coordinator"] == name and trace.machine == "coordinator"
    # Caught for the planted mistake, not for a slip in the planted code itself.
    assert not re.search(r"raised (ValueError|TypeError|AttributeError|KeyError|IndexError|NameError)",
                         trace.failure or ""), f"{planted.name}: {trace.failure}"
    assert len(trace.steps) <= MAX_STEPS, f"{planted.name}: reduced trace of {len(trace.steps)} steps"
    again = replay(trace, FakeShardEngine, ENGINE)
    assert again.failed, f"{planted.name}: the saved trace does not fail again when replayed"
    trace.config["coordinator"] = REFERENCE
    fixed = replay(trace, FakeShardEngine, ENGINE)
    assert not fixed.failed, f"{planted.name}'s trace fails with the reference coordinator too: {fixed.message}"


@pytest.mark.parametrize("name", SOUND)
def test_a_sound_coordinator_passes(name, tmp_path):
    """No false alarm: coordinators that clean up after failures (cancel on the route at the
    failed epoch, a fence at a new epoch on a node that answered OutOfMemory, a release on the
    node a crash makes them leave) or release on every engine pass under ``ci``."""
    config = _config(f"tests.sound_coordinators:{name}")
    run_machine(CoordinatorMachine, config, settings=CI_NO_SHRINK, save_dir=tmp_path)
    assert config.runs > 0 and config.steps > 0 and not config.saved


def _cleanup_runner(name: str) -> CoordinatorRunner:
    # A node that answers OutOfMemory on its first decode, everything else fault-free.
    plans = [FaultPlan(()) for _ in range(6)]
    plans[4] = FaultPlan((FaultRule(MemoryPressure(), op="decode"),))
    return CoordinatorRunner(FakeShardEngine, factory_name=ENGINE, coordinator=name, seed=0, plans=plans,
                             coordinator_factory=load_coordinator(name))


def test_the_budget_counts_cleanup_apart_and_says_why():
    # The case: an OutOfMemory, a cancel there at a new epoch, a replay above it.
    runner = _cleanup_runner("tests.sound_coordinators:fences_out_of_memory_at_a_new_epoch")
    for step in ({"op": "start", "session_id": "p", "prompt": [1, 2]}, {"op": "next", "session_id": "p"},
                 {"op": "next", "session_id": "p"}):
        runner.run(step)
    assert runner.trace.actual[-1] == {"outcome": "ok", "token": runner.sessions["p"].tokens[-1], "calls": 7,
                                       "faults": 1}
    assert call_budget("next", 1) == 6 and call_budget("next", 1, "cleanup") == 6
    assert call_budget("next", 0, "cleanup") == 0 and call_budget("release", 0, "cleanup") == 6
    assert call_budget("release", 0) == 0 and call_budget("start", 0, "cleanup") == 6
    assert call_budget("next", 2, "compute", own=False) == 6 and call_budget("next", 0, "cleanup", own=False) == 0
    # Cleanup on a step with no failure is over the budget, and the message says which and why.
    runner = _cleanup_runner("planted.coordinators:cleans_up_on_every_step")
    runner.run({"op": "start", "session_id": "p", "prompt": [1, 2]})
    with pytest.raises(Divergence, match=r"3 cleanup calls \(cancel, release\) for the step's session 'p' in one "
                                         r"step with 0 failing by a fault; the budget is 0: a call on each engine "
                                         r"\(N = 6\) for each failing call, none without one: node 1 cancel"):
        runner.run({"op": "next", "session_id": "p"})


def test_the_planted_mistakes_are_distinct():
    assert len(PLANTED) >= 10
    assert len({p.cls for p in PLANTED}) == len(PLANTED) == len({p.mistake for p in PLANTED})
