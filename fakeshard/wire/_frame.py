"""The binary frame's envelope: magic, the header's length, the header, the payload."""

from __future__ import annotations

import struct
from typing import Any

from fakeshard.wire._format import FRAME_MAGIC, MAX_HEADER_BYTES, Bad


def pack(head: bytes, payload: Any = b"") -> bytes:
    """The frame of the header ``head`` (UTF-8 JSON) and ``payload`` (raw bytes)."""
    return b"".join((FRAME_MAGIC, struct.pack("<I", len(head)), head, payload))


def split(data: Any, max_bytes: int) -> tuple[str, memoryview]:
    """A frame's header text and payload (a view of ``data``, copied once if it was writable)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise Bad(f"a frame is bytes, got {type(data).__name__}")
    data = bytes(data)  # no copy for bytes
    if len(data) > max_bytes:
        raise Bad(f"frame is {len(data)} bytes, over the limit of {max_bytes}")
    if len(data) < 8 or data[:4] != FRAME_MAGIC:
        raise Bad(f"a frame starts with {FRAME_MAGIC!r} and a 4-byte header length, got {data[:8]!r}")
    (size,) = struct.unpack_from("<I", data, 4)
    if size > MAX_HEADER_BYTES or 8 + size > len(data):
        raise Bad(f"frame header of {size} bytes does not fit a frame of {len(data)} bytes "
                   f"(limit {MAX_HEADER_BYTES})")
    return data[8:8 + size].decode("utf-8"), memoryview(data)[8 + size:]
