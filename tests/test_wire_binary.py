"""Binary hidden values: arrays in bundles, base64 in JSON, frames; the checksum's test vectors."""

from __future__ import annotations

import base64
import json
import struct

import numpy as np
import pytest
import xxhash
from hypothesis import given
from hypothesis import strategies as st

from fakeshard import (
    FakeShardEngine,
    HiddenBundle,
    MalformedBundle,
    SampleBundle,
    ShardSpec,
    TokenBundle,
    validate,
    wire,
)
from fakeshard._contract import hidden_checksum

# docs/contract.md, "The hidden checksum": these pin the algorithm for other languages.
VECTORS = [
    ("s1", 0, 0, 1, [[0.5, -0.25, 0.0, 1.0]], "312b2ef2fb97af6d"),
    ("s1", 3, 7, 2, [[0.5, -0.25, 0.0, 1.0], [0.1, 2.0, -3.5, 0.001]], "7b63b92c3c4e018d"),
    ("模型-ü", 1, 0, 5, [[-1.0, 0.999969482421875, 0.0, -0.0]], "f9b6158613c79956"),
    ("s\udc80", 0, 0, 1, [[0.5, -0.25, 0.0, 1.0]], "470ec5b3d13ac5eb"),  # a lone surrogate
]
FIRST_FRAME_HEADER = (b'{"kind":"hidden_bundle","contract":"1","session_id":"s1","epoch":0,"start_pos":0,'
                      b'"layer":1,"hidden":{"dtype":"float32","shape":[1,4]},"checksum":"312b2ef2fb97af6d"}')


@pytest.mark.parametrize("sid,epoch,start,layer,rows,checksum", VECTORS)
def test_checksum_vectors(sid, epoch, start, layer, rows, checksum):
    assert hidden_checksum(sid, epoch, start, layer, rows) == checksum
    assert hidden_checksum(sid, epoch, start, layer, np.array(rows, dtype=np.float32)) == checksum


def test_first_vector_frame_is_pinned_byte_for_byte():
    bundle = HiddenBundle.sealed("s1", 0, 0, 1, np.array([[0.5, -0.25, 0.0, 1.0]], dtype=np.float32))
    frame = wire.dumpb(bundle)
    assert frame == (b"FSB1" + struct.pack("<I", len(FIRST_FRAME_HEADER)) + FIRST_FRAME_HEADER
                     + bytes.fromhex("0000003f000080be000000000000803f"))
    assert len(FIRST_FRAME_HEADER) == 0xA4


def _head_output(width=64, n=5):
    spec = ShardSpec("wire-bin", 4, 0, 2, hidden_size=width)
    return FakeShardEngine(spec).prefill(TokenBundle("s", 2, 0, tuple(range(n))))


def test_engines_answer_with_frozen_float32_arrays_equal_to_their_rows():
    out = _head_output()
    assert isinstance(out.hidden, np.ndarray) and out.hidden.dtype == np.float32
    assert not out.hidden.flags.writeable
    with pytest.raises(ValueError):
        out.hidden[0, 0] = 1.0
    as_rows = HiddenBundle(out.session_id, out.epoch, out.start_pos, out.layer, out.rows(), out.checksum)
    assert as_rows == out and hash(as_rows) == hash(out) and validate(as_rows) is as_rows


def test_a_writable_array_is_copied_so_the_bundle_cannot_change():
    values = np.zeros((2, 4), dtype=np.float32)
    bundle = HiddenBundle.sealed("s", 0, 0, 1, values)
    values[0, 0] = 7.0
    assert bundle.hidden[0, 0] == 0.0 and validate(bundle) is bundle


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_frame_and_base64_round_trip(dtype):
    out = _head_output()
    for back in (wire.loadb(wire.dumpb(out, dtype=dtype)), wire.loads(wire.dumps(out, hidden="base64", dtype=dtype))):
        validate(back)
        if dtype == "float32":
            assert back == out
        else:  # rounded to half precision, resealed: valid, close, not equal
            assert back.hidden.dtype == np.float16
            assert np.allclose(back.hidden.astype(np.float32), out.hidden, atol=1e-3)


