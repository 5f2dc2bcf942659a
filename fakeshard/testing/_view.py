"""Histories you can see: a saved trace as one self-contained HTML timeline.

A trace's *history* (:func:`page_history`; :func:`fakeshard.testing._history.history_of` for
any saved trace) holds tracks (one per session, one per node or per branch), calls (a bar
from invocation to completion, with its outcome: ``ok``, ``error`` for a typed error,
``ambiguous`` for a call that may or may not have applied), marks (faults fired, nemesis
events, epoch bumps and re-routes), the first failing check, and, for a ``parallel`` history,
the linearization the checker found (or its longest partial one and the calls that could not
go next, as Porcupine shows them).  :func:`render` writes it into ``timeline.html`` (the
page's CSS and JavaScript, shipped beside this module): one file, its data inline, that needs
no network.  The history's fields are written down in ``docs/how-to/read-a-timeline.md``.

This module draws; it replays nothing, so a search loop that saves a trace draws its page
without importing the harness.  Sequential traces (``sessions``, ``faults``, ``surface``,
``failover``, ``coordinator``) are replayed by the harness to read the reference model's
state before and after each step; a step is one unit of time.  ``parallel`` histories are in
ticks of the machine's shared counter, ``concurrent`` ones in virtual seconds.
:func:`message_diagram` draws a coordinator trace's traffic (the ``concurrent`` machine's, on
its virtual clock; the ``coordinator`` machine's, one call at a time within each step) as a
Lamport diagram (SVG, built with :mod:`xml.etree.ElementTree`).
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Optional
from xml.etree import ElementTree as ET

from fakeshard.testing._lengths import compact
from fakeshard.testing._trace import Trace

__all__ = ["AMBIGUOUS", "Builder", "UNITS", "message_diagram", "page_history", "render", "saved_history",
           "short", "write_html"]

#: Outcomes after which a call may or may not have applied.
AMBIGUOUS = frozenset({"response_lost", "hung", "crashed_mid_call", "pending", "abandoned", "unanswered",
                       "ambiguous"})


def _kind(outcome: Optional[str]) -> str:
    if outcome is None or outcome in AMBIGUOUS:
        return "ambiguous"
    return "ok" if outcome == "ok" else "error"


class Builder:
    """Tracks, calls and marks as they are found; tracks keep the order they were first named."""

    def __init__(self, title: str, machine: str, unit: str) -> None:
        self.data: dict[str, Any] = {"title": title, "machine": machine, "unit": unit, "tracks": [],
                                     "calls": [], "marks": [], "failure": None, "linearization": None,
                                     "messages": None}
        self._tracks: dict[tuple[str, str], int] = {}

    def track(self, kind: str, name: str) -> int:
        key = (kind, name)
        if key not in self._tracks:
            self._tracks[key] = len(self.data["tracks"])
            self.data["tracks"].append({"kind": kind, "label": f"{kind} {name}"})
        return self._tracks[key]

    def call(self, track: int, start: float, end: Optional[float], label: str, outcome: Optional[str],
             details: dict[str, Any], before: Any = None, after: Any = None) -> int:
        self.data["calls"].append({"track": track, "start": _moment(start), "end": _moment(end), "label": label,
                                   "outcome": _kind(outcome), "code": outcome or "ambiguous",
                                   "details": details, "before": before, "after": after})
        return len(self.data["calls"]) - 1

    def mark(self, t: float, kind: str, label: str, track: Optional[int] = None) -> None:
        self.data["marks"].append({"t": _moment(t), "kind": kind, "label": label, "track": track})

    def fail(self, message: str, t: Optional[float], call: Optional[int], check: str) -> None:
        self.data["failure"] = {"message": message, "t": _moment(t), "call": call, "check": check}


def _moment(t: Any) -> Any:
    """A moment as the page shows it: to the microsecond (a virtual clock's sums of rounded hops
    carry float noise, 0.080915999999 for 0.080916); steps and ticks are left as they are."""
    return round(t, 6) if isinstance(t, float) else t


def short(value: Any) -> Any:
    """A step's field as a tooltip shows it: long token lists and seeded runs compacted."""
    seeded = isinstance(value, dict) and set(value) == {"count", "seed"}
    long_tokens = isinstance(value, list) and len(value) > 8 and all(isinstance(v, int) for v in value)
    return compact(value) if seeded or long_tokens else value


# -- the concurrent machine -----------------------------------------------------------------------

