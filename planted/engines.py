"""Engines with planted bugs: each breaks one rule, and the machines must catch it.

Most are wrappers that misuse the public surface the way a buggy engine
would (so they stay honest about what the machines can see); a few subclass
the fixture where the bug lives inside a call.  Each ``Bug`` names the
machine expected to catch it.
"""

from __future__ import annotations

import dataclasses
import math
import os
import random
from dataclasses import dataclass
from typing import Any, Callable

from fakeshard import (
    CacheMiss,
    Crash,
    Delay,
    EngineCrashed,
    FakeShardEngine,
    FaultPlan,
    HiddenBundle,
    Malformed,
    MalformedBundle,
    OutOfMemory,
    PositionMismatch,
    ResponseLost,
    SampleBundle,
    SessionCancelled,
    SessionReleased,
    StaleEpoch,
    TokenBundle,
)


class Wrapper:
    """Delegates everything to ``inner``; subclasses override the buggy call."""

    def __init__(self, inner: FakeShardEngine) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def prefill(self, bundle: Any) -> Any:
        return self.inner.prefill(bundle)

    def decode(self, bundle: Any) -> Any:
        return self.inner.decode(bundle)

    def cancel(self, session_id: str, epoch: int) -> None:
        return self.inner.cancel(session_id, epoch)

    def release(self, session_id: str, epoch: int) -> None:
        return self.inner.release(session_id, epoch)

    def restart(self) -> None:
        return self.inner.restart()

    def session(self, session_id: str) -> Any:
        return self.inner.session(session_id)

    @property
    def used_tokens(self) -> int:
        return self.inner.used_tokens

    @property
    def capacity_tokens(self) -> Any:
        return self.inner.capacity_tokens


def _flip(out: Any) -> Any:
    """The same bundle with a different value: a wrong output."""
    if isinstance(out, SampleBundle):
        return dataclasses.replace(out, token=(out.token + 1) % 64)
    return _flip_row(out, 0)


def _flip_row(out: HiddenBundle, i: int) -> HiddenBundle:
    """``out`` with the first value of its ``i``-th row changed."""
    rows = out.rows()
    changed = rows[:i] + ((rows[i][0] * -1 + 0.5,) + rows[i][1:],) + rows[i + 1:]
    return HiddenBundle.sealed(out.session_id, out.epoch, out.start_pos, out.layer, changed)


class StaleAsCacheMiss(Wrapper):
    """Fencing: reports a stale epoch as a cache miss, inviting a replay at the old epoch."""

    def prefill(self, bundle: Any) -> Any:
        try:
            return self.inner.prefill(bundle)
        except StaleEpoch as exc:
            raise CacheMiss("miss", session_id=exc.session_id, epoch=exc.epoch, expected=0,
                            got=bundle.start_pos) from None


class FenceMovesOnFailure(Wrapper):
    """Fencing: a refused prefill at a newer epoch still raises the fence."""

    def prefill(self, bundle: Any) -> Any:
        try:
            return self.inner.prefill(bundle)
        except CacheMiss:
            view = self.inner.session(bundle.session_id)
            if view is not None and bundle.epoch > view.epoch:
                self.inner.release(bundle.session_id, bundle.epoch)
            raise


class ForgetfulTombstone(Wrapper):
    """Tombstones: a cancel for a session the engine has not seen is dropped, so a late prefill wins."""

    def cancel(self, session_id: str, epoch: int) -> None:
        if self.inner.session(session_id) is None:
            return None
        return self.inner.cancel(session_id, epoch)


class LeakyRelease(Wrapper):
    """Accounting: released positions are never given back."""

    leaked = 0

    def release(self, session_id: str, epoch: int) -> None:
        view = self.inner.session(session_id)
        self.inner.release(session_id, epoch)
        if view is not None and view.status == "live" and epoch >= view.epoch:
            self.leaked += view.cached_tokens

    @property
    def used_tokens(self) -> int:
        return self.inner.used_tokens + self.leaked


class PartialAllocation(Wrapper):
    """Accounting: a prefill that does not fit allocates what fits, then fails."""

    def prefill(self, bundle: Any) -> Any:
        try:
            return self.inner.prefill(bundle)
        except OutOfMemory:
            capacity = self.inner.capacity_tokens
            room = (capacity or 0) - self.inner.used_tokens
            if isinstance(bundle, TokenBundle) and 0 < room < len(bundle.tokens):
                try:
                    self.inner.prefill(dataclasses.replace(bundle, tokens=bundle.tokens[:room]))
                except Exception:
                    pass
            raise