def test_float16_keeps_a_broken_checksum_broken():
    out = _head_output()
    broken = HiddenBundle(out.session_id, out.epoch, out.start_pos, out.layer, out.hidden, "0" * 16)
    with pytest.raises(MalformedBundle, match="checksum"):
        wire.loadb(wire.dumpb(broken, dtype="float16"))


def test_sizes_of_the_binary_forms():
    out = _head_output(width=256, n=32)
    raw = out.hidden.nbytes
    assert len(wire.dumpb(out)) <= 1.05 * raw
    assert len(wire.dumps(out, hidden="base64")) <= 1.4 * raw


def _raw_frame(header: bytes, payload: bytes = b"", size=None) -> bytes:
    """A frame of these header bytes and payload; ``size`` overrides the header length it states."""
    return b"FSB1" + struct.pack("<I", len(header) if size is None else size) + header + payload


def _frame(header: dict, payload: bytes) -> bytes:
    return _raw_frame(json.dumps(header).encode(), payload)


def _bad_frames():
    out = _head_output(width=8, n=2)
    good = wire.dumpb(out)
    (size,) = struct.unpack_from("<I", good, 4)
    header = json.loads(good[8:8 + size])
    payload = good[8 + size:]
    nan = np.array(out.hidden)
    nan[1, 3] = np.nan
    return {
        "wrong magic": b"FSB2" + good[4:],
        "truncated header": good[:8 + size - 3],
        "truncated payload": good[:-1],
        "trailing bytes": good + b"\0",
        "too short": good[:6],
        "header length past the end": b"FSB1" + struct.pack("<I", 2**31) + good[8:],
        "header not JSON": b"FSB1" + struct.pack("<I", 3) + b"{x}" + payload,
        "header not UTF-8": b"FSB1" + struct.pack("<I", 2) + b"\xff\xfe",
        "unknown dtype": _frame({**header, "hidden": {"dtype": "float64", "shape": [2, 8]}}, payload),
        "wrong shape": _frame({**header, "hidden": {"dtype": "float32", "shape": [3, 8]}}, payload),
        "negative shape": _frame({**header, "hidden": {"dtype": "float32", "shape": [-2, -8]}}, payload),
        "shape of three": _frame({**header, "hidden": {"dtype": "float32", "shape": [2, 4, 2]}}, payload),
        "base64 inside a frame": _frame({**header, "hidden": {"dtype": "float32", "shape": [2, 8],
                                                              "base64": ""}}, payload),
        "rows and a payload": _frame({**header, "hidden": [[0.0] * 8] * 2}, payload),
        "NaN": _frame(header, nan.astype("<f4").tobytes()),
        "payload on a sample": _frame(json.loads(wire.dumps(SampleBundle("s", 0, 1, 2))), b"\0\0\0\0"),
        "checksum": _frame({**header, "checksum": "0" * 16}, payload),
    }


@pytest.mark.parametrize("name", sorted(_bad_frames()))
def test_bad_frames_are_malformed(name):
    with pytest.raises(MalformedBundle):
        wire.loadb(_bad_frames()[name])


def test_an_oversized_frame_is_malformed():
    frame = wire.dumpb(_head_output())
    with pytest.raises(MalformedBundle, match="over the limit"):
        wire.loadb(frame, max_bytes=len(frame) - 1)
    assert wire.loadb(frame, max_bytes=len(frame)) == _head_output()


def test_bad_base64_is_malformed():
    doc = json.loads(wire.dumps(_head_output(width=8, n=2), hidden="base64"))
    for hidden in ({**doc["hidden"], "base64": "not base64!"},
                   {**doc["hidden"], "base64": base64.b64encode(b"\0" * 60).decode()},
                   {**doc["hidden"], "base64": 5},
                   {"dtype": "float32", "shape": [2, 8]},
                   {**doc["hidden"], "dtype": "int8"}):
        with pytest.raises(MalformedBundle):
            wire.loads(json.dumps({**doc, "hidden": hidden}))


