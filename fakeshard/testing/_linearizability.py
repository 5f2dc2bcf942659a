"""Is a concurrent history linearizable under the contract's sequential model?

A *history* is a list of :class:`Op`: a call, the outcome its caller saw, and
the moments (ticks of one shared counter) of its invocation and response.
It is *linearizable* when some total order of the calls respects real time
(a call that returned before another was invoked comes first) and, applied
one at a time to the model, gives every observed outcome. An *ambiguous*
call (``ResponseLost``, a timeout) may have taken effect at any moment after
its invocation, or never, as in Jepsen; its outcome is not compared.

The search is Wing and Gong's, with Lowe's memoisation (as in Porcupine):
depth-first over the calls that may go next (invoked before every pending
call's response), remembering each (set of calls placed, model state) pair
already explored, so no state is searched twice. Where nothing couples the
sessions (no capacity, no whole-engine call: ``used``, ``crash``,
``restart``), the history is split by session and each part checked alone.

The model is the contract's session table, as an immutable value: ``State``
is ``(crashed, ((session_id, epoch, status, cached), ...))``. Tokens come
from ``token_of(session_id, length)``: the token a FULL engine samples after
the session's first ``length`` tokens (the parallel programs feed each
session a fixed token per position, so a cached length names its history).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Optional

# Calls: ("prefill", sid, epoch, start, n), ("decode", sid, epoch, pos), ("cancel"|"release", sid, epoch),
# ("view", sid), ("used",), ("crash",), ("restart",). Outcomes are tuples (see ``step``).
Call = tuple
Outcome = tuple
State = tuple
GLOBAL_OPS = ("used", "crash", "restart")
INITIAL: State = (False, ())


@dataclass(frozen=True)
class Op:
    """One call of a history: who made it, what it was, what came back, and when."""

    index: int
    branch: int  # 0 for the sequential prefix, 1.. for the parallel branches
    call: Call
    outcome: Optional[Outcome]  # None when ambiguous
    invoked: int
    returned: float  # math.inf when ambiguous

    @property
    def ambiguous(self) -> bool:
        return self.outcome is None

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "branch": self.branch, "call": list(self.call),
                "outcome": None if self.outcome is None else list(self.outcome),
                "invoked": self.invoked, "returned": None if self.ambiguous else int(self.returned)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Op":
        outcome = None if d["outcome"] is None else tuple(d["outcome"])
        returned = math.inf if d["returned"] is None else d["returned"]
        return cls(d["index"], d["branch"], tuple(d["call"]), outcome, d["invoked"], returned)


def _sessions(state: State) -> dict[str, tuple[int, str, int]]:
    return {sid: (epoch, status, cached) for sid, epoch, status, cached in state[1]}


def _state(crashed: bool, sessions: dict[str, tuple[int, str, int]]) -> State:
    return (crashed, tuple(sorted((sid, *row) for sid, row in sessions.items())))


def step(state: State, call: Call, capacity: Optional[int],
         token_of: Callable[[str, int], Optional[int]]) -> tuple[State, Outcome]:
    """The contract applied to one call: the next state and the outcome a caller sees."""
    crashed, op = state[0], call[0]
    table = _sessions(state)
    if op == "crash":  # a Crash fault: the engine goes down before applying anything
        return _state(True, {}), ("engine_crashed",)
    if op == "restart":
        return INITIAL, ("ok",)
    if op == "used":
        return state, ("used", sum(c for _, _, c in table.values()))
    if op == "view":
        row = table.get(call[1])
        return state, ("view",) + (tuple(row) if row is not None else (None,))
    if crashed:
        return state, ("engine_crashed",)
    sid, epoch = call[1], call[2]
    row = table.get(sid)
    if op in ("cancel", "release"):
        if row is not None and epoch < row[0]:
            return state, ("stale_epoch",)
        if row is not None and row[0] == epoch and row[1] != "live":
            return state, ("ok",)  # already closed at this epoch: a no-op
        table[sid] = (epoch, "cancelled" if op == "cancel" else "released", 0)
        return _state(False, table), ("ok",)
    start, n = (call[3], call[4]) if op == "prefill" else (call[3], 1)
    if row is not None and epoch < row[0]:
        return state, ("stale_epoch",)
    held = row is not None and row[0] == epoch
    if row is not None and held and row[1] != "live":
        return state, ("cancelled" if row[1] == "cancelled" else "released",)
    if row is not None and held:
        if start != row[2]:
            return state, ("position_mismatch", row[2], start)
        freed = 0
    else:
        if op != "prefill" or start != 0:
            return state, ("cache_miss", 0, start)
        freed = row[2] if row is not None else 0
    used = sum(c for _, _, c in table.values())
    if capacity is not None and n > capacity - (used - freed):
        return state, ("out_of_memory",)
    table[sid] = (epoch, "live", start + n)
    return _state(False, table), ("ok", start + n, token_of(sid, start + n))


@dataclass
class Verdict:
    """The checker's answer; when not linearizable, the furthest it got and why it stopped."""

    linearizable: bool
    explored: int
    #: Indices of the calls of an order that explains them all (linearizable), or of the longest
    #: order found that explains its calls (not linearizable).
    order: tuple[int, ...] = ()
    #: For each call that could go next after ``order``: (index, the model's outcome).
    stuck: tuple[tuple[int, Outcome], ...] = ()
    #: The session the failing part concerns (``None``: the whole history was checked as one).
    part: Optional[str] = None


