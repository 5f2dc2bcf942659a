"""The reference model: the contract, read literally, over plain dicts.

Written from ``docs/contract.md`` and nothing else.  It holds, per session, the
newest epoch seen, a status and the token history cached at that epoch; it
counts fault-rule matches and draws probabilities from its own
``random.Random(plan.seed)``.  It never looks at the engine under test: the
values it expects come from an :class:`Oracle` that recomputes the whole
history on a fresh engine (replay equivalence).

It may be slow; it must be simple enough to trust by reading.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from fakeshard import FaultPlan, HiddenBundle, SampleBundle, ShardSpec
from fakeshard._feeder import Feeder

# Outcome codes: "ok" or an error code from the contract.
OK = "ok"
#: The session rules' conditions in the contract's order of checks: the first that holds decides.
COMPUTE_ORDER = ("down", "malformed", "stale", "cancelled", "released", "nothing_held_miss",
                 "position_mismatch", "pressure", "capacity")
CLOSE_ORDER = ("down", "malformed", "stale")


@dataclass
class Expected:
    """What the contract says a call returns.

    ``code`` is ``"ok"`` or an error code; ``fields`` the error's
    session_id/epoch/expected/got; ``output`` the exact output bundle of a
    successful compute call (``None`` for cancel/release); ``malformed`` the
    ways a ``Malformed`` fault must break that output; ``row`` the contract
    row the call took (a probe).
    """

    code: str
    row: str
    fields: dict[str, Any] = field(default_factory=dict)
    output: Any = None
    malformed: tuple[str, ...] = ()
    fired: tuple[str, ...] = ()
    #: Every condition of the session rules that held on the call, in the contract's order
    #: (the first decided it): the crossings a probe records.
    holds: tuple[str, ...] = ()
    #: The allocation the call reached (create, replace_older, create_over_tombstone, append),
    #: whether or not it fit; ``""`` for a call decided before it.
    allocation: str = ""


@dataclass
class ModelSession:
    epoch: int
    status: str  # "live" | "cancelled" | "released"
    history: list[int] = field(default_factory=list)  # the tokens cached (live only)


class Oracle:
    """Recomputes an engine's output from scratch on a fresh engine."""

    def __init__(self, factory: Callable[..., Any], spec: ShardSpec, seed: int) -> None:
        self.factory, self.spec, self.seed = factory, spec, seed
        self.feeder = Feeder(factory, spec, seed=seed)

    def output(self, session_id: str, epoch: int, start: int, history: list[int]) -> Any:
        """The output for positions ``start..len(history)-1`` of a session whose tokens are ``history``.

        Computed in one prefill from position 0 on a fresh engine, under a
        fixed session id and epoch 0, then labelled with the caller's identity:
        the contract says outputs depend on neither, nor on chunking.
        """
        fresh = self.factory(self.spec, seed=self.seed)
        whole = fresh.prefill(self.feeder.bundle("oracle", 0, 0, history, len(history)))
        if isinstance(whole, SampleBundle):
            return SampleBundle(session_id, epoch, whole.pos, whole.token)
        return HiddenBundle.sealed(session_id, epoch, start, whole.layer, whole.hidden[start:])


def well_typed(session_id: Any, epoch: Any) -> bool:
    """Whether an error must carry exactly this session id and epoch (the contract's Errors
    table: a non-empty str and an int >= 0; otherwise each may be the call's value or None)."""
    return isinstance(session_id, str) and session_id != "" and isinstance(epoch, int) \
        and not isinstance(epoch, bool) and epoch >= 0


class RuleCounters:
    """The contract's fault-drawing, literally: count matches, fire in the window."""

    def __init__(self, plan: FaultPlan) -> None:
        self.rules = plan.rules
        self.matched = [0] * len(plan.rules)
        self.rng = random.Random(plan.seed)

    def draw(self, op: str, session_id: Any) -> list[Any]:
        """The faults that fire on this call, in rule order."""
        return [fault for _, fault in self.draw_indexed(op, session_id)]

    def draw_indexed(self, op: str, session_id: Any) -> list[tuple[int, Any]]:
        """Each fault that fires on this call with the index of its rule, in rule order."""
        fired = []
        for i, rule in enumerate(self.rules):
            if rule.op not in ("any", op) or rule.session_id not in (None, session_id):
                continue
            self.matched[i] += 1
            n = self.matched[i]
            in_window = n >= rule.nth and (rule.count is None or n < rule.nth + rule.count)
            if not in_window:
                continue
            if rule.probability < 1.0 and not self.rng.random() < rule.probability:
                continue
            fired.append((i, rule.fault))
        return fired