class IgnoresStartPos(Wrapper):
    """Positions: a prefill at the wrong position is appended at the right one."""

    def prefill(self, bundle: Any) -> Any:
        try:
            return self.inner.prefill(bundle)
        except PositionMismatch as exc:
            if isinstance(bundle, TokenBundle):
                return self.inner.prefill(dataclasses.replace(bundle, start_pos=exc.expected))
            raise


class EpochSensitive(Wrapper):
    """Determinism: outputs change with the epoch."""

    def decode(self, bundle: Any) -> Any:
        out = self.inner.decode(bundle)
        return _flip(out) if bundle.epoch % 2 else out


class ChunkSensitive(Wrapper):
    """Determinism: a prefill chunk that starts past 0 computes something else."""

    def prefill(self, bundle: Any) -> Any:
        out = self.inner.prefill(bundle)
        n = len(bundle.tokens) if isinstance(bundle, TokenBundle) else len(bundle.hidden)
        return _flip(out) if bundle.start_pos > 0 and n > 1 else out


class DriftAfterRestart(Wrapper):
    """Determinism: an engine that has been restarted computes differently (a replay drifts)."""

    restarted = False

    def restart(self) -> None:
        self.inner.restart()
        self.restarted = True

    def prefill(self, bundle: Any) -> Any:
        out = self.inner.prefill(bundle)
        return _flip(out) if self.restarted else out


class CrashKeepsSessions(FakeShardEngine):
    """Crash: going down does not wipe the sessions."""

    def crash(self) -> None:
        self._crashed = True

    def restart(self) -> None:
        self._crashed = False


class DropNotApplied(FakeShardEngine):
    """Faults: a dropped response also drops the call (it is not applied)."""

    def _compute(self, op: str, bundle: Any) -> Any:
        before = self.session(getattr(bundle, "session_id", "")), self.used_tokens
        from fakeshard import ResponseLost

        try:
            return super()._compute(op, bundle)
        except ResponseLost:
            sid = bundle.session_id
            view, used = before
            if view is None:
                self._sessions.pop(sid, None)
            else:
                entry = self._sessions[sid]
                entry.epoch, entry.status, entry.cached = view.epoch, view.status, view.cached_tokens
            self._used = used
            raise


# -- crossed conditions: each bug shows only where two of the contract's conditions hold at once --


def _positions(bundle: Any) -> int:
    return len(bundle.tokens) if isinstance(bundle, TokenBundle) else len(bundle.hidden)


def _no_room(engine: Any, bundle: Any, freed: int = 0) -> bool:
    capacity = engine.capacity_tokens
    return capacity is not None and _positions(bundle) > capacity - (engine.used_tokens - freed)


class ValidatesBeforeUp(FakeShardEngine):
    """Order (engine up x valid input): a down engine looks at the input first, answering a bad
    one with malformed_bundle instead of engine_crashed."""

    def _compute(self, op: str, bundle: Any) -> Any:
        if self._crashed:
            try:
                self._check_input(op, bundle)
            except MalformedBundle:
                self._faults.draw(op, getattr(bundle, "session_id", None))  # the call still counts
                raise
        return super()._compute(op, bundle)


class CapacityBeforeFence(Wrapper):
    """Order (stale epoch x capacity): a stale call that would not fit is refused as out of
    memory, not as stale."""

    def prefill(self, bundle: Any) -> Any:
        view = self.inner.session(bundle.session_id) if isinstance(bundle, (TokenBundle, HiddenBundle)) else None
        if view is not None and bundle.epoch < view.epoch and _no_room(self.inner, bundle):
            raise OutOfMemory("no room", session_id=bundle.session_id, epoch=bundle.epoch)
        return self.inner.prefill(bundle)


class CapacityBeforeTombstone(Wrapper):
    """Order (released or cancelled x capacity): a call on a closed session that would not fit
    is refused as out of memory, not as closed."""

    def prefill(self, bundle: Any) -> Any:
        view = self.inner.session(bundle.session_id) if isinstance(bundle, (TokenBundle, HiddenBundle)) else None
        if view is not None and view.epoch == bundle.epoch and view.status != "live" \
                and _no_room(self.inner, bundle):
            raise OutOfMemory("no room", session_id=bundle.session_id, epoch=bundle.epoch)
        return self.inner.prefill(bundle)


