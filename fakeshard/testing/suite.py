"""The campaign as pytest tests: every machine and every engine check against the engine factory under test.

This module ships with the package, so a campaign runs from an installed wheel::

    python3 -m pytest --pyargs fakeshard.testing.suite --engine mypkg.adapter:make

(``fakeshard check`` runs it under coverage).  The fakeshard checkout collects
the same tests through ``stateful/test_machines.py`` and ``stateful/test_probes.py``.
The probe check comes last: it adds up what the machines before it reached.
"""

from __future__ import annotations

from collections import Counter

import pytest

from fakeshard.testing import _probes as probes
from fakeshard.testing import _profiles as profiles
from fakeshard.testing import checks
from fakeshard.testing._campaign import machine_settings, reporter_for, traces_dir, whole_profile, worker_seed
from fakeshard.testing._concurrent import ConcurrentFailure, builds_async, run_concurrent
from fakeshard.testing._coordinator_machine import FAULT_OUTCOMES, CoordinatorMachine
from fakeshard.testing._failover import FailoverMachine
from fakeshard.testing._lengths import longest_of
from fakeshard.testing._machines import FaultsMachine, MachineConfig, SessionsMachine
from fakeshard.testing._parallel import run_parallel
from fakeshard.testing._program import ProgramSettings, run_program
from fakeshard.testing._regress import run_machine
from fakeshard.testing._surface import SurfaceMachine
from fakeshard.testing.plugin import DEFAULT_COORDINATOR, RUN

#: The kit's own coordinators: their traces replay on an engine alone, among a checkout's regressions.
KIT_COORDINATORS = frozenset({DEFAULT_COORDINATOR, "fakeshard.testing:reference_async",
                              "fakeshard.testing._async_coordinator:reference_async"})

__all__ = ["test_ci_campaign_reaches_every_probe", "test_engine_passes_check", "test_machine",
           "test_machine_concurrent", "test_machine_coordinator", "test_machine_parallel", "test_machine_program"]


#: The engine checks as test parameters, each marked with the fault kinds it needs
#: (``needs_faults``), then the checks of a node's HTTP layer (``needs_http_nodes``: they run on
#: engine hosts and served nodes, and skip, saying so, on engines in process).
CHECKS = [pytest.param(check, id=check.__name__,
                       marks=pytest.mark.needs_faults(*sorted(getattr(check, "fault_kinds_needed", ()))))
          for check in checks.ENGINE_CHECKS] + \
         [pytest.param(check, id=check.__name__, marks=pytest.mark.needs_http_nodes)
          for check in checks.HTTP_CHECKS]


@pytest.mark.parametrize("check", CHECKS)
def test_engine_passes_check(engine_factory, check):
    """The engine checks of :mod:`fakeshard.testing.checks`: fixed cases at the contract's edges."""
    check(engine_factory)


# The longest machine first (failover: 74 of the main job's 248 CPU seconds, measured at e5e44cf):
# under ``-n 2`` a worker takes the next test as it frees, so the longest starting last would run
# on after the other worker had finished.
@pytest.mark.parametrize("machine", [FailoverMachine, SessionsMachine, FaultsMachine, SurfaceMachine],
                         ids=lambda m: m.machine_name)
def test_machine(engine_factory, engine_factory_name, request, machine):
    run = request.config.stash[RUN]
    reporter = reporter_for(machine.machine_name)
    config = MachineConfig.for_factory(engine_factory, engine_factory_name,
                                       on_step=reporter.tick if reporter else None)
    before = probes.reached.copy()
    failed = True
    try:
        run_machine(machine, config, settings=machine_settings(),
                    seed=worker_seed(), save_dir=traces_dir())
        failed = False
    finally:
        reached = probes.reached - before
        run.probes.setdefault(engine_factory_name, Counter()).update(reached)
        if reporter is not None:
            reporter.finish(config, reached, failed, config.saved, run.classes[engine_factory_name])
    assert config.runs > 0 and config.steps > 0
    run.machines_ran.add((engine_factory_name, machine.machine_name))


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
                            request.config.stash[RUN].classes[engine_factory_name])
    assert programs > 0 and config.steps > 0


def test_machine_coordinator(engine_factory, engine_factory_name, coordinator_factory, request):
    """Machine ``coordinator``: the coordinator under test (``--coordinator``) over engines from
    the factory, with faults and crashes; every stream fault-free, nothing held after release,
    no call after release, every step within the stated budget."""
    if builds_async(coordinator_factory):
        pytest.skip("an async coordinator: the concurrent machine tests it")
    reporter = reporter_for("coordinator")
    config = MachineConfig.for_factory(engine_factory, engine_factory_name, coordinator=coordinator_factory,
                                       coordinator_name=request.config.stash[RUN].coordinator_name,
                                       on_step=reporter.tick if reporter else None)
    before = probes.reached.copy()
    failed = True
    try:
        run_machine(CoordinatorMachine, config, settings=machine_settings(), seed=worker_seed(),
                    save_dir=traces_dir(request.config.stash[RUN].coordinator_name not in KIT_COORDINATORS))
        failed = False
    finally:
        reached = probes.reached - before
        if reporter is not None:
            reporter.finish(config, reached, failed, config.saved,
                            request.config.stash[RUN].classes[engine_factory_name])
    assert config.runs > 0 and config.steps > 0
    if profiles.is_ci() and whole_profile():  # a ci campaign puts the coordinator through every failing call
        from fakeshard._layer import fault_kinds_of

        # An out-of-memory answer comes from a MemoryPressure fault, which not every factory's engines apply.
        outcomes = FAULT_OUTCOMES - (set() if "MemoryPressure" in fault_kinds_of(engine_factory) else {"out_of_memory"})
        unseen = sorted(o for o in outcomes if not reached[f"coordinator:call:{o}"])
        assert not unseen, f"the coordinator campaign drew no call answered {', '.join(unseen)}"


