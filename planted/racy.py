"""Planted racy engines: each breaks the contract's atomicity in one way a real server might.

Each is correct when called from one thread at a time (the sequential
suites pass it); only concurrent callers can tell. ``_pause()`` stands for
the I/O or the computation that a real server does between the two halves
of a racy step: it lets another thread run there.
"""

from __future__ import annotations

import time
from typing import Any, Optional

from fakeshard import FakeShardEngine, FaultPlan, ShardSpec
from fakeshard._engine import _Entry


def _pause() -> None:
    time.sleep(0.0002)  # long enough for another thread to make a whole call


class _NoLock:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


class _PausingBackend:
    """A backend whose forward pass lets other threads run, between the checks and the commit."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.spec, self.evidence_class = inner.spec, inner.evidence_class

    def empty_cache(self) -> Any:
        return self._inner.empty_cache()

    def forward(self, cache: Any, start_pos: int, inputs: Any) -> Any:
        _pause()
        return self._inner.forward(cache, start_pos, inputs)


class UnlockedCheckThenCommit(FakeShardEngine):
    """No lock: two calls both pass the position check, then both commit (one append is lost)."""

    def __init__(self, spec: ShardSpec, **kw: Any) -> None:
        super().__init__(spec, **kw)
        self._lock = _NoLock()  # type: ignore[assignment]
        self._backend = _PausingBackend(self._backend)


class AccountingOutsideLock(FakeShardEngine):
    """The session table is locked, but ``used_tokens`` is updated after the lock is let go."""

    def _racy(self, call: Any, *args: Any) -> Any:
        with self._lock:
            base = self._used
            try:
                return_value = call(*args)
            finally:
                delta, self._used = self._used - base, base
                pending = delta
        used = self._used
        _pause()
        self._used = used + pending
        return return_value

    def prefill(self, bundle: Any) -> Any:
        return self._racy(super().prefill, bundle)

    def decode(self, bundle: Any) -> Any:
        return self._racy(super().decode, bundle)

    def cancel(self, session_id: str, epoch: int) -> None:
        self._racy(super().cancel, session_id, epoch)

    def release(self, session_id: str, epoch: int) -> None:
        self._racy(super().release, session_id, epoch)


class LateTombstone(FakeShardEngine):
    """A close of an unknown session writes its tombstone after the lock is let go (over a new session)."""

    def _late(self, op: str, session_id: str, epoch: int) -> None:
        with self._lock:
            known = session_id in self._sessions
            getattr(super(), op)(session_id, epoch)
            if known:
                return
            tombstone: Optional[_Entry] = self._sessions.pop(session_id, None)
        _pause()
        if tombstone is not None:
            self._sessions[session_id] = tombstone

    def cancel(self, session_id: str, epoch: int) -> None:
        self._late("cancel", session_id, epoch)

    def release(self, session_id: str, epoch: int) -> None:
        self._late("release", session_id, epoch)


class TornView(FakeShardEngine):
    """``session()`` reads a row's fields one by one without the lock: a close between them tears it."""

    def session(self, session_id: str) -> Any:
        from fakeshard._engine import SessionView

        entry = self._sessions.get(session_id)
        if entry is None:
            return None
        epoch, status = entry.epoch, entry.status
        _pause()
        return SessionView(session_id, epoch, status, entry.cached)


class RestartNotAtomic(FakeShardEngine):
    """``restart()`` empties the table, lets other calls in, then zeroes the accounting."""

    def restart(self) -> None:
        with self._lock:
            self._crashed = False
            self._sessions.clear()
        _pause()
        with self._lock:
            self._used = 0


def _factory(cls: type) -> Any:
    def make(spec: ShardSpec, *, seed: int = 0, capacity_tokens: Optional[int] = None, clock: Any = None,
             faults: Optional[FaultPlan] = None) -> Any:
        return cls(spec, seed=seed, capacity_tokens=capacity_tokens, clock=clock, faults=faults)
    make.__name__ = cls.__name__
    make.__doc__ = cls.__doc__
    return make


unlocked_check_then_commit = _factory(UnlockedCheckThenCommit)
accounting_outside_lock = _factory(AccountingOutsideLock)
late_tombstone = _factory(LateTombstone)
torn_view = _factory(TornView)
restart_not_atomic = _factory(RestartNotAtomic)

RACY = ("unlocked_check_then_commit", "accounting_outside_lock", "late_tombstone", "torn_view",
        "restart_not_atomic")
