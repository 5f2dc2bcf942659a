"""Which contract rows, error codes and fault kinds a run reached.

Every step reports its probes here (and to Hypothesis as ``event()``s, which
``--hypothesis-show-statistics`` prints).  ``REQUIRED`` is the list a ``ci``
campaign must reach: every row of the contract's session table for each call,
every error code, every fault and every ``Malformed`` kind.
"""

from __future__ import annotations

from collections import Counter

from fakeshard.errors import ERROR_CODES
from fakeshard.faults import MALFORMED_KINDS

_COMPUTE_ROWS = ("down", "malformed", "stale", "cancelled", "released", "nothing_held_miss",
                 "position_mismatch", "append", "pressure", "capacity")
_CLOSE_ROWS = ("down", "malformed", "stale", "noop", "tombstone", "frees")

REQUIRED: frozenset[str] = frozenset(
    [f"prefill:{row}" for row in _COMPUTE_ROWS + ("create", "replace_older", "create_over_tombstone")]
    + [f"decode:{row}" for row in _COMPUTE_ROWS]
    + [f"{op}:{row}" for op in ("cancel", "release") for row in _CLOSE_ROWS]
    + [f"code:{code}" for code in ERROR_CODES]
    + [f"fault:{name}" for name in ("Delay", "MemoryPressure", "Malformed", "Crash", "DropResponse")]
    + [f"malformed:{kind}" for kind in MALFORMED_KINDS]
)

#: Probes reached in this process, with counts.
reached: Counter[str] = Counter()


def record(names: list[str]) -> None:
    try:
        from hypothesis import event
    except ImportError:  # pragma: no cover - hypothesis is a test dependency
        event = None
    for name in names:
        reached[name] += 1
        if event is not None:
            try:
                event(name)
            except Exception:  # event() outside a Hypothesis test (replay) is fine to skip
                pass


def missing(seen: Counter[str] | set[str] | None = None) -> list[str]:
    have = set(seen if seen is not None else reached)
    return sorted(REQUIRED - have)
