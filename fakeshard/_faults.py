"""Declarative, seeded fault injection.

A :class:`FaultPlan` is data: rules and a seed, JSON-serialisable through
:mod:`fakeshard.wire` (a rule and each fault record are dataclasses-json classes, whose
``to_dict`` gives their fields as JSON values).  An engine turns its plan into a :class:`FaultInjector`
of its own (counters and a ``random.Random(plan.seed)``), so the same plan
given to two engines replays the same way on each.  The injector only says
what fires on a call; the engine applies it at the points the contract names.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Optional, Union

import numpy as np
from dataclasses_json import DataClassJsonMixin

from fakeshard._contract import HiddenBundle, SampleBundle, ShardSpec, hidden_checksum

__all__ = [
    "Crash",
    "Delay",
    "Drawn",
    "DropResponse",
    "Fault",
    "FaultInjector",
    "FaultPlan",
    "FaultRule",
    "Fired",
    "HIDDEN_MALFORMED_KINDS",
    "MALFORMED_KINDS",
    "Malformed",
    "MemoryPressure",
    "OPS",
    "SAMPLE_MALFORMED_KINDS",
    "corrupt",
]

#: The operations a rule can target (``any`` matches all of them).
OPS = ("prefill", "decode", "cancel", "release")
#: The ways :class:`Malformed` can break an output.
MALFORMED_KINDS = ("checksum", "shape", "layer", "nan", "token_range", "session", "epoch", "position")
#: The kinds that break a hidden bundle (a head's or middle's output), and those that break a
#: sample bundle (a tail's); :func:`corrupt` leaves an output as it is for a kind not in its list.
HIDDEN_MALFORMED_KINDS = ("checksum", "shape", "layer", "nan", "session", "epoch", "position")
SAMPLE_MALFORMED_KINDS = ("token_range", "session", "epoch", "position")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True, slots=True)
class Delay(DataClassJsonMixin):
    """The call takes ``seconds`` longer on the engine's clock; result unchanged."""

    seconds: float
    type_name: ClassVar[str] = "delay"

    def __post_init__(self) -> None:
        if isinstance(self.seconds, bool) or not isinstance(self.seconds, (int, float)) \
                or not math.isfinite(self.seconds) or self.seconds < 0:
            raise ValueError(f"Delay.seconds must be a finite number >= 0, got {self.seconds!r}")


@dataclass(frozen=True, slots=True)
class MemoryPressure(DataClassJsonMixin):
    """``None``: the call's allocation fails; a number: that much capacity is unavailable."""

    reserve_tokens: Optional[int] = None
    type_name: ClassVar[str] = "memory_pressure"

    def __post_init__(self) -> None:
        if self.reserve_tokens is not None and (
            not _is_int(self.reserve_tokens) or self.reserve_tokens < 0
        ):
            raise ValueError(
                f"MemoryPressure.reserve_tokens must be None or an int >= 0, got {self.reserve_tokens!r}"
            )


@dataclass(frozen=True, slots=True)
class Malformed(DataClassJsonMixin):
    """The call is applied but its output breaks the contract in the named way."""

    kind: str
    type_name: ClassVar[str] = "malformed"

    def __post_init__(self) -> None:
        if self.kind not in MALFORMED_KINDS:
            raise ValueError(f"Malformed.kind must be one of {MALFORMED_KINDS}, got {self.kind!r}")


@dataclass(frozen=True, slots=True)
class Crash(DataClassJsonMixin):
    """The engine goes down before applying the call."""

    type_name: ClassVar[str] = "crash"


@dataclass(frozen=True, slots=True)
class DropResponse(DataClassJsonMixin):
    """The call is applied; the caller gets ``ResponseLost``."""

    type_name: ClassVar[str] = "drop_response"


Fault = Union[Delay, MemoryPressure, Malformed, Crash, DropResponse]
FAULT_TYPES: tuple[type[Fault], ...] = (Delay, MemoryPressure, Malformed, Crash, DropResponse)


@dataclass(frozen=True, slots=True)
class FaultRule(DataClassJsonMixin):
    """Fire ``fault`` on the ``nth`` matching call and the ``count - 1`` after it.

    ``count=None`` fires on every matching call from the ``nth`` on.  A call
    matches when its op is ``op`` (or ``op == "any"``) and its session is
    ``session_id`` (or ``session_id is None``), whatever its outcome.  Each
    firing happens with ``probability``, drawn from the plan's generator.
    """

    fault: Fault
    op: str = "any"
    session_id: Optional[str] = None
    nth: int = 1
    count: Optional[int] = 1
    probability: float = 1.0

    def __post_init__(self) -> None:
        if not isinstance(self.fault, FAULT_TYPES):
            got = f"the class {self.fault.__name__}" if isinstance(self.fault, type) else type(self.fault).__name__
            raise TypeError(f"FaultRule.fault must be a fault record, got {got}")
        if self.op != "any" and self.op not in OPS:
            raise ValueError(f"FaultRule.op must be 'any' or one of {OPS}, got {self.op!r}")
        if self.session_id is not None and not isinstance(self.session_id, str):
            raise ValueError(f"FaultRule.session_id must be None or a str, got {self.session_id!r}")
        if not _is_int(self.nth) or self.nth < 1:
            raise ValueError(f"FaultRule.nth must be an int >= 1, got {self.nth!r}")
        if self.count is not None and (not _is_int(self.count) or self.count < 1):
            raise ValueError(f"FaultRule.count must be None or an int >= 1, got {self.count!r}")
        if isinstance(self.probability, bool) or not isinstance(self.probability, (int, float)) \
                or not 0.0 <= self.probability <= 1.0:
            raise ValueError(f"FaultRule.probability must be in [0, 1], got {self.probability!r}")

    def matches(self, op: str, session_id: object) -> bool:
        return (self.op == "any" or self.op == op) and (
            self.session_id is None or self.session_id == session_id
        )

    def in_window(self, n_matched: int) -> bool:
        """Whether the ``n_matched``-th matching call (1-based) is one this rule fires on."""
        return n_matched >= self.nth and (self.count is None or n_matched < self.nth + self.count)


