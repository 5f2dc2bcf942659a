"""Plain-text tables for the command line: columns padded, trailing blanks trimmed."""

from __future__ import annotations

from typing import Sequence

__all__ = ["text_table"]


def text_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A header, a dashed rule and the rows, each column as wide as its widest cell."""
    widths = [max([len(header[c])] + [len(r[c]) for r in rows]) for c in range(len(header))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip(),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
    return "\n".join(lines)
