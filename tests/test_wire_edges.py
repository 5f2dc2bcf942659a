"""The wire's and ``validate``'s edges, met on both sides, over a value of every kind."""

from __future__ import annotations

import pytest

from fakeshard import HiddenBundle, MalformedBundle, wire
from fakeshard.testing._runner import same
from fakeshard.testing._surface import FRAME_MUTATIONS, MUTATIONS, base64_damage, frame_damage, text_damage
from tests import wire_edges

POOL = wire_edges.pool()


def _id(value):
    return f"{type(value).__name__}-{POOL.index(value)}"


@pytest.mark.parametrize("value", POOL, ids=_id)
@pytest.mark.parametrize("index", [0, 1, 2])
def test_a_reader_meets_each_edge_of_the_wire_section_on_both_sides(value, index):
    wire_edges.reader_edges(value, index)


@pytest.mark.parametrize("value", POOL, ids=_id)
def test_a_name_field_holding_an_array_or_an_object_is_refused(value):
    wire_edges.name_fields(value)


@pytest.mark.parametrize("what", wire_edges.BINARY_EDGES)
def test_misuse_of_the_data_plane_api_is_a_typed_error_or_an_allowed_answer(what):
    wire_edges.binary_edge(what)


@pytest.mark.parametrize("session_id, epoch", [("s", 0), ("模型-ü", 5), ("s\udc80", 0), ("", 0), (3, 0),
                                                ("s", -1), ("s", True), ("s", "1")])
def test_validate_holds_a_bundle_to_every_rule_on_both_sides(session_id, epoch):
    wire_edges.bundle_rules(session_id, epoch)


@pytest.mark.parametrize("value", POOL, ids=_id)
@pytest.mark.parametrize("mutation", MUTATIONS[1:])
def test_every_damage_to_a_text_form_is_refused(value, mutation):
    broken, limit = text_damage(value, 1, mutation)
    with pytest.raises(MalformedBundle):
        wire.loads(broken, max_chars=limit)


@pytest.mark.parametrize("value", POOL, ids=_id)
@pytest.mark.parametrize("mutation", FRAME_MUTATIONS[2:])
def test_every_damage_to_a_binary_form_is_refused(value, mutation):
    damaged, limit = frame_damage(value, 1, mutation)
    with pytest.raises(MalformedBundle):
        wire.loadb(damaged, max_bytes=limit)
    with pytest.raises(MalformedBundle):
        wire.loads(base64_damage(value, mutation))


@pytest.mark.parametrize("value", POOL, ids=_id)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_a_value_comes_back_from_every_binary_form(value, dtype):
    for back in (wire.loadb(wire.dumpb(value, dtype=dtype)),
                 wire.loads(wire.dumps(value, hidden="base64", dtype=dtype))):
        if dtype == "float16" and isinstance(value, HiddenBundle):
            assert back.array().shape == value.array().shape
        else:
            assert same(back, value)
