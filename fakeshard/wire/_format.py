"""The wire's format: its limits, magic, media types, hidden dtypes and the kinds it carries."""

from __future__ import annotations

from typing import Any

import numpy as np

from fakeshard._contract import HiddenBundle, SampleBundle, TokenBundle
from fakeshard._faults import FAULT_TYPES, FaultPlan, FaultRule

#: ``loads`` refuses longer text (override per call with ``max_chars``).
MAX_TEXT_CHARS = 64 * 1024 * 1024
#: ``loadb`` refuses longer frames (override per call with ``max_bytes``).
MAX_FRAME_BYTES = 1024 * 1024 * 1024
#: The first four bytes of every binary frame (format 1).
FRAME_MAGIC = b"FSB1"
#: A frame's JSON header may not be longer than this.
MAX_HEADER_BYTES = 1024 * 1024
#: The media type of JSON (HTTP ``Content-Type``).
JSON_CONTENT_TYPE = "application/json"
#: The media type of the binary frame (HTTP ``Content-Type``).
FRAME_CONTENT_TYPE = "application/vnd.fakeshard.frame"
#: Binary encodings of hidden values: wire name -> little-endian numpy dtype.
HIDDEN_DTYPES: dict[str, np.dtype[Any]] = {"float32": np.dtype("<f4"), "float16": np.dtype("<f2")}
HIDDEN_FORMS = ("floats", "base64")

KINDS: dict[str, type] = {
    "token_bundle": TokenBundle,
    "hidden_bundle": HiddenBundle,
    "sample_bundle": SampleBundle,
    "fault_plan": FaultPlan,
    "fault_rule": FaultRule,
}
KIND_OF = {cls: kind for kind, cls in KINDS.items()}
FAULTS: dict[str, type] = {cls.type_name: cls for cls in FAULT_TYPES}
#: The kinds of bundle a transport carries (``loads_unchecked``).
BUNDLE_KINDS: dict[str, type] = {"token_bundle": TokenBundle, "hidden_bundle": HiddenBundle,
                                  "sample_bundle": SampleBundle}


class Bad(Exception):
    """A path and a reason, turned into ``MalformedBundle`` by the reader that met it."""
