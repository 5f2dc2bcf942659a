"""One tree of errors under :class:`ShardError`, each with a stable ``code``.

The tree says who is at fault:

* :class:`SessionError` -- the request does not fit the session's state on
  this engine (stale epoch, closed session, wrong position, nothing cached).
  A coordinator reacts by replaying, re-routing or giving up on the session.
* :class:`MalformedBundle` -- the input itself breaks the contract.
* :class:`EngineError` -- a condition of the engine, not of the request
  (out of memory, crashed, response lost).

Every error carries the ``session_id`` and ``epoch`` it concerns (``None``
where none applies); :class:`CacheMiss` and :class:`PositionMismatch` also
carry ``expected`` and ``got`` positions.  Errors compare equal when their
class, message and fields are equal, which makes engine-versus-model checks
and wire round-trips easy to assert.
"""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = [
    "CacheMiss",
    "EngineCrashed",
    "EngineError",
    "ERROR_CODES",
    "MalformedBundle",
    "OutOfMemory",
    "PositionMismatch",
    "ResponseLost",
    "SessionCancelled",
    "SessionError",
    "SessionReleased",
    "ShardError",
    "StaleEpoch",
]


class ShardError(Exception):
    """Base of every error fakeshard raises on purpose."""

    code: ClassVar[str] = "shard_error"
    #: Extra fields (beyond session_id and epoch) that this error carries.
    _extra: ClassVar[tuple[str, ...]] = ()

    def __init__(
        self,
        message: str,
        *,
        session_id: str | None = None,
        epoch: int | None = None,
        **extra: int,
    ) -> None:
        unknown = set(extra) - set(self._extra)
        if unknown:
            raise TypeError(
                f"{type(self).__name__} takes no field(s) {sorted(unknown)}"
            )
        missing = set(self._extra) - set(extra)
        if missing:
            raise TypeError(
                f"{type(self).__name__} needs field(s) {sorted(missing)}"
            )
        super().__init__(message)
        self.message = message
        self.session_id = session_id
        self.epoch = epoch
        for name in self._extra:
            setattr(self, name, extra[name])

    def fields(self) -> dict[str, Any]:
        """The error's data fields (not the message), in a stable order."""
        out: dict[str, Any] = {"session_id": self.session_id, "epoch": self.epoch}
        for name in self._extra:
            out[name] = getattr(self, name)
        return out

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, ShardError)
        return self.message == other.message and self.fields() == other.fields()

    def __hash__(self) -> int:  # errors are values; keep them hashable
        return id(type(self))

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.message, self.fields()))

    def __repr__(self) -> str:
        parts = [repr(self.message)] + [
            f"{k}={v!r}" for k, v in self.fields().items() if v is not None
        ]
        return f"{type(self).__name__}({', '.join(parts)})"


def _rebuild(cls: type[ShardError], message: str, fields: dict[str, Any]) -> ShardError:
    return cls(message, **fields)


class SessionError(ShardError):
    """The request does not fit the session's state on this engine."""


class MalformedBundle(ShardError):
    """The input breaks the contract (type, shape, checksum, range, version)."""

    code = "malformed_bundle"


class EngineError(ShardError):
    """A condition of the engine, not of the request."""


class StaleEpoch(SessionError):
    """The call's epoch is older than the newest epoch seen for the session."""

    code = "stale_epoch"


class SessionCancelled(SessionError):
    """The session was cancelled at this epoch."""

    code = "cancelled"


class SessionReleased(SessionError):
    """The session was released at this epoch."""

    code = "released"


class CacheMiss(SessionError):
    """Nothing is cached for the session at this epoch; replay from ``expected``."""

    code = "cache_miss"
    _extra = ("expected", "got")
    expected: int
    got: int


class PositionMismatch(SessionError):
    """The call's start position is not the number of cached positions."""

    code = "position_mismatch"
    _extra = ("expected", "got")
    expected: int
    got: int


class OutOfMemory(EngineError):
    """The call's allocation does not fit ``capacity_tokens``; nothing was allocated."""

    code = "out_of_memory"


class EngineCrashed(EngineError):
    """The engine is down; every session is gone until ``restart()``."""

    code = "engine_crashed"


class ResponseLost(EngineError):
    """The call may or may not have been applied: the response never arrived."""

    code = "response_lost"


#: Every concrete error class, by its stable code.
ERROR_CODES: dict[str, type[ShardError]] = {
    cls.code: cls
    for cls in (
        CacheMiss,
        StaleEpoch,
        SessionCancelled,
        SessionReleased,
        PositionMismatch,
        OutOfMemory,
        EngineCrashed,
        MalformedBundle,
        ResponseLost,
    )
}