@pytest.mark.parametrize("extra", ["=", "=="])
def test_padding_after_a_whole_quantum_is_malformed(extra):
    # 1 row of 3 float32 is 12 bytes: 16 characters, no padding, the last quantum whole.
    doc = json.loads(wire.dumps(HiddenBundle.sealed("s1", 0, 0, 1, [(0.5, -0.25, 1.0)]), hidden="base64"))
    code = doc["hidden"]["base64"]
    assert len(code) == 16 and not code.endswith("=")
    for reader in (wire.loads, wire.loads_unchecked):
        with pytest.raises(MalformedBundle, match="not a multiple of 4"):
            reader(json.dumps({**doc, "hidden": {**doc["hidden"], "base64": code + extra}}))


@given(st.binary(max_size=300))
def test_junk_is_malformed_and_nothing_else(data):
    for candidate in (data, b"FSB1" + data):
        try:
            wire.loadb(candidate)
        except MalformedBundle:
            pass
        try:
            wire.loads_unchecked(candidate, frame=True)
        except MalformedBundle:
            pass


@given(st.integers(0, 200), st.integers(0, 255))
def test_mutated_frames_are_malformed_or_valid(index, byte):
    frame = bytearray(wire.dumpb(_head_output(width=8, n=2)))
    frame[index % len(frame)] = byte
    try:
        validate(wire.loadb(bytes(frame)))
    except MalformedBundle:
        pass


def test_unchecked_reading_keeps_a_broken_bundle_for_its_receiver():
    out = _head_output(width=8, n=2)
    broken = HiddenBundle(out.session_id, out.epoch, out.start_pos, out.layer, out.hidden, "0" * 16)
    with pytest.raises(MalformedBundle):
        wire.loadb(wire.dumpb(broken))
    back = wire.loads_unchecked(wire.dumpb(broken), frame=True)
    assert back == broken
    token = TokenBundle("s", 0, 0, ("7", 2))
    assert wire.loads_unchecked(wire.dumps(token)) == token
    with pytest.raises(MalformedBundle):
        wire.loads_unchecked('{"kind": "fault_plan", "contract": "1"}')


# loads_unchecked: what a transport reads. Structure is checked and named; values are not.
_TOKEN = {"kind": "token_bundle", "contract": "1", "session_id": "s", "epoch": 0, "start_pos": 0,
          "tokens": [1, 2]}
_ERROR = {"kind": "error", "contract": "1", "code": "stale_epoch", "message": "old", "session_id": "s", "epoch": 1}
# loads_unchecked's cases: (name, data, whether it is a frame, message).
UNCHECKED_BAD = [
    ("not text", 42, False, "expected str or bytes, got int"),
    ("error of another contract", json.dumps({**_ERROR, "contract": "0"}), False,
     "contract version '0' is not '1'"),
    ("error without contract", json.dumps({k: v for k, v in _ERROR.items() if k != "contract"}), False,
     "contract version None is not '1'"),
    ("error frame with payload", _frame(_ERROR, b"\x00\x00\x80\x3f"), True,
     "a frame of kind 'error' carries no payload, got 4 bytes"),
    ("unknown kind", json.dumps({**_TOKEN, "kind": "tensor"}), False,
     "kind must be one of ['hidden_bundle', 'sample_bundle', 'token_bundle', 'error'], got 'tensor'"),
    ("kind not text", json.dumps({**_TOKEN, "kind": 3}), False,
     "kind must be one of ['hidden_bundle', 'sample_bundle', 'token_bundle', 'error'], got 3"),
    ("kind a list", json.dumps({**_TOKEN, "kind": [1]}), False,
     "kind must be one of ['hidden_bundle', 'sample_bundle', 'token_bundle', 'error'], got [1]"),
    ("not UTF-8", b"\xff\xfe", False, "'utf-8' codec can't decode byte 0xff in position 0: invalid start byte"),
    ("bad base64", json.dumps({**json.loads(wire.dumps(HiddenBundle.sealed("s", 0, 0, 1, [[0.5]]), hidden="base64")),
                               "hidden": {"dtype": "float32", "shape": [1, 1], "base64": "!!"}}), False,
     "hidden_bundle.hidden.base64 is not base64: Only base64 data is allowed"),
    ("missing field", json.dumps({k: v for k, v in _TOKEN.items() if k != "epoch"}), False,
     "token_bundle must have exactly the fields ['contract', 'epoch', 'session_id', 'start_pos', 'tokens'], "
     "got ['contract', 'session_id', 'start_pos', 'tokens']"),
    ("payload on a token frame", _frame(_TOKEN, b"\x01\x02\x03\x04"), True,
     "a frame of kind 'token_bundle' carries no payload, got 4 bytes"),
    ("an epoch beyond 64 bits", json.dumps({**_TOKEN, "epoch": 2**63}), False,
     "token_bundle.epoch does not fit in 64 bits"),
    ("a token below 64 bits", json.dumps({**_TOKEN, "tokens": [1, -(2**63) - 1]}), False,
     "token_bundle.tokens[1] does not fit in 64 bits"),
]



