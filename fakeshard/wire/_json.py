"""JSON as every reader of fakeshard's JSON reads it: no key named twice, one object."""

from __future__ import annotations

import json
from typing import Any, Union

from fakeshard.wire._format import Bad


def _reject_constant(name: str) -> Any:
    raise Bad(f"non-finite number {name} is not allowed")


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


#: The decoders, made once (``json.loads`` with options makes one a call).
_DECODER = json.JSONDecoder(object_pairs_hook=_unique_keys)
_STRICT_DECODER = json.JSONDecoder(object_pairs_hook=_unique_keys, parse_constant=_reject_constant)


def read_json(text: Union[str, bytes]) -> Any:
    """``json.loads`` as every reader of fakeshard's JSON uses it: an object naming a key twice
    is refused (``RepeatedKey``, a ``ValueError``), as a reader in another language could take
    either of the two values. ``json.JSONDecodeError`` and ``RecursionError`` pass as they come.
    """
    return json.loads(text, object_pairs_hook=_unique_keys)


def json_object(text: str, strict: bool) -> dict[str, Any]:
    """``text`` as one JSON object; ``strict`` refuses NaN and infinities."""
    try:
        if text[:1] == "\ufeff":  # refused by json.loads, with its words (a decoder's decode() skips that)
            json.loads(text)
        data = (_STRICT_DECODER if strict else _DECODER).decode(text)
    except RecursionError:
        raise Bad("JSON is nested too deeply") from None
    except RepeatedKey as exc:
        raise Bad(str(exc)) from None
    except json.JSONDecodeError as exc:
        raise Bad(f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise Bad(f"expected a JSON object, got {json_type(data)}")
    return data


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return {str: "a string", int: "an integer", float: "a number", list: "an array",
            dict: "an object"}.get(type(value), type(value).__name__)
