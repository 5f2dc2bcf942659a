"""Which contract rows, error codes and fault kinds a run reached.

Every step reports its probes here (and to Hypothesis as ``event()``s, which
``--hypothesis-show-statistics`` prints).  ``REQUIRED`` is the list a ``ci``
campaign must reach: every row of the contract's session table for each call,
every error code, every fault and every ``Malformed`` kind, every position just below, at
and just above a boundary (8, 16, ..., 32768) computed by a call that applies, and every crossed
condition (``CROSSINGS``) that the contract does not make impossible
(``UNREACHABLE``, each with its reason).
"""

from __future__ import annotations

import bisect
import functools
from collections import Counter
from typing import Callable, Optional

from fakeshard._errors import ERROR_CODES
from fakeshard._faults import MALFORMED_KINDS
from fakeshard.testing._lengths import EDGES, LONGEST, ROUND_STEP, boundaries_in

_COMPUTE_ROWS = ("down", "malformed", "stale", "cancelled", "released", "nothing_held_miss",
                 "position_mismatch", "append", "pressure", "capacity")
_CLOSE_ROWS = ("down", "malformed", "stale", "noop", "tombstone", "frees")

#: The session rules' conditions, in the contract's order of checks (as the model reads them).
COMPUTE_CONDITIONS = ("down", "malformed", "stale", "cancelled", "released", "nothing_held_miss",
                      "position_mismatch", "pressure", "capacity")
CLOSE_CONDITIONS = ("down", "malformed", "stale")
_FAULT_KINDS = ("Delay", "MemoryPressure", "Malformed", "Crash", "DropResponse")
_OUTCOMES = ("ok",) + tuple(ERROR_CODES)
#: What every malformed input the machines send is (``fakeshard.testing._damage.BAD_INPUTS``,
#: and the close calls' bad ``epoch`` and ``session``).
_BAD_KINDS = ("contract", "range", "type", "two_positions", "session_type", "empty_session",
              "epoch_negative", "epoch_bool", "start_negative", "no_positions", "token_type",
              "not_a_bundle", "nan", "checksum", "width", "ragged", "layer", "value_type", "rows_type",
              "epoch", "session")
_ALLOCATIONS = ("create", "replace_older", "create_over_tombstone", "append", "reserve")

#: Crossed conditions the contract makes impossible, each with the reason.  Every other
#: crossing below is required of a ci campaign.
UNREACHABLE: dict[str, str] = {
    **{f"cross:compute:down+{b}": "a crash wipes every session and tombstone: a down engine holds no state"
       for b in ("stale", "cancelled", "released", "position_mismatch")},
    "cross:close:down+stale": "a crash wipes every session and tombstone: a down engine holds no state",
    **{f"cross:compute:stale+{b}": "a stale epoch is older than the one held: nothing is held at the call's "
       "epoch, so it is not cancelled, released or live there" for b in ("cancelled", "released", "position_mismatch")},
    **{f"cross:compute:{a}+{b}": "the session at the call's epoch is in one state: cancelled, released, "
       "live, or not held" for a, b in (("cancelled", "released"), ("cancelled", "nothing_held_miss"),
                                         ("cancelled", "position_mismatch"), ("released", "nothing_held_miss"),
                                         ("released", "position_mismatch"),
                                         ("nothing_held_miss", "position_mismatch"))},
    **{f"cross:fault:Crash+{code}": "a crash takes the engine down before the call: it answers engine_crashed"
       for code in _OUTCOMES if code != "engine_crashed"},
    "cross:fault:DropResponse+ok": "a dropped response is response_lost when the call applies, else the "
                                   "call's own error (the fault is spent): never ok",
}


def _pairs(kind: str, conditions: tuple[str, ...]) -> list[str]:
    return [f"cross:{kind}:{a}+{b}" for i, a in enumerate(conditions) for b in conditions[i + 1:]]


#: Every crossing the contract orders or combines: each check with each later one (compute
#: and close calls), each fault kind with each outcome, a down engine with each kind of bad
#: input, and capacity with each kind of allocation (create, replace of an older epoch,
#: create over a tombstone, append) and with a memory reserve, fitting or not.
CROSSINGS: frozenset[str] = frozenset(
    _pairs("compute", COMPUTE_CONDITIONS) + _pairs("close", CLOSE_CONDITIONS)
    + [f"cross:fault:{k}+{code}" for k in _FAULT_KINDS for code in _OUTCOMES]
    + [f"cross:down+bad:{bad}" for bad in _BAD_KINDS]
    + [f"cross:capacity:{a}+{fit}" for a in _ALLOCATIONS for fit in ("fit", "full")]
)

