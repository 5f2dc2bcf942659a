"""Test the tester through HTTP API v1: every planted host bug (``planted/hosts``, the Node.js
example host with one mistake each) is caught, by its machine under ``ci`` (no shrink phase)
with a short reduced trace that fails on the planted host and passes on the example host, or
by the engine check named. Skipped without ``node``."""

from __future__ import annotations

import os
import shutil

import pytest

pytest.importorskip("httpx", reason="an engine host is reached over HTTP: the extra 'serve'")
if shutil.which("node") is None:
    pytest.skip("needs Node.js (`node` on PATH; CI installs it)", allow_module_level=True)

from fakeshard.remote import Host, attached  # noqa: E402
from fakeshard.testing import checks  # noqa: E402
from fakeshard.testing._machines import MachineConfig  # noqa: E402
from fakeshard.testing._registry import replay  # noqa: E402
from fakeshard.testing._regress import run_machine  # noqa: E402
from planted import CI_NO_SHRINK, MACHINES  # noqa: E402
from planted.hosts import EXAMPLE_HOST, HOST_BUGS  # noqa: E402

pytestmark = pytest.mark.xdist_group("planted_hosts")

#: A reduced counterexample longer than this is not a short story.
MAX_STEPS = 12
#: The bugs whose catch by a machine takes minutes over HTTP (measured on two idle cores, see
#: planted/hosts/__init__.py): run with FAKESHARD_LONG_CATCHES=1; CI runs the rest.
LONG = os.environ.get("FAKESHARD_LONG_CATCHES") == "1"


@pytest.fixture(scope="module")
def example_host():
    with Host(f"node {EXAMPLE_HOST}") as running:
        yield running


def _params():
    for bug in HOST_BUGS:
        marks = [] if bug.seconds < 60 or LONG else [pytest.mark.skip(
            reason=f"its machine takes about {bug.seconds} s to catch it over HTTP: FAKESHARD_LONG_CATCHES=1 runs it"
                   + (f" ({bug.check} catches it in every run: test_a_long_catch_is_also_made_by_its_check)"
                      if bug.check else ""))]
        yield pytest.param(bug, id=bug.name, marks=marks)


@pytest.mark.parametrize("bug", [b for b in HOST_BUGS if b.check], ids=lambda b: b.name)
def test_a_long_catch_is_also_made_by_its_check(bug, example_host):
    """Where a machine's catch over HTTP takes minutes, an engine check catches the same bug at
    once, and passes on the example host."""
    with Host(bug.command) as host:
        with pytest.raises(AssertionError):
            getattr(checks, bug.check)(attached(host.control))
    getattr(checks, bug.check)(attached(example_host.control))


@pytest.mark.parametrize("bug", list(_params()))
def test_a_planted_host_bug_is_caught(bug, example_host, tmp_path):
    with Host(bug.command) as host:
        planted = attached(host.control)
        if bug.machine not in MACHINES:  # an engine check
            with pytest.raises(AssertionError):
                getattr(checks, bug.machine)(planted)
            getattr(checks, bug.machine)(attached(example_host.control))
            return
        config = MachineConfig(planted, f"planted host {bug.name}")
        with pytest.raises(AssertionError):
            run_machine(MACHINES[bug.machine], config, settings=CI_NO_SHRINK, save_dir=tmp_path,
                        note=f"planted host {bug.name} ({bug.rule})")
        assert config.failures, "the machine failed but left no trace"
        trace = config.failures[-1]
        assert len(trace.steps) <= MAX_STEPS, f"reduced trace has {len(trace.steps)} steps"
        assert len(list(tmp_path.glob("*.json"))) == 1
        assert replay(trace, planted, "planted host").failed
    assert not replay(trace, attached(example_host.control), "example host").failed


def test_at_least_eight_host_bugs_over_the_rules_all_in_nodejs():
    assert len(HOST_BUGS) >= 8
    assert all(bug.command.startswith("node ") for bug in HOST_BUGS)
    assert {"fencing", "tombstones", "accounting", "crash", "capacity", "validation", "lengths"} <= \
        {bug.rule.split(":")[0] for bug in HOST_BUGS}
