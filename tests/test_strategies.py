"""fakeshard.testing.strategies: what each strategy draws keeps to the contract (or breaks it as named)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fakeshard import FakeShardEngine, MalformedBundle, Pipeline, ShardSpec, TokenBundle, validate, wire
from fakeshard._engine import SessionEngine
from fakeshard.testing import strategies as fs


@given(st.sampled_from(fs.ROLES).flatmap(lambda role: st.tuples(st.just(role), fs.specs(role=role))))
def test_specs_have_the_layer_range_of_their_role(role_and_spec):
    role, spec = role_and_spec
    assert 0 <= spec.start_layer < spec.end_layer <= spec.n_layers
    assert (spec.start_layer == 0) == (role in ("head", "full"))
    assert (spec.end_layer == spec.n_layers) == (role in ("tail", "full"))


@given(fs.specs(role="full"), fs.histories(vocab_size=16, max_size=12))
def test_a_drawn_history_generates_on_a_full_engine(spec, history):
    history = [t % spec.vocab_size for t in history]
    tokens = Pipeline([FakeShardEngine(spec)]).generate("s", history, 2)
    assert len(tokens) == 2 and all(0 <= t < spec.vocab_size for t in tokens)


@given(st.data(), st.sampled_from(fs.ROLES), st.sampled_from(["prefill", "decode"]))
def test_inputs_are_valid_and_an_engine_takes_a_prefill(data, role, op):
    spec = data.draw(fs.specs(role=role))
    bundle = data.draw(fs.inputs(spec, op))
    validate(bundle, spec.with_layers(0, spec.n_layers))
    assert isinstance(bundle, TokenBundle) == (spec.start_layer == 0)
    assert len(getattr(bundle, "tokens", None) or bundle.hidden) == 1 or op == "prefill"
    if op == "prefill":
        FakeShardEngine(spec).prefill(bundle)  # starts at 0 on a fresh engine: accepted


@given(st.data(), st.sampled_from(fs.ROLES))
def test_malformed_inputs_are_refused_as_malformed(data, role):
    spec = data.draw(fs.specs(role=role))
    kind, bundle = data.draw(fs.malformed_inputs(spec))
    engine = FakeShardEngine(spec)
    with pytest.raises(MalformedBundle):
        engine.prefill(bundle)
    assert engine.used_tokens == 0 and engine.session_ids() == (), kind


@given(st.data())
def test_outputs_are_valid_and_cross_the_wire(data):
    spec = data.draw(fs.specs(role="head"))
    hidden = data.draw(fs.hidden_bundles(spec))
    validate(hidden, spec)
    assert wire.loadb(wire.dumpb(hidden)) == hidden
    sample = data.draw(fs.sample_bundles(spec))
    validate(sample, spec)


@given(fs.fault_plans(session=st.none() | st.just("s")))
def test_fault_plans_round_trip_and_an_engine_takes_them(plan):
    assert wire.loads(wire.dumps(plan)) == plan
    engine = FakeShardEngine(ShardSpec("m", 2, 0, 2), faults=plan)
    assert isinstance(engine, SessionEngine) and engine.fault_plan == plan


def test_every_fault_kind_is_drawn():
    seen = set()

    @given(fs.faults())
    def collect(fault):
        seen.add(type(fault).__name__ if not hasattr(fault, "kind") else f"Malformed:{fault.kind}")

    collect()
    assert {"Crash", "DropResponse", "Delay", "MemoryPressure"} <= seen
    assert any(s.startswith("Malformed:") for s in seen)


def test_unknown_names_are_refused_when_the_strategy_is_built():
    spec = ShardSpec("m", 2, 0, 2)
    with pytest.raises(ValueError, match="role must be one of"):
        fs.specs(role="edge")
    with pytest.raises(ValueError, match="kind must be one of"):
        fs.malformed_inputs(spec, kind="wobbly")
    with pytest.raises(ValueError, match="op must be prefill or decode"):
        fs.inputs(spec, op="cancel")
