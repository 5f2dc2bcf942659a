"""Faults as a layer in front of any engine (``fakeshard._layer``): the same plan fires on the
same calls as an engine's own, with the same effects the contract's fault table gives, except
``MemoryPressure``, which a layer cannot apply and says so."""

from __future__ import annotations

import pytest
from hypothesis import settings

from fakeshard import (
    Crash,
    Delay,
    DropResponse,
    EngineCrashed,
    FakeShardEngine,
    FaultPlan,
    FaultRule,
    Malformed,
    MemoryPressure,
    ResponseLost,
    ShardSpec,
    StaleEpoch,
    TokenBundle,
    VirtualClock,
)
from fakeshard._layer import LAYER_FAULT_KINDS, FaultLayer, fault_kinds_of, layered, without_unapplied
from fakeshard.testing import _probes as probes
from fakeshard.testing import _profiles as profiles
from fakeshard.testing._machines import FaultsMachine, MachineConfig, SessionsMachine
from fakeshard.testing._registry import replay
from fakeshard.testing._regress import run_machine
from planted import CI_NO_SHRINK

SPEC = ShardSpec("layer", 4, 0, 4, hidden_size=4, vocab_size=64)

#: The fixture engine with its plans applied by a layer: the sound design every rule must pass.
layered_fixture = layered(FakeShardEngine)


class _CrashKeepsMemory(FaultLayer):
    """A layer whose Crash takes the node down without its memory lost (the restart is skipped)."""

    def _enter(self, op, session_id, epoch):
        drawn = self._faults.draw(op, session_id)
        if drawn.delay:
            self.clock.sleep(drawn.delay)
        if drawn.crash:
            self._down = True
        if self._down:
            raise EngineCrashed("down", session_id=session_id, epoch=epoch)
        return drawn

    def restart(self):
        with self._lock:
            self._down = False


def keeps_memory(spec, *, seed=0, capacity_tokens=None, clock=None, faults=None):
    clock = clock if clock is not None else VirtualClock()
    return _CrashKeepsMemory(FakeShardEngine(spec, seed=seed, capacity_tokens=capacity_tokens, clock=clock),
                             without_unapplied(faults), clock=clock)


keeps_memory.fault_kinds = LAYER_FAULT_KINDS


def _same(a, b):
    """Two engines' answers to one call: the same output, or errors of the same code and fields."""
    def run(call):
        try:
            return ("ok", call())
        except Exception as err:  # noqa: BLE001 - compared by code and fields
            return (getattr(err, "code", type(err).__name__), getattr(err, "session_id", None),
                    getattr(err, "epoch", None))
    return run(a) == run(b)


def test_a_layer_fires_the_same_plan_on_the_same_calls_as_the_engines_own():
    plan = FaultPlan((FaultRule(Delay(0.5), op="prefill", nth=1), FaultRule(Malformed("position"), op="decode", nth=2),
                      FaultRule(DropResponse(), op="any", nth=4, probability=0.5),
                      FaultRule(Crash(), op="decode", nth=4)), seed=7)
    own_clock, layer_clock = VirtualClock(), VirtualClock()
    own = FakeShardEngine(SPEC, clock=own_clock, faults=plan)
    layer = FaultLayer(FakeShardEngine(SPEC, clock=layer_clock), plan, clock=layer_clock)
    calls = [lambda e: e.prefill(TokenBundle("s", 0, 0, (1, 2))), lambda e: e.decode(TokenBundle("s", 0, 2, (3,))),
             lambda e: e.decode(TokenBundle("s", 0, 3, (4,))), lambda e: e.decode(TokenBundle("s", 0, 4, (5,))),
             lambda e: e.release("s", 0), lambda e: e.decode(TokenBundle("s", 0, 5, (6,))), lambda e: e.restart(),
             lambda e: e.prefill(TokenBundle("s", 1, 0, (1,))), lambda e: e.cancel("s", 0)]
    for call in calls:
        assert _same(lambda: call(own), lambda: call(layer))
        assert (own.crashed, own.used_tokens, own.session("s")) == \
            (layer.crashed, layer.used_tokens, layer.session("s"))
    assert own_clock.now() == layer_clock.now() == 0.5
    assert [(f.call, f.rule) for f in own.fault_log] == [(f.call, f.rule) for f in layer.fault_log]


def test_a_dropped_answer_was_applied_and_a_refused_call_keeps_its_error():
    layer = FaultLayer(FakeShardEngine(SPEC), FaultPlan((FaultRule(DropResponse(), op="any", count=None),)))
    with pytest.raises(ResponseLost):
        layer.prefill(TokenBundle("s", 1, 0, (1, 2)))
    assert layer.session("s").cached_tokens == 2
    with pytest.raises(StaleEpoch):
        layer.prefill(TokenBundle("s", 0, 0, (1,)))


def test_memory_pressure_is_refused_by_a_layer_and_left_out_by_its_factory():
    pressure = FaultPlan((FaultRule(MemoryPressure(), op="prefill"), FaultRule(Crash(), op="decode")))
    with pytest.raises(ValueError, match="MemoryPressure cannot be applied in front of an engine"):
        FaultLayer(FakeShardEngine(SPEC), pressure)
    engine = layered_fixture(SPEC, faults=pressure)
    assert engine.fault_plan.rules == (FaultRule(Crash(), op="decode"),)
    assert fault_kinds_of(layered_fixture) == LAYER_FAULT_KINDS and "MemoryPressure" not in LAYER_FAULT_KINDS
    assert fault_kinds_of(FakeShardEngine) >= LAYER_FAULT_KINDS | {"MemoryPressure"}
    plan = FaultPlan((FaultRule(Crash()),))
    assert without_unapplied(plan) is plan and without_unapplied(None) is None


def test_probes_of_an_unapplied_kind_are_not_required():
    kept = probes.required(kinds=LAYER_FAULT_KINDS)
    gone = probes.REQUIRED - kept
    assert {"fault:MemoryPressure", "cross:capacity:reserve+fit", "prefill:pressure",
            "cross:compute:stale+pressure", "cross:fault:MemoryPressure+ok"} <= gone
    assert all("MemoryPressure" in p or "reserve" in p or "pressure" in p for p in gone)
    assert "fault:Crash" in kept and "cross:capacity:append+full" in kept


@pytest.mark.parametrize("machine", [SessionsMachine, FaultsMachine], ids=lambda m: m.machine_name)
def test_the_engine_machines_pass_the_fixture_with_its_faults_in_a_layer(machine, tmp_path):
    config = MachineConfig.for_factory(layered_fixture, "tests.test_layer:layered_fixture")
    run_machine(machine, config, settings=settings(profiles.get("ci"), max_examples=150), save_dir=tmp_path)


def test_the_faults_machine_catches_a_layer_whose_crash_keeps_the_memory(tmp_path):
    """Under ``ci`` without Hypothesis's shrink phase, as every planted bug is caught (the
    step-removal reduction every saved trace gets keeps it short; shrinking took 80 s more)."""
    config = MachineConfig.for_factory(keeps_memory, "tests.test_layer:keeps_memory")
    with pytest.raises(AssertionError):
        run_machine(FaultsMachine, config, settings=settings(CI_NO_SHRINK, max_examples=300), save_dir=tmp_path)
    assert config.failures and len(list(tmp_path.glob("*.json"))) == 1
    assert replay(config.failures[-1], keeps_memory, "tests.test_layer:keeps_memory").failed
    assert not replay(config.failures[-1], layered_fixture, "tests.test_layer:layered_fixture").failed
