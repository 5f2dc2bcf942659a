"""JSON and binary frames in and out for every bundle, fault plan, fault rule and error.

``dumps`` turns a value into one JSON object with a ``kind`` discriminator
and the ``contract`` version (dataclass fields via dataclasses-json's
``to_dict``).  ``loads`` is strict: exact keys, exact JSON types (no ``"1"``
for ``1``, no ``1.5`` for an int, no ``true`` for a number), integers that fit
in 64 bits (so any coordinator's JSON library reads them), finite numbers,
a known ``kind`` and version, bounded size and depth, and the result passes
:func:`fakeshard.validate`.  Anything else raises :class:`MalformedBundle`
and nothing else.  (dataclasses-json's own schemas coerce ``"1"`` and
``1.5`` to ``1``, so the strict reading is ours.)  No pickle, no eval.

A hidden bundle's values travel in one of three forms (``docs/contract.md``, "The wire"
defines each byte): readable rows of JSON numbers (the default, for traces
and small examples), ``dumps(bundle, hidden="base64")`` (little-endian
float32, or float16 on request, base64 inside the JSON object), or the
compact binary frame of :func:`dumpb` / :func:`loadb` (a JSON header, then
the raw little-endian values: a network's data plane at memory speed).

Round trip::

    >>> from fakeshard import TokenBundle
    >>> text = dumps(TokenBundle("s1", 0, 0, (1, 2)))
    >>> text
    '{"kind": "token_bundle", "contract": "1", "session_id": "s1", "epoch": 0, "start_pos": 0, "tokens": [1, 2]}'
    >>> loads(text) == TokenBundle("s1", 0, 0, (1, 2))
    True
"""

from __future__ import annotations

import binascii
import dataclasses
import functools
import json
import struct
import typing
from typing import Any, Optional, Union

import numpy as np
from dataclasses_json import DataClassJsonMixin

from fakeshard.contract import (
    CONTRACT_VERSION,
    HiddenBundle,
    SampleBundle,
    TokenBundle,
    _float64_rows,
    frozen_array,
    hidden_checksum,
    validate,
)
from fakeshard.errors import ERROR_CODES, MalformedBundle, ShardError
from fakeshard.faults import FAULT_TYPES, FaultPlan, FaultRule

__all__ = [
    "FRAME_CONTENT_TYPE",
    "FRAME_MAGIC",
    "HIDDEN_DTYPES",
    "JSON_CONTENT_TYPE",
    "MAX_FRAME_BYTES",
    "MAX_TEXT_CHARS",
    "RepeatedKey",
    "dumpb",
    "dumps",
    "fault_from_dict",
    "fault_to_dict",
    "loadb",
    "loads",
    "loads_unchecked",
    "read_json",
]

#: ``loads`` refuses longer text (override per call with ``max_chars``).
MAX_TEXT_CHARS = 64 * 1024 * 1024
#: ``loadb`` refuses longer frames (override per call with ``max_bytes``).
MAX_FRAME_BYTES = 1024 * 1024 * 1024
#: The first four bytes of every binary frame (format 1).
FRAME_MAGIC = b"FSB1"
#: A frame's JSON header may not be longer than this.
_MAX_HEADER_BYTES = 1024 * 1024
#: The media type of JSON (HTTP ``Content-Type``).
JSON_CONTENT_TYPE = "application/json"
#: The media type of the binary frame (HTTP ``Content-Type``).
FRAME_CONTENT_TYPE = "application/vnd.fakeshard.frame"
#: Binary encodings of hidden values: wire name -> little-endian numpy dtype.
HIDDEN_DTYPES: dict[str, np.dtype[Any]] = {"float32": np.dtype("<f4"), "float16": np.dtype("<f2")}
_HIDDEN_FORMS = ("floats", "base64")

