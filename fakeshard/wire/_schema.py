"""The typed reading of a JSON object into a wire value: exact keys, exact JSON types,
integers within 64 bits, hidden values in any of their three forms; and the envelope every
reader checks first (the kind, the payload, an error)."""

from __future__ import annotations

import binascii
import dataclasses
import functools
import itertools
import typing
from typing import Any, Optional, Union

import numpy as np

from fakeshard._contract import CONTRACT_VERSION, HiddenBundle, frozen_array
from fakeshard._errors import ERROR_CODES, MalformedBundle, ShardError
from fakeshard.wire._format import FAULTS, HIDDEN_DTYPES, Bad
from fakeshard.wire._json import json_type


def fault_from_dict(data: Any) -> Any:
    """The fault record a JSON object holds; :class:`MalformedBundle` for anything else."""
    try:
        return read_fault(data, "fault")
    except Bad as exc:
        raise MalformedBundle(f"wire: {exc}") from None


def fits_64_bits(value: int) -> bool:
    """Whether ``value`` is within signed 64 bits, the wire's range for every integer."""
    return -(2**63) <= value < 2**63


def int64(value: int, path: str) -> int:
    """``value`` if it fits in signed 64 bits; else :class:`Bad`, naming ``path``."""
    if not fits_64_bits(value):
        raise Bad(f"{path} does not fit in 64 bits")
    return value


@functools.lru_cache(maxsize=None)
def _shape(tp: Any) -> tuple[Any, tuple[Any, ...]]:
    """An annotation's origin and arguments (``typing.get_origin``, ``typing.get_args``), once each."""
    return typing.get_origin(tp), typing.get_args(tp)


def _check(value: Any, tp: Any, path: str) -> Any:
    """``value`` checked against the annotation ``tp``, with ints widened to floats."""
    if tp is str:
        if not isinstance(value, str):
            raise Bad(f"{path} must be a string, got {json_type(value)}")
        return value
    if tp is int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise Bad(f"{path} must be an integer, got {json_type(value)}")
        return int64(value, path)
    if tp is float:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise Bad(f"{path} must be a number, got {json_type(value)}")
        try:
            number = float(value)
        except OverflowError:
            raise Bad(f"{path} is too large for a float") from None
        return number
    origin, args = _shape(tp)
    if origin is Union:
        kept = [a for a in args if a is not type(None)]
        if value is None and len(kept) < len(args):
            return None
        if len(kept) == 1:
            return _check(value, kept[0], path)
        return read_fault(value, path)  # the only non-Optional union on the wire
    if origin is tuple:
        if not isinstance(value, list):
            raise Bad(f"{path} must be an array, got {json_type(value)}")
        item_type = args[0]
        if item_type is float or item_type is int:
            return _numbers(value, item_type, path)
        return tuple(_check(item, item_type, f"{path}[{i}]") for i, item in enumerate(value))
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return read_object(value, tp, path, skip=())
    raise Bad(f"{path}: no wire reading for {tp!r}")  # pragma: no cover - a type we forgot


def _numbers(value: list[Any], item_type: type, path: str) -> tuple[Any, ...]:
    """An array of numbers (``float``) or integers (``int``), each read as :func:`_check` reads it;
    an item's path is written only for the item that is refused (a row of 4,096 values)."""
    if item_type is float:
        if all(type(v) is float for v in value):
            return tuple(value)
    elif all(type(v) is int and -(2**63) <= v < 2**63 for v in value):
        return tuple(value)
    return tuple(_check(item, item_type, f"{path}[{i}]") for i, item in enumerate(value))


_ROWS = tuple[tuple[float, ...], ...]
_LIST, _FLOAT = frozenset({list}), frozenset({float})