class CapacityBeforePosition(Wrapper):
    """Order (position x capacity): a mispositioned call that would not fit is refused as out
    of memory, not as a position mismatch."""

    def prefill(self, bundle: Any) -> Any:
        view = self.inner.session(bundle.session_id) if isinstance(bundle, (TokenBundle, HiddenBundle)) else None
        if view is not None and view.epoch == bundle.epoch and view.status == "live" \
                and bundle.start_pos != view.cached_tokens and _no_room(self.inner, bundle):
            raise OutOfMemory("no room", session_id=bundle.session_id, epoch=bundle.epoch)
        return self.inner.prefill(bundle)


class ReplaceCountsOld(Wrapper):
    """Capacity x epochs: a prefill that replaces an older epoch's cache does not count the old
    positions as free, so a replace that fits is refused."""

    def prefill(self, bundle: Any) -> Any:
        view = self.inner.session(bundle.session_id) if isinstance(bundle, (TokenBundle, HiddenBundle)) else None
        if view is not None and view.epoch < bundle.epoch and view.cached_tokens and bundle.start_pos == 0 \
                and _no_room(self.inner, bundle):
            raise OutOfMemory("no room", session_id=bundle.session_id, epoch=bundle.epoch)
        return self.inner.prefill(bundle)


class TombstoneHoldsMemory(Wrapper):
    """Capacity x tombstones: every tombstone (a cancel or release of a session not held) is
    charged one position until a prefill replaces it."""

    tombstones: set = set()

    def _close(self, op: str, session_id: str, epoch: int) -> None:
        view = self.inner.session(session_id) if isinstance(session_id, str) else None
        getattr(self.inner, op)(session_id, epoch)
        if view is None or view.epoch < epoch:
            self.tombstones = self.tombstones | {session_id}

    def cancel(self, session_id: str, epoch: int) -> None:
        self._close("cancel", session_id, epoch)

    def release(self, session_id: str, epoch: int) -> None:
        self._close("release", session_id, epoch)

    def prefill(self, bundle: Any) -> Any:
        out = self.inner.prefill(bundle)
        self.tombstones = self.tombstones - {bundle.session_id}
        return out

    def restart(self) -> None:
        self.inner.restart()
        self.tombstones = set()

    @property
    def used_tokens(self) -> int:
        return self.inner.used_tokens + len(self.tombstones)


class CrashKeepsAccounting(FakeShardEngine):
    """Capacity x crashes: a crash wipes the sessions but not the accounting, so the engine
    comes back with positions charged that no session holds."""

    def crash(self) -> None:
        used = self._used
        super().crash()
        self._used = used

    def restart(self) -> None:
        used = self._used
        super().restart()
        self._used = used


class ReserveOnlyOnCreate(FakeShardEngine):
    """Capacity x memory pressure: a memory reserve is honoured when a session is created, and
    ignored when positions are appended."""

    def _enter(self, op: str, session_id: object, epoch: object) -> Any:
        drawn = super()._enter(op, session_id, epoch)
        entry = self._sessions.get(session_id) if isinstance(session_id, str) else None
        if drawn.reserve_tokens and entry is not None and entry.epoch == epoch and entry.status == "live":
            return dataclasses.replace(drawn, reserve_tokens=0)
        return drawn


class DropOnFailedCall(FakeShardEngine):
    """Fault x outcome: a DropResponse that fires on a call failing for another reason is not
    spent: the caller gets response_lost instead of the call's own error."""

    _drawn: Any = None

    def _enter(self, op: str, session_id: object, epoch: object) -> Any:
        self._drawn = super()._enter(op, session_id, epoch)
        return self._drawn

    def _compute(self, op: str, bundle: Any) -> Any:
        self._drawn = None
        try:
            return super()._compute(op, bundle)
        except (StaleEpoch, PositionMismatch, CacheMiss, OutOfMemory, SessionCancelled, SessionReleased) as exc:
            if self._drawn is not None and self._drawn.drop:
                raise ResponseLost("lost", session_id=exc.session_id, epoch=exc.epoch) from None
            raise


class DelayOnlyOnSuccess(FakeShardEngine):
    """Fault x outcome: a Delay takes its time only on calls that succeed (a refused call
    answers at once)."""

    def _enter(self, op: str, session_id: object, epoch: object) -> Any:
        drawn = self._faults.draw(op, session_id)
        if drawn.crash:
            self.crash()
        if self._crashed:
            raise EngineCrashed("down", session_id=session_id if isinstance(session_id, str) else None,
                                epoch=epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else None)
        self._pending_delay = drawn.delay
        return dataclasses.replace(drawn, delay=0.0)

    def _compute(self, op: str, bundle: Any) -> Any:
        self._pending_delay = 0.0
        out = super()._compute(op, bundle)
        if self._pending_delay:
            self.clock.sleep(self._pending_delay)
        return out