def test_unchecked_reading_takes_bytes_and_text_up_to_the_limit():
    text = json.dumps(_TOKEN)
    token = TokenBundle("s", 0, 0, (1, 2))
    assert wire.loads_unchecked(text.encode("utf-8")) == token
    assert wire.loads_unchecked(bytearray(text.encode("utf-8"))) == token
    assert wire.loads_unchecked(text, max_bytes=len(text)) == token  # the limit itself is allowed
    with pytest.raises(MalformedBundle) as info:
        wire.loads_unchecked(text, max_bytes=len(text) - 1)
    assert str(info.value) == f"wire: text is {len(text)} bytes, over the limit of {len(text) - 1}"
    named = json.dumps({**_TOKEN, "session_id": "模型"}).encode("utf-8")  # UTF-8, whatever the locale
    assert wire.loads_unchecked(named).session_id == "模型"
    # The limit counts bytes, whether the text comes as bytes or as a str: "模型" is 2
    # characters and 6 bytes.
    raw = json.dumps({**_TOKEN, "session_id": "模型"}, ensure_ascii=False)
    for form in (raw, raw.encode("utf-8")):
        assert wire.loads_unchecked(form, max_bytes=len(raw.encode("utf-8"))).session_id == "模型"
        with pytest.raises(MalformedBundle, match="over the limit"):
            wire.loads_unchecked(form, max_bytes=len(raw.encode("utf-8")) - 1)


def test_unchecked_reading_takes_every_64_bit_integer_as_sent():
    for number in (2**63 - 1, -(2**63)):  # the ends of the range; a negative one is the receiver's to refuse
        back = wire.loads_unchecked(json.dumps({**_TOKEN, "start_pos": number, "tokens": [number]}))
        assert (back.start_pos, back.tokens) == (number, (number,))


def test_unchecked_reading_returns_an_error_as_the_error_and_keeps_nan():
    error = wire.loads_unchecked(json.dumps(_ERROR))
    assert type(error).__name__ == "StaleEpoch" and (error.session_id, error.epoch, str(error)) == ("s", 1, "old")
    broken = HiddenBundle.sealed("s", 0, 0, 1, [[float("nan"), 0.0]])
    back = wire.loads_unchecked(wire.dumps(broken))  # JSON's non-standard NaN travels
    assert back.checksum == broken.checksum and np.isnan(np.asarray(back.hidden, dtype=np.float64)[0, 0])
    with pytest.raises(MalformedBundle):
        validate(back)
    out = _head_output(width=8, n=2)
    assert wire.loads_unchecked(wire.dumps(out, hidden="base64")) == out  # base64 values without a frame


FAULT_BAD = [
    ("not an object", [1], "fault must be an object, got an array"),
    ("type not text", {"type": 7}, "fault.type must be one of ['crash', 'delay', 'drop_response', 'malformed', "
                                   "'memory_pressure'], got 7"),
    ("bad field", {"type": "delay", "seconds": "soon"}, "fault.seconds must be a number, got a string"),
    ("a tuple", (1,), "fault must be an object, got tuple"),  # a Python value no JSON type names
    ("type a list", {"type": [1]}, "fault.type must be one of ['crash', 'delay', 'drop_response', 'malformed', "
                                   "'memory_pressure'], got [1]"),
]