def hidden_values(value: Any, path: str, payload: Optional[memoryview]) -> Any:
    """A hidden bundle's values: rows of numbers, base64 (JSON) or the frame's payload."""
    if isinstance(value, list):
        if payload is not None:
            raise Bad(f"{path} must be {{dtype, shape}} in a frame, got an array")
        # The usual rows, lists of floats only, are read in C; anything else is read item by item
        # by :func:`_check`, which names the item it refuses.
        if set(map(type, value)) <= _LIST and set(map(type, itertools.chain.from_iterable(value))) <= _FLOAT:
            return tuple(map(tuple, value))
        return _check(value, _ROWS, path)
    if not isinstance(value, dict):
        raise Bad(f"{path} must be an array of rows or an object, got {json_type(value)}")
    keys = {"dtype", "shape"} | (set() if payload is not None else {"base64"})
    if set(value) != keys:
        raise Bad(f"{path} must have exactly the fields {sorted(keys)}, got {sorted(value)}")
    dtype = HIDDEN_DTYPES.get(value["dtype"]) if isinstance(value["dtype"], str) else None
    if dtype is None:
        raise Bad(f"{path}.dtype must be one of {sorted(HIDDEN_DTYPES)}, got {value['dtype']!r}")
    shape = value["shape"]
    if not isinstance(shape, list) or len(shape) != 2 or not all(
            type(n) is int and 0 <= n < 2**31 for n in shape):
        raise Bad(f"{path}.shape must be [rows, columns] of integers >= 0, got {shape!r}")
    if payload is None:
        text = value["base64"]
        if not isinstance(text, str):
            raise Bad(f"{path}.base64 must be a string, got {json_type(text)}")
        try:
            data: Any = binascii.a2b_base64(text.encode("ascii"), strict_mode=True)
        except (binascii.Error, UnicodeEncodeError) as exc:
            raise Bad(f"{path}.base64 is not base64: {exc}") from None
        if len(text) % 4:  # strict_mode lets padding follow a whole quantum ("AAAA="); RFC 4648 does not
            raise Bad(f"{path}.base64 is not base64: {len(text)} characters, not a multiple of 4")
    else:
        data = payload
    need = shape[0] * shape[1] * dtype.itemsize
    if len(data) != need:
        raise Bad(f"{path} holds {len(data)} bytes, but {shape[0]}x{shape[1]} {value['dtype']} "
                   f"needs {need}")
    rows = np.frombuffer(data, dtype=dtype).reshape(shape)
    return frozen_array(rows)


@functools.lru_cache(maxsize=None)
def _schema(cls: type, skip: tuple[str, ...]) -> tuple[tuple[tuple[str, Any], ...], frozenset[str]]:
    """A wire type's fields with their annotations, and every key its object may hold."""
    hints = typing.get_type_hints(cls)
    fields = tuple((f.name, hints[f.name]) for f in dataclasses.fields(cls) if f.name not in skip)
    return fields, frozenset(name for name, _ in fields) | frozenset(skip)


def read_object(value: Any, cls: type, path: str, skip: tuple[str, ...],
            payload: Optional[memoryview] = None) -> Any:
    if not isinstance(value, dict):
        raise Bad(f"{path} must be an object, got {json_type(value)}")
    fields, allowed = _schema(cls, skip)
    extra = sorted(set(value) - allowed)
    if extra:
        raise Bad(f"{path} has unknown field(s) {extra}")
    kwargs = {}
    for name, annotation in fields:
        if name not in value:
            raise Bad(f"{path} is missing field {name!r}")
        if cls is HiddenBundle and name == "hidden":
            kwargs[name] = hidden_values(value[name], f"{path}.{name}", payload)
        else:
            kwargs[name] = _check(value[name], annotation, f"{path}.{name}")
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise Bad(f"{path}: {exc}") from None


def read_fault(value: Any, path: str) -> Any:
    if not isinstance(value, dict):
        raise Bad(f"{path} must be an object, got {json_type(value)}")
    name = value.get("type")
    cls = FAULTS.get(name) if isinstance(name, str) else None
    if cls is None:
        raise Bad(f"{path}.type must be one of {sorted(FAULTS)}, got {name!r}")
    return read_object(value, cls, path, skip=("type",))


def _error(data: dict[str, Any]) -> ShardError:
    code = data.get("code")
    cls = ERROR_CODES.get(code) if isinstance(code, str) else None
    if cls is None:
        raise Bad(f"error.code must be one of {sorted(ERROR_CODES)}, got {code!r}")
    names = ("kind", "contract", "code", "message", "session_id", "epoch") + cls._extra
    extra = sorted(set(data) - set(names))
    if extra:
        raise Bad(f"error has unknown field(s) {extra}")
    missing = [n for n in names if n not in data]
    if missing:
        raise Bad(f"error is missing field(s) {missing}")
    message = _check(data["message"], str, "error.message")
    session_id = _check(data["session_id"], typing.Optional[str], "error.session_id")
    epoch = _check(data["epoch"], typing.Optional[int], "error.epoch")
    extras = {n: _check(data[n], int, f"error.{n}") for n in cls._extra}
    return cls(message, session_id=session_id, epoch=epoch, **extras)


def envelope(data: dict[str, Any], kinds: dict[str, type], payload: Optional[memoryview]) -> Any:
    """What every reader checks of an object before its fields: its ``kind`` (one of ``kinds``,
    or ``error``), that only a hidden bundle's frame carries a payload, and, for an error, the
    contract version.  An error is returned read; otherwise the class of its kind."""
    kind = data.get("kind")
    cls = kinds.get(kind) if isinstance(kind, str) else None
    if payload is not None and len(payload) and cls is not HiddenBundle:
        raise Bad(f"a frame of kind {kind!r} carries no payload, got {len(payload)} bytes")
    if kind == "error":
        if data.get("contract") != CONTRACT_VERSION:
            raise Bad(f"contract version {data.get('contract')!r} is not {CONTRACT_VERSION!r}")
        return _error(data)
    if cls is None:
        raise Bad(f"kind must be one of {sorted(kinds) + ['error']}, got {kind!r}")
    return cls
