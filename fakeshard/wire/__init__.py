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

The package holds one idea a module: ``_format`` (limits, magic, media types, kinds),
``_encode`` (writing), ``_frame`` (the frame's envelope), ``_json`` (JSON as every reader
reads it), ``_schema`` (the typed reading of an object, and the envelope every reader checks
first) and ``_read`` (the strict readers and the transport's structural one).

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

from fakeshard.wire._encode import dumpb, dumps, fault_to_dict
from fakeshard.wire._format import (
    FRAME_CONTENT_TYPE,
    FRAME_MAGIC,
    HIDDEN_DTYPES,
    JSON_CONTENT_TYPE,
    MAX_FRAME_BYTES,
    MAX_TEXT_CHARS,
)
from fakeshard.wire._json import RepeatedKey, read_json
from fakeshard.wire._read import loadb, loads, loads_unchecked
from fakeshard.wire._schema import fault_from_dict

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
