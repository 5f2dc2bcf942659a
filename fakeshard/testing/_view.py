"""Histories you can see: a saved trace as one self-contained HTML timeline.

:func:`history_of` turns a trace into a *history*: tracks (one per session, one per node or
per branch), calls (a bar from invocation to completion, with its outcome: ``ok``, ``error``
for a typed error, ``ambiguous`` for a call that may or may not have applied), marks (faults
fired, nemesis events, epoch bumps and re-routes), the first failing check, and, for a
``parallel`` history, the linearization the checker found (or its longest partial one and
the calls that could not go next, as Porcupine shows them).  :func:`render` writes it into
``timeline.html`` (the page's CSS and JavaScript, shipped beside this module): one file, its
data inline, that needs no network.  The history's fields are written down in
``docs/how-to/read-a-timeline.md``.

Sequential traces (``sessions``, ``faults``, ``surface``, ``failover``, ``coordinator``) are
replayed to read the reference model's state before and after each step; a step is one unit
of time.  ``parallel`` histories are in ticks of the machine's shared counter, ``concurrent``
ones in virtual seconds.  :func:`message_diagram` draws a coordinator trace's traffic (the
``concurrent`` machine's, on its virtual clock; the ``coordinator`` machine's, one call at a
time within each step) as a Lamport diagram (SVG, built with :mod:`xml.etree.ElementTree`).
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Optional
from xml.etree import ElementTree as ET

from fakeshard.testing._lengths import compact
from fakeshard.testing._trace import Trace

__all__ = ["AMBIGUOUS", "history_of", "render", "write_html", "message_diagram"]

#: Outcomes after which a call may or may not have applied.
AMBIGUOUS = frozenset({"response_lost", "hung", "crashed_mid_call", "pending", "abandoned", "unanswered",
                       "ambiguous"})


def _kind(outcome: Optional[str]) -> str:
    if outcome is None or outcome in AMBIGUOUS:
        return "ambiguous"
    return "ok" if outcome == "ok" else "error"


class _Builder:
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


def _short(value: Any) -> Any:
    """A step's field as a tooltip shows it: long token lists and seeded runs compacted."""
    seeded = isinstance(value, dict) and set(value) == {"count", "seed"}
    long_tokens = isinstance(value, list) and len(value) > 8 and all(isinstance(v, int) for v in value)
    return compact(value) if seeded or long_tokens else value


# -- sequential machines --------------------------------------------------------------------------

def _row(view: Optional[tuple[int, str, int]]) -> Optional[dict[str, Any]]:
    """A session view as the contract reads it (``view_state``'s ``(epoch, status, cached)``), named."""
    return None if view is None else dict(zip(("epoch", "status", "cached"), view))


def _engine_state(runner: Any) -> dict[str, Any]:
    """What a sequential runner's world holds: the reference model (engine machines), or the
    coordinator's sessions (failover), or what each node holds (coordinator machine)."""
    from fakeshard.testing._runner import view_state

    model = getattr(runner, "model", None)
    if model is not None:
        return {"crashed": model.crashed, "used": model.used,
                "sessions": {sid: _row(model.view(sid)) for sid in sorted(model.sessions)}}
    nodes = getattr(runner, "nodes", None)
    if nodes is not None:  # the coordinator machine: the coordinator under test is opaque
        held: dict[str, Any] = {}
        for node in nodes:
            views = {sid: _row(view_state(node.engine.session(sid))) for sid in sorted(getattr(runner, "sessions", {}))}
            views = {sid: row for sid, row in views.items() if row is not None}
            if views:
                held[f"node {node.index}"] = views
        return {"nodes hold": held}
    c = runner.coordinator
    return {"reroutes": c.reroutes, "replays": c.replays,
            "sessions": {sid: {"epoch": s.epoch, "open": s.open, "history": len(s.history)}
                         for sid, s in sorted(c.sessions.items())}}


