"""The wire's and ``validate``'s edges, each met on both sides: the tables the test modules run.

Each function takes the value (or the case) it checks and raises ``AssertionError`` where the
library departs from the contract's Wire section, its Names and Session rules, or the
written choices.  ``tests/test_wire_edges.py`` runs them over :func:`pool`;
``tests/test_machine_checks.py`` breaks the library in one way at a time and shows each
is caught.
"""

from __future__ import annotations

import dataclasses
import json
import math
import warnings
from typing import Any, Callable, Optional

import numpy as np
import xxhash

from fakeshard import (
    Crash,
    Delay,
    FakeShardEngine,
    FaultPlan,
    FaultRule,
    HiddenBundle,
    MalformedBundle,
    MemoryPressure,
    SampleBundle,
    ShardError,
    ShardSpec,
    TokenBundle,
    validate,
    wire,
)
from fakeshard._errors import ERROR_CODES
from fakeshard.testing._model import well_typed
from fakeshard.testing._runner import damaged_checksum, same
from fakeshard.testing._surface import frame_parts, framed
from fakeshard.testing.checks import _names as names_the_call

#: The wire section's kinds, by the type of value, and the keys of its bundles and errors.
WIRE_KINDS = {"TokenBundle": "token_bundle", "HiddenBundle": "hidden_bundle", "SampleBundle": "sample_bundle",
              "FaultPlan": "fault_plan", "FaultRule": "fault_rule", "ShardError": "error"}
_IDENTITY = {"kind", "contract", "session_id", "epoch"}
WIRE_KEYS = {"token_bundle": _IDENTITY | {"start_pos", "tokens"}, "sample_bundle": _IDENTITY | {"pos", "token"},
             "hidden_bundle": _IDENTITY | {"start_pos", "layer", "hidden", "checksum"},
             "error": _IDENTITY | {"code", "message"}}


def pool() -> list[Any]:
    """Values of every kind the wire carries: bundles (an engine's answers among them), rules,
    plans and an error of every code.  The last hidden bundle holds float32 values that binary16
    does not hold, so a float16 hop changes them and the checksum."""
    spec = ShardSpec("edges-model", 4, 0, 2)
    engine = FakeShardEngine(spec, seed=1)
    tokens = TokenBundle("s", 0, 0, (1, 2))
    values: list[Any] = [
        tokens, engine.prefill(tokens), FakeShardEngine(spec.with_layers(2, 4)).prefill(
            HiddenBundle.sealed("t", 0, 0, 2, [(0.5, 0.0, 1.0, -1.0, 0.0, 0.0, 0.0, 0.0)])),
        FaultPlan((FaultRule(Delay(1.0)),), seed=3),
        FaultPlan((FaultRule(MemoryPressure(None), "prefill", "a", 2, 3, 0.5), FaultRule(Crash()))),
        HiddenBundle.sealed("s", 1, 2, 1, [(0.5, -0.25, 0.0, 1.0), (0.125, 0.0, 1.5, -2.0)]),
        FaultRule(MemoryPressure(2), "decode", "s", 2, None, 0.5),
        HiddenBundle.sealed("s", 3, 0, 2, np.array([[0.1, 1 / 3, -2.7, 1e-3]], dtype=np.float32)),
        SampleBundle("模型-ü", 7, 3, 9),
    ]
    for code, cls in sorted(ERROR_CODES.items()):
        values.append(cls(f"a {code}", session_id="s", epoch=4, **{name: 3 for name in cls._extra}))
    return values


def expect(ok: bool, build: Callable[[], Any], errors: tuple[type, ...] = (ValueError, TypeError)) -> Any:
    """``build()`` must return when ``ok``, raise one of ``errors`` when not."""
    if ok:
        return build()
    try:
        value = build()
    except errors:
        return None
    raise AssertionError(f"accepted what the contract refuses: {value!r}")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def wire_rows(value: Any) -> Any:
    """A JSON array as the wire's structural reading holds it: arrays of arrays as tuples of tuples."""
    return tuple(tuple(v) if isinstance(v, list) else v for v in value) if isinstance(value, list) else value


def contract_checksum(session_id: Any, epoch: Any, start_pos: Any, layer: Any, hidden: Any) -> str:
    """The hidden checksum as the contract's section writes it (its layout, not the library's code)."""
    values = np.array(hidden, dtype=np.float64)
    rows, cols = values.shape if values.ndim == 2 else (0, 0)  # no rows: 0x0
    header = f"1\0{session_id}\0{epoch}\0{start_pos}\0{layer}\0{rows}x{cols}\0"
    data = header.encode("utf-8", "surrogatepass") + values.astype("<f4").tobytes()
    return xxhash.xxh3_64(data).hexdigest()


