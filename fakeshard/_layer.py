"""Faults as a layer: a fault plan applied in front of any engine, by the caller's side.

An engine that runs no plan of its own (a node whose host implements no fault plans, an
engine under test that has none) gets its faults from :class:`FaultLayer`: the same
:class:`~fakeshard.FaultInjector` draws each call's faults exactly as an engine would (the
same plan fires on the same calls), and the layer applies their effects between the caller
and the engine, as the contract's fault table says:

==================  ==============================================================
``Delay``           the caller's clock sleeps, before anything else
``Crash``           the engine restarted (its memory lost) and the layer down:
                    every call answers ``EngineCrashed`` until :meth:`restart`
``DropResponse``    the call forwarded and applied, its answer dropped
                    (``ResponseLost``); a call the engine refuses keeps its error
``Malformed``       the engine's answer broken as :func:`fakeshard._faults.corrupt`
                    breaks it, ``checksum`` last
==================  ==============================================================

``MemoryPressure`` is the one kind a layer cannot apply: whether a call reaches its
allocation is the engine's session table, and holding capacity back is the engine's
accounting. A plan holding it is refused (``ValueError``); :func:`without_unapplied` gives
the plan of what a layer applies. Such an engine's own out-of-memory path is still
exercised by the real ``capacity_tokens`` it is made with.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any, Optional

from fakeshard._clock import Clock, VirtualClock
from fakeshard._engine import _ids
from fakeshard._errors import EngineCrashed, ResponseLost
from fakeshard._faults import FaultInjector, FaultPlan, Fired, MemoryPressure, corrupt

__all__ = ["ALL_FAULT_KINDS", "LAYER_FAULT_KINDS", "FaultLayer", "fault_kinds_of", "layered", "without_unapplied"]

#: Every fault kind of the contract.
ALL_FAULT_KINDS = frozenset({"Delay", "Crash", "DropResponse", "Malformed", "MemoryPressure"})
#: The fault kinds a layer applies in front of an engine.
LAYER_FAULT_KINDS = ALL_FAULT_KINDS - {"MemoryPressure"}


def fault_kinds_of(factory: Any) -> frozenset[str]:
    """The fault kinds ``factory``'s engines apply: its ``fault_kinds`` attribute, else every kind."""
    return frozenset(getattr(factory, "fault_kinds", ALL_FAULT_KINDS))


def without_unapplied(plan: Optional[FaultPlan], kinds: frozenset[str] = LAYER_FAULT_KINDS) -> Optional[FaultPlan]:
    """``plan`` without the rules whose fault is of no kind in ``kinds`` (the same plan when
    every rule's is)."""
    if plan is None:
        return None
    kept = tuple(rule for rule in plan.rules if type(rule.fault).__name__ in kinds)
    return plan if len(kept) == len(plan.rules) else replace(plan, rules=kept)