_KINDS: dict[str, type] = {
    "token_bundle": TokenBundle,
    "hidden_bundle": HiddenBundle,
    "sample_bundle": SampleBundle,
    "fault_plan": FaultPlan,
    "fault_rule": FaultRule,
}
_KIND_OF = {cls: kind for kind, cls in _KINDS.items()}
_FAULTS: dict[str, type] = {cls.type_name: cls for cls in FAULT_TYPES}


def fault_to_dict(fault: Any) -> dict[str, Any]:
    """One fault record as its JSON object (``{"type": ..., <fields>}``), as inside a rule."""
    return {"type": fault.type_name, **_record_dict(fault)}


def _record_dict(record: Any) -> dict[str, Any]:
    """A fault record's or a rule's fields as JSON values, by dataclasses-json."""
    # dataclasses-json's to_dict reads any dataclass; only its annotation asks for its mixin.
    return DataClassJsonMixin.to_dict(record)


def fault_from_dict(data: Any) -> Any:
    """The fault record a JSON object holds; :class:`MalformedBundle` for anything else."""
    try:
        return _fault(data, "fault")
    except _Bad as exc:
        raise MalformedBundle(f"wire: {exc}") from None


def _to_dict(obj: Any, hidden: Any = None) -> dict[str, Any]:
    """``obj``'s JSON object; a hidden bundle's ``hidden`` replaced by ``hidden`` if given."""
    if isinstance(obj, ShardError):
        return {"kind": "error", "contract": CONTRACT_VERSION, "code": obj.code,
                "message": obj.message, **obj.fields()}
    kind = _KIND_OF.get(type(obj))
    if kind is None:
        raise TypeError(
            f"wire.dumps takes a bundle, FaultPlan, FaultRule or ShardError, got {type(obj).__name__}"
        )
    if isinstance(obj, FaultPlan):
        body: dict[str, Any] = {
            "contract": CONTRACT_VERSION,
            "seed": obj.seed,
            "rules": [_rule_to_dict(rule) for rule in obj.rules],
        }
    elif isinstance(obj, FaultRule):
        body = {"contract": CONTRACT_VERSION, **_rule_to_dict(obj)}
    elif isinstance(obj, HiddenBundle):
        body = {"contract": obj.contract, "session_id": obj.session_id, "epoch": obj.epoch,
                "start_pos": obj.start_pos, "layer": obj.layer,
                "hidden": _rows_for_json(obj.rows()) if hidden is None else hidden,
                "checksum": obj.checksum}
    else:  # token and sample bundles: their fields, tuples as arrays (the hot path of a data plane)
        body = {"contract": obj.contract}
        for name in _FIELDS[type(obj)]:
            value = getattr(obj, name)
            body[name] = list(value) if isinstance(value, tuple) else value
    return {"kind": kind, **body}


#: A bundle's fields in declaration order, less ``contract`` (written first).
_FIELDS = {cls: tuple(f.name for f in dataclasses.fields(cls) if f.name != "contract")
           for cls in (TokenBundle, SampleBundle)}


def _rows_for_json(rows: Any) -> Any:
    if isinstance(rows, np.ndarray):  # not 2-D: carried as nested lists all the same
        return rows.tolist()
    return [list(row) if isinstance(row, tuple) else row for row in rows] \
        if isinstance(rows, tuple) else rows