#: The classes of boundary real engines break at (``fakeshard.testing._lengths.boundaries_in``):
#: powers of two from 16, and round decimal lengths (multiples of 100) from 100.
LENGTH_CLASSES = {"power": 16, "round": 100}
#: A total past this is one a 16-bit counter cannot hold.
TOTAL_PROBE = 2**16
#: The probes of length bugs as classes, not positions: a call that takes a session across a
#: boundary of each class, a session view read just past one (its count one or two above it),
#: a prefill that continues a session (a split history, which must answer as the whole one
#: does), and an engine holding more positions in total than a 16-bit counter holds.
LENGTH_PROBES = tuple(
    [f"length:across:{c}" for c in LENGTH_CLASSES] + [f"length:view_past:{c}" for c in LENGTH_CLASSES]
    + ["length:split_prefill", f"length:total_past_{TOTAL_PROBE}"])

REQUIRED: frozenset[str] = frozenset(
    [f"prefill:{row}" for row in _COMPUTE_ROWS + ("create", "replace_older", "create_over_tombstone")]
    + [f"decode:{row}" for row in _COMPUTE_ROWS]
    + [f"{op}:{row}" for op in ("cancel", "release") for row in _CLOSE_ROWS]
    + [f"code:{code}" for code in ERROR_CODES]
    + [f"fault:{name}" for name in ("Delay", "MemoryPressure", "Malformed", "Crash", "DropResponse")]
    + [f"malformed:{kind}" for kind in MALFORMED_KINDS]
    + [f"position:{p}" for p in EDGES]
    + list(LENGTH_PROBES)
) | (CROSSINGS - frozenset(UNREACHABLE))

#: The situations the concurrent machine reports (``fakeshard check``'s table counts them for it):
#: each fault kind met in prefill, decode and release, each nemesis event, a call refused, hung
#: or cut by a crash, a re-route, a replay at a new epoch, a release racing a token, churn
#: mid-session, a call that worked after a partition healed, a give-up, 8 and 32 requests in flight.
SITUATIONS = tuple(
    [f"sim:fault:{kind}:{op}" for kind in ("Crash", "DropResponse", "Malformed", "Delay", "MemoryPressure")
     for op in ("prefill", "decode", "release")]
    + [f"sim:nemesis:{k}" for k in ("crash", "restart", "partition", "heal", "leave", "join")]
    + ["sim:call:refused", "sim:call:hung", "sim:call:crashed_mid_call", "sim:reroute", "sim:replay_new_epoch",
       "sim:release_raced_token", "sim:churn_mid_session", "sim:partition_healed", "sim:gave_up",
       "sim:in_flight:8", "sim:in_flight:32"])

#: The situations the program machine counts: the concurrent machine's but three.  A served node's
#: call log cannot show a call refused (the connection never reached the node) or cut by a crash
#: (the node logs it as answered ``engine_crashed``), and a give-up is the program's own choice in
#: real time (the reference program retries for about 20 s first): each is counted when seen.
PROGRAM_SITUATIONS = tuple(s for s in SITUATIONS
                           if s not in ("sim:call:refused", "sim:call:crashed_mid_call", "sim:gave_up"))

#: The situations the coordinator machine reports: each step kind, each call outcome a
#: coordinator cannot prevent, a step with a failing call, a give-up.
COORDINATOR_SITUATIONS = tuple(
    [f"coordinator:{op}" for op in ("start", "next", "release", "crash")]
    + [f"coordinator:call:{o}" for o in ("ok", "engine_crashed", "response_lost", "out_of_memory", "malformed_output")]
    + ["coordinator:faulted_step", "coordinator:gave_up"])

#: Probes reached in this process, with counts.
reached: Counter[str] = Counter()


def record(names: list[str]) -> None:
    """Count ``names`` as reached, and report each to the running Hypothesis test as an event."""
    reached.update(names)
    event = _event()
    if event is None:  # pragma: no cover - hypothesis is a test dependency
        return
    for name in names:
        try:
            event(name)
        except Exception:  # event() outside a Hypothesis test (replay) is fine to skip
            pass


@functools.cache
def _event() -> Optional[Callable[..., None]]:
    """Hypothesis's ``event``, imported on first use (this module is imported without Hypothesis)."""
    try:
        from hypothesis import event
    except ImportError:  # pragma: no cover - hypothesis is a test dependency
        return None
    return event