def names_the_bundle(err: MalformedBundle, bundle: Any, what: str) -> None:
    """A refusal names the bundle's well-typed session id and epoch; otherwise each is the value or None."""
    names_the_call(err, bundle.session_id, bundle.epoch, what)


def objects(doc: Any, path: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    """Every JSON object in ``doc`` with its path (keys and indexes), ``doc`` itself first."""
    if isinstance(doc, dict):
        found = [(path, doc)]
        for key, item in doc.items():
            found += objects(item, (*path, key))
        return found
    if isinstance(doc, list):
        return [found for i, item in enumerate(doc) for found in objects(item, (*path, i))]
    return []


def key_twice(doc: Any, path: tuple[Any, ...], key: str, again: Any) -> str:
    """``doc`` as JSON text in which the object at ``path`` names ``key`` a second time, last,
    with the value ``again`` (which ``json.dumps`` of a dict cannot write)."""
    if not path:
        return json.dumps(doc)[:-1] + f", {json.dumps(key)}: {json.dumps(again)}}}"
    step, rest = path[0], path[1:]
    if isinstance(doc, dict):
        items = (f"{json.dumps(k)}: {key_twice(v, rest, key, again) if k == step else json.dumps(v)}"
                 for k, v in doc.items())
        return "{" + ", ".join(items) + "}"
    return "[" + ", ".join(key_twice(v, rest, key, again) if i == step else json.dumps(v)
                           for i, v in enumerate(doc)) + "]"


def reader_edges(value: Any, index: int) -> None:
    """The edges the wire section draws for a reader, each met on both sides in one step.

    Integers are signed 64-bit (the schema's bounds), each of a binary shape's two numbers is
    below 2**31, base64 is RFC 4648 section 4 (its alphabet and padding only), a size limit
    admits a value of exactly its size, and the transport's reading gives an error back as the
    error and refuses an error frame with a payload.  Where the structure reads, the value
    stands or falls by its own rules: ``loads`` gives what the constructor and ``validate``
    give the same fields, ``loads_unchecked`` gives the fields as sent.
    """
    bundle = isinstance(value, (TokenBundle, HiddenBundle, SampleBundle))
    text = wire.dumps(value)
    # A limit admits exactly its size, in characters for text and bytes for bytes and frames.
    frame = wire.dumpb(value)
    assert same(wire.loads(text, max_chars=len(text)), value)
    assert same(wire.loads(text.encode(), max_chars=len(text.encode())), value)
    assert same(wire.loadb(frame, max_bytes=len(frame)), value)
    expect(False, lambda: wire.loadb(frame, max_bytes=len(frame) - 1), (MalformedBundle,))
    if bundle or isinstance(value, ShardError):
        assert same(wire.loads_unchecked(text, max_bytes=len(text)), value)
        assert same(wire.loads_unchecked(text.encode()), value)
        assert same(wire.loads_unchecked(frame, frame=True, max_bytes=len(frame)), value)
        expect(False, lambda: wire.loads_unchecked(text, max_bytes=len(text) - 1), (MalformedBundle,))
        expect(False, lambda: wire.loads_unchecked(frame, frame=True, max_bytes=len(frame) - 1),
                     (MalformedBundle,))
    if isinstance(value, ShardError):
        expect(False, lambda: wire.loadb(frame + b"\x00"), (MalformedBundle,))
        expect(False, lambda: wire.loads_unchecked(frame + b"\x00", frame=True), (MalformedBundle,))
    # Integers: signed 64-bit, then the value's own rules.
    doc = json.loads(text)
    ints = sorted(k for k, v in doc.items() if _is_int(v))
    if ints and dataclasses.is_dataclass(value):
        key = ints[index % len(ints)]
        for number in (2**63 - 1, -(2**63), 2**63, -(2**63) - 1):
            edited = json.dumps({**doc, key: number})
            if not -(2**63) <= number < 2**63:
                expect(False, lambda: wire.loads(edited), (MalformedBundle,))
                if bundle:
                    expect(False, lambda: wire.loads_unchecked(edited), (MalformedBundle,))
                continue
            try:
                expected: Any = dataclasses.replace(value, **{key: number})
                if bundle:
                    validate(expected)
            except (ValueError, TypeError, MalformedBundle):
                expected = None
            if expected is None:
                expect(False, lambda: wire.loads(edited), (MalformedBundle,))
            else:
                assert same(wire.loads(edited), expected), (key, number)
            if bundle:
                assert getattr(wire.loads_unchecked(edited), key) == number
    # An integer field's items are integers within 64 bits too (tokens), on both readings; a
    # hidden value is a number, not an integer field: a big integer literal among the rows
    # (or in rows of the wrong shape) is taken as sent by the transport's reading.
    lists = sorted(k for k, v in doc.items() if isinstance(v, list) and v and all(_is_int(x) for x in v))
    if bundle and lists:
        key = lists[0]
        for number in (2**63, -(2**63) - 1):
            edited = json.dumps({**doc, key: [*doc[key][:-1], number]})
            expect(False, lambda: wire.loads(edited), (MalformedBundle,))
            expect(False, lambda: wire.loads_unchecked(edited), (MalformedBundle,))
        edited = json.dumps({**doc, key: [*doc[key][:-1], 2**63 - 1]})
        assert getattr(wire.loads_unchecked(edited), key)[-1] == 2**63 - 1
    if isinstance(value, HiddenBundle) and isinstance(doc["hidden"], list):
        for hidden in ([[2**70] + doc["hidden"][0][1:]] + doc["hidden"][1:], [2**70]):
            edited = json.dumps({**doc, "hidden": hidden})
            assert wire.loads_unchecked(edited).hidden == wire_rows(hidden), hidden
    # An error object without one of its fields is refused, as any object missing a key, and
    # so is one with a key its code does not have (exact keys: `expected` and `got` belong to
    # cache_miss and position_mismatch only).
    if isinstance(value, ShardError):
        for key in sorted(doc):
            partial = json.dumps({k: v for k, v in doc.items() if k != key})
            expect(False, lambda: wire.loads(partial), (MalformedBundle,))
            expect(False, lambda: wire.loads_unchecked(partial), (MalformedBundle,))
        for key in ("note", "expected", "got"):
            if key not in doc:
                more = json.dumps({**doc, key: 0})
                expect(False, lambda: wire.loads(more), (MalformedBundle,))
                expect(False, lambda: wire.loads_unchecked(more), (MalformedBundle,))
    if isinstance(value, FaultPlan) and value.rules:
        # A number is a JSON number: no string, no bool, in any field that holds one.
        for where in ("probability", "seconds"):
            for number in ("1", True):
                rules = [dict(r) for r in doc["rules"]]
                if where == "seconds" and rules[0]["fault"].get("type") == "delay":
                    rules[0]["fault"] = {**rules[0]["fault"], "seconds": number}
                else:
                    rules[0]["probability"] = number
                edited = json.dumps({**doc, "rules": rules})
                expect(False, lambda: wire.loads(edited), (MalformedBundle,))
    # Every object has its kind and the contract's version; a bundle's and an error's keys are
    # exactly the wire section's.
    assert doc.get("contract") == "1" and doc.get("kind") == WIRE_KINDS[type(value).__name__ if not isinstance(
        value, ShardError) else "ShardError"], doc
    keys = WIRE_KEYS.get(doc["kind"])
    if keys is not None:
        extra = {"expected", "got"} if doc["kind"] == "error" and doc["code"] in ("cache_miss",
                                                                                "position_mismatch") else set()
        assert set(doc) == keys | extra, (sorted(doc), sorted(keys | extra))
    repeated_keys(value, index, frame)
    if isinstance(value, TokenBundle):
        # A frame's header may be 1 MiB, not a byte more (JSON's whitespace fills it here).
        head = json.dumps(doc).encode()
        for size, ok in ((2**20, True), (2**20 + 1, False)):
            padded = framed(head + b" " * (size - len(head)))
            if ok:
                assert same(wire.loadb(padded), value)
            else:
                expect(False, lambda: wire.loadb(padded), (MalformedBundle,))
    if not isinstance(value, HiddenBundle):
        return
    # float16: the values rounded to binary16 and resealed over them; a checksum that did not
    # match its values is kept, so the damage stays visible.
    half = value.array().astype(np.float16).astype(np.float32)
    resealed = contract_checksum(value.session_id, value.epoch, value.start_pos, value.layer, half)
    for back in (wire.loadb(wire.dumpb(value, dtype="float16")),
                 wire.loads(wire.dumps(value, hidden="base64", dtype="float16"))):
        assert np.array_equal(back.array(), half) and back.checksum == resealed, (back, resealed)
    damaged = dataclasses.replace(value, checksum=damaged_checksum(value.checksum))
    for dtype in ("float32", "float16"):
        frame_sent, text_sent = wire.dumpb(damaged, dtype=dtype), wire.dumps(damaged, hidden="base64", dtype=dtype)
        expect(False, lambda: wire.loadb(frame_sent), (MalformedBundle,))
        expect(False, lambda: wire.loads(text_sent), (MalformedBundle,))
        assert wire.loads_unchecked(frame_sent, frame=True).checksum == damaged.checksum
        assert wire.loads_unchecked(text_sent).checksum == damaged.checksum
    # NaN: the strict reader refuses it; the transport's reading carries it to the receiver.
    nan_text = json.dumps({**doc, "hidden": [[math.nan] + doc["hidden"][0][1:]] + doc["hidden"][1:]})
    expect(False, lambda: wire.loads(nan_text), (MalformedBundle,))
    assert math.isnan(wire.loads_unchecked(nan_text).hidden[0][0])
    # Base64: the alphabet and the padding, nothing else.
    doc = json.loads(wire.dumps(value, hidden="base64"))
    code = doc["hidden"]["base64"]
    cut = (index % (len(code) // 4)) * 4 + 2  # inside a quantum, where a lenient reader skips
    for damaged in (code[:cut] + "\n" + code[cut:], code[:cut] + "*" + code[cut:], code + "AAAA",
                    code.rstrip("=") if code.endswith("=") else code + "="):
        broken = json.dumps({**doc, "hidden": {**doc["hidden"], "base64": damaged}})
        expect(False, lambda: wire.loads(broken), (MalformedBundle,))
        expect(False, lambda: wire.loads_unchecked(broken), (MalformedBundle,))
    # A binary shape's numbers are each below 2**31; a shape of no values reads as sent.
    header, _ = frame_parts(frame)
    for shape in ([2**31 - 1, 0], [0, 2**31 - 1], [0, 0], [2**31, 0], [0, 2**31]):
        empty = framed({**header, "hidden": {**header["hidden"], "shape": shape}})
        expect(False, lambda: wire.loadb(empty), (MalformedBundle,))  # no row holds a value
        if max(shape) < 2**31:
            assert wire.loads_unchecked(empty, frame=True).array().shape == tuple(shape)
        else:
            expect(False, lambda: wire.loads_unchecked(empty, frame=True), (MalformedBundle,))

def repeated_keys(value: Any, index: int, frame: bytes) -> None:
    """Exact keys: an object that names a key twice is refused by every reader, at any depth
    (a bundle, a base64 hidden object, a plan's rule and its fault, ``frame``'s header; and
    ``wire.read_json``, the HTTP API's and a topology file's reader), whether the two values
    agree or not; a reader that kept either one would read what a reader in
    another language may read differently."""
    bundle = isinstance(value, (TokenBundle, HiddenBundle, SampleBundle))
    clean = json.loads(wire.dumps(value, hidden="base64"))
    sent: list[tuple[dict[str, Any], Optional[bytes]]] = [(clean, None)]
    if bundle:  # the frame's header, before the payload the value has
        sent.append(frame_parts(frame))
    clean_text = json.dumps(clean)
    for read in (clean_text, clean_text.encode()):  # the HTTP API's and topology's reader
        assert wire.read_json(read) == clean
    for doc, payload in sent:
        for path, where in objects(doc):
            if not where:  # an empty object has no key to repeat
                continue
            key = sorted(where)[index % len(where)]
            for again in (where[key], None):
                text = key_twice(doc, path, key, again)
                if payload is not None:
                    broken = framed(text.encode(), payload)
                    expect(False, lambda: wire.loadb(broken), (MalformedBundle,))
                    expect(False, lambda: wire.loads_unchecked(broken, frame=True), (MalformedBundle,))
                    continue
                expect(False, lambda: wire.loads(text), (MalformedBundle,))
                expect(False, lambda: wire.read_json(text), (wire.RepeatedKey,))
                if bundle or isinstance(value, ShardError):
                    expect(False, lambda: wire.loads_unchecked(text), (MalformedBundle,))

BINARY_EDGES = ("dumps_type", "dumps_form", "dumps_dtype", "junk_binary", "ragged_binary", "cube_rows",
                "cube_binary", "compare", "junk_array", "loadb_type", "loadb_bytearray", "unchecked_types",
                "unchecked_fields", "unchecked_kind", "unchecked_text", "unchecked_deep", "unchecked_error",
                "unchecked_oversize", "none_array", "text_array", "bool_array", "none_binary", "bool_binary",
                "dumps_dtype_list", "no_warnings", "numpy_rows", "array_row_binary", "range_row_base64")


def binary_edge(what: str) -> None:
    """Misuse of the data plane's API: each a typed error, or an answer the contract allows."""
    sealed = HiddenBundle.sealed("s", 0, 0, 1, np.array([[0.5, 0.25, 0.0, -0.5]], dtype=np.float32))
    junk = HiddenBundle("s", 0, 0, 1, (("x", None),), sealed.checksum)
    cube = HiddenBundle("s", 0, 0, 1, np.zeros((1, 2, 2), dtype=np.float32), sealed.checksum)
    token_text = wire.dumps(TokenBundle("s", 0, 0, (1,)))
    if what == "compare":
        rows = HiddenBundle("s", 0, 0, 1, sealed.rows(), sealed.checksum)
        assert sealed == rows and sealed != junk and junk != sealed and (sealed == "s") is False
        assert cube.rows() is cube.hidden and rows.array().dtype == np.float32
        assert rows.rows() is rows.hidden and hash(rows) == hash(sealed)
        assert sealed != HiddenBundle.sealed("s", 1, 0, 1, sealed.hidden)
        assert HiddenBundle.sealed("s", 0, 0, 1, []).checksum == HiddenBundle.sealed("s", 0, 0, 1, ()).checksum
        return
    if what == "cube_rows":
        assert json.loads(wire.dumps(cube))["hidden"] == [[[0.0, 0.0], [0.0, 0.0]]]
        return
    if what == "loadb_bytearray":
        assert wire.loadb(bytearray(wire.dumpb(sealed))) == sealed
        return
    if what == "junk_array":
        # array() converts numbers only, and its refusal names the bundle it came from.
        try:
            junk.array()
        except MalformedBundle as exc:
            assert (exc.session_id, exc.epoch) == ("s", 0), (exc.session_id, exc.epoch)
        else:
            raise AssertionError("array() of rows holding a str and None answered")
        return
    if what == "numpy_rows":
        # numpy's float64 values are floats: rows of them convert and travel as plain ones do.
        plain = ((0.5, 0.25), (-1.0, 2.0))
        rows = tuple(tuple(map(np.float64, row)) for row in plain)
        numpy_sealed = HiddenBundle.sealed("s", 0, 0, 1, rows)
        assert numpy_sealed.array().tolist() == [list(row) for row in plain]
        assert wire.loadb(wire.dumpb(numpy_sealed)).array().tolist() == [list(row) for row in plain]
        assert numpy_sealed == HiddenBundle.sealed("s", 0, 0, 1, np.array(plain, dtype=np.float32))
        return
    if what == "no_warnings":
        # A value beyond a narrower float's range becomes inf, as any cast makes it, without a
        # warning (a warning is an error where warnings are errors): float64 beyond float32
        # in the checksum, float32 beyond float16 on the binary wire.
        wide = np.array([[1e39, 0.5, 0.0, -1e39]])
        loud = HiddenBundle.sealed("s", 0, 0, 1, np.array([[7e4, 0.5, 0.0, -7e4]], dtype=np.float32))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert HiddenBundle.sealed("s", 0, 0, 1, wide).checksum == contract_checksum(
                "s", 0, 0, 1, np.array([[np.inf, 0.5, 0.0, -np.inf]], dtype=np.float32))
            for form in (lambda: wire.loads_unchecked(wire.dumpb(loud, dtype="float16"), frame=True),
                         lambda: wire.loads_unchecked(wire.dumps(loud, hidden="base64", dtype="float16"))):
                assert np.isinf(form().array()[0, [0, 3]]).all()
        return
    failing = {
        "dumps_type": (lambda: wire.dumps(object()), (TypeError,)),
        "dumps_form": (lambda: wire.dumps(sealed, hidden="hex"), (ValueError,)),
        "dumps_dtype": (lambda: wire.dumpb(sealed, dtype="float64"), (ValueError,)),
        "junk_binary": (lambda: wire.dumpb(junk), (TypeError,)),
        "ragged_binary": (lambda: wire.dumps(HiddenBundle("s", 0, 0, 1, ((1.0,), (1.0, 2.0)), "0"),
                                             hidden="base64"), (TypeError,)),
        "cube_binary": (lambda: wire.dumpb(cube), (TypeError,)),
        # Rows of what is no number have no array and no binary form (numpy alone would read
        # None as NaN, "1.5" as 1.5, True as 1.0).
        "none_array": (lambda: HiddenBundle("s", 0, 0, 1, ((None, 0.5),), "0").array(), (MalformedBundle,)),
        "text_array": (lambda: HiddenBundle("s", 0, 0, 1, (("1.5", 0.5),), "0").array(), (MalformedBundle,)),
        "bool_array": (lambda: HiddenBundle("s", 0, 0, 1, ((0.5, True),), "0").array(), (MalformedBundle,)),
        "none_binary": (lambda: wire.dumpb(HiddenBundle.sealed("s", 0, 0, 1, ((None, 0.5),))), (TypeError,)),
        "bool_binary": (lambda: wire.dumps(HiddenBundle.sealed("s", 0, 0, 1, ((0.5, True),)), hidden="base64"),
                        (TypeError,)),
        "dumps_dtype_list": (lambda: wire.dumpb(sealed, dtype=["float32"]), (ValueError,)),
        # A row held as an array or a range, which validate refuses, has no binary form (numpy
        # would read it as a row of floats, and it would arrive as a valid bundle).
        "array_row_binary": (lambda: wire.dumpb(HiddenBundle("s", 0, 0, 1, tuple(sealed.array()), sealed.checksum)),
                             (TypeError,)),
        "range_row_base64": (lambda: wire.dumps(HiddenBundle("s", 0, 0, 1, (range(4),), "0" * 16),
                                                hidden="base64"), (TypeError,)),
        "loadb_type": (lambda: wire.loadb("FSB1"), (MalformedBundle,)),
        "unchecked_types": (lambda: wire.loads_unchecked(5), (MalformedBundle,)),
        "unchecked_fields": (lambda: wire.loads_unchecked(token_text.replace('"epoch"', '"era"')),
                             (MalformedBundle,)),
        "unchecked_kind": (lambda: wire.loads_unchecked(wire.dumpb(FaultPlan()), frame=True),
                           (MalformedBundle,)),
        "unchecked_text": (lambda: wire.loads_unchecked("[1]"), (MalformedBundle,)),
        "unchecked_deep": (lambda: wire.loads_unchecked("[" * 5000 + "]" * 5000), (MalformedBundle,)),
        "unchecked_error": (lambda: wire.loads_unchecked(wire.dumpb(ERROR_CODES["cancelled"]("m")) + b"x",
                                                         frame=True), (MalformedBundle,)),
        "unchecked_oversize": (lambda: wire.loads_unchecked(token_text, max_bytes=5), (MalformedBundle,)),
    }
    build, errors = failing[what]
    expect(False, build, errors)


def bundle_rules(session_id: Any, epoch: Any) -> None:
    """Every rule ``validate`` holds a bundle to, met on both sides in each step.

    The cases come from the contract's Names and Session rules: positions, tokens within
    ``0..vocab_size-1``, a hidden bundle's layer a boundary inside the model, its values
    finite floats of the spec's width, as rows or a 2-D float array, sealed by the
    checksum the contract defines (computed here from its layout, :func:`contract_checksum`).
    A refusal is ``MalformedBundle`` naming the bundle's session id and epoch where they
    are well-typed (the Errors table).  Each step meets every case, so a short campaign
    checks them all; the drawn identity decides which side a case must land on.
    """
    spec = ShardSpec("surface-model", 4, 0, 4, hidden_size=4, vocab_size=64)
    wide = ShardSpec("surface-model", 4, 0, 4, hidden_size=8, vocab_size=64)
    well = well_typed(session_id, epoch)
    row = (0.5, -0.25, 0.0, 1.0)
    f32 = np.array([row], dtype=np.float32)

    def hidden(rows: Any = (row,), layer: int = 1, checksum: Any = None, start: Any = 0) -> HiddenBundle:
        if checksum is None:
            checksum = contract_checksum(session_id, epoch, start, layer, rows)
        return HiddenBundle(session_id, epoch, start, layer, rows, checksum)

    def tokens(values: Any, start: Any = 0, contract: str = "1") -> TokenBundle:
        return TokenBundle(session_id, epoch, start, values, contract)

    def sample(pos: Any, token: Any) -> SampleBundle:
        return SampleBundle(session_id, epoch, pos, token)

    cases: list[tuple[str, Any, Optional[ShardSpec], bool]] = [
        ("tokens", tokens((0, 63)), spec, True),
        ("tokens at a later position", tokens((1,), start=3), spec, True),
        ("no tokens", tokens(()), None, False),
        ("a token at vocab_size", tokens((1, 64)), spec, False),
        ("a token at vocab_size, no spec", tokens((1, 64)), None, True),
        ("a negative token", tokens((-1,)), None, False),
        ("a bool token", tokens((True,)), None, False),
        ("a float token", tokens((1.0,)), None, False),
        ("a negative start_pos", tokens((1,), start=-1), None, False),
        ("a bool start_pos", tokens((1,), start=True), None, False),
        ("another contract", tokens((1,), contract="2"), None, False),
        ("rows", hidden(), spec, True),
        ("rows into the last layer", hidden(layer=3), spec, True),
        ("a layer at n_layers", hidden(layer=4), spec, False),
        ("a layer at n_layers, no spec", hidden(layer=4), None, True),
        ("layer 0", hidden(layer=0), None, False),
        ("rows of one value, no spec", hidden(rows=((0.5,), (1.0,))), None, True),
        ("rows of one value", hidden(rows=((0.5,), (1.0,))), spec, False),
        ("rows wider than the spec", hidden(rows=(row + row,)), spec, False),
        ("no rows", hidden(rows=()), None, False),
        ("an empty row", hidden(rows=((),)), None, False),
        ("ragged rows", HiddenBundle.sealed(session_id, epoch, 0, 1, (row, row[:3])), None, False),
        ("NaN", hidden(rows=((math.nan,) + row[1:],)), None, False),
        ("infinity", hidden(rows=(row[:3] + (-math.inf,),)), None, False),
        ("an int beyond float64", hidden(rows=((10**400,) + row[1:],), checksum="0" * 16), None, False),
        ("a wrong checksum", hidden(checksum="0" * 16), None, False),
        ("a checksum of another layer", hidden(checksum=contract_checksum(session_id, epoch, 0, 2, (row,))),
         None, False),
        ("a checksum not a str", hidden(checksum=12), None, False),
        ("a float32 array", hidden(rows=f32), spec, True),
        ("a float64 array", hidden(rows=f32.astype(np.float64)), spec, True),
        ("an int array", hidden(rows=np.array([[1, 2, 3, 4]]), checksum="0" * 16), None, False),
        ("a 1-D array", hidden(rows=f32[0], checksum="0" * 16), None, False),
        ("a 3-D array", hidden(rows=f32.reshape(1, 2, 2), checksum="0" * 16), None, False),
        ("an array of no rows", hidden(rows=np.zeros((0, 4), dtype=np.float32)), None, False),
        ("an array of empty rows", hidden(rows=np.zeros((1, 0), dtype=np.float32)), None, False),
        ("an array holding NaN", hidden(rows=np.array([[0.5, np.nan, 0.0, 1.0]], dtype=np.float32)),
         None, False),
        ("an array wider than the spec", hidden(rows=np.zeros((1, 5), dtype=np.float32)), spec, False),
        ("an array of nothing but NaN", hidden(rows=np.full((2, 4), np.nan, dtype=np.float32)), None, False),
        ("rows of numpy float64 values", hidden(rows=(tuple(np.float64(v) for v in row),)), spec, True),
        ("rows of numpy float64 values, one NaN", hidden(rows=((np.float64(0.5), np.float64(math.nan), 0.0, 1.0),)),
         None, False),
        ("a sample", sample(1, 63), spec, True),
        ("a sample token at vocab_size", sample(1, 64), spec, False),
        ("a sample token at vocab_size, no spec", sample(1, 64), None, True),
        ("a sample at pos 0", sample(0, 1), None, False),
        ("a negative sample token", sample(1, -1), None, False),
        ("a bool sample pos", sample(True, 1), None, False),
    ]
    for what, bundle, against, ok in cases:
        if ok and well:
            assert validate(bundle, against) is bundle, what
            continue
        try:
            validate(bundle, against)
        except MalformedBundle as err:
            names_the_bundle(err, bundle, what)
        else:
            raise AssertionError(f"validate accepted what the contract refuses ({what}): {bundle!r}")
    for value in (None, 3, "bundle", {"session_id": "s"}, spec):
        expect(False, lambda: validate(value, spec), (MalformedBundle,))
    expect(False, lambda: HiddenBundle.sealed("s", 0, 0, 1, [("x", None)]), (MalformedBundle,))
    # The frame of the contract's first test vector, byte for byte (its compact header).
    header = (b'{"kind":"hidden_bundle","contract":"1","session_id":"s1","epoch":0,"start_pos":0,"layer":1,'
              b'"hidden":{"dtype":"float32","shape":[1,4]},"checksum":"312b2ef2fb97af6d"}')
    assert wire.dumpb(HiddenBundle.sealed("s1", 0, 0, 1, [row])) == \
        framed(header, np.array([row], dtype="<f4").tobytes())
    if not well:
        return
    # Lists are held as tuples; rows, an array and a float64 array of the same float32 values
    # are equal and share the checksum, and a bundle's values are frozen.
    assert tokens([1, 2]).tokens == (1, 2) and validate(tokens([1, 2]), spec).tokens == (1, 2)
    listed = hidden(rows=[list(row)])
    assert listed.hidden == (row,) and listed == hidden() == hidden(rows=f32) == hidden(rows=f32.astype(np.float64))
    other = hidden(rows=((0.5, -0.25, 0.0, 2.0),), checksum=hidden().checksum)
    assert other != hidden() and hidden() != other and other != hidden(rows=f32) and hidden(rows=f32) != other
    for sealed_rows in ([row], f32, f32.astype(np.float64), []):
        # The drawn identity, and in every step the ids whose UTF-8 is an edge of the header's
        # encoding (a lone surrogate, which only `surrogatepass` encodes; characters beyond ASCII).
        for sid in (session_id, "s\udc80", "模型-ü"):
            sealed = HiddenBundle.sealed(sid, epoch, 0, 1, sealed_rows)
            assert sealed.checksum == contract_checksum(sid, epoch, 0, 1, sealed_rows), (sid, sealed_rows)
    # sealed holds rows (tuples or lists; a row given as an array) as rows of Python numbers,
    # a 2-D array as an array: each a valid bundle equal to the one of plain rows.
    for given in ([row], [list(row)], list(f32), list(f32.astype(np.float16)), f32, f32.astype(np.float64)):
        sealed = HiddenBundle.sealed(session_id, epoch, 0, 1, given)
        shown = f"HiddenBundle.sealed of {type(given).__name__} rows {given!r}"
        try:
            assert validate(sealed, spec) is sealed and sealed == hidden(), shown
        except MalformedBundle as err:
            raise AssertionError(f"{shown} is refused: {err}") from None
        if isinstance(given, np.ndarray):
            assert isinstance(sealed.hidden, np.ndarray), shown
        else:
            assert all(type(v) is float for r in sealed.hidden for v in r) and \
                isinstance(sealed.hidden, tuple) and all(isinstance(r, tuple) for r in sealed.hidden), shown
    assert hidden(rows=()).array().shape == (0, 0)  # the checksum's 0x0: no rows
    writable = f32.copy()
    held = hidden(rows=writable)
    writable[0, 0] = 9.0
    assert held.rows() == (row,) and not held.hidden.flags.writeable
    # Frozen means nothing can write to it: a read-only view of writable memory is copied
    # too; an array read-only all the way down (as a frame's payload is) is held as it is,
    # not copied (the data plane's memory speed).
    under = f32.copy()
    view = under.view()
    view.flags.writeable = False
    viewed = hidden(rows=view)
    under[0, 0] = 9.0
    assert viewed.rows() == (row,), "a read-only view of writable memory was held, not copied"
    payload = np.frombuffer(f32.tobytes(), dtype=np.float32).reshape(1, 4)
    owned = f32.copy()
    owned.flags.writeable = False
    for kept in (payload, owned):
        assert hidden(rows=kept).hidden is kept, "a read-only array was copied"
    # Rows of ints are numbers too: their array is float32.
    ints = hidden(rows=((1, 0, 2, -1),))
    assert validate(ints, spec) is ints and ints.array().dtype == np.float32
    assert ints.array().tolist() == [[1.0, 0.0, 2.0, -1.0]]
    for bundle in (held, hidden()):
        out = bundle.array()
        assert out.dtype == np.float32 and not out.flags.writeable and out.tolist() == [list(row)]
    # A bundle found valid for one width is not valid for another.
    once = hidden()
    assert validate(once, spec) is once and validate(once) is once
    expect(False, lambda: validate(once, wide), (MalformedBundle,))



def name_fields(value: Any) -> None:
    """A field the reader looks a name up by (kind, code, a fault's type, dtype) holding an
    array or an object: ``MalformedBundle``, like any value of the wrong JSON type, on both
    readings (the structural one takes values as sent, but reads by these names)."""
    doc = json.loads(wire.dumps(value, hidden="base64"))
    names = [(doc, k) for k, v in doc.items() if isinstance(v, str)]
    names += [(doc["hidden"], "dtype")] if isinstance(doc.get("hidden"), dict) else []
    names += [(r["fault"], "type") for r in doc.get("rules", [])]
    for where, key in names:
        for junk in ([], {}):
            kept = where[key]
            where[key] = junk
            broken = json.dumps(doc)
            where[key] = kept
            expect(False, lambda: wire.loads(broken), (MalformedBundle,))
            if key in ("kind", "code", "dtype") and isinstance(value, (TokenBundle, HiddenBundle, SampleBundle,
                                                                       ShardError)):
                expect(False, lambda: wire.loads_unchecked(broken), (MalformedBundle,))