def test_machine_concurrent(engine_factory, engine_factory_name, coordinator_factory, request):
    """Machine ``concurrent``: an async coordinator (``--coordinator``, else the kit's reference
    async one) with many sessions in flight over engines from the factory, under a nemesis on
    virtual time; every stream fault-free, nothing held after release, no call after release
    or to a node that left, every request within the budget (``--availability`` may require a
    share of answered requests)."""
    run = request.config.stash[RUN]
    _many_sessions(request, engine_factory, engine_factory_name, "concurrent",
                   lambda config, **kwargs: run_concurrent(config, **kwargs),
                   users_coordinator=run.coordinator_name not in KIT_COORDINATORS,
                   coordinator=coordinator_factory, coordinator_name=run.coordinator_name)


def test_machine_program(engine_factory, engine_factory_name, request):
    """Machine ``program``: a coordinator program (``--coordinator-cmd``, any language, speaking
    the stdio protocol) over nodes from the factory served on loopback, in real time, under a
    nemesis acting through the control API; the concurrent machine's checks, judged from the
    nodes' call log."""
    command = request.config.stash[RUN].coordinator_cmd
    if not command:
        pytest.skip("no coordinator program: give one with --coordinator-cmd")
    timeout = request.config.getoption("--request-timeout")
    program = ProgramSettings() if timeout is None else ProgramSettings(request_timeout=timeout)
    _many_sessions(request, engine_factory, engine_factory_name, "program",
                   lambda config, **kwargs: run_program(config, command, program=program, **kwargs),
                   users_coordinator=True)


def _many_sessions(request, engine_factory, engine_factory_name, machine, campaign, users_coordinator,
                   **config_kwargs):
    """Run a campaign of many sessions in flight (``campaign(config, settings=, save_dir=, seed=,
    availability=)``), reported as the machine ``machine``; its failure is the test's."""
    run = request.config.stash[RUN]
    reporter = reporter_for(machine)
    config = MachineConfig.for_factory(engine_factory, engine_factory_name,
                                       on_step=reporter.tick if reporter else None, **config_kwargs)
    before = probes.reached.copy()
    failed, notes, failure = True, [], None
    try:
        total = campaign(config, settings=machine_settings(), save_dir=traces_dir(users_coordinator),
                         seed=worker_seed(),
                         availability=request.config.getoption("--availability"))
        failed = False
        notes = total.notes()
    except ConcurrentFailure as exc:
        failure = str(exc)
    finally:
        if reporter is not None:
            reporter.finish(config, probes.reached - before, failed, config.saved, run.classes[engine_factory_name],
                            notes)
    if failure is not None:  # failed outside the handler: the report says it once, not chained to itself
        pytest.fail(failure, pytrace=False)
    assert config.runs > 0 and total.next_requests > 0


def test_ci_campaign_reaches_every_probe(engine_factory, engine_factory_name, request):
    if not profiles.is_ci():
        pytest.skip("the probe requirement is made of the ci profile's campaign")
    if not whole_profile():
        pytest.skip("the probe requirement is made of the ci profile's own size; FAKESHARD_MAX_EXAMPLES "
                    "or FAKESHARD_STEPS made this campaign smaller")
    run = request.config.stash[RUN]
    ran = run.machines_ran
    reached = Counter(run.probes.get(engine_factory_name, {}))
    for machine in (SessionsMachine, FaultsMachine, FailoverMachine):
        # Run here what did not run in this process (selected out, or on another xdist worker).
        if (engine_factory_name, machine.machine_name) not in ran:
            before = probes.reached.copy()
            config = MachineConfig.for_factory(engine_factory, engine_factory_name)
            run_machine(machine, config, save_dir=None)
            reached.update(probes.reached - before)
    from fakeshard._layer import fault_kinds_of

    unreached = probes.missing(reached, longest_of(engine_factory), fault_kinds_of(engine_factory))
    assert unreached == [], f"unreached probes: {unreached}"
    impossible = probes.impossible(reached)
    assert not impossible, ("reached crossings the contract makes impossible (the engine or the list is "
                            f"wrong): {', '.join(f'{p} ({probes.UNREACHABLE[p]})' for p in impossible)}")