def _binary_values(bundle: HiddenBundle, dtype: str) -> tuple[np.ndarray, str]:
    """The bundle's values in the wire ``dtype`` (C order), and the checksum to send with them.

    float32 is exact for every engine's output.  float16 rounds: a bundle
    whose checksum matched its values is resealed over the rounded values
    (so it arrives valid, at lower precision); one whose checksum did not
    match keeps it, so the damage stays visible to the receiver.
    """
    want = HIDDEN_DTYPES.get(dtype) if isinstance(dtype, str) else None
    if want is None:
        raise ValueError(f"dtype must be one of {sorted(HIDDEN_DTYPES)}, got {dtype!r}")
    try:
        if isinstance(bundle.hidden, np.ndarray):
            source = bundle.array()
        else:
            for i, row in enumerate(bundle.hidden):
                # numpy reads a row held as an array (or a range) as a row of floats: sent so, a
                # bundle validate refuses would arrive valid.  A scalar row fails on its shape.
                if not isinstance(row, tuple) and np.ndim(row) > 0:
                    raise TypeError(f"hidden[{i}] is {type(row).__name__}, not a tuple")
            source = _float64_rows(bundle.hidden)
    except (TypeError, ValueError, OverflowError) as exc:
        raise TypeError(f"wire: these hidden values have no binary form ({exc})") from None
    if source.ndim != 2:
        raise TypeError(f"wire: hidden of shape {source.shape} has no binary form (rows x columns)")
    with np.errstate(over="ignore", invalid="ignore"):
        values = np.ascontiguousarray(source, dtype=want)
    checksum = bundle.checksum
    # The checksum is defined over the values rounded to float32, so a float32 copy keeps it;
    # only float16 changes the values it covers.
    if dtype != "float32":
        if checksum == hidden_checksum(bundle.session_id, bundle.epoch, bundle.start_pos,
                                       bundle.layer, source, bundle.contract):
            checksum = hidden_checksum(bundle.session_id, bundle.epoch, bundle.start_pos,
                                       bundle.layer, values, bundle.contract)
    return values, checksum


def _rule_to_dict(rule: FaultRule) -> dict[str, Any]:
    out = _record_dict(rule)
    out["fault"] = fault_to_dict(rule.fault)
    return out


def dumps(obj: Any, *, hidden: str = "floats", dtype: str = "float32") -> str:
    """One JSON object for ``obj``; ``TypeError`` for a value the wire does not carry.

    ``hidden="base64"`` writes a hidden bundle's values as
    ``{"dtype": ..., "shape": [rows, cols], "base64": ...}`` in ``dtype``
    (``"float32"``, exact for every engine's output, or ``"float16"``,
    rounded; see :func:`_binary_values`).  The default writes rows of JSON
    numbers.  A hidden bundle holding NaN (a ``Malformed("nan")`` output) is
    written with JSON's non-standard ``NaN`` in the readable form, so it can
    travel and be refused by ``loads`` at the receiving end, as a real
    corrupt message would.
    """
    if hidden not in _HIDDEN_FORMS:
        raise ValueError(f"hidden must be one of {_HIDDEN_FORMS}, got {hidden!r}")
    if hidden == "base64" and isinstance(obj, HiddenBundle):
        values, checksum = _binary_values(obj, dtype)
        encoded = {"dtype": dtype, "shape": list(values.shape),
                   "base64": binascii.b2a_base64(values.data.cast("B"), newline=False).decode("ascii")}
        return json.dumps({**_to_dict(obj, encoded), "checksum": checksum})
    return json.dumps(_to_dict(obj))


def dumpb(obj: Any, *, dtype: str = "float32") -> bytes:
    """``obj`` as one binary frame (``docs/contract.md``, "The wire"): the data plane's encoding.

    Layout: :data:`FRAME_MAGIC` (4 bytes), the header's length ``H`` as a
    little-endian uint32, ``H`` bytes of UTF-8 JSON (the value's JSON
    object; a hidden bundle's ``hidden`` is ``{"dtype": ..., "shape":
    [rows, cols]}``), then the hidden values as raw little-endian bytes, row
    after row (nothing for other values).  One copy of the values, no text.
    """
    payload: Any = b""
    if isinstance(obj, HiddenBundle):
        values, checksum = _binary_values(obj, dtype)
        header = {**_to_dict(obj, {"dtype": dtype, "shape": list(values.shape)}), "checksum": checksum}
        payload = values.data.cast("B")
    else:
        header = _to_dict(obj)
    head = json.dumps(header, separators=(",", ":")).encode("utf-8")
    return b"".join((FRAME_MAGIC, struct.pack("<I", len(head)), head, payload))


# -- loading -----------------------------------------------------------------


