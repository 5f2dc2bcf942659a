"""fakeshard.wire: round trips for every value, and only MalformedBundle for bad text."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fakeshard import (
    CacheMiss,
    Crash,
    Delay,
    DropResponse,
    FaultPlan,
    FaultRule,
    HiddenBundle,
    Malformed,
    MalformedBundle,
    MemoryPressure,
    SampleBundle,
    TokenBundle,
    validate,
    wire,
)
from fakeshard._errors import ERROR_CODES
from fakeshard._faults import MALFORMED_KINDS, OPS
from tests.wire_edges import key_twice

ids = st.text(min_size=1, max_size=12)
naturals = st.integers(min_value=0, max_value=2**40)
finite = st.floats(allow_nan=False, allow_infinity=False)


@st.composite
def hidden_bundles(draw):
    rows, cols = draw(st.integers(1, 4)), draw(st.integers(1, 6))
    hidden = [[draw(finite) for _ in range(cols)] for _ in range(rows)]
    return HiddenBundle.sealed(draw(ids), draw(naturals), draw(naturals), draw(st.integers(1, 99)), hidden)


bundles = st.one_of(
    st.builds(TokenBundle, ids, naturals, naturals, st.lists(naturals, min_size=1, max_size=8).map(tuple)),
    hidden_bundles(),
    st.builds(SampleBundle, ids, naturals, st.integers(1, 2**40), naturals),
)
faults = st.one_of(
    st.builds(Delay, st.floats(0, 1e6, allow_nan=False)),
    st.builds(MemoryPressure, st.none() | naturals),
    st.builds(Malformed, st.sampled_from(MALFORMED_KINDS)),
    st.just(Crash()),
    st.just(DropResponse()),
)
rules = st.builds(
    FaultRule, faults, st.sampled_from(("any",) + OPS), st.none() | ids,
    st.integers(1, 100), st.none() | st.integers(1, 100), st.floats(0, 1),
)
plans = st.builds(FaultPlan, st.lists(rules, max_size=4).map(tuple), st.integers(-(2**63), 2**63 - 1))


@st.composite
def errors(draw):
    cls = draw(st.sampled_from(sorted(ERROR_CODES.values(), key=lambda c: c.code)))
    extra = {name: draw(naturals) for name in cls._extra}
    return cls(draw(st.text()), session_id=draw(st.none() | ids), epoch=draw(st.none() | naturals), **extra)


@given(st.one_of(bundles, plans, rules, errors()))
def test_round_trip(value):
    text = wire.dumps(value)
    data = json.loads(text)
    assert data["contract"] == "1" and isinstance(data["kind"], str)
    back = wire.loads(text)
    assert type(back) is type(value) and back == value
    assert wire.dumps(back) == text


def test_bytes_are_accepted():
    text = wire.dumps(SampleBundle("s", 1, 2, 3))
    assert wire.loads(text.encode()) == SampleBundle("s", 1, 2, 3)


def test_golden_layout_of_each_kind():
    """The wire layout is a format: pin one document of each kind."""
    plan = FaultPlan((FaultRule(MemoryPressure(4), op="prefill", nth=2, count=None, probability=0.5),), seed=9)
    assert wire.dumps(plan) == (
        '{"kind": "fault_plan", "contract": "1", "seed": 9, "rules": [{"fault": {"type": '
        '"memory_pressure", "reserve_tokens": 4}, "op": "prefill", "session_id": null, "nth": 2, '
        '"count": null, "probability": 0.5}]}'
    )
    assert wire.dumps(CacheMiss("m", session_id="s", epoch=2, expected=0, got=5)) == (
        '{"kind": "error", "contract": "1", "code": "cache_miss", "message": "m", '
        '"session_id": "s", "epoch": 2, "expected": 0, "got": 5}'
    )
    assert wire.dumps(HiddenBundle.sealed("s", 0, 1, 2, [[0.5, -1.0]])) == (
        '{"kind": "hidden_bundle", "contract": "1", "session_id": "s", "epoch": 0, "start_pos": 1, '
        '"layer": 2, "hidden": [[0.5, -1.0]], "checksum": "%s"}'
        % HiddenBundle.sealed("s", 0, 1, 2, [[0.5, -1.0]]).checksum
    )


def test_dumps_refuses_what_the_wire_does_not_carry():
    for junk in ({"kind": "token_bundle"}, None, HiddenBundle):
        with pytest.raises(TypeError) as info:
            wire.dumps(junk)
        assert str(info.value) == ("wire.dumps takes a bundle, FaultPlan, FaultRule or ShardError, "
                                   f"got {type(junk).__name__}")
    bundle = HiddenBundle.sealed("s", 0, 0, 1, [[0.25, 0.5]])
    for form in ("hex", None, "FLOATS"):
        with pytest.raises(ValueError) as info:
            wire.dumps(bundle, hidden=form)
        assert str(info.value) == f"hidden must be one of ('floats', 'base64'), got {form!r}"


GOOD = json.loads(wire.dumps(TokenBundle("s", 1, 0, (1, 2))))
GOOD_HIDDEN = json.loads(wire.dumps(HiddenBundle.sealed("s", 0, 0, 1, [[0.25, 0.5]])))
GOOD_PLAN = json.loads(wire.dumps(FaultPlan((FaultRule(Delay(1.0)),))))
GOOD_ERROR = json.loads(wire.dumps(CacheMiss("m", session_id="s", epoch=1, expected=0, got=2)))


def _with(doc, **changes):
    out = json.loads(json.dumps(doc))
    for key, value in changes.items():
        if value is ...:
            del out[key]
        else:
            out[key] = value
    return json.dumps(out)


BAD_TEXTS = [
    ("not json", "{nope", "not JSON"),
    ("empty", "", "not JSON"),
    ("array", "[1, 2]", "JSON object"),
    ("no kind", _with(GOOD, kind=...), "kind"),
    ("unknown kind", _with(GOOD, kind="tensor"), "kind"),
    ("kind type", _with(GOOD, kind=3), "kind"),
    ("old version", _with(GOOD, contract="0"), "contract version"),
    ("version as int", _with(GOOD, contract=1), "contract version"),
    ("missing field", _with(GOOD, epoch=...), "missing field 'epoch'"),
    ("extra field", _with(GOOD, priority=1), "unknown field"),
    ("string for int", _with(GOOD, epoch="1"), "epoch must be an integer"),
    ("float for int", _with(GOOD, epoch=1.5), "epoch must be an integer"),
    ("bool for int", _with(GOOD, epoch=True), "epoch must be an integer"),
    ("null for int", _with(GOOD, start_pos=None), "start_pos must be an integer"),
    ("tokens not a list", _with(GOOD, tokens="12"), "tokens must be an array"),
    ("token a string", _with(GOOD, tokens=[1, "2"]), r"tokens[1]"),
    ("empty tokens", _with(GOOD, tokens=[]), "tokens must be a non-empty"),
    ("negative epoch", _with(GOOD, epoch=-1), "epoch must be >= 0"),
    ("NaN", json.dumps(GOOD_HIDDEN).replace("0.25", "NaN"), "non-finite"),
    ("Infinity", json.dumps(GOOD_HIDDEN).replace("0.25", "Infinity"), "non-finite"),
    ("huge number", json.dumps(GOOD_HIDDEN).replace("0.25", "1" + "0" * 400), "too large"),
    ("int past 64 bits", _with(GOOD, epoch=2**63), "does not fit in 64 bits"),
    ("bad checksum", _with(GOOD_HIDDEN, checksum="00"), "checksum"),
    ("ragged hidden", _with(GOOD_HIDDEN, hidden=[[0.25, 0.5], [0.1]]), "shape"),
    ("bad fault type", json.dumps(GOOD_PLAN).replace('"delay"', '"meteor"'), "type must be one of"),
    ("fault field", json.dumps(GOOD_PLAN).replace('"seconds"', '"secs"'), "unknown field"),
    ("negative delay", json.dumps(GOOD_PLAN).replace("1.0}", "-1.0}"), "seconds"),
    ("rule op", json.dumps(GOOD_PLAN).replace('"any"', '"explode"'), "op"),
    ("rules not a list", _with(GOOD_PLAN, rules={}), "rules must be an array"),
    ("error code", _with(GOOD_ERROR, code="boom"), "code must be one of"),
    ("error missing got", _with(GOOD_ERROR, got=...), "missing field"),
    ("error extra", _with(GOOD_ERROR, detail="x"), "unknown field"),
    ("error epoch type", _with(GOOD_ERROR, epoch="1"), "epoch must be an integer"),
    ("deep nesting", "[" * 100000 + "]" * 100000, "nested too deeply"),
    ("not text", 42, "takes str or bytes"),
    ("bad utf-8", b"\xff\xfe{", "UTF-8"),
]


@pytest.mark.parametrize("name,text,match", BAD_TEXTS, ids=[c[0] for c in BAD_TEXTS])
def test_bad_text_is_malformed(name, text, match):
    with pytest.raises(MalformedBundle) as info:
        wire.loads(text)
    assert match in str(info.value), str(info.value)


# Each JSON type by the name an error message gives it (the contract's "names what was wrong").
JSON_TYPE_NAMES = [(None, "null"), (True, "a boolean"), ("1", "a string"), (1.5, "a number"), ([1], "an array"),
                   ({}, "an object")]


@pytest.mark.parametrize("value,name", JSON_TYPE_NAMES, ids=[n for _, n in JSON_TYPE_NAMES])
def test_a_wrong_type_is_named_by_its_json_type(value, name):
    with pytest.raises(MalformedBundle) as info:
        wire.loads(_with(GOOD, epoch=value))
    assert str(info.value) == f"wire: token_bundle.epoch must be an integer, got {name}"


def test_an_integer_where_text_belongs_is_named_an_integer():
    with pytest.raises(MalformedBundle) as info:
        wire.loads(_with(GOOD, session_id=3))
    assert str(info.value) == "wire: token_bundle.session_id must be a string, got an integer"


def _repeat_a_key(doc: dict, path: tuple, key: str) -> str:
    """``doc`` as JSON text, with ``key`` of the object at ``path`` written a second time, last."""
    target = doc
    for step in path:
        target = target[step]
    return key_twice(doc, path, key, target[key])


REPEATED = [
    ("top level", TokenBundle("s", 0, 0, (1,)), (), "session_id"),
    ("in an error", CacheMiss("m", session_id="s", epoch=0, expected=0, got=3), (), "got"),
    ("in a rule", FaultPlan((FaultRule(Crash(), op="prefill"),)), ("rules", 0), "op"),
    ("in a fault", FaultPlan((FaultRule(Delay(1.0)),)), ("rules", 0, "fault"), "seconds"),
    ("in hidden base64", HiddenBundle.sealed("s", 0, 0, 2, [[0.5] * 4]), ("hidden",), "dtype"),
]


@pytest.mark.parametrize("name,value,path,key", REPEATED, ids=[c[0] for c in REPEATED])
def test_an_object_naming_a_key_twice_is_refused_by_every_reader(name, value, path, key):
    """A reader elsewhere may keep the first of two values where Python keeps the last."""
    text = _repeat_a_key(json.loads(wire.dumps(value, hidden="base64")), path, key)
    assert json.loads(text) == json.loads(wire.dumps(value, hidden="base64"))  # the same value twice
    for read in (wire.loads, wire.loads_unchecked):
        with pytest.raises(MalformedBundle, match=f"names the key '{key}' twice"):
            read(text)
    with pytest.raises(wire.RepeatedKey):
        wire.read_json(text)


def test_a_frame_header_naming_a_key_twice_is_refused():
    frame = wire.dumpb(TokenBundle("s", 0, 0, (1, 2)))
    size = int.from_bytes(frame[4:8], "little")
    header = json.loads(frame[8:8 + size])

    def with_header(text: str) -> bytes:
        return frame[:4] + len(text.encode()).to_bytes(4, "little") + text.encode() + frame[8 + size:]

    with pytest.raises(MalformedBundle, match="names the key 'epoch' twice"):
        wire.loadb(with_header(_repeat_a_key(header, (), "epoch")))
    assert wire.loadb(with_header(json.dumps(header))) == TokenBundle("s", 0, 0, (1, 2))  # rebuilt alike


def test_oversized_text_is_refused_before_parsing():
    text = wire.dumps(TokenBundle("s", 0, 0, tuple(range(100))))
    with pytest.raises(MalformedBundle, match="over the limit"):
        wire.loads(text, max_chars=len(text) - 1)
    with pytest.raises(MalformedBundle, match="over the limit"):
        wire.loads(text.encode(), max_chars=10)
    assert wire.loads(text, max_chars=len(text)).tokens == tuple(range(100))
    # max_chars counts characters, however many bytes each takes in UTF-8 ("模型": 2 and 6).
    raw = json.dumps(json.loads(wire.dumps(TokenBundle("模型", 0, 0, (1,)))), ensure_ascii=False)
    for form in (raw, raw.encode("utf-8")):
        assert wire.loads(form, max_chars=len(raw)).session_id == "模型"
        with pytest.raises(MalformedBundle, match="over the limit"):
            wire.loads(form, max_chars=len(raw) - 1)


def test_nan_output_travels_and_is_refused_at_the_receiver():
    broken = HiddenBundle.sealed("s", 0, 0, 1, [[float("nan"), 0.0]])
    with pytest.raises(MalformedBundle, match="non-finite"):
        wire.loads(wire.dumps(broken))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300)
@given(st.one_of(st.text(), st.binary(), json_values.map(json.dumps)))
def test_junk_raises_only_malformed(text):
    try:
        wire.loads(text)
    except MalformedBundle:
        pass


def _mutations(doc):
    keys = sorted(doc)
    values = st.one_of(json_values, st.sampled_from([None, True, -1, 1.5, "1", [], {}]))
    drop = st.sampled_from(keys).map(lambda k: {kk: v for kk, v in doc.items() if kk != k})
    change = st.tuples(st.sampled_from(keys), values).map(lambda kv: {**doc, kv[0]: kv[1]})
    add = st.tuples(st.text(max_size=6), values).map(lambda kv: {**doc, kv[0]: kv[1]})
    return st.one_of(drop, change, add)


@settings(max_examples=300)
@given(st.sampled_from([GOOD, GOOD_HIDDEN, GOOD_PLAN, GOOD_ERROR]).flatmap(_mutations))
def test_mutated_documents_are_malformed_or_valid(doc):
    try:
        value = wire.loads(json.dumps(doc))
    except MalformedBundle:
        return
    # A mutation that happens to stay valid must read back as what it says.
    assert json.loads(wire.dumps(value)) == doc


@given(faults)
def test_a_fault_record_round_trips_on_its_own(fault):
    assert wire.fault_from_dict(json.loads(json.dumps(wire.fault_to_dict(fault)))) == fault


@pytest.mark.parametrize("junk", [None, 3, {}, {"type": "explode"}, {"type": "delay"},
                                  {"type": "delay", "seconds": "1"}, {"type": "crash", "extra": 1}])
def test_a_bad_fault_record_is_malformed(junk):
    with pytest.raises(MalformedBundle):
        wire.fault_from_dict(junk)


GOOD_B64 = json.loads(wire.dumps(HiddenBundle.sealed("s", 0, 0, 1, [[0.25, 0.5]]), hidden="base64"))


def _hidden_with(**changes):
    return _with(GOOD_B64, hidden=json.loads(_with(GOOD_B64["hidden"], **changes)))


# The whole message for each structural fault (BAD_TEXTS above checks a piece of each): the
# path of the bad field and what was found there.
EXACT = [
    ("hidden not rows", _with(GOOD_B64, hidden=5),
     "hidden_bundle.hidden must be an array of rows or an object, got an integer"),
    ("hidden row value", _with(GOOD_B64, hidden=[["a"]]), "hidden_bundle.hidden[0][0] must be a number, got a string"),
    ("hidden object keys", _hidden_with(extra=1),
     "hidden_bundle.hidden must have exactly the fields ['base64', 'dtype', 'shape'], "
     "got ['base64', 'dtype', 'extra', 'shape']"),
    ("dtype list", _hidden_with(dtype=[1]),
     "hidden_bundle.hidden.dtype must be one of ['float16', 'float32'], got [1]"),
    ("shape past 2**31", _hidden_with(shape=[2**31, 0], base64=""),
     "hidden_bundle.hidden.shape must be [rows, columns] of integers >= 0, got [2147483648, 0]"),
    ("shape past 2**32", _hidden_with(shape=[0, 2**32], base64=""),
     "hidden_bundle.hidden.shape must be [rows, columns] of integers >= 0, got [0, 4294967296]"),
    ("shape not an array", _hidden_with(shape=5), "hidden_bundle.hidden.shape must be [rows, columns] of integers "
     ">= 0, got 5"),
    ("shape of three", _hidden_with(shape=[1, 2, 1]), "hidden_bundle.hidden.shape must be [rows, columns] of integers "
     ">= 0, got [1, 2, 1]"),
    ("base64 not text", _hidden_with(base64=5), "hidden_bundle.hidden.base64 must be a string, got an integer"),
    ("base64 with a space", _hidden_with(base64="AACA PgAAAD8="),
     "hidden_bundle.hidden.base64 is not base64: Only base64 data is allowed"),
    ("base64 past its padding", _hidden_with(base64="AACAPgAAAD8=\n"),
     "hidden_bundle.hidden.base64 is not base64: Excess data after padding"),
    ("base64 short", _hidden_with(base64="AAAAAA=="),
     "hidden_bundle.hidden holds 4 bytes, but 1x2 float32 needs 8"),
    ("rule not object", _with(GOOD_PLAN, rules=[5]), "fault_plan.rules[0] must be an object, got an integer"),
    ("rule fault not object", _with(GOOD_PLAN, rules=[{**GOOD_PLAN["rules"][0], "fault": 5}]),
     "fault_plan.rules[0].fault must be an object, got an integer"),
    ("rule fault null", _with(GOOD_PLAN, rules=[{**GOOD_PLAN["rules"][0], "fault": None}]),
     "fault_plan.rules[0].fault must be an object, got null"),
    ("seed under 64 bits", _with(GOOD_PLAN, seed=-(2**63) - 1), "fault_plan.seed does not fit in 64 bits"),
    ("error code list", _with(GOOD_ERROR, code=[1]),
     "error.code must be one of ['cache_miss', 'cancelled', 'engine_crashed', 'malformed_bundle', 'out_of_memory', "
     "'position_mismatch', 'released', 'response_lost', 'stale_epoch'], got [1]"),
    ("error message type", _with(GOOD_ERROR, message=5), "error.message must be a string, got an integer"),
    ("error session type", _with(GOOD_ERROR, session_id=5), "error.session_id must be a string, got an integer"),
    ("error field type", _with(GOOD_ERROR, expected="0"), "error.expected must be an integer, got a string"),
    ("tokens not array", _with(GOOD, tokens="12"), "token_bundle.tokens must be an array, got a string"),
    ("session null", _with(GOOD, session_id=None), "token_bundle.session_id must be a string, got null"),
    ("not an object", "[1, 2]", "expected a JSON object, got an array"),
    ("nested too deeply", "[" * 100000 + "]" * 100000, "JSON is nested too deeply"),
    ("old contract", _with(GOOD, contract="0"), "contract version '0' is not '1'"),
    ("unknown kind", _with(GOOD, kind="tensor"),
     "kind must be one of ['fault_plan', 'fault_rule', 'hidden_bundle', 'sample_bundle', 'token_bundle', 'error'], "
     "got 'tensor'"),
    ("not text", 42, "wire.loads takes str or bytes, got int"),
]


@pytest.mark.parametrize("name,text,message", EXACT, ids=[c[0] for c in EXACT])
def test_a_structural_fault_is_named_whole(name, text, message):
    with pytest.raises(MalformedBundle) as info:
        wire.loads(text)
    assert str(info.value) == f"wire: {message}"


def test_the_edges_of_what_the_wire_takes():
    for seed in (-(2**63), 2**63 - 1):  # the 64-bit range, both ends included
        assert wire.loads(_with(GOOD_PLAN, seed=seed)).seed == seed
    assert wire.loads(_with(GOOD_ERROR, session_id=None)).session_id is None  # an error's ids may be null
    text = wire.dumps(TokenBundle("s", 0, 0, tuple(range(10)))).encode()
    assert wire.loads(text, max_chars=len(text)).tokens == tuple(range(10))  # bytes up to the limit itself
    for shape in ([0, 2], [1, 0]):  # an empty shape is structure the receiver refuses, not the reader
        back = wire.loads_unchecked(_hidden_with(shape=shape, base64=""))
        assert np.asarray(back.hidden).shape == tuple(shape)
        with pytest.raises(MalformedBundle):
            validate(back)


def _numbers_made_non_finite():
    """Every wire object's text with each of its numbers replaced by NaN, Infinity or -Infinity."""
    import re

    from fakeshard import Crash, Delay, FaultPlan, FaultRule, HiddenBundle, MemoryPressure, SampleBundle, TokenBundle

    values = [TokenBundle("s", 0, 0, (1, 2)), HiddenBundle.sealed("s", 1, 2, 1, [(0.5, -0.25, 0.0, 1.0)]),
              SampleBundle("s", 0, 1, 3), FaultRule(Crash()),
              FaultPlan((FaultRule(Delay(1.0), "decode", "s", 2, None, 0.5), FaultRule(MemoryPressure(2))))]
    values += [cls("m", session_id="s", epoch=1, **{n: 3 for n in cls._extra}) for cls in ERROR_CODES.values()]
    for value in values:
        text = wire.dumps(value)
        for number in re.finditer(r"(?<=[:\[, ])-?\d+(\.\d+)?(e-?\d+)?(?=[,\]}])", text):
            for constant in ("NaN", "Infinity", "-Infinity"):
                yield text[:number.start()] + constant + text[number.end():]


@pytest.mark.parametrize("strict", [True, False])
def test_a_non_finite_number_in_any_field_is_refused_by_the_field_s_own_check_too(monkeypatch, strict):
    # loads parses strictly (NaN and infinities are no JSON); each field's own check refuses them
    # as well, so the reader does not stand on one guard.
    if not strict:
        from fakeshard.wire import _read

        parse = _read.json_object
        monkeypatch.setattr(_read, "json_object", lambda text, strict: parse(text, False))
    texts = list(_numbers_made_non_finite())
    assert len(texts) > 100
    for text in texts:
        with pytest.raises(MalformedBundle):
            wire.loads(text)


@pytest.mark.parametrize("read", [wire.loads, wire.loads_unchecked], ids=["loads", "loads_unchecked"])
def test_a_text_starting_with_a_byte_order_mark_is_refused_naming_it(read):
    text = "\ufeff" + wire.dumps(TokenBundle("s", 0, 0, (1,)))
    with pytest.raises(MalformedBundle, match="BOM"):
        read(text)
