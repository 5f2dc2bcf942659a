"""Writing: a wire value as its JSON object, as text (``dumps``) and as a frame (``dumpb``)."""

from __future__ import annotations

import binascii
import dataclasses
import json
from typing import Any

import numpy as np
from dataclasses_json import DataClassJsonMixin

from fakeshard._contract import (
    CONTRACT_VERSION,
    HiddenBundle,
    SampleBundle,
    TokenBundle,
    _float64_rows,
    hidden_checksum,
)
from fakeshard._errors import ShardError
from fakeshard._faults import FaultPlan, FaultRule
from fakeshard.wire import _frame
from fakeshard.wire._format import HIDDEN_DTYPES, HIDDEN_FORMS, KIND_OF


def fault_to_dict(fault: Any) -> dict[str, Any]:
    """One fault record as its JSON object (``{"type": ..., <fields>}``), as inside a rule."""
    return {"type": fault.type_name, **_record_dict(fault)}


def _record_dict(record: DataClassJsonMixin) -> dict[str, Any]:
    """A fault record's or a rule's fields as JSON values, by dataclasses-json."""
    return record.to_dict()


def to_dict(obj: Any, hidden: Any = None) -> dict[str, Any]:
    """``obj``'s JSON object; a hidden bundle's ``hidden`` replaced by ``hidden`` if given."""
    if isinstance(obj, ShardError):
        return {"kind": "error", "contract": CONTRACT_VERSION, "code": obj.code,
                "message": obj.message, **obj.fields()}
    kind = KIND_OF.get(type(obj))
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
    if hidden not in HIDDEN_FORMS:
        raise ValueError(f"hidden must be one of {HIDDEN_FORMS}, got {hidden!r}")
    if hidden == "base64" and isinstance(obj, HiddenBundle):
        values, checksum = _binary_values(obj, dtype)
        encoded = {"dtype": dtype, "shape": list(values.shape),
                   "base64": binascii.b2a_base64(values.data.cast("B"), newline=False).decode("ascii")}
        return json.dumps({**to_dict(obj, encoded), "checksum": checksum})
    return json.dumps(to_dict(obj))


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
        header = {**to_dict(obj, {"dtype": dtype, "shape": list(values.shape)}), "checksum": checksum}
        payload = values.data.cast("B")
    else:
        header = to_dict(obj)
    return _frame.pack(json.dumps(header, separators=(",", ":")).encode("utf-8"), payload)