def _check_part(ops: list[Op], capacity: Optional[int], token_of: Callable[[str, int], Optional[int]],
                initial: State) -> Verdict:
    n = len(ops)
    required = 0
    for i, op in enumerate(ops):
        if not op.ambiguous:
            required |= 1 << i
    seen: set[tuple[int, State]] = set()
    best: tuple[int, tuple[int, ...], State, int] = (-1, (), initial, 0)
    explored = 0
    # Depth-first, iteratively: (placed set, state, order so far).
    stack: list[tuple[int, State, tuple[int, ...]]] = [(0, initial, ())]
    while stack:
        placed, state, order = stack.pop()
        if placed & required == required:
            return Verdict(True, explored, tuple(ops[i].index for i in order))
        key = (placed, state)
        if key in seen:
            continue
        seen.add(key)
        explored += 1
        if len(order) > best[0]:
            best = (len(order), order, state, placed)
        first_return = min(ops[i].returned for i in range(n) if not placed >> i & 1)
        for i in range(n - 1, -1, -1):
            op = ops[i]
            if placed >> i & 1 or op.invoked > first_return:
                continue
            after, outcome = step(state, op.call, capacity, token_of)
            if op.ambiguous or outcome == op.outcome:
                stack.append((placed | 1 << i, after, order + (i,)))
    _, order, state, placed = best
    first_return = min((ops[i].returned for i in range(n) if not placed >> i & 1), default=math.inf)
    stuck = tuple((ops[i].index, step(state, ops[i].call, capacity, token_of)[1]) for i in range(n)
                  if not placed >> i & 1 and ops[i].invoked <= first_return and not ops[i].ambiguous)
    return Verdict(False, explored, tuple(ops[i].index for i in order), stuck)


def _coupled(history: list[Op], capacity: Optional[int], initial: State) -> bool:
    """Whether something couples the sessions (a capacity, a whole-engine call, a crashed
    start), so that the history is checked as one instead of split by session."""
    return capacity is not None or any(op.call[0] in GLOBAL_OPS for op in history) or initial[0]


def _session_start(rows: dict[str, tuple[int, str, int]], sid: str) -> State:
    """The state one session's part of a split history starts from: its own row, if any."""
    return _state(False, {sid: rows[sid]} if sid in rows else {})