class _Bad(Exception):
    """Internal: a path and a reason, turned into MalformedBundle at the top."""


def _reject_constant(name: str) -> Any:
    raise _Bad(f"non-finite number {name} is not allowed")


class RepeatedKey(ValueError):
    """A JSON object that names one key twice (readers in other languages differ on which counts)."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    data = dict(pairs)
    if len(data) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise RepeatedKey(f"a JSON object names the key {key!r} twice")
            seen.add(key)
    return data


def read_json(text: Union[str, bytes]) -> Any:
    """``json.loads`` as every reader of fakeshard's JSON uses it: an object naming a key twice
    is refused (``RepeatedKey``, a ``ValueError``), as a reader in another language could take
    either of the two values. ``json.JSONDecodeError`` and ``RecursionError`` pass as they come.
    """
    return json.loads(text, object_pairs_hook=_unique_keys)


def _int64(value: int, path: str) -> int:
    """``value`` if it fits in signed 64 bits, the wire's range for every integer."""
    if not -(2**63) <= value < 2**63:
        raise _Bad(f"{path} does not fit in 64 bits")
    return value


def _check(value: Any, tp: Any, path: str) -> Any:
    """``value`` checked against the annotation ``tp``, with ints widened to floats."""
    origin = typing.get_origin(tp)
    if tp is str:
        if not isinstance(value, str):
            raise _Bad(f"{path} must be a string, got {_json_type(value)}")
        return value
    if tp is int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise _Bad(f"{path} must be an integer, got {_json_type(value)}")
        return _int64(value, path)
    if tp is float:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise _Bad(f"{path} must be a number, got {_json_type(value)}")
        try:
            number = float(value)
        except OverflowError:
            raise _Bad(f"{path} is too large for a float") from None
        return number
    if origin is Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None and len(args) < len(typing.get_args(tp)):
            return None
        if len(args) == 1:
            return _check(value, args[0], path)
        return _fault(value, path)  # the only non-Optional union on the wire
    if origin is tuple:
        item_type = typing.get_args(tp)[0]
        if not isinstance(value, list):
            raise _Bad(f"{path} must be an array, got {_json_type(value)}")
        return tuple(_check(item, item_type, f"{path}[{i}]") for i, item in enumerate(value))
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _object(value, tp, path, skip=())
    raise _Bad(f"{path}: no wire reading for {tp!r}")  # pragma: no cover - a type we forgot


_ROWS = tuple[tuple[float, ...], ...]


def _hidden(value: Any, path: str, payload: Optional[memoryview]) -> Any:
    """A hidden bundle's values: rows of numbers, base64 (JSON) or the frame's payload."""
    if isinstance(value, list):
        if payload is not None:
            raise _Bad(f"{path} must be {{dtype, shape}} in a frame, got an array")
        return _check(value, _ROWS, path)
    if not isinstance(value, dict):
        raise _Bad(f"{path} must be an array of rows or an object, got {_json_type(value)}")
    keys = {"dtype", "shape"} | (set() if payload is not None else {"base64"})
    if set(value) != keys:
        raise _Bad(f"{path} must have exactly the fields {sorted(keys)}, got {sorted(value)}")
    dtype = HIDDEN_DTYPES.get(value["dtype"]) if isinstance(value["dtype"], str) else None
    if dtype is None:
        raise _Bad(f"{path}.dtype must be one of {sorted(HIDDEN_DTYPES)}, got {value['dtype']!r}")
    shape = value["shape"]
    if not isinstance(shape, list) or len(shape) != 2 or not all(
            type(n) is int and 0 <= n < 2**31 for n in shape):
        raise _Bad(f"{path}.shape must be [rows, columns] of integers >= 0, got {shape!r}")
    if payload is None:
        text = value["base64"]
        if not isinstance(text, str):
            raise _Bad(f"{path}.base64 must be a string, got {_json_type(text)}")
        try:
            data: Any = binascii.a2b_base64(text.encode("ascii"), strict_mode=True)
        except (binascii.Error, UnicodeEncodeError) as exc:
            raise _Bad(f"{path}.base64 is not base64: {exc}") from None
        if len(text) % 4:  # strict_mode lets padding follow a whole quantum ("AAAA="); RFC 4648 does not
            raise _Bad(f"{path}.base64 is not base64: {len(text)} characters, not a multiple of 4")
    else:
        data = payload
    need = shape[0] * shape[1] * dtype.itemsize
    if len(data) != need:
        raise _Bad(f"{path} holds {len(data)} bytes, but {shape[0]}x{shape[1]} {value['dtype']} "
                   f"needs {need}")
    rows = np.frombuffer(data, dtype=dtype).reshape(shape)
    return frozen_array(rows)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return {str: "a string", int: "an integer", float: "a number", list: "an array",
            dict: "an object"}.get(type(value), type(value).__name__)