def test_binary_forms_refuse_what_has_none_by_name():
    bundle = HiddenBundle.sealed("s", 0, 0, 1, [[0.5, 0.25]])
    for dtype in ("float64", 3, ["float32"]):
        with pytest.raises(ValueError) as info:
            wire.dumpb(bundle, dtype=dtype)
        assert str(info.value) == f"dtype must be one of ['float16', 'float32'], got {dtype!r}"
    with pytest.raises(TypeError) as info:
        wire.dumpb(HiddenBundle("s", 0, 0, 1, (("a", "b"),), "0" * 16))
    assert str(info.value) == "wire: these hidden values have no binary form (hidden[0][0] is str 'a', not a number)"
    with pytest.raises(TypeError) as info:
        wire.dumps(HiddenBundle("s", 0, 0, 1, (1.0, 2.0), "0" * 16), hidden="base64")
    assert str(info.value) == "wire: hidden of shape (2,) has no binary form (rows x columns)"


@pytest.mark.parametrize("row", [np.array([0.5, 0.25], dtype=np.float32), np.array([0.5, 0.25]), range(2)])
def test_a_row_that_is_no_tuple_has_no_binary_form(row):
    # numpy reads it as a row of floats: in a frame, a bundle validate refuses would arrive valid.
    bundle = HiddenBundle("s", 0, 0, 1, (row,), "0" * 16)
    with pytest.raises(MalformedBundle, match=r"hidden\[0\]"):
        validate(bundle)
    for send in (lambda: wire.dumpb(bundle), lambda: wire.dumps(bundle, hidden="base64")):
        with pytest.raises(TypeError, match=rf"no binary form \(hidden\[0\] is {type(row).__name__}, not a tuple\)"):
            send()


def test_float16_overflow_travels_as_infinity_without_a_warning():
    # pytest turns warnings into errors here: the cast must not warn on values float16 cannot hold.
    bundle = HiddenBundle.sealed("s", 0, 0, 1, [[1e6, 0.5]])
    back = wire.loads_unchecked(wire.dumpb(bundle, dtype="float16"), frame=True)
    assert np.isinf(back.array()[0, 0]) and back.array()[0, 1] == 0.5
    with pytest.raises(MalformedBundle):
        validate(back)


def test_float16_keeps_a_wrong_checksum_wrong():
    # Only a checksum that matched its values is resealed over the rounded ones.
    broken = HiddenBundle(7, 0, 0, 1, ((0.5, 0.25),), "0" * 16)
    back = wire.loads_unchecked(wire.dumpb(broken, dtype="float16"), frame=True)
    assert back.checksum == "0" * 16 and back.session_id == 7


def test_bundles_with_nan_in_the_same_places_are_equal():
    # A Malformed("nan") output must equal its replay, in a list or a float32 array alike.
    rows = [[float("nan"), 0.5]]
    a = HiddenBundle.sealed("s", 0, 0, 1, rows)
    b = HiddenBundle.sealed("s", 0, 0, 1, np.array(rows, dtype=np.float32))
    assert a == b and b == a and a == HiddenBundle.sealed("s", 0, 0, 1, rows)
    assert a != HiddenBundle.sealed("s", 0, 0, 1, [[0.5, float("nan")]])


FRAME_BAD = [
    ("not bytes", "FSB1", "wire.loadb takes bytes, got str"),
    ("bad magic", b"XXXX\x00\x00\x00\x00{}", r"a frame starts with b'FSB1' and a 4-byte header length, "
                                              r"got b'XXXX\x00\x00\x00\x00'"),
    ("short", b"FSB1\x00\x00\x00", r"a frame starts with b'FSB1' and a 4-byte header length, got b'FSB1\x00\x00\x00'"),
    ("header past the end", _raw_frame(b"{}", size=3), "frame header of 3 bytes does not fit a frame of 10 bytes "
                                                    "(limit 1048576)"),
    ("payload on a token frame", _raw_frame(wire.dumpb(TokenBundle("s", 0, 0, (1,)))[8:], payload=b"\x00" * 4),
     "a frame of kind 'token_bundle' carries no payload, got 4 bytes"),
    ("rows in a frame", _frame(json.loads(wire.dumps(HiddenBundle.sealed("s", 0, 0, 1, [[0.25, 0.5]]))), b""),
     "hidden_bundle.hidden must be {dtype, shape} in a frame, got an array"),
    ("header length past 2**31", _raw_frame(b"{}", size=0xFFFFFFFF),
     "frame header of 4294967295 bytes does not fit a frame of 10 bytes (limit 1048576)"),
]