def check(history: list[Op], capacity: Optional[int], token_of: Callable[[str, int], Optional[int]],
          initial: State = INITIAL) -> Verdict:
    """Whether ``history`` is linearizable; split by session where nothing couples them."""
    if _coupled(history, capacity, initial):
        return check_whole(history, capacity, token_of, initial)
    explored = 0
    by_session: dict[str, list[Op]] = {}
    for op in history:
        by_session.setdefault(op.call[1], []).append(op)
    rows = _sessions(initial)
    order: tuple[int, ...] = ()
    for sid in sorted(by_session):
        verdict = _check_part(by_session[sid], capacity, token_of, _session_start(rows, sid))
        explored += verdict.explored
        if not verdict.linearizable:
            verdict.explored, verdict.part = explored, sid
            return verdict
        order += verdict.order
    return Verdict(True, explored, order)


def states_along(history: list[Op], verdict: Verdict, capacity: Optional[int],
                 token_of: Callable[[str, int], Optional[int]],
                 initial: State = INITIAL) -> dict[int, tuple[State, State]]:
    """The model's state before and after each call of ``verdict.order`` (by call index), the
    calls applied in that order.  Where the check split the history by session, each session's
    calls are applied from that session's own start, so a state shows that session alone."""
    by_index = {op.index: op for op in history}
    split = not _coupled(history, capacity, initial)
    rows = _sessions(initial)
    states: dict[str, State] = {}
    out: dict[int, tuple[State, State]] = {}
    for index in verdict.order:
        op = by_index[index]
        key = op.call[1] if split else ""
        if key not in states:
            states[key] = _session_start(rows, key) if split else initial
        before = states[key]
        after, _ = step(before, op.call, capacity, token_of)
        out[index] = (before, after)
        states[key] = after
    return out


def state_dict(state: State) -> dict[str, Any]:
    """A model state as a person reads it: whether the engine is crashed, and each session's
    ``epoch``, ``status`` and ``cached`` tokens."""
    return {"crashed": state[0],
            "sessions": {sid: {"epoch": epoch, "status": status, "cached": cached}
                         for sid, epoch, status, cached in state[1]}}


def check_whole(history: list[Op], capacity: Optional[int], token_of: Callable[[str, int], Optional[int]],
                initial: State = INITIAL) -> Verdict:
    """Whether ``history`` is linearizable, searched as one (no split by session)."""
    return _check_part(list(history), capacity, token_of, initial)


def describe_call(call: Call) -> str:
    op, args = call[0], call[1:]
    return f"{op}({', '.join(repr(a) for a in args)})"


def describe_outcome(outcome: Optional[Outcome]) -> str:
    if outcome is None:
        return "ambiguous (may or may not have applied)"
    return " ".join(str(x) for x in outcome)


def timeline(history: list[Op], verdict: Optional[Verdict] = None) -> str:
    """The history drawn as one row per call: its span over the ticks, and why no order explains it."""
    if not history:
        return "(empty history)"
    last = max(int(op.returned) if not op.ambiguous else op.invoked for op in history) + 1
    scale = max(1, math.ceil(last / 48))
    lines = [f"{'call':<4} {'branch':<6} {'span':<{last // scale + 2}} call -> outcome"]
    for op in sorted(history, key=lambda o: o.invoked):
        end = last if op.ambiguous else int(op.returned)
        bar = " " * (op.invoked // scale) + "[" + "-" * max(0, (end - op.invoked) // scale - 1) + \
            ("..." if op.ambiguous else "]")
        lines.append(f"{op.index:<4} {op.branch:<6} {bar:<{last // scale + 2}} "
                     f"{describe_call(op.call)} -> {describe_outcome(op.outcome)}")
    if verdict is not None and not verdict.linearizable:
        by_index = {op.index: op for op in history}
        where = f" (session {verdict.part!r})" if verdict.part is not None else ""
        lines.append(f"not linearizable{where}: {verdict.explored} states explored; the longest order "
                     f"that explains its calls is {list(verdict.order) or '[]'}, then no call can go next:")
        for index, wanted in verdict.stuck:
            op = by_index[index]
            lines.append(f"  call {index} {describe_call(op.call)}: observed {describe_outcome(op.outcome)}, "
                         f"the model says {describe_outcome(wanted)} at that point")
        if not verdict.stuck:
            lines.append("  (every call that may go next must wait for one that has not been invoked)")
    return "\n".join(lines)