@functools.lru_cache(maxsize=None)
def _schema(cls: type, skip: tuple[str, ...]) -> tuple[tuple[tuple[str, Any], ...], frozenset[str]]:
    """A wire type's fields with their annotations, and every key its object may hold."""
    hints = typing.get_type_hints(cls)
    fields = tuple((f.name, hints[f.name]) for f in dataclasses.fields(cls) if f.name not in skip)
    return fields, frozenset(name for name, _ in fields) | frozenset(skip)


def _object(value: Any, cls: type, path: str, skip: tuple[str, ...],
            payload: Optional[memoryview] = None) -> Any:
    if not isinstance(value, dict):
        raise _Bad(f"{path} must be an object, got {_json_type(value)}")
    fields, allowed = _schema(cls, skip)
    extra = sorted(set(value) - allowed)
    if extra:
        raise _Bad(f"{path} has unknown field(s) {extra}")
    kwargs = {}
    for name, annotation in fields:
        if name not in value:
            raise _Bad(f"{path} is missing field {name!r}")
        if cls is HiddenBundle and name == "hidden":
            kwargs[name] = _hidden(value[name], f"{path}.{name}", payload)
        else:
            kwargs[name] = _check(value[name], annotation, f"{path}.{name}")
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise _Bad(f"{path}: {exc}") from None


def _fault(value: Any, path: str) -> Any:
    if not isinstance(value, dict):
        raise _Bad(f"{path} must be an object, got {_json_type(value)}")
    name = value.get("type")
    cls = _FAULTS.get(name) if isinstance(name, str) else None
    if cls is None:
        raise _Bad(f"{path}.type must be one of {sorted(_FAULTS)}, got {name!r}")
    return _object(value, cls, path, skip=("type",))


def _error(data: dict[str, Any]) -> ShardError:
    code = data.get("code")
    cls = ERROR_CODES.get(code) if isinstance(code, str) else None
    if cls is None:
        raise _Bad(f"error.code must be one of {sorted(ERROR_CODES)}, got {code!r}")
    names = ("kind", "contract", "code", "message", "session_id", "epoch") + cls._extra
    extra = sorted(set(data) - set(names))
    if extra:
        raise _Bad(f"error has unknown field(s) {extra}")
    missing = [n for n in names if n not in data]
    if missing:
        raise _Bad(f"error is missing field(s) {missing}")
    message = _check(data["message"], str, "error.message")
    session_id = _check(data["session_id"], typing.Optional[str], "error.session_id")
    epoch = _check(data["epoch"], typing.Optional[int], "error.epoch")
    extras = {n: _check(data[n], int, f"error.{n}") for n in cls._extra}
    return cls(message, session_id=session_id, epoch=epoch, **extras)


