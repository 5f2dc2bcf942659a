"""Crossed conditions: what the model reads as holding together, and the probes' lists."""

from __future__ import annotations

from fakeshard import FakeShardEngine, FaultPlan, FaultRule, MemoryPressure, ShardSpec
from fakeshard.testing import _probes as probes
from fakeshard.testing._damage import BAD_INPUTS
from fakeshard.testing._model import CLOSE_ORDER, COMPUTE_ORDER, Model, Oracle

SPEC = ShardSpec("crossing-model", n_layers=2, start_layer=0, end_layer=2, hidden_size=4, vocab_size=64)


def _model(capacity=None, plan=FaultPlan()) -> Model:
    return Model(Oracle(FakeShardEngine, SPEC, 0), capacity=capacity, plan=plan)


def test_the_lists_agree_with_the_model_and_runner():
    assert probes.COMPUTE_CONDITIONS == COMPUTE_ORDER and probes.CLOSE_CONDITIONS == CLOSE_ORDER
    assert set(probes._BAD_KINDS) == set(BAD_INPUTS) | {"epoch", "session"}
    assert set(probes.UNREACHABLE) < probes.CROSSINGS
    assert all(reason for reason in probes.UNREACHABLE.values())
    assert probes.CROSSINGS - set(probes.UNREACHABLE) <= probes.REQUIRED


def test_a_stale_decode_is_also_a_miss_at_its_epoch():
    model = _model()
    assert model.compute("prefill", "s", 2, 0, [1, 2]).code == "ok"
    expected = model.compute("decode", "s", 1, 2, [3])
    assert expected.code == "stale_epoch" and expected.holds == ("stale", "nothing_held_miss")
    assert "cross:compute:stale+nothing_held_miss" in probes.crossings(
        "decode", expected.holds, expected.fired, expected.code, None, expected.allocation)


def test_a_mispositioned_call_that_would_not_fit_is_a_position_mismatch_first():
    model = _model(capacity=3)
    assert model.compute("prefill", "s", 0, 0, [1, 2]).code == "ok"
    expected = model.compute("prefill", "s", 0, 5, [1, 2, 3])
    assert expected.code == "position_mismatch"
    assert expected.holds == ("position_mismatch", "capacity")


def test_a_replace_counts_the_older_cache_as_free():
    model = _model(capacity=3)
    assert model.compute("prefill", "s", 0, 0, [1, 2, 3]).code == "ok"
    expected = model.compute("prefill", "s", 1, 0, [4, 5, 6])
    assert expected.code == "ok" and "capacity" not in expected.holds
    assert expected.allocation == "replace_older"
    names = probes.crossings("prefill", expected.holds, expected.fired, expected.code, None, expected.allocation)
    assert "cross:capacity:replace_older+fit" in names


def test_a_down_engine_with_a_bad_input_and_pressure():
    model = _model(plan=FaultPlan((FaultRule(MemoryPressure()),)))
    model.crashed = True
    expected = model.compute("prefill", "s", 0, 0, [1], valid=False)
    assert expected.code == "engine_crashed"
    assert expected.holds == ("down", "malformed", "pressure")
    names = probes.crossings("prefill", expected.holds, expected.fired, expected.code, "nan", "")
    assert {"cross:compute:down+malformed", "cross:compute:down+pressure", "cross:compute:malformed+pressure",
            "cross:down+bad:nan", "cross:fault:MemoryPressure+engine_crashed"} <= set(names)


def test_close_conditions():
    model = _model()
    assert model.close("release", "s", 3).code == "ok"
    expected = model.close("cancel", "s", 1, valid=False)
    assert expected.code == "malformed_bundle" and expected.holds == ("malformed", "stale")
