"""JSON in and out for every bundle, fault plan, fault rule and error.

``dumps`` turns a value into one JSON object with a ``kind`` discriminator
and the ``contract`` version (dataclass fields via dataclasses-json's
``to_dict``).  ``loads`` is strict: exact keys, exact JSON types (no ``"1"``
for ``1``, no ``1.5`` for an int, no ``true`` for a number), integers that fit
in 64 bits (so any coordinator's JSON library reads them), finite numbers,
a known ``kind`` and version, bounded size and depth, and the result passes
:func:`fakeshard.validate`.  Anything else raises :class:`MalformedBundle`
and nothing else.  (dataclasses-json's own schemas coerce ``"1"`` and
``1.5`` to ``1``, so the strict reading is ours.)  No pickle, no eval.

Round trip::

    >>> from fakeshard import TokenBundle
    >>> text = dumps(TokenBundle("s1", 0, 0, (1, 2)))
    >>> text
    '{"kind": "token_bundle", "contract": "1", "session_id": "s1", "epoch": 0, "start_pos": 0, "tokens": [1, 2]}'
    >>> loads(text) == TokenBundle("s1", 0, 0, (1, 2))
    True
"""

from __future__ import annotations

import dataclasses
import functools
import json
import typing
from typing import Any, Union

from dataclasses_json import DataClassJsonMixin

from fakeshard.contract import CONTRACT_VERSION, HiddenBundle, SampleBundle, TokenBundle, validate
from fakeshard.errors import ERROR_CODES, MalformedBundle, ShardError
from fakeshard.faults import FAULT_TYPES, FaultPlan, FaultRule

__all__ = ["MAX_TEXT_CHARS", "dumps", "loads"]

#: ``loads`` refuses longer text (override per call with ``max_chars``).
MAX_TEXT_CHARS = 64 * 1024 * 1024

_KINDS: dict[str, type] = {
    "token_bundle": TokenBundle,
    "hidden_bundle": HiddenBundle,
    "sample_bundle": SampleBundle,
    "fault_plan": FaultPlan,
    "fault_rule": FaultRule,
}
_KIND_OF = {cls: kind for kind, cls in _KINDS.items()}
_FAULTS: dict[str, type] = {cls.type_name: cls for cls in FAULT_TYPES}  # type: ignore[attr-defined]


def _fault_to_dict(fault: Any) -> dict[str, Any]:
    return {"type": fault.type_name, **DataClassJsonMixin.to_dict(fault)}


def _to_dict(obj: Any) -> dict[str, Any]:
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
    else:
        fields = DataClassJsonMixin.to_dict(obj)
        body = {"contract": fields.pop("contract"), **fields}
    return {"kind": kind, **body}


def _rule_to_dict(rule: FaultRule) -> dict[str, Any]:
    out = DataClassJsonMixin.to_dict(rule)
    out["fault"] = _fault_to_dict(rule.fault)
    return out


def dumps(obj: Any) -> str:
    """One JSON object for ``obj``; ``TypeError`` for a value the wire does not carry.

    A hidden bundle holding NaN (a ``Malformed("nan")`` output) is written
    with JSON's non-standard ``NaN``, so it can travel and be refused by
    ``loads`` at the receiving end, as a real corrupt message would.
    """
    return json.dumps(_to_dict(obj))


# -- loading -----------------------------------------------------------------


class _Bad(Exception):
    """Internal: a path and a reason, turned into MalformedBundle at the top."""


def _reject_constant(name: str) -> Any:
    raise _Bad(f"non-finite number {name} is not allowed")


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
        if not -(2**63) <= value < 2**63:
            raise _Bad(f"{path} does not fit in 64 bits")
        return value
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
    if dataclasses.is_dataclass(tp):
        return _object(value, tp, path, skip=())
    raise _Bad(f"{path}: no wire reading for {tp!r}")  # pragma: no cover - a type we forgot


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


def _object(value: Any, cls: type, path: str, skip: tuple[str, ...]) -> Any:
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
            if len(text) > max_chars:
                raise _Bad(f"text is {len(text)} bytes, over the limit of {max_chars}")
            text = bytes(text).decode("utf-8")
        if not isinstance(text, str):
            raise _Bad(f"wire.loads takes str or bytes, got {type(text).__name__}")
        if len(text) > max_chars:
            raise _Bad(f"text is {len(text)} characters, over the limit of {max_chars}")
        try:
            data = json.loads(text, parse_constant=_reject_constant)
        except RecursionError:
            raise _Bad("JSON is nested too deeply") from None
        except json.JSONDecodeError as exc:
            raise _Bad(f"not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise _Bad(f"expected a JSON object, got {_json_type(data)}")
        if data.get("contract") != CONTRACT_VERSION:
            raise _Bad(f"contract version {data.get('contract')!r} is not {CONTRACT_VERSION!r}")
        kind = data.get("kind")
        if kind == "error":
            return _error(data)
        cls = _KINDS.get(kind) if isinstance(kind, str) else None
        if cls is None:
            raise _Bad(f"kind must be one of {sorted(_KINDS) + ['error']}, got {kind!r}")
        body = {k: v for k, v in data.items() if k != "kind"}
        if cls in (FaultPlan, FaultRule):
            body.pop("contract")
        obj = _object(body, cls, kind, skip=())
    except _Bad as exc:
        raise MalformedBundle(f"wire: {exc}") from None
    except UnicodeDecodeError as exc:
        raise MalformedBundle(f"wire: text is not UTF-8: {exc}") from None
    if isinstance(obj, (TokenBundle, HiddenBundle, SampleBundle)):
        validate(obj)
    return obj
