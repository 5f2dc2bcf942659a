"""What a served cluster's nodes were sent: one call log, read through the control API.

Every ``prefill``, ``decode``, ``cancel`` and ``release`` a node receives is an
entry, kept from the moment the request arrives (so a call that hangs in a
partition is there too) until it is answered.  A harness judges a coordinator
by it: "no call after release", "no call to a node that left", the call budget.
``GET /v1/calls`` and ``GET /v1/nodes/{name}/calls`` serve it (docs/contract.md,
"The call log").  Times are seconds on the cluster's monotonic clock, comparable
with one another and with the answer's ``now``.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
from typing import Any, Optional

#: Entries a cluster keeps; the oldest go first (an answer says where what it kept starts).
KEEP = 100_000
#: What a call can end as besides ``ok`` and an engine error's code.
#: ``hung``: swallowed by a partition that hangs (never applied, never answered);
#: ``reset``: applied, and the connection reset halfway through the answer;
#: ``malformed_output``: answered with an output the node's fault plan made malformed.
OUTCOMES = ("pending", "ok", "hung", "reset", "malformed_output")
#: The calls the log keeps.
LOGGED_OPS = ("prefill", "decode", "cancel", "release")


class CallLog:
    """The cluster's call log: entries numbered in the order their requests arrived."""

    # An entry holds only atomic values (``fired`` is a tuple), so the garbage collector stops
    # tracking it: 100,000 kept entries cost a full collection nothing.

    def __init__(self, keep: int = KEEP) -> None:
        self._entries: "collections.deque[dict[str, Any]]" = collections.deque(maxlen=keep)
        self._next = 0

    @staticmethod
    def now() -> float:
        return asyncio.get_running_loop().time()

    def begin(self, node: str, op: str, session_id: Any, epoch: Any, start_pos: Any = None,
              positions: int = 0) -> dict[str, Any]:
        entry = {"seq": self._next, "node": node, "op": op,
                 "session_id": session_id if isinstance(session_id, str) else None,
                 "epoch": epoch if type(epoch) is int else None,
                 "start_pos": start_pos if type(start_pos) is int else None, "positions": positions,
                 "received": self.now(), "answered": None, "outcome": "pending", "fired": (), "held": 0.0,
                 "after_wipe": False, "abandoned": None}
        self._next += 1
        self._entries.append(entry)
        return entry

    def end(self, entry: dict[str, Any], outcome: str) -> None:
        """The call ended as ``outcome`` now (the first end counts)."""
        if entry["outcome"] == "pending":
            entry["outcome"] = outcome
            if outcome != "hung":
                entry["answered"] = self.now()

    def abandon(self, entry: dict[str, Any]) -> None:
        """The call's caller hung up before reading its answer, now (the first time counts)."""
        if entry["abandoned"] is None:
            entry["abandoned"] = self.now()

    def since(self, seq: int, node: Optional[str] = None) -> dict[str, Any]:
        """Entries numbered ``seq`` or later (of ``node`` only, if named), oldest first."""
        first = self._entries[0]["seq"] if self._entries else self._next
        start = max(seq - first, 0)
        entries = [dict(e, fired=list(e["fired"])) for e in itertools.islice(self._entries, start, None)
                   if node is None or e["node"] == node]
        return {"kind": "call_log", "first": first, "next": self._next, "now": self.now(), "calls": entries}


def describe(op: str, bundle: Any) -> tuple[Any, Any, Any, int]:
    """A compute request's session id, epoch, first position and how many positions it carries."""
    positions = 0
    for attr in ("tokens", "hidden"):
        value = getattr(bundle, attr, None)
        if value is not None:
            try:
                positions = len(value)
            except TypeError:
                positions = 0
            break
    return (getattr(bundle, "session_id", None), getattr(bundle, "epoch", None),
            getattr(bundle, "start_pos", None), positions)
