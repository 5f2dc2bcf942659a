"""A ci campaign must reach every contract row, error code and fault kind."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import settings

from stateful import probes
from stateful.failover import FailoverMachine
from stateful.machines import FaultsMachine, MachineConfig, SessionsMachine
from stateful.regress import run_machine


def test_ci_campaign_reaches_every_probe(engine_factory, engine_factory_name, request):
    if settings.get_current_profile_name() != "ci":
        pytest.skip("the probe requirement is made of the ci profile's campaign")
    ran = getattr(request.config, "fakeshard_machines_ran", set())
    reached = Counter(getattr(request.config, "fakeshard_probes", {}).get(engine_factory_name, {}))
    for machine in (SessionsMachine, FaultsMachine, FailoverMachine):
        # Run here what did not run in this process (selected out, or on another xdist worker).
        if (engine_factory_name, machine.machine_name) not in ran:
            before = probes.reached.copy()
            config = MachineConfig.for_factory(engine_factory, engine_factory_name)
            run_machine(machine, config, save_dir=None)
            reached.update(probes.reached - before)
    assert probes.missing(reached) == [], f"unreached probes: {probes.missing(reached)}"