def _concurrent(trace: Trace, builder: Builder) -> None:
    invoked: dict[Any, dict[str, Any]] = {}
    completed: dict[Any, int] = {}
    for e in trace.steps:
        event = e["event"]
        if event == "invoke":
            invoked[e["request"]] = e
        elif event == "complete":
            start = invoked.pop(e["request"], e)
            outcome = e.get("outcome")
            completed[e["request"]] = builder.call(
                builder.track("session", str(e["session"])), start["t"], e["t"], e["op"],
                "ok" if outcome in ("ok", "token", None) else str(outcome),
                {"request": e["request"], "op": e["op"], "outcome": outcome, "token": e.get("token")})
        elif event == "nemesis":
            what = " ".join(f"{k}={v}" for k, v in e.items() if k not in ("t", "event"))
            builder.mark(e["t"], "nemesis", what)
        elif event == "failure":
            near = [i for i, c in enumerate(builder.data["calls"]) if c["end"] is not None and c["end"] <= e["t"]]
            builder.fail(e.get("message", ""), e["t"], near[-1] if near else None, e.get("check", ""))
    for rid, e in invoked.items():  # invoked, never answered
        builder.call(builder.track("session", str(e["session"])), e["t"], None, e["op"], "unanswered",
                     {"request": rid, "op": e["op"], "outcome": "never answered"})
    epochs: dict[Any, Any] = {}
    for c in trace.actual:
        done = c.get("done")
        track = builder.track("node", str(c["node"]))
        builder.call(track, c["sent"], done, f"{c['op']} {c['session_id']}",
                     "abandoned" if c.get("abandoned") and c["outcome"] == "pending" else c["outcome"],
                     {k: v for k, v in c.items() if k not in ("seq",)})
        for fault in c.get("fired", ()):
            builder.mark(c.get("arrived") or c["sent"], "fault", f"{fault} fired on node {c['node']}", track)
        sid, epoch = c["session_id"], c["epoch"]
        if isinstance(epoch, int) and sid in epochs and epoch > epochs[sid]:
            builder.mark(c["sent"], "epoch", f"session {sid}: epoch {epochs[sid]} -> {epoch}")
        if isinstance(epoch, int):
            epochs[sid] = max(epoch, epochs.get(sid, epoch))
    builder.data["messages"] = _messages(trace.actual)


