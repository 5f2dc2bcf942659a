"""Clocks are injected: an engine reads time only through the one it was given."""

from __future__ import annotations

import math
import time
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "RealClock", "VirtualClock"]


@runtime_checkable
class Clock(Protocol):
    def now(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


def _check_seconds(seconds: object) -> float:
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise TypeError(f"seconds must be a number, got {type(seconds).__name__}")
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"seconds must be finite and >= 0, got {seconds!r}")
    return float(seconds)


class VirtualClock:
    """Time that moves only when something sleeps on it; never sleeps for real.

    It refuses to go backwards::

        >>> clock = VirtualClock()
        >>> clock.sleep(1.5); clock.now()
        1.5
    """

    __slots__ = ("_now",)

    def __init__(self, start: float = 0.0) -> None:
        self._now = _check_seconds(start)

    def now(self) -> float:
        return self._now

    def sleep(self, seconds: float) -> None:
        self._now += _check_seconds(seconds)

    advance = sleep

    def __repr__(self) -> str:
        return f"VirtualClock(now={self._now!r})"


class RealClock:
    """The process's monotonic clock; ``sleep`` really sleeps."""

    __slots__ = ()

    def now(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(_check_seconds(seconds))

    def __repr__(self) -> str:
        return "RealClock()"