def test_frame_edges():
    with pytest.raises(MalformedBundle) as info:  # the shortest frame: its (empty) header is read
        wire.loadb(_raw_frame(b""))
    assert str(info.value).startswith("wire: not JSON: ")
    with pytest.raises(MalformedBundle) as info:
        wire.loads_unchecked(42, frame=True)
    assert str(info.value) == "wire: a frame is bytes, got int"
    with pytest.raises(MalformedBundle) as info:
        wire.loadb(_raw_frame(b'{"kind": "\xff"}'))
    assert str(info.value).startswith("wire: frame header is not UTF-8: ")
    token = TokenBundle("s", 0, 0, (1,))
    head = wire.dumpb(token)[8:]
    limit = 1024 * 1024
    assert wire.loadb(_raw_frame(head + b" " * (limit - len(head)))) == token  # a header of the limit itself
    with pytest.raises(MalformedBundle) as info:  # one byte over, however long the frame
        wire.loadb(_raw_frame(head + b" " * (limit + 1 - len(head)), payload=b"\x00" * 64))
    assert str(info.value) == f"wire: frame header of {limit + 1} bytes does not fit a frame of {limit + 73} bytes " \
                              f"(limit {limit})"


HIDDEN_ROWS_BAD = [
    ("no rows", (), "hidden must be a non-empty sequence of rows"),
    ("a row that is not a row", ((0.5,), 0.5), "hidden[1] must be a row of floats, got float"),
    ("empty rows", ((),), "hidden rows must not be empty"),
    ("a string", ((0.5, "x"),), "hidden[0][1] must be a float, got str"),
    ("a huge int", ((0.5, 2**2000),), "hidden[0][1] is an int of 2001 bits, too large for a float64"),
]


def _read_unchecked(frame):
    return lambda data: wire.loads_unchecked(data, frame=frame)


# Every structural fault a reader meets, and the message that names it.
WIRE_BAD = ([(f"unchecked: {name}", _read_unchecked(frame), data, message)
             for name, data, frame, message in UNCHECKED_BAD]
            + [(f"fault record: {name}", wire.fault_from_dict, data, message) for name, data, message in FAULT_BAD]
            + [(f"frame: {name}", wire.loadb, data, message) for name, data, message in FRAME_BAD])


@pytest.mark.parametrize("name,read,data,message", WIRE_BAD, ids=[c[0] for c in WIRE_BAD])
def test_a_reader_names_what_is_wrong(name, read, data, message):
    with pytest.raises(MalformedBundle) as info:
        read(data)
    assert str(info.value) == f"wire: {message}"


HIDDEN_ARRAY_BAD = [
    ("ints", np.zeros((1, 2), dtype=np.int32), "hidden must be an array of a float dtype, got int32"),
    ("one row flat", np.zeros(2, dtype=np.float32), "hidden must be a 2-D array of rows, got shape (2,)"),
    ("no rows", np.zeros((0, 2), dtype=np.float32), "hidden must be a non-empty sequence of rows"),
    ("empty rows", np.zeros((2, 0), dtype=np.float32), "hidden rows must not be empty"),
]

# Bad hidden values, as rows and as arrays: each named, the error carrying the bundle's identity.
HIDDEN_BAD = [(f"rows: {n}", rows, m, None) for n, rows, m in HIDDEN_ROWS_BAD] + \
    [(f"array: {n}", rows, m, None) for n, rows, m in HIDDEN_ARRAY_BAD]