def crossings(op: str, holds: tuple[str, ...], fired: tuple[str, ...], code: str, bad: Optional[str],
              allocation: str = "") -> list[str]:
    """The crossed conditions of one call: each pair of session-rule conditions that held
    together (``cross:compute:a+b``, ``cross:close:a+b``, in the contract's order), each fault
    kind fired with the call's outcome (``cross:fault:Kind+code``), a down engine with the
    kind of bad input (``cross:down+bad:kind``), and, on an engine with a capacity, the
    allocation the call reached with whether it fit (``cross:capacity:create+fit``, ...,
    ``cross:capacity:append+full``; ``allocation`` is ``""`` without a capacity), and with a
    memory reserve (``cross:capacity:reserve+code``)."""
    kind = "close" if op in ("cancel", "release") else "compute"
    names = [f"cross:{kind}:{a}+{b}" for i, a in enumerate(holds) for b in holds[i + 1:]]
    names += [f"cross:fault:{name}+{code}" for name in sorted(set(fired))]
    if bad is not None and "down" in holds:
        names.append(f"cross:down+bad:{bad}")
    if allocation:
        names.append(f"cross:capacity:{allocation}+{'full' if 'capacity' in holds else 'fit'}")
        if "MemoryPressure" in fired:
            names.append(f"cross:capacity:reserve+{'full' if 'capacity' in holds else 'fit'}")
    return names


def positions(start: int, end: int) -> list[str]:
    """The positions at a boundary's edge (``EDGES``: 7, 8, 9, ..., 32767, 32768, 32769) that a
    call computing positions ``start .. end - 1`` covers: ``position:4097``."""
    first = bisect.bisect_left(EDGES, start)
    last = bisect.bisect_left(EDGES, end)
    return [f"position:{p}" for p in EDGES[first:last]]


def lengths(op: str, start: int, n: int) -> list[str]:
    """The length probes of a call that applied, computing positions ``start .. start + n - 1``:
    a session continued (``start > 0``) across a boundary, the call computing position ``b``
    itself, and a prefill that continues one."""
    if start <= 0:
        return []
    names = [f"length:across:{c}" for c, low in LENGTH_CLASSES.items()
             if boundaries_in(max(start, low), start + n - 1, c)]
    if op == "prefill" and n > 1:
        names.append("length:split_prefill")
    return names


def held(total: int, cached: list[int]) -> list[str]:
    """The length probes of an engine's state as a caller reads it: ``total`` positions held,
    and sessions' views whose count is ``cached`` (one or two past a boundary)."""
    names = [f"length:total_past_{TOTAL_PROBE}"] if total > TOTAL_PROBE else []
    # A count one or two past b: b is count - 1 or count - 2 (every step reads every view: no lists).
    past = [b for count in cached for b in (count - 1, count - 2)]
    if any(b >= LENGTH_CLASSES["power"] and b & (b - 1) == 0 for b in past):
        names.append("length:view_past:power")
    if any(b >= LENGTH_CLASSES["round"] and b % ROUND_STEP == 0 for b in past):
        names.append("length:view_past:round")
    return names


def required(longest: int = LONGEST, kinds: frozenset[str] = frozenset(_FAULT_KINDS)) -> frozenset[str]:
    """:data:`REQUIRED` of a factory whose prompts stop at ``longest`` positions (its
    ``machine_max_positions``) and whose engines apply the fault ``kinds`` (its ``fault_kinds``):
    the positions past its last are not required, nor a total past 2**16 where the machines'
    three sessions of four such prompts cannot hold one, nor a fault of a kind not applied
    (without ``MemoryPressure``, no reserve either)."""
    drop = {f"position:{p}" for p in EDGES if p >= longest}
    if 3 * 4 * longest <= TOTAL_PROBE:
        drop.add(f"length:total_past_{TOTAL_PROBE}")
    for kind in set(_FAULT_KINDS) - set(kinds):
        drop |= {p for p in REQUIRED if p == f"fault:{kind}" or p.startswith(f"cross:fault:{kind}+")}
        if kind == "MemoryPressure":  # its reserve, and the session rules' "pressure" condition
            drop |= {p for p in REQUIRED if p.startswith("cross:capacity:reserve+")
                     or "pressure" in p.split(":")[-1].split("+")}
    return REQUIRED - drop


def missing(seen: Counter[str] | set[str] | None = None, longest: int = LONGEST,
            kinds: frozenset[str] = frozenset(_FAULT_KINDS)) -> list[str]:
    have = set(seen if seen is not None else reached)
    return sorted(required(longest, kinds) - have)


def impossible(seen: Counter[str] | set[str] | None = None) -> list[str]:
    """The probes reached that the contract makes unreachable (:data:`UNREACHABLE`)."""
    have = set(seen if seen is not None else reached)
    return sorted(have & set(UNREACHABLE))