class Model:
    """The state the contract says an engine is in, and what each call returns."""

    def __init__(self, oracle: Oracle, *, capacity: Optional[int], plan: FaultPlan) -> None:
        self.oracle = oracle
        self.spec = oracle.spec
        self.capacity = capacity
        self.sessions: dict[str, ModelSession] = {}
        self.crashed = False
        self.clock = 0.0
        self.faults = RuleCounters(plan)

    @property
    def used(self) -> int:
        return sum(len(s.history) for s in self.sessions.values())

    def view(self, session_id: str) -> Optional[tuple[int, str, int]]:
        s = self.sessions.get(session_id)
        return None if s is None else (s.epoch, s.status, len(s.history))

    def history(self, session_id: str) -> list[int]:
        s = self.sessions.get(session_id)
        return list(s.history) if s is not None else []

    def restart(self) -> None:
        self.crashed = False
        self.sessions = {}

    def _enter(self, op: str, session_id: Any, epoch: Any, valid: bool
               ) -> tuple[list[Any], tuple[str, ...], dict[str, Any], Optional[Expected]]:
        """Draw the faults, then the first two checks (engine up, valid input).

        Returns what fired, its names, the error fields, and the outcome if a
        check already decided it.  An error carries the call's own session id and
        epoch whenever the id is a non-empty str and the epoch an int >= 0, the
        call malformed or not (the contract's Errors table); where either is
        ill-typed, each may be the call's value or None, so neither is checked.
        """
        fired = self.faults.draw(op, session_id)
        self.clock += sum(f.seconds for f in fired if type(f).__name__ == "Delay")
        if any(type(f).__name__ == "Crash" for f in fired):
            self.crashed = True
            self.sessions = {}
        names = tuple(type(f).__name__ for f in fired)
        ids = {"session_id": session_id, "epoch": epoch} if valid or well_typed(session_id, epoch) else {}
        if self.crashed:
            return fired, names, ids, Expected("engine_crashed", "down", ids, fired=names)
        if not valid:
            return fired, names, ids, Expected("malformed_bundle", "malformed", ids, fired=names)
        return fired, names, ids, None

    def conditions(self, op: str, session_id: Any, epoch: Any, start: int, n: int, valid: bool,
                   fired: list[Any]) -> tuple[str, ...]:
        """Every session-rule condition that holds for the call, each read on its own, in the
        contract's order (``COMPUTE_ORDER``, ``CLOSE_ORDER``); changes nothing.  The session
        conditions are read where the call names a session and epoch of the right types."""
        holds = ["down"] if self.crashed else []
        if not valid:
            holds.append("malformed")
        if not isinstance(session_id, str) or isinstance(epoch, bool) or not isinstance(epoch, int):
            return tuple(holds)
        s = self.sessions.get(session_id)
        if s is not None and epoch < s.epoch:
            holds.append("stale")
        if op in ("cancel", "release"):
            return tuple(holds)
        held = s if s is not None and s.epoch == epoch else None
        if held is not None and held.status in ("cancelled", "released"):
            holds.append(held.status)
        if held is None and (op != "prefill" or start != 0):
            holds.append("nothing_held_miss")
        if held is not None and held.status == "live" and start != len(held.history):
            holds.append("position_mismatch")
        pressure = [f for f in fired if type(f).__name__ == "MemoryPressure"]
        if any(f.reserve_tokens is None for f in pressure):
            holds.append("pressure")
        if self.capacity is not None:
            freed = len(s.history) if s is not None and s.epoch < epoch else 0
            reserve = sum(f.reserve_tokens or 0 for f in pressure)
            if n > self.capacity - reserve - (self.used - freed):
                holds.append("capacity")
        return tuple(holds)

    def compute(self, op: str, session_id: str, epoch: int, start: int, tokens: list[int],
                valid: bool = True, sent_epoch: Any = None) -> Expected:
        """prefill/decode of ``tokens`` at ``start``; ``valid=False`` for a malformed input, whose
        bundle may carry another epoch (``sent_epoch``, which its error must name)."""
        fired, names, ids, decided = self._enter(op, session_id, epoch if valid else sent_epoch, valid)
        holds = self.conditions(op, session_id, epoch, start, len(tokens), valid, fired)
        if decided is None:
            decided = self._decide_compute(op, session_id, epoch, start, tokens, fired, names, ids)
        return dataclasses.replace(decided, holds=holds)

    def _decide_compute(self, op: str, session_id: str, epoch: int, start: int, tokens: list[int],
                        fired: list[Any], names: tuple[str, ...], ids: dict[str, Any]) -> Expected:
        s = self.sessions.get(session_id)
        held = s if s is not None and s.epoch == epoch else None
        if s is not None and epoch < s.epoch:
            return Expected("stale_epoch", "stale", ids, fired=names)
        if held is not None and held.status == "cancelled":
            return Expected("cancelled", "cancelled", ids, fired=names)
        if held is not None and held.status == "released":
            return Expected("released", "released", ids, fired=names)
        if held is None:
            if op != "prefill" or start != 0:
                return Expected("cache_miss", "nothing_held_miss", {**ids, "expected": 0, "got": start},
                                fired=names)
            row = "create" if s is None else ("replace_older" if s.history else "create_over_tombstone")
            freed = len(s.history) if s is not None else 0
            cached: list[int] = []
        else:
            if start != len(held.history):
                return Expected("position_mismatch", "position_mismatch",
                                {**ids, "expected": len(held.history), "got": start}, fired=names)
            row, freed, cached = "append", 0, held.history
        if "MemoryPressure" in names:
            if any(f.reserve_tokens is None for f in fired if type(f).__name__ == "MemoryPressure"):
                return Expected("out_of_memory", "pressure", ids, fired=names, allocation=row)
        if self.capacity is not None:
            reserve = sum(f.reserve_tokens for f in fired if type(f).__name__ == "MemoryPressure")
            if len(tokens) > self.capacity - reserve - (self.used - freed):
                return Expected("out_of_memory", "capacity", ids, fired=names, allocation=row)
        history = cached + list(tokens)
        self.sessions[session_id] = ModelSession(epoch, "live", history)
        output = self.oracle.output(session_id, epoch, start, history)
        malformed = tuple(f.kind for f in fired if type(f).__name__ == "Malformed")
        if "DropResponse" in names:
            return Expected("response_lost", row, ids, output=output, malformed=malformed, fired=names,
                            allocation=row)
        return Expected(OK, row, output=output, malformed=malformed, fired=names, allocation=row)

    def close(self, op: str, session_id: str, epoch: int, valid: bool = True) -> Expected:
        """cancel/release."""
        fired, names, ids, decided = self._enter(op, session_id, epoch, valid)
        holds = self.conditions(op, session_id, epoch, 0, 0, valid, fired)
        if decided is None:
            decided = self._decide_close(op, session_id, epoch, names, ids)
        return dataclasses.replace(decided, holds=holds)

    def _decide_close(self, op: str, session_id: str, epoch: int, names: tuple[str, ...],
                      ids: dict[str, Any]) -> Expected:
        status = "cancelled" if op == "cancel" else "released"
        s = self.sessions.get(session_id)
        if s is not None and epoch < s.epoch:
            return Expected("stale_epoch", "stale", ids, fired=names)
        if s is not None and s.epoch == epoch and s.status != "live":
            row = "noop"
        else:
            row = "tombstone" if s is None or s.epoch < epoch else "frees"
            self.sessions[session_id] = ModelSession(epoch, status, [])
        if "DropResponse" in names:
            return Expected("response_lost", row, ids, fired=names)
        return Expected(OK, row, fired=names)
