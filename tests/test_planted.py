"""Test the tester: every planted bug is caught, with a short reduced trace.

Runs under the ``ci`` profile's settings whatever profile is loaded, so the
claim "the ci campaign catches it" is what is tested, except for Hypothesis's
own shrink phase: each step here runs an engine and a model, so shrinking takes
minutes per bug (measured: 42 s to 175 s).  The step-removal reduction that
every saved trace gets is what makes these traces short.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import pytest

from fakeshard.testing._failover import FailoverMachine
from fakeshard.testing._machines import MachineConfig
from fakeshard.testing._registry import replay
from fakeshard.testing._regress import run_machine
from planted import CI_NO_SHRINK, MACHINES
from planted.engines import BUGS

#: One xdist worker runs this module's tests (``--dist loadgroup``, in the project's addopts),
#: so the median check below mostly finds every planted bug's length already measured.
pytestmark = pytest.mark.xdist_group("planted")

#: A reduced counterexample longer than this is not a short story.
MAX_STEPS = 12
#: Each bug's reduced trace and the folder its saved trace went to, caught once in this process
#: whichever test asks first (xdist does not keep a group's order).
CAUGHT: dict[str, tuple[Any, Path]] = {}


def _caught(bug, tmp_path_factory):
    """The reduced trace of ``bug``, caught by its machine under ``ci`` (no shrink phase), and
    the folder holding the trace it saved."""
    if bug.name not in CAUGHT:
        save_dir = tmp_path_factory.mktemp(bug.name)
        config = MachineConfig(bug.factory, f"planted.engines:{bug.name}")
        with pytest.raises(AssertionError):
            run_machine(MACHINES[bug.machine], config, settings=CI_NO_SHRINK,
                        save_dir=save_dir, note=f"planted bug {bug.name} ({bug.rule})")
        assert config.failures, "the machine failed but left no trace"
        CAUGHT[bug.name] = (config.failures[-1], save_dir)
    return CAUGHT[bug.name]


@pytest.mark.parametrize("bug", BUGS, ids=[b.name for b in BUGS])
def test_planted_bug_is_caught(bug, tmp_path_factory):
    trace, save_dir = _caught(bug, tmp_path_factory)
    assert len(trace.steps) <= MAX_STEPS, f"reduced trace has {len(trace.steps)} steps"
    # The saved trace replays deterministically: it fails on the bug...
    saved = sorted(save_dir.glob("*.json"))
    assert len(saved) == 1
    assert replay(trace, bug.factory, "planted").failed
    # ...and passes on the fixture engine.
    from fakeshard import FakeShardEngine

    assert not replay(trace, FakeShardEngine, "fakeshard:FakeShardEngine").failed


def test_at_least_ten_bugs_over_every_rule():
    assert len(BUGS) >= 10
    assert {b.rule for b in BUGS} >= {"fencing", "tombstones", "accounting", "position checks",
                                       "determinism", "fault semantics", "crash"}


def test_median_reduced_length_is_short(tmp_path_factory):
    lengths = {bug.name: len(_caught(bug, tmp_path_factory)[0].steps) for bug in BUGS}
    median = statistics.median(lengths.values())
    print(f"\nreduced trace lengths: {dict(sorted(lengths.items()))}; median {median}")
    assert median <= 6


def test_failover_machine_catches_a_drifting_spare(tmp_path):
    """A node that computes differently after a restart poisons the spare pool: the
    failover machine's fault-free-stream invariant must notice (crashes come from the
    drawn plans, so the story is longer than the single-engine machines' ones)."""
    bug = next(b for b in BUGS if b.name == "drift_after_restart")
    config = MachineConfig(bug.factory, "planted.engines:drift_after_restart")
    with pytest.raises(AssertionError):
        run_machine(FailoverMachine, config, settings=CI_NO_SHRINK, save_dir=tmp_path)
    assert 0 < len(config.failures[-1].steps) <= 25