# -- bugs that live at real lengths ------------------------------------------------


def _flip_at(out: Any, position: int) -> Any:
    """``out`` with the value at ``position`` changed (a sampled token: when it is at or past
    ``position``, since a wrong row there feeds every later one)."""
    if isinstance(out, SampleBundle):
        return _flip(out) if out.pos >= position else out
    i = position - out.start_pos
    return _flip_row(out, i) if 0 <= i < len(out.hidden) else out


class DriftFrom12(Wrapper):
    """Lengths: a decode at position 12 or later reads the KV cache one slot off, so what it
    computes drifts (a prefill of the same positions is right)."""

    def decode(self, bundle: Any) -> Any:
        out = self.inner.decode(bundle)
        return _flip(out) if bundle.start_pos >= 12 else out


class SeamAt512(Wrapper):
    """Lengths: a prefill computes its positions in chunks of 512 and the second chunk starts
    one position late, so a call covering positions 511 and 512 gets position 512 wrong."""

    def prefill(self, bundle: Any) -> Any:
        out = self.inner.prefill(bundle)
        start = bundle.start_pos
        return _flip_at(out, 512) if start <= 511 < start + _positions(bundle) - 1 else out


class WindowAt4097(Wrapper):
    """Lengths: a prompt prefilled from position 0 past a 4,096-position window is off by one
    from position 4,097 on (prompts that arrive in chunks, and decodes, are right)."""

    def prefill(self, bundle: Any) -> Any:
        out = self.inner.prefill(bundle)
        return _flip_at(out, 4097) if bundle.start_pos == 0 and _positions(bundle) > 4097 else out


def _int16(n: Any) -> Any:
    return (n + 2**15) % 2**16 - 2**15 if isinstance(n, int) and not isinstance(n, bool) else n


class Int16ErrorPositions(Wrapper):
    """Lengths: a cache miss or position mismatch names its positions as 16-bit integers, so
    beyond 32,767 its ``expected`` and ``got`` wrap."""

    def _call(self, fn: Callable[[Any], Any], bundle: Any) -> Any:
        try:
            return fn(bundle)
        except (CacheMiss, PositionMismatch) as exc:
            raise type(exc)(exc.message, session_id=exc.session_id, epoch=exc.epoch,
                            expected=_int16(exc.expected), got=_int16(exc.got)) from None

    def prefill(self, bundle: Any) -> Any:
        return self._call(self.inner.prefill, bundle)

    def decode(self, bundle: Any) -> Any:
        return self._call(self.inner.decode, bundle)


class ReserveOverflows(FakeShardEngine):
    """Lengths x capacity: the room left under a memory reserve is computed in 32-bit signed
    arithmetic, so a reservation of 2**32 or more wraps around and a call that cannot fit is
    admitted."""

    def _enter(self, op: str, session_id: object, epoch: object) -> Any:
        drawn = super()._enter(op, session_id, epoch)
        capacity = self.capacity_tokens
        if drawn.reserve_tokens and capacity is not None:
            room = (capacity - drawn.reserve_tokens + 2**31) % 2**32 - 2**31
            return dataclasses.replace(drawn, reserve_tokens=capacity - room)
        return drawn


# -- length bugs of a class, at positions drawn when the engine is built -----------------------
#
# The bugs above sit at positions an issue named.  These five are classes of length bug, each
# at a position drawn from ``PLANTED_SEED`` when the module is imported (``FAKESHARD_PLANTED_SEED``
# overrides it; ``LENGTH_POSITIONS`` records what was drawn), so that the machines are tested on
# the class, never tuned to a position: ``benchmarks/catch.py --seed N`` times them at other draws.

#: The seed the length classes draw their positions from.
PLANTED_SEED = int(os.environ.get("FAKESHARD_PLANTED_SEED", "20261207"))


def _log_uniform(rng: random.Random, low: int, high: int) -> int:
    """An integer from ``low`` to ``high``, each octave as likely as another."""
    return min(high, max(low, int(math.exp(rng.uniform(math.log(low), math.log(high + 1))))))