def _sequential(trace: Trace, factory: Callable[..., Any], factory_name: str, tolerance: float,
                builder: _Builder) -> None:
    from fakeshard.testing._regress import replay

    states: list[dict[str, Any]] = []
    node_calls: list[list[tuple[Any, ...]]] = []
    pipeline_calls: list[list[tuple[Any, ...]]] = []
    seen = 0

    def observe(i: int, runner: Any) -> None:
        nonlocal seen
        states.append(_engine_state(runner))
        log = getattr(runner, "log", None)
        if i > 0 and log is not None and hasattr(log, "current"):
            node_calls.append(list(log.current))
        coordinator = getattr(runner, "coordinator", None)
        if i > 0 and coordinator is not None and hasattr(coordinator, "calls") and log is None:
            pipeline_calls.append(list(coordinator.calls[seen:]))
            seen = len(coordinator.calls)

    result = replay(trace, factory, factory_name, tolerance=tolerance, stop_at_failure=False, observe=observe)
    steps, expected, actual = result.trace.steps, result.trace.expected, result.trace.actual
    epochs: dict[str, Any] = {}
    for i, step in enumerate(steps):
        sid = step.get("session_id")
        track = builder.track("session", str(sid)) if sid is not None else builder.track("engine", "")
        got = actual[i] if i < len(actual) else {}
        want = expected[i] if i < len(expected) else {}
        outcome = got.get("outcome", "ok")
        if outcome == "exception":
            outcome = got.get("type", "exception")
        args = {k: _short(v) for k, v in step.items() if k not in ("op", "session_id")}
        label = step.get("op", "?")
        index = builder.call(track, i, i + 1, label, outcome,
                             {"step": i + 1, **args, "expected": want, "actual": got},
                             states[i] if i < len(states) else None,
                             states[i + 1] if i + 1 < len(states) else None)
        for fault in want.get("fired", ()):
            builder.mark(i, "fault", f"{fault} fired on step {i + 1}", track)
        if result.first_divergence == i + 1:
            builder.fail(result.message or "diverged", i + 1, index, result.error_type or "divergence")
        if "epoch" in got and sid is not None:
            if sid in epochs and got["epoch"] != epochs[sid]:
                builder.mark(i + 0.5, "epoch", f"session {sid}: epoch {epochs[sid]} -> {got['epoch']}", track)
            epochs[sid] = got["epoch"]
    messages = []
    for i, calls in enumerate(node_calls):  # the coordinator machine: each step's engine calls
        for (node, op, sid, epoch, outcome), (start, end) in zip(calls, _slots(i, len(calls))):
            builder.call(builder.track("node", str(node)), start, end, f"{op} {sid}",
                         outcome, {"step": i + 1, "node": node, "op": op, "session": sid, "epoch": epoch})
            # One call at a time: the request leaves as the call starts, its answer is back as it ends.
            middle = round((start + end) / 2, 6)
            messages.append({"from": "coordinator", "to": f"node {node}", "sent": round(start, 6),
                             "received": middle, "label": f"{op} {sid}@{epoch}"})
            messages.append({"from": f"node {node}", "to": "coordinator", "sent": middle,
                             "received": round(end, 6), "label": outcome})
    if messages:
        builder.data["messages"] = messages
    for i, calls in enumerate(pipeline_calls):  # failover: the reference coordinator's attempts
        for (op, sid, epoch, pos, out), (start, end) in zip(calls, _slots(i, len(calls))):
            code = getattr(out, "code", "ok")
            builder.call(builder.track("pipeline", "route"), start, end,
                         f"{op} {sid}", code, {"step": i + 1, "op": op, "session": sid, "epoch": epoch,
                                                "position": pos, "answer": str(out) if code != "ok" else
                                                getattr(out, "token", None)})
        if i + 1 < len(states):  # the step's re-routes: the reference coordinator's count, before and after
            more = states[i + 1]["reroutes"] - states[i]["reroutes"]
            if more > 0:
                builder.mark(i + 0.5, "reroute", f"re-routed on step {i + 1} ({more})")
    if result.failed and builder.data["failure"] is None:
        builder.fail(result.message or "failed", len(steps), None, result.error_type or "finish")


