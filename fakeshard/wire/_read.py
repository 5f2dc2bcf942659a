"""Reading: the strict readers (``loads``, ``loadb``) and the transport's structural one
(``loads_unchecked``), each over the one envelope and schema reader."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Optional, Union

from fakeshard._contract import CONTRACT_VERSION, HiddenBundle, SampleBundle, TokenBundle, validate
from fakeshard._errors import MalformedBundle, ShardError
from fakeshard._faults import FaultPlan, FaultRule
from fakeshard.wire import _frame
from fakeshard.wire._format import BUNDLE_KINDS, KINDS, MAX_FRAME_BYTES, MAX_TEXT_CHARS, Bad
from fakeshard.wire._json import json_object
from fakeshard.wire._schema import envelope, fits_64_bits, hidden_values, int64, read_object


def loads(text: Union[str, bytes], *, max_chars: int = MAX_TEXT_CHARS) -> Any:
    """The value ``text`` encodes; :class:`MalformedBundle` for any bad text."""
    try:
        if isinstance(text, (bytes, bytearray)):
            # A character is 1 to 4 bytes in UTF-8: more than 4 bytes a character cannot be
            # within the limit, so such a text is refused before it is decoded.
            if len(text) > 4 * max_chars:
                raise Bad(f"text is {len(text)} bytes, over the limit of {max_chars} characters")
            text = bytes(text).decode("utf-8")
        if not isinstance(text, str):
            raise Bad(f"wire.loads takes str or bytes, got {type(text).__name__}")
        if len(text) > max_chars:
            raise Bad(f"text is {len(text)} characters, over the limit of {max_chars}")
        obj = _from_json(text, None)
    except Bad as exc:
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
            raise Bad(f"wire.loadb takes bytes, got {type(data).__name__}")
        head, payload = _frame.split(data, max_bytes)
        obj = _from_json(head, payload)
    except Bad as exc:
        raise MalformedBundle(f"wire: {exc}") from None
    except UnicodeDecodeError as exc:
        raise MalformedBundle(f"wire: frame header is not UTF-8: {exc}") from None
    return _validated(obj)


def _from_json(text: str, payload: Optional[memoryview]) -> Any:
    data = json_object(text, strict=True)
    if data.get("contract") != CONTRACT_VERSION:
        raise Bad(f"contract version {data.get('contract')!r} is not {CONTRACT_VERSION!r}")
    cls = envelope(data, KINDS, payload)
    if isinstance(cls, ShardError):
        return cls
    kind = data["kind"]
    body = {k: v for k, v in data.items() if k != "kind"}
    if cls in (FaultPlan, FaultRule):
        body.pop("contract")
    return read_object(body, cls, str(kind), skip=(), payload=payload if cls is HiddenBundle else None)


def _validated(obj: Any) -> Any:
    if isinstance(obj, (TokenBundle, HiddenBundle, SampleBundle)):
        validate(obj)
    return obj


@functools.lru_cache(maxsize=None)
def _field_names(cls: type) -> tuple[tuple[str, ...], frozenset[str]]:
    """A bundle class's field names, in order and as a set."""
    names = tuple(f.name for f in dataclasses.fields(cls))
    return names, frozenset(names)


def _within_64_bits(items: tuple[Any, ...], kind: str, name: str) -> None:
    """The wire's own rule for the integers of a field's array; refused by name and index."""
    for i, item in enumerate(items):
        if type(item) is int and not fits_64_bits(item):
            int64(item, f"{kind}.{name}[{i}]")


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
            text, payload = _frame.split(data, max_bytes)
        else:
            # The limit counts bytes (UTF-8, a str's as it would be sent), before any decoding.
            size = len(data) if isinstance(data, (bytes, bytearray)) else \
                len(data.encode("utf-8", "surrogatepass")) if isinstance(data, str) else None
            if size is None:
                raise Bad(f"expected str or bytes, got {type(data).__name__}")
            if size > max_bytes:
                raise Bad(f"text is {size} bytes, over the limit of {max_bytes}")
            text = data.decode("utf-8") if isinstance(data, (bytes, bytearray)) else data
            payload = None
        obj = json_object(text, strict=False)
        cls = envelope(obj, BUNDLE_KINDS, payload)
        if isinstance(cls, ShardError):
            return cls
        kind = obj["kind"]
        names, fields = _field_names(cls)
        if len(obj) != len(names) + 1 or not fields <= obj.keys():
            keys = set(obj) - {"kind"}
            raise Bad(f"{kind} must have exactly the fields {sorted(names)}, got {sorted(keys)}")
        values = {}
        for name in names:
            value = obj[name]
            if cls is HiddenBundle and name == "hidden" and (isinstance(value, dict) or payload is not None):
                value = hidden_values(value, f"{kind}.hidden", payload)
            elif isinstance(value, list):
                value = tuple(tuple(v) if isinstance(v, list) else v for v in value)
            if name != "hidden":  # integers within 64 bits is the wire's own rule, not a value's
                if type(value) is int and not fits_64_bits(value):
                    int64(value, f"{kind}.{name}")  # the label is built only to refuse
                elif isinstance(value, tuple):
                    _within_64_bits(value, kind, name)
            values[name] = value
        return cls(**values)
    except Bad as exc:
        raise MalformedBundle(f"wire: {exc}") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise MalformedBundle(f"wire: {exc}") from None