def _draw_positions(seed: int) -> dict[str, int]:
    """Where each length class breaks, drawn from ``seed``: a round decimal length (a multiple of
    100 from 100 to 32,700), a chunk limit (64 .. 16,384 positions), a power of two (2**4 ..
    2**15), a cap on a view's count (16 .. 30,000)."""
    rng = random.Random(seed)
    return {
        "round": 100 * max(1, _log_uniform(rng, 100, 32_700) // 100),
        "chunk": _log_uniform(rng, 64, 16_384),
        "power": 2 ** rng.randint(4, 15),
        "cap": _log_uniform(rng, 16, 30_000),
    }


#: What ``PLANTED_SEED`` drew (printed by the benchmark and the tests, so a catch is reproducible).
LENGTH_POSITIONS = _draw_positions(PLANTED_SEED)


class DriftPastRoundLength(Wrapper):
    """Lengths: from a round decimal length on (a multiple of 100), a decode reads its cache one
    slot off, so the token it computes drifts (a prefill of the same positions is right).  A
    drift that every path shared would be another function, not a bug a caller can see: the
    machines hold an engine to itself, one path against another."""

    at = LENGTH_POSITIONS["round"]

    def decode(self, bundle: Any) -> Any:
        out = self.inner.decode(bundle)
        return _flip(out) if bundle.start_pos >= self.at else out


class ChunkLimitInPrefill(Wrapper):
    """Lengths: a prefill of more positions than a chunk limit computes the first position
    past the limit wrong (the next chunk reads a stale row), wherever the call starts."""

    limit = LENGTH_POSITIONS["chunk"]

    def prefill(self, bundle: Any) -> Any:
        out = self.inner.prefill(bundle)
        if _positions(bundle) > self.limit:
            return _flip_at(out, bundle.start_pos + self.limit)
        return out


class MissAcrossPowerOfTwo(Wrapper):
    """Lengths: the step that crosses a power of two (a decode at it, or a prefill that
    continues a session across it) answers ``cache_miss`` though the cache is there (a block
    table that grows at 2**k looks the session up before it has grown)."""

    at = LENGTH_POSITIONS["power"]

    def _check(self, bundle: Any) -> None:
        start = bundle.start_pos
        view = self.inner.session(bundle.session_id)
        applies = (view is not None and view.status == "live" and view.epoch == bundle.epoch
                   and view.cached_tokens == start)  # a call the engine would answer ok
        if applies and 0 < start <= self.at < start + _positions(bundle):
            raise CacheMiss(f"no block for position {self.at}", session_id=bundle.session_id,
                            epoch=bundle.epoch, expected=0, got=start)

    def prefill(self, bundle: Any) -> Any:
        self._check(bundle)
        return self.inner.prefill(bundle)

    def decode(self, bundle: Any) -> Any:
        self._check(bundle)
        return self.inner.decode(bundle)


class UsedTokens16Bit(Wrapper):
    """Lengths x capacity: the positions held are counted in a 16-bit counter, so an engine
    holding 65,536 or more in total (several long sessions at once) reports them wrapped."""

    @property
    def used_tokens(self) -> int:
        return int(self.inner.used_tokens) % 2**16


class RoomCounted16Bit(FakeShardEngine):
    """Lengths x capacity: the room left under the capacity is computed from a 16-bit count of
    the positions held, so an engine holding 65,536 or more admits calls it has no room for
    (``used_tokens`` itself is right)."""

    def _check_room(self, where: Any, drawn: Any, n: int, freed: int) -> None:
        capacity = self.capacity_tokens
        if capacity is not None and not drawn.fail_allocation \
                and n <= capacity - drawn.reserve_tokens - (self.used_tokens - freed) % 2**16:
            return
        super()._check_room(where, drawn, n, freed)


class CappedCachedView(Wrapper):
    """Lengths: a session's view reports at most a fixed count of cached positions (a
    field narrower than the cache), so a session longer than it reads short."""

    cap = LENGTH_POSITIONS["cap"]

    def session(self, session_id: str) -> Any:
        view = self.inner.session(session_id)
        if view is None or view.cached_tokens <= self.cap:
            return view
        return dataclasses.replace(view, cached_tokens=self.cap)


def _without(fault_type: type) -> Callable[..., Any]:
    def factory(spec: Any, *, faults: Any = None, **kw: Any) -> FakeShardEngine:
        if faults is not None:
            faults = FaultPlan(tuple(r for r in faults.rules if not isinstance(r.fault, fault_type)),
                               faults.seed)
        return FakeShardEngine(spec, faults=faults, **kw)
    return factory


def _wrapped(cls: type) -> Callable[..., Any]:
    def factory(spec: Any, **kw: Any) -> Any:
        return cls(FakeShardEngine(spec, **kw))
    return factory


@dataclass(frozen=True)
class Bug:
    name: str
    rule: str
    factory: Callable[..., Any]
    machine: str  # the machine expected to catch it


BUGS = (
    Bug("stale_as_cache_miss", "fencing", _wrapped(StaleAsCacheMiss), "sessions"),
    Bug("fence_moves_on_failure", "fencing", _wrapped(FenceMovesOnFailure), "sessions"),
    Bug("forgetful_tombstone", "tombstones", _wrapped(ForgetfulTombstone), "sessions"),
    Bug("leaky_release", "accounting", _wrapped(LeakyRelease), "sessions"),
    Bug("partial_allocation", "accounting", _wrapped(PartialAllocation), "sessions"),
    Bug("ignores_start_pos", "position checks", _wrapped(IgnoresStartPos), "sessions"),
    Bug("epoch_sensitive", "determinism", _wrapped(EpochSensitive), "sessions"),
    Bug("chunk_sensitive", "determinism", _wrapped(ChunkSensitive), "sessions"),
    Bug("drift_after_restart", "determinism", _wrapped(DriftAfterRestart), "sessions"),
    Bug("crash_keeps_sessions", "crash", CrashKeepsSessions, "sessions"),
    Bug("drop_not_applied", "fault semantics", DropNotApplied, "faults"),
    Bug("malformed_ignored", "fault semantics", _without(Malformed), "faults"),
    Bug("delay_ignored", "fault semantics", _without(Delay), "faults"),
    Bug("crash_ignored", "fault semantics", _without(Crash), "faults"),
    # One per class of crossed condition (fakeshard.testing._probes.CROSSINGS).
    Bug("validates_before_up", "order: engine up x valid input", ValidatesBeforeUp, "sessions"),
    Bug("capacity_before_fence", "order: stale epoch x capacity", _wrapped(CapacityBeforeFence), "sessions"),
    Bug("capacity_before_tombstone", "order: closed session x capacity", _wrapped(CapacityBeforeTombstone),
        "sessions"),
    Bug("capacity_before_position", "order: position x capacity", _wrapped(CapacityBeforePosition), "sessions"),
    Bug("replace_counts_old", "capacity x epochs", _wrapped(ReplaceCountsOld), "sessions"),
    Bug("tombstone_holds_memory", "capacity x tombstones", _wrapped(TombstoneHoldsMemory), "sessions"),
    Bug("crash_keeps_accounting", "capacity x crashes", CrashKeepsAccounting, "sessions"),
    Bug("reserve_only_on_create", "capacity x memory pressure", ReserveOnlyOnCreate, "faults"),
    Bug("drop_on_failed_call", "fault x outcome: lost response", DropOnFailedCall, "faults"),
    Bug("delay_only_on_success", "fault x outcome: delay", DelayOnlyOnSuccess, "faults"),
    # Bugs at lengths (a KV slot, a prefill chunk's seam, a window, 16- and 32-bit counters).
    Bug("drift_from_12", "lengths", _wrapped(DriftFrom12), "sessions"),
    Bug("seam_at_512", "lengths", _wrapped(SeamAt512), "sessions"),
    Bug("window_at_4097", "lengths", _wrapped(WindowAt4097), "sessions"),
    Bug("int16_error_positions", "lengths", _wrapped(Int16ErrorPositions), "sessions"),
    Bug("reserve_overflows", "lengths x capacity", ReserveOverflows, "faults"),
    # Classes of length bug at positions drawn from PLANTED_SEED (LENGTH_POSITIONS).
    Bug("drift_past_round_length", "lengths: a round decimal length", _wrapped(DriftPastRoundLength), "sessions"),
    Bug("chunk_limit_in_prefill", "lengths: a chunk limit", _wrapped(ChunkLimitInPrefill), "sessions"),
    Bug("miss_across_power_of_two", "lengths: a power of two", _wrapped(MissAcrossPowerOfTwo), "sessions"),
    Bug("used_tokens_16_bit", "lengths: a 16-bit total", _wrapped(UsedTokens16Bit), "sessions"),
    Bug("room_counted_16_bit", "lengths: a 16-bit total x capacity", RoomCounted16Bit, "sessions"),
    Bug("capped_cached_view", "lengths: a session view's count", _wrapped(CappedCachedView), "sessions"),
)
