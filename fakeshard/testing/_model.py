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
import itertools
import random
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import numpy as np

from fakeshard import FaultPlan, HiddenBundle, SampleBundle, ShardSpec, TokenBundle
from fakeshard.testing._lengths import BOUNDARIES

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
    #: How ``output`` was computed (:attr:`Oracle.path`), for the failure message.
    oracle: str = ""


@dataclass
class ModelSession:
    epoch: int
    status: str  # "live" | "cancelled" | "released"
    history: list[int] = field(default_factory=list)  # the tokens cached (live only), grown in place
    #: Which history this is: a new number for each session created, kept while it grows.
    lineage: int = 0


class ReferenceFailed(AssertionError):
    """An engine of the factory under test, computing an expected output by another path, failed
    a call the contract says succeeds (a fault-free call on a fresh engine or session)."""


def _answered(engine: Any, op: str, bundle: Any, where: str) -> Any:
    """``engine.op(bundle)``, or :class:`ReferenceFailed` naming the call, if it raises."""
    try:
        return getattr(engine, op)(bundle)
    except Exception as exc:
        n = len(bundle.tokens) if isinstance(bundle, TokenBundle) else len(bundle.hidden)
        raise ReferenceFailed(
            f"{where}, a fault-free {op} of positions {bundle.start_pos}..{bundle.start_pos + n - 1} of "
            f"session {bundle.session_id!r} (every earlier position held) raised {type(exc).__name__}: {exc}; "
            f"the contract says it succeeds") from None


class _Follower:
    """Sessions of one fault-free engine, each following a lineage (a history a model session
    holds at one epoch, which only grows): the session holds the lineage's first positions and
    moves on by the new ones alone.  The :data:`KEEP` most recently used are kept; one
    forgotten is released, and built again from position 0 if it is needed again."""

    KEEP = 16

    def __init__(self, make: Callable[[], Any], name: str) -> None:
        self._make, self._name = make, name
        self.engine: Any = None
        self._sessions = 0
        #: lineage -> (the session holding it, how many positions it holds)
        self.held: OrderedDict[int, tuple[str, int]] = OrderedDict()

    def at(self, lineage: int, positions: int) -> Optional[str]:
        """The session holding exactly ``positions`` of ``lineage``, or ``None``."""
        kept = self.held.get(lineage)
        if kept is None or kept[1] != positions:
            return None
        self.held.move_to_end(lineage)
        return kept[0]

    def begin(self, lineage: int) -> str:
        """A new session for ``lineage`` (any older one is released)."""
        if self.engine is None:
            self.engine = self._make()
        old = self.held.pop(lineage, None)
        if old is not None:
            self.engine.release(old[0], 0)
        while len(self.held) >= self.KEEP:
            _, (gone, _) = self.held.popitem(last=False)
            self.engine.release(gone, 0)
        self._sessions += 1
        session = f"{self._name}-{self._sessions}"
        self.held[lineage] = (session, 0)
        return session

    def moved(self, lineage: int, positions: int) -> None:
        self.held[lineage] = (self.held[lineage][0], positions)


def cuts(start: int, end: int) -> list[tuple[int, int]]:
    """``start .. end`` cut at every boundary (a power of two from 8) strictly inside it."""
    if start >= end:
        return []
    points = [b for b in BOUNDARIES if start < b < end]
    edges = [start] + points + [end]
    return list(zip(edges, edges[1:]))


def _described(start: int, pieces: list[tuple[int, int]], single: str) -> str:
    """How the reference computed ``pieces`` after ``start`` positions, in words."""
    said = f"on a fault-free engine of the same factory holding positions 0..{start - 1}, in {len(pieces)} call(s)"
    if len(pieces) > 1:
        said += " cut at " + ", ".join(str(a) for a, _ in pieces[1:])
    singles = [str(a) for a, b in pieces if a and b - a == 1]
    if singles:
        said += f" with position(s) {', '.join(singles)} by {single}"
    return said


