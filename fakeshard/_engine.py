"""The session table: one place for epochs, tombstones, positions, accounting, crash.

:class:`SessionEngine` applies the contract's session rules, cache accounting
and fault plan to any :class:`~fakeshard._backend.Backend`;
:class:`FakeShardEngine` is it over the deterministic :class:`HashBackend`.
Every check happens before anything changes, so a failed call changes
nothing (only ``Crash`` is defined to change state on a failing call).
Every call holds the engine's lock from its fault draw to its answer, so
calls from concurrent threads are atomic: linearizable, as the contract
states.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Optional

from fakeshard._backend import Backend, HashBackend
from fakeshard._clock import Clock, VirtualClock
from fakeshard._contract import (
    HiddenBundle,
    InputBundle,
    OutputBundle,
    SampleBundle,
    ShardSpec,
    TokenBundle,
    validate,
)
from fakeshard._errors import (
    CacheMiss,
    EngineCrashed,
    MalformedBundle,
    OutOfMemory,
    PositionMismatch,
    ResponseLost,
    SessionCancelled,
    SessionReleased,
    StaleEpoch,
)
from fakeshard._faults import Drawn, FaultInjector, FaultPlan, Fired, corrupt

__all__ = ["FakeShardEngine", "SessionEngine", "SessionView"]

LIVE = "live"
CANCELLED = "cancelled"
RELEASED = "released"


@dataclass(frozen=True, slots=True)
class SessionView:
    """A read-only snapshot of one session on one engine."""

    session_id: str
    epoch: int
    status: str
    cached_tokens: int


class _Entry:
    """A session's row in the table: its fence, status and cache."""

    __slots__ = ("epoch", "status", "cached", "cache")

    def __init__(self, epoch: int, status: str, cached: int, cache: Any) -> None:
        self.epoch = epoch
        self.status = status
        self.cached = cached
        self.cache = cache


class _Where:
    """``"<op> session '<id>' epoch <n>"`` for error messages, formatted only when used."""

    __slots__ = ("op", "session_id", "epoch")
    op: str
    session_id: Any  # the call's own values: well-typed once its input was checked
    epoch: Any

    def __init__(self, op: str, session_id: Any, epoch: Any) -> None:
        self.op, self.session_id, self.epoch = op, session_id, epoch

    def __format__(self, spec: str) -> str:
        return f"{self.op} session {self.session_id!r} epoch {self.epoch}"


def _ids(session_id: object, epoch: object) -> dict[str, Any]:
    """The error fields for a call's identity, where they are well-typed."""
    return {
        "session_id": session_id if isinstance(session_id, str) else None,
        "epoch": epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else None,
    }


def check_engine_arguments(capacity_tokens: object, clock: object, faults: object) -> None:
    """An engine constructor's ``capacity_tokens``, ``clock`` and ``faults``, refused with a typed
    error where they are no int >= 0 (or ``None``), no clock, no plan."""
    if capacity_tokens is not None and (
        isinstance(capacity_tokens, bool) or not isinstance(capacity_tokens, int) or capacity_tokens < 0
    ):
        raise ValueError(f"capacity_tokens must be None or an int >= 0, got {capacity_tokens!r}")
    if clock is not None and not isinstance(clock, Clock):
        raise TypeError(f"clock must have now() and sleep(seconds), got {type(clock).__name__}")
    if faults is not None and not isinstance(faults, FaultPlan):
        raise TypeError(f"faults must be a FaultPlan or None, got {type(faults).__name__}")