def _messages(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Coordinator-to-node traffic: a request from its sending to its arrival, an answer from
    the node's answer to its arrival back (a lost or hung one has no answer arrow)."""
    out = []
    for c in calls:
        if c.get("arrived") is not None:
            out.append({"from": "coordinator", "to": f"node {c['node']}", "sent": c["sent"], "received": c["arrived"],
                        "label": f"{c['op']} {c['session_id']}@{c['epoch']}"})
        if c.get("answered") is not None and c.get("done") is not None:
            out.append({"from": f"node {c['node']}", "to": "coordinator", "sent": c["answered"],
                        "received": c["done"], "label": c["outcome"]})
    return out


# -- the whole --------------------------------------------------------------------------------------

#: The unit a kind of history's time is in (a step, for the sequential machines).
UNITS = {"parallel": "tick", "concurrent": "virtual second", "program": "second"}


def page_history(trace: Trace, fill: Callable[["Builder"], None]) -> dict[str, Any]:
    """The history a page draws for ``trace``, its tracks, calls and marks put in by
    ``fill(builder)`` (each kind of trace has its own: :func:`saved_history` reads a coordinator
    run's as saved; the harness replays the others, :mod:`fakeshard.testing._history`)."""
    builder = Builder(f"{trace.machine} trace, found on {trace.engine_factory}", trace.machine,
                       UNITS.get(trace.machine, "step"))
    builder.data["note"] = trace.note
    builder.data["saved_failure"] = trace.failure
    fill(builder)
    calls = builder.data["calls"]
    ends = [c["end"] if c["end"] is not None else c["start"] for c in calls] + [m["t"] for m in builder.data["marks"]]
    last = max([builder.data.get("end", 0)] + ends)
    builder.data["end"] = last if last > 0 else 1  # a history all at one moment still has a width
    builder.data["state_note"] = STATE_NOTES.get(trace.machine, "")
    return builder.data


def saved_history(trace: Trace) -> dict[str, Any]:
    """The history of a ``concurrent`` or ``program`` trace, read as saved (its run, in virtual
    or real time, is kept whole: nothing is replayed)."""
    return page_history(trace, lambda builder: _concurrent(trace, builder))


#: Why a kind of history shows no model state around some calls.
STATE_NOTES = {
    "concurrent": "the concurrent machine keeps no sequential model: its checks compare each session's "
                  "tokens with the fault-free stream and read the nodes' call logs",
    "program": "a coordinator program's run keeps no sequential model: its checks compare each session's "
               "tokens with the fault-free stream and read the served nodes' call log",
    "coordinator": "a node call's state is not read: the step's state is what every node holds after it",
    "failover": "a route attempt's state is not read: the step's state is the reference coordinator's",
    "parallel": "a call outside the order the checker found has no state of its own",
}


def _page() -> str:
    return resources.files("fakeshard.testing").joinpath("timeline.html").read_text(encoding="utf-8")


def render(history: dict[str, Any]) -> str:
    """The page for ``history``: the shipped template with the history inline (as JSON in a
    ``<script type="application/json">``; ``<`` is written ``\\u003c``, so no text of the
    history can close the element) and the message diagram, if any, as inline SVG."""
    data = json.dumps(history, sort_keys=True, allow_nan=False, default=str).replace("<", "\\u003c")
    svg = message_diagram(history["messages"]) if history.get("messages") else ""
    return _page().replace("/*HISTORY*/null", data, 1).replace("<!--MESSAGES-->", svg, 1)


def write_html(history: dict[str, Any], path: Path) -> Path:
    Path(path).write_text(render(history), encoding="utf-8")
    return Path(path)


#: Pixels between two events of the message diagram: more than a label's height (9 px).
ROW = 13


def message_diagram(messages: list[dict[str, Any]], limit: int = 400) -> str:
    """A Lamport diagram of ``messages`` (the first ``limit``): one vertical line per process
    (the coordinator, then each node), logical time downwards, an arrow per message from its
    sending to its receipt.  Every sending and every receipt has a row of its own, in the order
    they happened (a sending before its receipt), so no two labels share a row: each label sits
    just above its arrow's start.  SVG text, every label escaped by ElementTree."""
    shown = sorted(messages, key=lambda m: (m["sent"], m["received"]))[:limit]
    procs = ["coordinator"] + sorted({m["to"] for m in shown} | {m["from"] for m in shown} - {"coordinator"},
                                     key=lambda p: (len(p), p))
    x = {p: 90 + 140 * i for i, p in enumerate(procs)}
    # (time, a sending before a receipt at the same time, the message): one row each.
    events = sorted([(m["sent"], 0, k) for k, m in enumerate(shown)]
                    + [(m["received"], 1, k) for k, m in enumerate(shown)])
    row = {(kind, k): r for r, (_, kind, k) in enumerate(events)}
    height = 70 + max(300, ROW * len(events))

    def y(kind: int, k: int) -> str:
        return f"{50 + ROW * row[(kind, k)]:.1f}"

    width = 90 + 140 * len(procs)
    svg = ET.Element("svg", {"xmlns": "http://www.w3.org/2000/svg", "id": "messages", "width": str(width),
                             "height": str(height), "viewBox": f"0 0 {width} {height}", "class": "lamport"})
    defs = ET.SubElement(svg, "defs")
    marker = ET.SubElement(defs, "marker", {"id": "arrow", "viewBox": "0 0 10 10", "refX": "10", "refY": "5",
                                            "markerWidth": "6", "markerHeight": "6", "orient": "auto"})
    ET.SubElement(marker, "path", {"d": "M0,0 L10,5 L0,10 z", "fill": "#555"})
    for p in procs:
        ET.SubElement(svg, "line", {"x1": str(x[p]), "y1": "40", "x2": str(x[p]), "y2": str(height - 10),
                                    "stroke": "#999"})
        ET.SubElement(svg, "text", {"x": str(x[p]), "y": "25", "text-anchor": "middle"}).text = p
    for k, m in enumerate(shown):
        line = ET.SubElement(svg, "line", {"x1": str(x[m["from"]]), "y1": y(0, k), "x2": str(x[m["to"]]),
                                           "y2": y(1, k), "marker-end": "url(#arrow)",
                                           "class": "msg reply" if m["to"] == "coordinator" else "msg"})
        ET.SubElement(line, "title").text = f"{m['label']}: sent {m['sent']:g}, received {m['received']:g}"
        rightwards = x[m["to"]] >= x[m["from"]]
        ET.SubElement(svg, "text", {"x": str(x[m["from"]] + (4 if rightwards else -4)),
                                    "y": f"{float(y(0, k)) - 2:.1f}",
                                    "text-anchor": "start" if rightwards else "end",
                                    "class": "msglabel"}).text = f"{m['label']} (t={m['sent']:g})"
    if len(messages) > limit:
        ET.SubElement(svg, "text", {"x": "10", "y": str(height - 2)}).text = \
            f"the first {limit} of {len(messages)} messages"
    return ET.tostring(svg, encoding="unicode")