# What only a spec shows (its hidden_size), and values that are not finite, in both forms.
_NAN_AT_1_2 = [[0.5, 0.25, 0.0, 1.0], [0.5, 0.25, float("nan"), 1.0]]
_SPEC = ShardSpec("m", 4, 1, 3, hidden_size=4)
HIDDEN_BAD += [
    ("rows: narrower than the spec", ((0.5, 0.25),), "hidden has shape mismatch: row 0 has 2 values, expected 4",
     _SPEC),
    ("array: narrower than the spec", np.zeros((3, 2), dtype=np.float32),
     "hidden has shape mismatch: row 0 has 2 values, expected 4", _SPEC),
    ("rows: nan", tuple(map(tuple, _NAN_AT_1_2)), "hidden[1][2] = nan is not finite", _SPEC),
    ("array: nan", np.array(_NAN_AT_1_2, dtype=np.float32), "hidden[1][2] = nan is not finite", _SPEC),
    ("array: -inf", np.array([[0.5, 0.25, 0.0, 1.0], [-np.inf, 0.0, 0.0, 0.0]]), "hidden[1][0] = -inf is not finite",
     None),
]


@pytest.mark.parametrize("name,rows,message,spec", HIDDEN_BAD, ids=[c[0] for c in HIDDEN_BAD])
def test_bad_hidden_values_are_named_and_the_error_carries_the_bundles_identity(name, rows, message, spec):
    with pytest.raises(MalformedBundle) as info:
        validate(HiddenBundle("s", 3, 0, 1, rows, "0" * 16), spec)
    assert str(info.value) == f"HiddenBundle: {message}"
    assert (info.value.session_id, info.value.epoch) == ("s", 3)


def test_rows_that_are_no_floats_are_named_and_the_error_carries_the_bundles_identity():
    with pytest.raises(MalformedBundle) as info:
        HiddenBundle("s", 3, 0, 1, (("x", 1.0),), "0" * 16).array()
    assert str(info.value) == "HiddenBundle: hidden must be rows of floats (hidden[0][0] is str 'x', not a number)"
    assert (info.value.session_id, info.value.epoch) == ("s", 3)


def test_hidden_values_are_read_only_wherever_they_come_from():
    # The data plane hands out views without copying: nobody may write through one.
    out = _head_output(width=8, n=2)
    assert out.hidden.flags.writeable is False
    assert HiddenBundle("s", 0, 0, 1, ((0.5, 0.25),), "0" * 16).array().flags.writeable is False
    assert wire.loadb(wire.dumpb(out)).hidden.flags.writeable is False


def test_a_read_only_view_of_writable_memory_is_copied():
    # Read-only on its face, but its owner (a writable array, a bytearray) could still change it.
    owner = np.zeros((2, 4), dtype=np.float32)
    view = owner.view()
    view.flags.writeable = False
    memory = bytearray(32)
    over_memory = np.frombuffer(memory, dtype=np.float32).reshape(2, 4)
    over_memory.flags.writeable = False
    for values, write in ((view, lambda: owner.__setitem__((0, 0), 7.0)),
                          (over_memory, lambda: memory.__setitem__(slice(0, 4), b"\x00\x00\x80\x3f"))):
        bundle = HiddenBundle.sealed("s", 0, 0, 1, values)
        write()
        assert values[0, 0] != 0.0  # the write reached the original
        assert bundle.hidden[0, 0] == 0.0 and validate(bundle) is bundle


def test_read_only_memory_is_kept_without_a_copy():
    values = np.frombuffer(bytes(32), dtype=np.float32).reshape(2, 4)
    alone = np.zeros((2, 4), dtype=np.float32)
    alone.flags.writeable = False
    for kept in (values, alone):
        assert HiddenBundle.sealed("s", 0, 0, 1, kept).hidden is kept