def loads(text: Union[str, bytes], *, max_chars: int = MAX_TEXT_CHARS) -> Any:
    """The value ``text`` encodes; :class:`MalformedBundle` for any bad text."""
    try:
        if isinstance(text, (bytes, bytearray)):
            # A character is 1 to 4 bytes in UTF-8: more than 4 bytes a character cannot be
            # within the limit, so such a text is refused before it is decoded.
            if len(text) > 4 * max_chars:
                raise _Bad(f"text is {len(text)} bytes, over the limit of {max_chars} characters")
            text = bytes(text).decode("utf-8")
        if not isinstance(text, str):
            raise _Bad(f"wire.loads takes str or bytes, got {type(text).__name__}")
        if len(text) > max_chars:
            raise _Bad(f"text is {len(text)} characters, over the limit of {max_chars}")
        obj = _from_json(text, None)
    except _Bad as exc:
        raise MalformedBundle(f"wire: {exc}") from None
    except UnicodeDecodeError as exc:
        raise MalformedBundle(f"wire: text is not UTF-8: {exc}") from None
    return _validated(obj)


def loadb(data: Union[bytes, bytearray, memoryview], *, max_bytes: int = MAX_FRAME_BYTES) -> Any:
    """The value one binary frame encodes; :class:`MalformedBundle` for any bad frame.

    Wrong magic, a truncated frame or header, trailing bytes, an unknown
    dtype, a payload of the wrong length for its shape, NaN, a frame longer
    than ``max_bytes``: all are ``MalformedBundle``.  The values are not
    copied: the returned bundle's array reads the frame's bytes (copied
    once if ``data`` is writable).
    """
    try:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise _Bad(f"wire.loadb takes bytes, got {type(data).__name__}")
        head, payload = _split_frame(data, max_bytes)
        obj = _from_json(head, payload)
    except _Bad as exc:
        raise MalformedBundle(f"wire: {exc}") from None
    except UnicodeDecodeError as exc:
        raise MalformedBundle(f"wire: frame header is not UTF-8: {exc}") from None
    return _validated(obj)