class Oracle:
    """The output a call must return, computed on fault-free engines of the same factory.

    Where the history is short (at most :data:`SCRATCH` positions), the output is computed
    from scratch: one prefill of the whole history on a fresh engine, under a fixed session
    id and epoch 0, then labelled with the caller's identity (the contract says outputs
    depend on neither, nor on chunking).  A longer history would cost the whole history on
    every step, so the reference engine keeps a session per lineage and computes the call's
    new positions alone, by another path than the engine under test's: cut at every
    boundary (8, 16, ..., 32768) the call crosses, and each one-position piece by the other
    operation (a decode's position by a one-token prefill, a prefill's by a decode).  An
    engine whose output depends on how its positions were chunked, or on whether they were
    decoded or prefilled, disagrees with it; the work is linear in the positions a call
    touches.  The rows entering a middle or tail engine come the same way, from an upstream
    engine following each lineage (:meth:`rows`).
    """

    #: Histories up to this many positions are recomputed from scratch.
    SCRATCH = 64
    #: How the last output was computed, in words.
    path = ""

    def __init__(self, factory: Callable[..., Any], spec: ShardSpec, seed: int) -> None:
        self.factory, self.spec, self.seed = factory, spec, seed
        upstream = spec.with_layers(0, spec.start_layer) if spec.start_layer else None
        self._upstream = _Follower(lambda: factory(upstream, seed=seed), "upstream") if upstream else None
        #: lineage -> (its rows in from upstream, in a buffer grown by doubling; how many are filled)
        self._rows: dict[int, tuple[np.ndarray, int]] = {}
        self._reference = _Follower(lambda: factory(spec, seed=seed), "reference")

    # -- what enters the engine ------------------------------------------------

    def rows(self, lineage: int, history: Sequence[int], start: int, end: int) -> np.ndarray:
        """The hidden rows entering ``spec.start_layer`` at positions ``start .. end - 1`` of a
        lineage whose tokens (so far) are ``history``: what a healthy upstream stage sends."""
        if self._upstream is None:
            raise ValueError("a head or full engine takes tokens, not hidden rows")
        buffer, filled = self._rows.get(lineage, (None, 0))
        if buffer is None or end > filled:
            buffer = self._grow(lineage, history, buffer, filled, end)
        return buffer[start:end]

    def _grow(self, lineage: int, history: Sequence[int], buffer: Optional[np.ndarray], filled: int,
              end: int) -> np.ndarray:
        """Rows up to ``end`` for the lineage (its buffer); the rows it already has stay as they are."""
        up = self._upstream
        assert up is not None
        session, begin = up.at(lineage, filled), filled
        if session is None:  # forgotten, or never held: from position 0
            session, begin = up.begin(lineage), 0
        more = TokenBundle(session, 0, begin, tuple(history[begin:end]))
        out = _answered(up.engine, "decode" if begin and end - begin == 1 else "prefill", more,
                        "an upstream engine the kit runs to make this engine's input rows")
        up.moved(lineage, end)
        new = np.asarray(out.hidden, dtype=np.float32)[filled - begin:]
        if buffer is None or len(buffer) < end:
            grown = np.empty((max(end, 2 * filled), new.shape[1]), dtype=np.float32)
            if buffer is not None:
                grown[:filled] = buffer[:filled]
            buffer = grown
        buffer[filled:end] = new
        self._rows[lineage] = (buffer, end)
        if len(self._rows) > 4 * _Follower.KEEP:  # forget the rows of lineages long gone
            for gone in [k for k in self._rows if k not in up.held][: len(self._rows) // 2]:
                del self._rows[gone]
        return buffer

    def inputs(self, lineage: int, history: Sequence[int], session_id: str, epoch: int,
               start: int, end: int) -> Any:
        """The bundle carrying positions ``start .. end - 1`` of the lineage into the engine."""
        if self._upstream is None:
            return TokenBundle(session_id, epoch, start, tuple(history[start:end]))
        rows = self.rows(lineage, history, start, end).copy()
        rows.flags.writeable = False
        return HiddenBundle.sealed(session_id, epoch, start, self.spec.start_layer, rows)

    # -- what comes out ----------------------------------------------------------

    def output(self, session_id: str, epoch: int, start: int, history: Sequence[int], *, lineage: int,
               op: str = "prefill") -> Any:
        """The output of ``op`` for positions ``start .. len(history) - 1`` of the lineage whose
        tokens, this call's included, are ``history``."""
        end = len(history)
        if end <= self.SCRATCH:
            fresh = self.factory(self.spec, seed=self.seed)
            whole = _answered(fresh, "prefill", self.inputs(lineage, history, "oracle", 0, 0, end),
                              "a fresh engine the kit runs to compute the expected output")
            self.path = f"from scratch: one prefill of positions 0..{end - 1} on a fresh engine"
            return self._labelled(whole, session_id, epoch, start)
        ref = self._reference
        session = ref.at(lineage, start)
        if session is None:  # the reference has not followed this lineage this far: from 0
            session = ref.begin(lineage)
            for a, b in cuts(0, start):
                self._piece(session, lineage, history, a, b, "decode")
        other = "prefill" if op == "decode" else "decode"
        pieces = cuts(start, end)
        outs = [self._piece(session, lineage, history, a, b, other) for a, b in pieces]
        ref.moved(lineage, end)
        self.path = _described(start, pieces, other)
        if isinstance(outs[-1], SampleBundle):
            return SampleBundle(session_id, epoch, outs[-1].pos, outs[-1].token)
        rows = np.concatenate([np.asarray(o.hidden, dtype=np.float32) for o in outs])
        return HiddenBundle.sealed(session_id, epoch, start, outs[-1].layer, rows)

    def _piece(self, session: str, lineage: int, history: Sequence[int], a: int, b: int, single: str) -> Any:
        """Positions ``a .. b - 1`` on the reference session; one position past 0 by ``single``."""
        bundle = self.inputs(lineage, history, session, 0, a, b)
        engine = self._reference.engine
        return _answered(engine, "decode" if a and b - a == 1 and single == "decode" else "prefill", bundle,
                         "the reference engine the kit runs to compute the expected output by another path")

    def _labelled(self, whole: Any, session_id: str, epoch: int, start: int) -> Any:
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
        self._lineages = itertools.count(1)

    @property
    def used(self) -> int:
        return sum(len(s.history) for s in self.sessions.values())

    def view(self, session_id: str) -> Optional[tuple[int, str, int]]:
        s = self.sessions.get(session_id)
        return None if s is None else (s.epoch, s.status, len(s.history))

    def history(self, session_id: str) -> list[int]:
        s = self.sessions.get(session_id)
        return list(s.history) if s is not None else []

    def held(self, session_id: str) -> Optional[ModelSession]:
        """The session's state as the model holds it (not a copy: read, never change it)."""
        return self.sessions.get(session_id)

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
        else:
            if start != len(held.history):
                return Expected("position_mismatch", "position_mismatch",
                                {**ids, "expected": len(held.history), "got": start}, fired=names)
            row, freed = "append", 0
        if "MemoryPressure" in names:
            if any(f.reserve_tokens is None for f in fired if type(f).__name__ == "MemoryPressure"):
                return Expected("out_of_memory", "pressure", ids, fired=names, allocation=row)
        if self.capacity is not None:
            reserve = sum(f.reserve_tokens for f in fired if type(f).__name__ == "MemoryPressure")
            if len(tokens) > self.capacity - reserve - (self.used - freed):
                return Expected("out_of_memory", "capacity", ids, fired=names, allocation=row)
        if held is not None:  # an append: the same history, grown in place
            held.history.extend(tokens)
            grown = held
        else:
            grown = self.sessions[session_id] = ModelSession(epoch, "live", list(tokens), next(self._lineages))
        output = self.oracle.output(session_id, epoch, start, grown.history, lineage=grown.lineage, op=op)
        path = self.oracle.path
        malformed = tuple(f.kind for f in fired if type(f).__name__ == "Malformed")
        if "DropResponse" in names:
            return Expected("response_lost", row, ids, output=output, malformed=malformed, fired=names,
                            allocation=row, oracle=path)
        return Expected(OK, row, output=output, malformed=malformed, fired=names, allocation=row, oracle=path)

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