def test_the_two_forms_convert_each_way():
    rows = ((0.5, 0.1), (2.0, -3.5))
    from_rows = HiddenBundle.sealed("s", 0, 0, 1, rows)
    array = from_rows.array()
    assert array.dtype == np.float32 and array.shape == (2, 2) and array.flags.writeable is False
    assert array.tolist() == [[0.5, float(np.float32(0.1))], [2.0, -3.5]]
    # float32 holds 0.1 less exactly than a Python float, but the contract reads values as
    # float32 (the checksum, the wire, equality): the two are one bundle.
    from_array = HiddenBundle.sealed("s", 0, 0, 1, array)
    assert from_array.checksum == from_rows.checksum and from_array == from_rows
    assert from_array != HiddenBundle.sealed("s", 0, 0, 1, ((0.5, 0.1 + 2**-24), (2.0, -3.5)))
    assert from_array.rows() == ((0.5, float(np.float32(0.1))), (2.0, -3.5))
    assert HiddenBundle.sealed("s", 0, 0, 1, from_array.rows()) == from_array
    # A malformed bundle's contents come back as they are, for its receiver to refuse.
    flat = np.zeros(4, dtype=np.float32)
    assert HiddenBundle("s", 0, 0, 1, flat, "0" * 16).rows().shape == (4,)
    with pytest.raises(MalformedBundle) as info:
        HiddenBundle("s", 2, 0, 1, (0.5, 0.25), "0" * 16).array()
    assert str(info.value) == "HiddenBundle: hidden must be rows of floats (hidden must be 2-D, got shape (2,))"
    assert (info.value.session_id, info.value.epoch) == ("s", 2)


def test_a_bundle_of_no_rows_is_0x0_in_either_form():
    # Malformed (validate refuses it), but its checksum is defined, "0x0" in the header.
    empty_rows = HiddenBundle.sealed("s", 0, 0, 1, ())
    empty_array = HiddenBundle.sealed("s", 0, 0, 1, np.zeros((0, 0), dtype=np.float32))
    header = b"1\x00s\x000\x000\x001\x000x0\x00"
    assert empty_rows.checksum == empty_array.checksum == xxhash.xxh3_64(header).hexdigest()
    assert empty_rows == empty_array and empty_array == empty_rows
    assert empty_rows.array().shape == (0, 0)
    assert empty_rows != HiddenBundle.sealed("s", 0, 0, 1, np.zeros((1, 0), dtype=np.float32))
    with pytest.raises(MalformedBundle, match="non-empty"):
        validate(empty_rows)


def test_an_array_bundle_is_unequal_to_one_holding_what_is_no_number():
    values = np.zeros((1, 2), dtype=np.float32)
    array = HiddenBundle("s", 0, 0, 1, values, "0" * 16)
    for junk in ((("a", "b"),), ((0.0,), (0.0, 0.0)), ((None, 0.0),)):
        other = HiddenBundle("s", 0, 0, 1, junk, "0" * 16)
        assert array != other and other != array


def test_a_session_id_with_a_lone_surrogate_has_a_checksum():
    # JSON's "\\udc80" makes such a str; the header holds the code point's three UTF-8 bytes
    # (docs/contract.md, The hidden checksum): the table's vector is this hash of these bytes.
    header = b"1\x00s\xed\xb2\x80\x000\x000\x001\x001x4\x00"
    values = struct.pack("<4f", 0.5, -0.25, 0.0, 1.0)
    assert xxhash.xxh3_64(header + values).hexdigest() == "470ec5b3d13ac5eb"
    bundle = HiddenBundle.sealed("s\udc80", 0, 0, 1, [[0.5, -0.25, 0.0, 1.0]])
    assert validate(bundle) is bundle
    back = wire.loads(wire.dumps(bundle))
    assert back == bundle and back.session_id == "s\udc80"


@pytest.mark.parametrize("value", [None, "1.5", True, 1j])
def test_rows_holding_what_is_no_number_have_no_array_and_no_binary_form(value):
    # numpy alone reads None as NaN, "1.5" as 1.5 and True as 1.0: a bad bundle would pass on
    # as a good one.
    bundle = HiddenBundle("s", 3, 0, 1, ((0.5, value),), "0" * 16)
    with pytest.raises(MalformedBundle) as info:
        bundle.array()
    assert (info.value.session_id, info.value.epoch) == ("s", 3)
    assert f"hidden[0][1] is {type(value).__name__} {value!r}, not a number" in str(info.value)
    for send in (lambda: wire.dumpb(bundle), lambda: wire.dumps(bundle, hidden="base64")):
        with pytest.raises(TypeError, match="no binary form"):
            send()
    assert bundle != HiddenBundle("s", 3, 0, 1, np.array([[0.5, np.nan]], dtype=np.float32), bundle.checksum)