def _split_frame(data: Any, max_bytes: int) -> tuple[str, memoryview]:
    """A frame's header text and payload (a view of ``data``, copied once if it was writable)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise _Bad(f"a frame is bytes, got {type(data).__name__}")
    data = bytes(data)  # no copy for bytes
    if len(data) > max_bytes:
        raise _Bad(f"frame is {len(data)} bytes, over the limit of {max_bytes}")
    if len(data) < 8 or data[:4] != FRAME_MAGIC:
        raise _Bad(f"a frame starts with {FRAME_MAGIC!r} and a 4-byte header length, got {data[:8]!r}")
    (size,) = struct.unpack_from("<I", data, 4)
    if size > _MAX_HEADER_BYTES or 8 + size > len(data):
        raise _Bad(f"frame header of {size} bytes does not fit a frame of {len(data)} bytes "
                   f"(limit {_MAX_HEADER_BYTES})")
    return data[8:8 + size].decode("utf-8"), memoryview(data)[8 + size:]


def _json_object(text: str, strict: bool) -> dict[str, Any]:
    """``text`` as one JSON object; ``strict`` refuses NaN and infinities."""
    try:
        data = json.loads(text, parse_constant=_reject_constant if strict else None,
                          object_pairs_hook=_unique_keys)
    except RecursionError:
        raise _Bad("JSON is nested too deeply") from None
    except RepeatedKey as exc:
        raise _Bad(str(exc)) from None
    except json.JSONDecodeError as exc:
        raise _Bad(f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise _Bad(f"expected a JSON object, got {_json_type(data)}")
    return data


def _envelope(data: dict[str, Any], kinds: dict[str, type], payload: Optional[memoryview]) -> Any:
    """What every reader checks of an object before its fields: its ``kind`` (one of ``kinds``,
    or ``error``), that only a hidden bundle's frame carries a payload, and, for an error, the
    contract version.  An error is returned read; otherwise the class of its kind."""
    kind = data.get("kind")
    cls = kinds.get(kind) if isinstance(kind, str) else None
    if payload is not None and len(payload) and cls is not HiddenBundle:
        raise _Bad(f"a frame of kind {kind!r} carries no payload, got {len(payload)} bytes")
    if kind == "error":
        if data.get("contract") != CONTRACT_VERSION:
            raise _Bad(f"contract version {data.get('contract')!r} is not {CONTRACT_VERSION!r}")
        return _error(data)
    if cls is None:
        raise _Bad(f"kind must be one of {sorted(kinds) + ['error']}, got {kind!r}")
    return cls


def _from_json(text: str, payload: Optional[memoryview]) -> Any:
    data = _json_object(text, strict=True)
    if data.get("contract") != CONTRACT_VERSION:
        raise _Bad(f"contract version {data.get('contract')!r} is not {CONTRACT_VERSION!r}")
    cls = _envelope(data, _KINDS, payload)
    if isinstance(cls, ShardError):
        return cls
    kind = data["kind"]
    body = {k: v for k, v in data.items() if k != "kind"}
    if cls in (FaultPlan, FaultRule):
        body.pop("contract")
    return _object(body, cls, str(kind), skip=(), payload=payload if cls is HiddenBundle else None)


def _validated(obj: Any) -> Any:
    if isinstance(obj, (TokenBundle, HiddenBundle, SampleBundle)):
        validate(obj)
    return obj


_BUNDLE_KINDS = {"token_bundle": TokenBundle, "hidden_bundle": HiddenBundle, "sample_bundle": SampleBundle}


def loads_unchecked(data: Union[str, bytes], *, frame: bool = False,
                    max_bytes: int = MAX_FRAME_BYTES) -> Any:
    """A bundle as it was sent, for a transport: the structure is checked, the values are not.

    The object must be a bundle kind with exactly its fields, and binary
    hidden values must have the length their dtype and shape say; every
    value is taken as it is (JSON arrays as tuples, ``NaN`` allowed; integers
    must still fit in 64 bits, the wire's own rule), so a
    bundle that breaks the contract arrives broken and its receiver's
    :func:`validate` (or engine) refuses it with the error it would give in
    process.  A served node reads requests this way, and the remote client
    reads answers this way.  Anything structurally unreadable is
    :class:`MalformedBundle`; an error object is returned as the error.
    """
    try:
        if frame:
            text, payload = _split_frame(data, max_bytes)
        else:
            # The limit counts bytes (UTF-8, a str's as it would be sent), before any decoding.
            size = len(data) if isinstance(data, (bytes, bytearray)) else \
                len(data.encode("utf-8", "surrogatepass")) if isinstance(data, str) else None
            if size is None:
                raise _Bad(f"expected str or bytes, got {type(data).__name__}")
            if size > max_bytes:
                raise _Bad(f"text is {size} bytes, over the limit of {max_bytes}")
            text = data.decode("utf-8") if isinstance(data, (bytes, bytearray)) else data
            payload = None
        obj = _json_object(text, strict=False)
        cls = _envelope(obj, _BUNDLE_KINDS, payload)
        if isinstance(cls, ShardError):
            return cls
        kind = obj["kind"]
        names = [f.name for f in dataclasses.fields(cls)]
        keys = set(obj) - {"kind"}
        if keys != set(names):
            raise _Bad(f"{kind} must have exactly the fields {sorted(names)}, got {sorted(keys)}")
        values = {}
        for name in names:
            value = obj[name]
            if cls is HiddenBundle and name == "hidden" and (isinstance(value, dict) or payload is not None):
                value = _hidden(value, f"{kind}.hidden", payload)
            elif isinstance(value, list):
                value = tuple(tuple(v) if isinstance(v, list) else v for v in value)
            if name != "hidden":  # integers within 64 bits is the wire's own rule, not a value's
                for i, item in enumerate(value if isinstance(value, tuple) else (value,)):
                    if type(item) is int:
                        _int64(item, f"{kind}.{name}{f'[{i}]' if isinstance(value, tuple) else ''}")
            values[name] = value
        return cls(**values)
    except _Bad as exc:
        raise MalformedBundle(f"wire: {exc}") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise MalformedBundle(f"wire: {exc}") from None