class FaultLayer:
    """``engine`` (which runs no plan of its own) with ``faults`` applied in front of it, on
    ``clock`` (the caller's: a ``Delay`` sleeps there). Every call goes through one lock, so
    a crash drawn on one call is atomic with the others, as an engine's own would be."""

    def __init__(self, engine: Any, faults: Optional[FaultPlan] = None, *, clock: Optional[Clock] = None) -> None:
        if faults is not None and not isinstance(faults, FaultPlan):
            raise TypeError(f"faults must be a FaultPlan or None, got {type(faults).__name__}")
        if faults is not None and any(isinstance(rule.fault, MemoryPressure) for rule in faults.rules):
            raise ValueError("MemoryPressure cannot be applied in front of an engine (its allocation is the "
                             "engine's): give the plan without_unapplied(plan)")
        self.engine = engine
        self.spec = engine.spec
        self.evidence_class = engine.evidence_class
        self.clock: Clock = clock if clock is not None else VirtualClock()
        self._faults = FaultInjector(faults)
        self._down = False
        self._lock = threading.RLock()

    def __repr__(self) -> str:
        return f"FaultLayer({self.engine!r}, {len(self._faults.plan.rules)} rules{', down' if self._down else ''})"

    # -- inspection: the engine's, while it is up ----------------------------------------

    @property
    def capacity_tokens(self) -> Optional[int]:
        return self.engine.capacity_tokens

    @property
    def used_tokens(self) -> int:
        return self.engine.used_tokens

    @property
    def crashed(self) -> bool:
        return self._down

    @property
    def fault_plan(self) -> FaultPlan:
        return self._faults.plan

    @property
    def fault_log(self) -> tuple[Fired, ...]:
        return tuple(self._faults.log)

    def session(self, session_id: str) -> Any:
        return self.engine.session(session_id)

    # -- lifecycle ------------------------------------------------------------------------

    def crash(self) -> None:
        """Take the engine down now: its memory is lost (a restart of it), calls fail until :meth:`restart`."""
        with self._lock:
            self.engine.restart()
            self._down = True

    def restart(self) -> None:
        """Bring the engine back up, empty; the plan's counters and generator carry on."""
        with self._lock:
            self.engine.restart()
            self._down = False

    # -- calls ----------------------------------------------------------------------------

    def _enter(self, op: str, session_id: object, epoch: object) -> Any:
        drawn = self._faults.draw(op, session_id)
        if drawn.delay:
            self.clock.sleep(drawn.delay)
        if drawn.crash:
            self.engine.restart()
            self._down = True
        if self._down:
            raise EngineCrashed(f"{op}: the engine for layers {self.spec.start_layer}..{self.spec.end_layer} is "
                                "down (a Crash fault); restart() brings it back empty", **_ids(session_id, epoch))
        return drawn

    def _compute(self, op: str, bundle: Any) -> Any:
        session_id, epoch = getattr(bundle, "session_id", None), getattr(bundle, "epoch", None)
        with self._lock:
            drawn = self._enter(op, session_id, epoch)
            output = getattr(self.engine, op)(bundle)
            for kind in sorted(drawn.malformed, key=lambda k: k == "checksum"):
                output = corrupt(output, kind, self.spec)
            if drawn.drop:
                raise ResponseLost(f"{op}: applied, but the response was lost", **_ids(session_id, epoch))
            return output

    def _close(self, op: str, session_id: Any, epoch: Any) -> None:
        with self._lock:
            drawn = self._enter(op, session_id, epoch)
            getattr(self.engine, op)(session_id, epoch)
            if drawn.drop:
                raise ResponseLost(f"{op}: applied, but the response was lost", **_ids(session_id, epoch))

    def prefill(self, bundle: Any) -> Any:
        return self._compute("prefill", bundle)

    def decode(self, bundle: Any) -> Any:
        return self._compute("decode", bundle)

    def cancel(self, session_id: str, epoch: int) -> None:
        self._close("cancel", session_id, epoch)

    def release(self, session_id: str, epoch: int) -> None:
        self._close("release", session_id, epoch)


def layered(factory: Any) -> Any:
    """An engine factory like ``factory`` whose engines run no plan of their own: the plan they
    are given is applied by a :class:`FaultLayer` in front of each (its ``MemoryPressure`` rules
    left out; the factory's ``fault_kinds`` says so). The factory's judging attributes carry over."""

    def make(spec: Any, *, seed: int = 0, capacity_tokens: Optional[int] = None, clock: Optional[Clock] = None,
             faults: Optional[FaultPlan] = None) -> FaultLayer:
        if faults is not None and not isinstance(faults, FaultPlan):
            raise TypeError(f"faults must be a FaultPlan or None, got {type(faults).__name__}")
        clock = clock if clock is not None else VirtualClock()
        engine = factory(spec, seed=seed, capacity_tokens=capacity_tokens, clock=clock)
        return FaultLayer(engine, without_unapplied(faults), clock=clock)

    for attr in ("tolerance", "logits", "machine_hidden_size", "machine_wide_hidden_size", "machine_max_positions"):
        if hasattr(factory, attr):
            setattr(make, attr, getattr(factory, attr))
    make.fault_kinds = LAYER_FAULT_KINDS  # type: ignore[attr-defined]
    make.__name__ = f"layered_{getattr(factory, '__name__', 'engine')}"
    return make
