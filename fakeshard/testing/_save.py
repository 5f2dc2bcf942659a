"""Saving a failure: its trace as JSON, and its timeline beside it.

A search loop (a machine's campaign) calls :func:`keep` with a way to draw the trace's
history; the loop knows its own kind of trace, so this module needs no catalogue of
machines, and nothing here replays.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable, Optional

from fakeshard.testing._trace import Trace, stem
from fakeshard.testing._view import write_html

__all__ = ["keep", "timeline_beside"]


def keep(trace: Trace, config: Any, save_dir: Optional[Path],
         history: Optional[Callable[[], dict[str, Any]]] = None) -> Optional[Path]:
    """Record a failing run's ``trace`` on a machine ``config`` (its ``failures``, and its
    ``saved`` when the trace is saved under ``save_dir``); the path saved to, or ``None``.
    ``history()``, when given, is the trace's history, drawn as ``<stem>.html`` beside it."""
    config.failures.append(trace)
    if save_dir is None:
        return None
    path = trace.save(Path(save_dir), stem(trace))
    config.saved.append(str(path))
    if history is not None:
        timeline_beside(history, path)
    return path


def timeline_beside(history: Callable[[], dict[str, Any]], path: Path) -> Optional[Path]:
    """Write the timeline of ``history()`` beside the trace file ``path``, as ``<stem>.html``;
    the page's path, or ``None`` when it could not be drawn.  A page that cannot be drawn
    never hides the failure it would have shown: the reason goes to standard error."""
    try:
        return write_html(history(), path.with_suffix(".html"))
    except Exception as exc:  # the failure being saved matters more than its picture
        sys.stderr.write(f"fakeshard: no timeline for {path}: {type(exc).__name__}: {exc}\n")
        return None
