"""A derandomized campaign draws the same whatever local modules the process imported; the
machines' Malformed faults are fitted to what each node's output can show."""

from __future__ import annotations

import importlib
import sys
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fakeshard import Delay, FakeShardEngine, FaultPlan, FaultRule, Malformed, ShardSpec, TokenBundle
from fakeshard._faults import MALFORMED_KINDS
from fakeshard.testing import _coordinator_machine as coordinator_machine
from fakeshard.testing import _failover as failover
from fakeshard.testing import _probes as probes
from fakeshard.testing import _profiles as profiles
from fakeshard.testing._concurrent import scenarios
from fakeshard.testing._coordinator_machine import CoordinatorMachine
from fakeshard.testing._draws import stable_draws
from fakeshard.testing._machines import MachineConfig, fit_malformed
from fakeshard.testing._regress import run_machine


def _wide_integers() -> list[int]:
    """What a derandomized test of wide integers draws (the kind of draw Hypothesis may take
    from a local module's constants)."""
    seen: list[int] = []

    @settings(derandomize=True, max_examples=300, database=None)
    @given(st.integers(0, 2**16))
    def draw(x: int) -> None:
        seen.append(x)

    draw()
    return seen


def _import_constants(tmp_path, name: str, offset: int) -> None:
    """A new local module whose source holds many integers of its own (Hypothesis keeps those
    of at least 100, once per process: each module here has other values)."""
    values = range(101 + offset, 65536, 331)
    (tmp_path / f"{name}.py").write_text("VALUES = [" + ", ".join(str(i) for i in values) + "]\n")
    sys.path.insert(0, str(tmp_path))
    try:
        importlib.import_module(name)
    finally:
        sys.path.remove(str(tmp_path))


def test_stable_draws_do_not_change_when_a_module_is_imported(tmp_path):
    with stable_draws():
        first = _wide_integers()
    _import_constants(tmp_path, "fakeshard_draws_constants_a", 1)
    with stable_draws():
        assert _wide_integers() == first


def test_without_stable_draws_an_import_changes_the_draws(tmp_path):
    """The control: what the pinning guards against is real in the Hypothesis in use."""
    from hypothesis.internal.conjecture import providers

    if not hasattr(providers, "_get_local_constants"):
        pytest.skip("this Hypothesis draws no constants from local modules")
    first = _wide_integers()
    _import_constants(tmp_path, "fakeshard_draws_constants_b", 2)
    assert _wide_integers() != first


def test_stable_draws_nest_and_restore_hypothesis():
    from hypothesis.internal.conjecture import providers

    original = getattr(providers, "_get_local_constants", None)
    with stable_draws():
        with stable_draws():
            pass
        if original is not None:
            assert providers._get_local_constants is not original
    assert getattr(providers, "_get_local_constants", None) is original


def _coordinator_campaign() -> tuple[int, int, Counter]:
    config = MachineConfig.for_factory(FakeShardEngine, "fakeshard:FakeShardEngine")
    before = probes.reached.copy()
    run_machine(CoordinatorMachine, config, settings=settings(profiles.get("ci"), max_examples=60), save_dir=None)
    return config.runs, config.steps, probes.reached - before


def test_a_kit_campaign_replays_exactly_after_other_modules_are_imported(tmp_path):
    first = _coordinator_campaign()
    _import_constants(tmp_path, "fakeshard_draws_constants_c", 3)
    assert _coordinator_campaign() == first


# -- Malformed faults fitted to a node's output ------------------------------------------------

_SPEC = ShardSpec("fit", 4, 0, 4, hidden_size=4, vocab_size=64)


def _broken(kind: str, last: bool) -> bool:
    """Whether ``Malformed(kind)`` on a prefill changes the output of a node whose output is a
    sample (``last``: all the layers) or a hidden bundle (the first two)."""
    spec = _SPEC if last else _SPEC.with_layers(0, 2)
    bundle = TokenBundle("s", 0, 0, (1, 2, 3))
    faulty = FakeShardEngine(spec, faults=FaultPlan((FaultRule(Malformed(kind), op="prefill"),)))
    return faulty.prefill(bundle) != FakeShardEngine(spec).prefill(bundle)