def _slots(step: int, n: int) -> list[tuple[float, float]]:
    """Where the ``n`` calls a step made sit within it, one after the other: ``[step, step + 1)``
    cut in ``n`` equal parts."""
    return [(step + j / n, step + (j + 1) / n) for j in range(n)]


# -- the parallel machine -------------------------------------------------------------------------

def _parallel(trace: Trace, factory: Callable[..., Any], builder: _Builder) -> None:
    from fakeshard import ShardSpec
    from fakeshard.testing._linearizability import (
        Op,
        check,
        describe_call,
        describe_outcome,
        state_dict,
        states_along,
    )
    from fakeshard.testing._parallel import Program, Tokens

    spec = ShardSpec(**trace.config["spec"])
    program = Program.from_dict(trace.config["program"])
    tokens = Tokens(factory, spec)
    history = tokens.blur([Op.from_dict(d) for d in trace.steps])
    verdict = check(history, program.capacity, tokens)
    states = states_along(history, verdict, program.capacity, tokens)
    end = max([op.invoked + 1 for op in history] + [int(op.returned) for op in history if not op.ambiguous])
    ids: dict[int, int] = {}
    for op in sorted(history, key=lambda o: (o.branch, o.invoked)):
        before, after = states.get(op.index, (None, None))
        ids[op.index] = builder.call(
            builder.track("branch", str(op.branch)), op.invoked, None if op.ambiguous else op.returned,
            describe_call(op.call), None if op.outcome is None else str(op.outcome[0]),
            {"call": op.index, "branch": op.branch, "observed": describe_outcome(op.outcome),
             "invoked": op.invoked, "returned": None if op.ambiguous else op.returned},
            None if before is None else state_dict(before), None if after is None else state_dict(after))
    builder.data["end"] = end
    by_index = {op.index: op for op in history}
    builder.data["linearization"] = {
        "linearizable": verdict.linearizable, "explored": verdict.explored, "part": verdict.part,
        "order": [ids[i] for i in verdict.order],
        "stuck": [{"call": ids[i], "model": describe_outcome(wanted),
                   "observed": describe_outcome(by_index[i].outcome)} for i, wanted in verdict.stuck]}
    if not verdict.linearizable:
        first = verdict.stuck[0][0] if verdict.stuck else None
        where = f" (session {verdict.part!r})" if verdict.part is not None else ""
        builder.fail(f"not linearizable{where}: the longest order that explains its calls has "
                     f"{len(verdict.order)} calls, then no call can go next", None,
                     None if first is None else ids[first], "linearizability")


# -- the concurrent machine -----------------------------------------------------------------------

def _concurrent(trace: Trace, builder: _Builder) -> None:
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

def history_of(trace: Trace, factory: Callable[..., Any], factory_name: str,
               tolerance: float = 0.0) -> dict[str, Any]:
    """The history a page draws for ``trace``, on ``factory``'s engines (sequential traces are
    replayed to read the model's state; parallel ones re-checked; concurrent ones read as saved)."""
    unit = {"parallel": "tick", "concurrent": "virtual second", "program": "second"}.get(trace.machine, "step")
    builder = _Builder(f"{trace.machine} trace, found on {trace.engine_factory}", trace.machine, unit)
    builder.data["note"] = trace.note
    builder.data["saved_failure"] = trace.failure
    if trace.machine == "parallel":
        _parallel(trace, factory, builder)
    elif trace.machine in ("concurrent", "program"):  # a program's run: the same history, in real time
        _concurrent(trace, builder)
    else:
        _sequential(trace, factory, factory_name, tolerance, builder)
    calls = builder.data["calls"]
    ends = [c["end"] if c["end"] is not None else c["start"] for c in calls] + [m["t"] for m in builder.data["marks"]]
    last = max([builder.data.get("end", 0)] + ends)
    builder.data["end"] = last if last > 0 else 1  # a history all at one moment still has a width
    builder.data["state_note"] = STATE_NOTES.get(trace.machine, "")
    return builder.data


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
