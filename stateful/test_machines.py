"""Run every machine against the engine factory under test."""

from __future__ import annotations

import pytest

from stateful.failover import FailoverMachine
from stateful.machines import FaultsMachine, MachineConfig, SessionsMachine
from stateful.regress import run_machine


@pytest.mark.parametrize("machine", [SessionsMachine, FaultsMachine, FailoverMachine],
                         ids=lambda m: m.machine_name)
def test_machine(engine_factory, request, machine):
    config = MachineConfig(engine_factory, request.config.fakeshard_factory_name,
                           tolerance=getattr(engine_factory, "tolerance", 0.0))
    run_machine(machine, config)
    assert config.runs > 0 and config.steps > 0
    ran = getattr(request.config, "fakeshard_machines_ran", set())
    ran.add(machine.machine_name)
    request.config.fakeshard_machines_ran = ran
