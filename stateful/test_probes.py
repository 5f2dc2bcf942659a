"""A ci campaign must reach every contract row, error code and fault kind."""

from __future__ import annotations

import pytest
from hypothesis import settings

from stateful import probes
from stateful.failover import FailoverMachine
from stateful.machines import FaultsMachine, MachineConfig, SessionsMachine
from stateful.regress import run_machine


def test_ci_campaign_reaches_every_probe(engine_factory, request):
    if settings.get_current_profile_name() != "ci":
        pytest.skip("the probe requirement is made of the ci profile's campaign")
    ran = getattr(request.config, "fakeshard_machines_ran", set())
    for machine in (SessionsMachine, FaultsMachine, FailoverMachine):
        if machine.machine_name not in ran:  # e.g. selected out, or run on another xdist worker
            config = MachineConfig(engine_factory, request.config.fakeshard_factory_name,
                                   tolerance=getattr(engine_factory, "tolerance", 0.0))
            run_machine(machine, config, save_dir=None)
    assert probes.missing() == [], f"unreached probes: {probes.missing()}"
