"""A sequential trace's history, for its timeline page.

Sequential traces (``sessions``, ``faults``, ``surface``, ``failover``, ``coordinator``) are
replayed (:mod:`fakeshard.testing._replay`) to read the reference model's state before and after
each step.  Any trace's history: :func:`fakeshard.testing._registry.history_of`; the page itself
is :mod:`fakeshard.testing._view`'s.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from fakeshard.testing._replay import replay_steps
from fakeshard.testing._runner import view_state
from fakeshard.testing._trace import Trace
from fakeshard.testing._view import Builder, page_history, short

__all__ = ["sequential_history"]


def sequential_history(trace: Trace, factory: Callable[..., Any], factory_name: str,
                       tolerance: float = 0.0) -> dict[str, Any]:
    """The history a page draws for a sequential ``trace``, replayed on ``factory``'s engines to
    read the model's state around each step."""
    return page_history(trace, lambda builder: _sequential(trace, factory, factory_name, tolerance, builder))


def _row(view: Optional[tuple[int, str, int]]) -> Optional[dict[str, Any]]:
    """A session view as the contract reads it (``view_state``'s ``(epoch, status, cached)``), named."""
    return None if view is None else dict(zip(("epoch", "status", "cached"), view))


def _engine_state(runner: Any) -> dict[str, Any]:
    """What a sequential runner's world holds: the reference model (engine machines), or the
    coordinator's sessions (failover), or what each node holds (coordinator machine)."""
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
                builder: Builder) -> None:
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

    result = replay_steps(trace, factory, factory_name, tolerance=tolerance, stop_at_failure=False,
                          observe=observe)
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
        args = {k: short(v) for k, v in step.items() if k not in ("op", "session_id")}
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