@dataclass(frozen=True, slots=True)
class FaultPlan:
    """Rules plus the seed of the plan's own generator."""

    rules: tuple[FaultRule, ...] = ()
    seed: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.rules, list):
            object.__setattr__(self, "rules", tuple(self.rules))
        if not isinstance(self.rules, tuple) or not all(isinstance(r, FaultRule) for r in self.rules):
            raise TypeError("FaultPlan.rules must be a sequence of FaultRule")
        if not _is_int(self.seed):
            raise ValueError(f"FaultPlan.seed must be an int, got {self.seed!r}")


@dataclass(frozen=True, slots=True)
class Fired:
    """One rule firing: on which call (1-based, counting every call) and what."""

    call: int
    rule: int
    op: str
    session_id: object
    fault: Fault


@dataclass(slots=True)
class Drawn:
    """What fired on one call, folded into what the engine must do."""

    delay: float = 0.0
    crash: bool = False
    fail_allocation: bool = False
    reserve_tokens: int = 0
    malformed: tuple[str, ...] = ()
    drop: bool = False


#: Shared result for calls on which nothing fires (never mutated).
_NOTHING = Drawn()


class FaultInjector:
    """The running state of one plan on one engine: rule counters and the generator.

    Several rules may fire on one call; their effects combine: delays add,
    reserves add, any ``MemoryPressure(None)`` fails the allocation,
    ``Malformed`` kinds apply in rule order, a crash pre-empts everything.
    """

    __slots__ = ("plan", "_rng", "_matched", "calls", "log")

    def __init__(self, plan: FaultPlan | None) -> None:
        self.plan = plan if plan is not None else FaultPlan()
        self._rng = random.Random(self.plan.seed)
        self._matched = [0] * len(self.plan.rules)
        #: Calls seen so far (every call, matching or not).
        self.calls = 0
        #: Every firing so far, in order.
        self.log: list[Fired] = []

    def draw(self, op: str, session_id: object) -> Drawn:
        self.calls += 1
        if not self.plan.rules:
            return _NOTHING
        drawn: Drawn | None = None
        for index, rule in enumerate(self.plan.rules):
            if not rule.matches(op, session_id):
                continue
            self._matched[index] += 1
            if not rule.in_window(self._matched[index]):
                continue
            # Draw only for rules that may not fire: a certain rule consumes no randomness.
            if rule.probability < 1.0 and self._rng.random() >= rule.probability:
                continue
            if drawn is None:
                drawn = Drawn()
            self.log.append(Fired(self.calls, index, op, session_id, rule.fault))
            fault = rule.fault
            if isinstance(fault, Delay):
                drawn.delay += float(fault.seconds)
            elif isinstance(fault, Crash):
                drawn.crash = True
            elif isinstance(fault, MemoryPressure):
                if fault.reserve_tokens is None:
                    drawn.fail_allocation = True
                else:
                    drawn.reserve_tokens += fault.reserve_tokens
            elif isinstance(fault, Malformed):
                drawn.malformed += (fault.kind,)
            else:
                drawn.drop = True
        return drawn if drawn is not None else _NOTHING


def _reseal(bundle: HiddenBundle, **changes: Any) -> HiddenBundle:
    broken = replace(bundle, **changes)
    return replace(
        broken,
        checksum=hidden_checksum(
            broken.session_id, broken.epoch, broken.start_pos, broken.layer, broken.hidden
        ),
    )


def corrupt(output: object, what: str, spec: ShardSpec) -> object:
    """``output`` broken in the named way, or unchanged if it has no field for it.

    Identity, layer, shape and NaN corruptions carry a checksum recomputed
    over the broken contents (a node that computed the wrong thing, not a
    damaged message); ``checksum`` damages the checksum alone.
    """
    if isinstance(output, HiddenBundle):
        if what == "checksum":
            # Wrong with respect to the contents, however often it is applied.
            right = _reseal(output).checksum
            return replace(output, checksum=("0" if right[0] != "0" else "1") + right[1:])
        if what == "shape":
            return _reseal(output, hidden=output.array()[:, :-1])
        if what == "layer":
            return _reseal(output, layer=output.layer + 1)
        if what == "nan":
            rows = np.array(output.array())
            rows[0, 0] = math.nan
            return _reseal(output, hidden=rows)
        if what == "session":
            return _reseal(output, session_id=output.session_id + "~")
        if what == "epoch":
            return _reseal(output, epoch=output.epoch + 1)
        if what == "position":
            return _reseal(output, start_pos=output.start_pos + 1)
        return output
    if isinstance(output, SampleBundle):  # the only other output an engine corrupts
        if what == "token_range":
            return replace(output, token=spec.vocab_size)
        if what == "session":
            return replace(output, session_id=output.session_id + "~")
        if what == "epoch":
            return replace(output, epoch=output.epoch + 1)
        if what == "position":
            return replace(output, pos=output.pos + 1)
    return output