class SessionEngine:
    """The contract's session rules over a computation backend.

    Rules are checked in the contract's order: engine up, valid input, stale
    epoch, cancelled, released, nothing held at this epoch, position, memory.
    """

    def __init__(
        self,
        backend: Backend,
        *,
        capacity_tokens: Optional[int] = None,
        clock: Optional[Clock] = None,
        faults: Optional[FaultPlan] = None,
    ) -> None:
        check_engine_arguments(capacity_tokens, clock, faults)
        self._backend = backend
        self._lock = threading.RLock()  # re-entered by a crash drawn inside a call
        self.spec: ShardSpec = backend.spec
        self.evidence_class: str = backend.evidence_class
        self.clock: Clock = clock if clock is not None else VirtualClock()
        self._capacity = capacity_tokens
        self._faults = FaultInjector(faults)
        self._sessions: dict[str, _Entry] = {}
        self._used = 0
        self._crashed = False
        role = self.spec.role
        self._input_type = TokenBundle if role.takes_tokens else HiddenBundle
        self._samples = role.samples

    # -- inspection --------------------------------------------------------

    @property
    def capacity_tokens(self) -> Optional[int]:
        return self._capacity

    @property
    def used_tokens(self) -> int:
        """Cached positions summed over all sessions."""
        return self._used

    @property
    def crashed(self) -> bool:
        return self._crashed

    @property
    def fault_plan(self) -> FaultPlan:
        return self._faults.plan

    @property
    def fault_log(self) -> tuple[Fired, ...]:
        """Every fault fired on this engine so far, in order."""
        return tuple(self._faults.log)

    def replace_faults(self, plan: Optional[FaultPlan]) -> None:
        """Run ``plan`` from now on, with fresh counters, generator and log (``None``: no faults).

        Sessions and accounting are untouched; this is how a served node's
        control port swaps the plan of a running engine.
        """
        if plan is not None and not isinstance(plan, FaultPlan):
            raise TypeError(f"faults must be a FaultPlan or None, got {type(plan).__name__}")
        with self._lock:
            self._faults = FaultInjector(plan)

    def session(self, session_id: str) -> Optional[SessionView]:
        """The session's view, or ``None`` if the engine holds nothing for it."""
        with self._lock:
            entry = self._sessions.get(session_id)
            if entry is None:
                return None
            return SessionView(session_id, entry.epoch, entry.status, entry.cached)

    def session_ids(self) -> tuple[str, ...]:
        """Every session the engine holds a row for (live or tombstone), sorted."""
        with self._lock:
            return tuple(sorted(self._sessions))

    def __repr__(self) -> str:
        s = self.spec
        state = "crashed" if self._crashed else f"{len(self._sessions)} sessions"
        return (
            f"{type(self).__name__}({s.model_id!r} layers {s.start_layer}..{s.end_layer} "
            f"of {s.n_layers}, {s.role.value}, {state}, used {self._used}/{self._capacity})"
        )

    # -- lifecycle ---------------------------------------------------------

    def crash(self) -> None:
        """Take the engine down now: every session and tombstone is gone."""
        with self._lock:
            self._crashed = True
            self._sessions.clear()
            self._used = 0

    def restart(self) -> None:
        """Bring the engine back up, empty (a restart of a running engine empties it too).

        The fault plan's counters and generator carry on: the plan scripts the
        engine's whole life, not one run of it.
        """
        with self._lock:
            self._crashed = False
            self._sessions.clear()
            self._used = 0

    # -- calls -------------------------------------------------------------

    def prefill(self, bundle: InputBundle) -> OutputBundle:
        """Append one or more positions; return the output bundle."""
        with self._lock:
            return self._compute("prefill", bundle)

    def decode(self, bundle: InputBundle) -> OutputBundle:
        """Append exactly one position; return the output bundle."""
        with self._lock:
            return self._compute("decode", bundle)

    def cancel(self, session_id: str, epoch: int) -> None:
        """Free the session's cache and refuse it at this epoch (idempotent)."""
        with self._lock:
            self._close("cancel", CANCELLED, session_id, epoch)

    def release(self, session_id: str, epoch: int) -> None:
        """Free the session's cache and close it at this epoch (idempotent)."""
        with self._lock:
            self._close("release", RELEASED, session_id, epoch)

    def _enter(self, op: str, session_id: object, epoch: object) -> Any:
        drawn = self._faults.draw(op, session_id)
        if drawn.delay:
            self.clock.sleep(drawn.delay)
        if drawn.crash:
            self.crash()
        if self._crashed:
            raise EngineCrashed(
                f"{op}: engine for layers {self.spec.start_layer}..{self.spec.end_layer} "
                "is down; restart() brings it back empty",
                **_ids(session_id, epoch),
            )
        return drawn

    def _check_input(self, op: str, bundle: Any) -> tuple[Any, ...]:
        if type(bundle) is not self._input_type:
            raise MalformedBundle(
                f"{op}: a {self.spec.role.value} engine takes {self._input_type.__name__}, "
                f"got {type(bundle).__name__}",
                **_ids(getattr(bundle, "session_id", None), getattr(bundle, "epoch", None)),
            )
        validate(bundle, self.spec)
        if isinstance(bundle, HiddenBundle):
            if bundle.layer != self.spec.start_layer:
                raise MalformedBundle(
                    f"{op}: HiddenBundle for layer {bundle.layer}, but this engine starts "
                    f"at layer {self.spec.start_layer}",
                    session_id=bundle.session_id, epoch=bundle.epoch,
                )
            inputs = bundle.hidden
        else:
            inputs = bundle.tokens
        if op == "decode" and len(inputs) != 1:
            raise MalformedBundle(
                f"decode takes exactly one position, got {len(inputs)}",
                session_id=bundle.session_id, epoch=bundle.epoch,
            )
        return inputs

    def _compute(self, op: str, bundle: Any) -> Any:
        session_id: Any = getattr(bundle, "session_id", None)
        drawn = self._enter(op, session_id, getattr(bundle, "epoch", None))
        inputs = self._check_input(op, bundle)
        epoch, start, n = bundle.epoch, bundle.start_pos, len(inputs)
        where = _Where(op, session_id, epoch)  # formatted only into an error message
        entry = self._sessions.get(session_id)
        cache, freed = self._held(where, entry, start)
        self._check_room(where, drawn, n, freed)
        new_cache, out = self._backend.forward(cache, start, inputs)
        # Commit: nothing above changed any state.
        if entry is None or entry.epoch != epoch:
            self._sessions[session_id] = _Entry(epoch, LIVE, n, new_cache)
        else:
            entry.cached = start + n
            entry.cache = new_cache
        self._used += n - freed
        return self._answer(where, drawn, start, n, out)

    def _held(self, where: "_Where", entry: Optional["_Entry"], start: int) -> tuple[Any, int]:
        """The cache a compute call at ``where`` extends, and the positions it frees: the
        contract's session table, in its order of checks, up to the allocation."""
        session_id, epoch = where.session_id, where.epoch
        if entry is not None and epoch <= entry.epoch:
            if epoch < entry.epoch:
                raise StaleEpoch(
                    f"{where}: stale, the session is at epoch {entry.epoch}",
                    session_id=session_id, epoch=epoch,
                )
            if entry.status == CANCELLED:
                raise SessionCancelled(f"{where}: the session was cancelled",
                                       session_id=session_id, epoch=epoch)
            if entry.status == RELEASED:
                raise SessionReleased(f"{where}: the session was released",
                                      session_id=session_id, epoch=epoch)
            if start != entry.cached:
                raise PositionMismatch(
                    f"{where}: starts at position {start}, but {entry.cached} positions are cached",
                    session_id=session_id, epoch=epoch, expected=entry.cached, got=start,
                )
            return entry.cache, 0
        # Nothing held at this epoch: never seen, or only an older epoch.
        if where.op != "prefill" or start != 0:
            raise CacheMiss(
                f"{where}: nothing cached at this epoch; replay from position 0 (got {start})",
                session_id=session_id, epoch=epoch, expected=0, got=start,
            )
        return self._backend.empty_cache(), 0 if entry is None else entry.cached

    def _check_room(self, where: "_Where", drawn: Drawn, n: int, freed: int) -> None:
        """``OutOfMemory`` unless ``n`` positions fit: a failed allocation, or the capacity less
        the reserve and what is held (the ``freed`` positions of a replaced epoch not counted)."""
        if drawn.fail_allocation:
            raise OutOfMemory(f"{where}: allocation of {n} positions failed under memory pressure",
                              session_id=where.session_id, epoch=where.epoch)
        if self._capacity is not None:
            available = self._capacity - drawn.reserve_tokens - (self._used - freed)
            if n > available:
                raise OutOfMemory(
                    f"{where}: needs {n} positions, {max(available, 0)} of "
                    f"{self._capacity} available",
                    session_id=where.session_id, epoch=where.epoch,
                )

    def _answer(self, where: "_Where", drawn: Drawn, start: int, n: int, out: Any) -> Any:
        """The output of an applied call, broken as the drawn ``Malformed`` kinds say, or
        ``ResponseLost`` when its response is dropped."""
        session_id, epoch = where.session_id, where.epoch
        if self._samples:
            output: Any = SampleBundle(session_id, epoch, start + n, out)
        else:
            output = HiddenBundle.sealed(session_id, epoch, start, self.spec.end_layer, out)
        # A checksum corruption goes last: the others recompute the checksum.
        for kind in sorted(drawn.malformed, key=lambda k: k == "checksum"):
            output = corrupt(output, kind, self.spec)
        if drawn.drop:
            raise ResponseLost(f"{where}: applied, but the response was lost",
                               session_id=session_id, epoch=epoch)
        return output

    def _close(self, op: str, status: str, session_id: str, epoch: int) -> None:
        drawn = self._enter(op, session_id, epoch)
        if not isinstance(session_id, str) or not session_id:
            raise MalformedBundle(f"{op}: session_id must be a non-empty str, got {session_id!r}",
                                  **_ids(session_id, epoch))
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise MalformedBundle(f"{op}: epoch must be an int >= 0, got {epoch!r}",
                                  session_id=session_id)
        entry = self._sessions.get(session_id)
        if entry is None:
            # A tombstone, so that a late prefill at this epoch is refused.
            self._sessions[session_id] = _Entry(epoch, status, 0, None)
        elif epoch < entry.epoch:
            raise StaleEpoch(
                f"{op} session {session_id!r} epoch {epoch}: stale, the session is at "
                f"epoch {entry.epoch}",
                session_id=session_id, epoch=epoch,
            )
        elif epoch > entry.epoch or entry.status == LIVE:
            self._used -= entry.cached
            entry.epoch, entry.status, entry.cached, entry.cache = epoch, status, 0, None
        # else: already cancelled or released at this epoch, a no-op.
        if drawn.drop:
            raise ResponseLost(
                f"{op} session {session_id!r} epoch {epoch}: applied, but the response was lost",
                session_id=session_id, epoch=epoch,
            )


class FakeShardEngine(SessionEngine):
    """The deterministic fixture engine for ``spec``'s layer range.

    For example::

        >>> spec = ShardSpec("demo", n_layers=4, start_layer=0, end_layer=4)
        >>> engine = FakeShardEngine(spec, seed=1)
        >>> out = engine.prefill(TokenBundle("s1", epoch=0, start_pos=0, tokens=(5, 6, 7)))
        >>> out.pos, engine.session("s1").cached_tokens
        (3, 3)
    """

    evidence_class = "fixture"
    #: The suites also check the choices this engine makes where the contract
    #: is silent (see :func:`fakeshard._factory.makes_fixture_choices`).
    fixture_choices = True

    def __init__(
        self,
        spec: ShardSpec,
        *,
        seed: int = 0,
        capacity_tokens: Optional[int] = None,
        clock: Optional[Clock] = None,
        faults: Optional[FaultPlan] = None,
    ) -> None:
        if not isinstance(spec, ShardSpec):
            raise TypeError(f"spec must be a ShardSpec, got {type(spec).__name__}")
        super().__init__(
            HashBackend(spec, seed), capacity_tokens=capacity_tokens, clock=clock, faults=faults
        )
        self.seed = seed
