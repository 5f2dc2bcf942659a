"""Testing the tester: every planted coordinator is caught by the coordinator machine.

Each runs under the ``ci`` profile's settings without Hypothesis's shrink phase
(the machine's own step reduction still runs), as the planted engines do.  The
reduced trace must be a short story, and it must pass with the reference
coordinator, so that it pins the planted mistake and nothing else.
"""

from __future__ import annotations

import re

import pytest

from fakeshard import FakeShardEngine
from fakeshard.testing.coordinating import CoordinatorMachine, load_coordinator
from fakeshard.testing.machines import MachineConfig
from fakeshard.testing.regress import replay, run_machine
from fakeshard.testing.trace import Trace
from tests.planted_coordinators import PLANTED
from tests.test_planted import CI_NO_SHRINK, MAX_STEPS

ENGINE = "fakeshard:FakeShardEngine"
REFERENCE = "fakeshard.testing.coordinating:reference"


def _config(name: str) -> MachineConfig:
    return MachineConfig.for_factory(FakeShardEngine, ENGINE, coordinator=load_coordinator(name),
                                     coordinator_name=name)


@pytest.mark.parametrize("planted", PLANTED, ids=[p.name for p in PLANTED])
def test_planted_coordinator_is_caught(planted, tmp_path):
    name = f"tests.planted_coordinators:{planted.name}"
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


def test_the_planted_mistakes_are_distinct():
    assert len(PLANTED) >= 10
    assert len({p.cls for p in PLANTED}) == len(PLANTED) == len({p.mistake for p in PLANTED})
