"""Run every machine against the engine factory under test."""

from __future__ import annotations

from collections import Counter

import pytest

from stateful import probes
from stateful.campaign import machine_settings, reporter_for, traces_dir, worker_seed
from stateful.failover import FailoverMachine
from stateful.machines import FaultsMachine, MachineConfig, SessionsMachine
from stateful.parallel import run_parallel
from stateful.regress import run_machine
from stateful.surface import SurfaceMachine


@pytest.mark.parametrize("machine", [SessionsMachine, FaultsMachine, FailoverMachine, SurfaceMachine],
                         ids=lambda m: m.machine_name)
def test_machine(engine_factory, engine_factory_name, request, machine):
    reporter = reporter_for(machine.machine_name)
    config = MachineConfig.for_factory(engine_factory, engine_factory_name,
                                       on_step=reporter.tick if reporter else None)
    before = probes.reached.copy()
    failed = True
    try:
        run_machine(machine, config, settings=machine_settings(), seed=worker_seed(), save_dir=traces_dir())
        failed = False
    finally:
        reached = probes.reached - before
        by_factory = getattr(request.config, "fakeshard_probes", {})
        by_factory.setdefault(engine_factory_name, Counter()).update(reached)
        request.config.fakeshard_probes = by_factory
        if reporter is not None:
            reporter.finish(config, reached, failed, config.saved,
                            request.config.fakeshard_classes[engine_factory_name])
    assert config.runs > 0 and config.steps > 0
    ran = getattr(request.config, "fakeshard_machines_ran", set())
    ran.add((engine_factory_name, machine.machine_name))
    request.config.fakeshard_machines_ran = ran


def test_machine_parallel(engine_factory, engine_factory_name, request):
    """Machine ``parallel``: concurrent callers, and every history linearizable."""
    reporter = reporter_for("parallel")
    config = MachineConfig.for_factory(engine_factory, engine_factory_name,
                                       on_step=reporter.tick if reporter else None)
    before = probes.reached.copy()
    failed = True
    try:
        programs = run_parallel(config, settings=machine_settings(), save_dir=traces_dir(), seed=worker_seed())
        failed = False
    finally:
        if reporter is not None:
            reporter.finish(config, probes.reached - before, failed, config.saved,
                            request.config.fakeshard_classes[engine_factory_name])
    assert programs > 0 and config.steps > 0