@pytest.mark.parametrize("last", [True, False], ids=["sample", "hidden"])
@pytest.mark.parametrize("kind", MALFORMED_KINDS)
def test_a_fitted_malformed_fault_breaks_its_nodes_output_and_the_rest_of_the_plan_stays(kind, last):
    delay = FaultRule(Delay(0.5), op="decode")
    plan = FaultPlan((FaultRule(Malformed(kind), op="prefill", nth=2, count=None, probability=0.5), delay), seed=7)
    fitted = fit_malformed(plan, last=last)
    rule, other = fitted.rules
    assert _broken(rule.fault.kind, last)
    assert (rule.op, rule.nth, rule.count, rule.probability, other, fitted.seed) == ("prefill", 2, None, 0.5, delay, 7)
    if _broken(kind, last):
        assert fitted == plan  # a kind the output can show is kept


class _Recorded:
    """An engine factory that keeps the spec and fault plan of every engine it makes."""

    def __init__(self) -> None:
        self.made: list[tuple[ShardSpec, FaultPlan]] = []

    def __call__(self, spec, *, seed=0, capacity_tokens=None, clock=None, faults=None):
        self.made.append((spec, faults))
        return FakeShardEngine(spec, seed=seed, capacity_tokens=capacity_tokens, clock=clock, faults=faults)


def _every_kind() -> FaultPlan:
    return FaultPlan(tuple(FaultRule(Malformed(kind)) for kind in MALFORMED_KINDS))


def _assert_every_malformed_fault_shows(made: list[tuple[ShardSpec, FaultPlan]]) -> None:
    assert made
    for spec, plan in made:
        last = spec.end_layer == spec.n_layers
        for rule in plan.rules:
            assert _broken(rule.fault.kind, last), (spec, rule)


def test_the_coordinator_machines_nodes_get_malformed_faults_their_outputs_show():
    factory = _Recorded()
    n = len(coordinator_machine.RANGES) * coordinator_machine.PER_STAGE
    coordinator_machine.CoordinatorRunner(factory, factory_name="f", coordinator="fakeshard.testing:reference", seed=0,
                                          plans=coordinator_machine._fitted([_every_kind()] * n))
    _assert_every_malformed_fault_shows(factory.made)


def test_the_failover_machines_nodes_get_malformed_faults_their_outputs_show():
    factory = _Recorded()
    plans = failover._fitted([_every_kind()] * failover.N_NODES)
    failover.FailoverRunner(factory, factory_name="f", seed=0, plans=plans)
    _assert_every_malformed_fault_shows(factory.made)


@settings(max_examples=40, database=None, deadline=None)
@given(scenarios())
def test_a_scenarios_nodes_get_malformed_faults_their_outputs_show(sc):
    for k, plan in enumerate(sc.plans):
        last = k // sc.replicas == sc.stages - 1
        for rule in plan.rules:
            if isinstance(rule.fault, Malformed):
                assert _broken(rule.fault.kind, last), (k, rule)


def test_a_run_hypothesis_throws_away_is_counted_as_discarded_and_no_other_is():
    from hypothesis.errors import StopTest

    from fakeshard.testing._machines import count_discarded

    config = MachineConfig.for_factory(FakeShardEngine, "fakeshard:FakeShardEngine")

    def ends_with(exc):
        try:
            if exc is not None:
                raise exc
        finally:
            count_discarded(config)  # where Hypothesis calls a machine's teardown

    for exc in (None, AssertionError("a failure found"), StopTest(0)):
        try:
            ends_with(exc)
        except (AssertionError, StopTest):
            pass
    assert config.discarded == 1


@pytest.mark.parametrize("machine", [failover.FailoverMachine, CoordinatorMachine])
def test_a_machines_examples_are_the_runs_hypothesis_counted(machine):
    # Both machines have rules that swarm testing can leave with none enabled and valid, so
    # Hypothesis starts runs it throws away; the campaign's row still reads ``max_examples``.
    config = MachineConfig.for_factory(FakeShardEngine, "fakeshard:FakeShardEngine")
    run_machine(machine, config, settings=settings(profiles.get("ci"), max_examples=30, stateful_step_count=10),
                save_dir=None)
    assert config.examples == 30
    assert config.runs == config.examples + config.discarded
