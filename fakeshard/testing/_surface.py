"""The Surface machine: values built from drawn arguments, good and bad, and sent damaged.

The session machines build valid worlds and break the calls made in them; this one
breaks the construction of values and their transport.  Rules draw arguments from
mixes of valid and invalid values, ask a model written from the contract and its
choices (``docs/reference/choices.md``) whether they are acceptable, and check the
library agrees: a value when they are, a typed error (``ValueError`` / ``TypeError``
for constructors, ``MalformedBundle`` for the wire) when not.  What it builds joins a
pool; later steps send a drawn pool value through a drawn wire form with a drawn
damage, which must come back exactly when undamaged and be refused when damaged.

Fixed cases at the contract's edges are not here: those an engine must meet are
:mod:`fakeshard.testing.checks`, those of the library's own values are its tests.
"""

from __future__ import annotations

import json
import math
import pickle
from typing import Any, Callable, Optional

import numpy as np
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule

from fakeshard import (
    Crash,
    Delay,
    DropResponse,
    FaultPlan,
    FaultRule,
    HiddenBundle,
    Malformed,
    MalformedBundle,
    MemoryPressure,
    Pipeline,
    RealClock,
    SampleBundle,
    ShardError,
    ShardSpec,
    TokenBundle,
    VirtualClock,
    validate,
    wire,
)
from fakeshard._errors import ERROR_CODES
from fakeshard._faults import MALFORMED_KINDS, OPS, FaultInjector
from fakeshard._feeder import Feeder
from fakeshard.testing._machines import MachineConfig, count_discarded
from fakeshard.testing._model import RuleCounters
from fakeshard.testing._runner import same

__all__ = ["FRAME_MUTATIONS", "MUTATIONS", "SurfaceMachine", "frame_parts", "framed"]


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# -- the model: which arguments the contract (and its written choices) accept -----------

def spec_ok(model_id: Any, n: Any, start: Any, end: Any, hidden: Any, vocab: Any) -> bool:
    return (isinstance(model_id, str) and model_id != "" and _is_int(n) and n >= 1
            and _is_int(hidden) and hidden >= 4 and _is_int(vocab) and vocab >= 2
            and _is_int(start) and _is_int(end) and 0 <= start < end <= n)


def seconds_ok(v: Any) -> bool:
    return _is_number(v) and math.isfinite(v) and v >= 0


def fault_ok(kind: str, arg: Any) -> bool:
    if kind == "delay":
        return seconds_ok(arg)
    if kind == "memory_pressure":
        return arg is None or (_is_int(arg) and arg >= 0)
    if kind == "malformed":
        return arg in MALFORMED_KINDS
    return True


def rule_ok(fault_valid: bool, op: Any, session_id: Any, nth: Any, count: Any, p: Any) -> bool:
    return (fault_valid and (op == "any" or op in OPS) and (session_id is None or isinstance(session_id, str))
            and _is_int(nth) and nth >= 1 and (count is None or (_is_int(count) and count >= 1))
            and _is_number(p) and 0 <= p <= 1)


def tiles(ranges: list[tuple[int, int]], n: int) -> bool:
    at = 0
    for a, b in ranges:
        if a != at:
            return False
        at = b
    return bool(ranges) and at == n


#: Faults and rule windows the injector rule combines (op, session_id, nth, count, probability).
INJECTOR_FAULTS = (Delay(0.5), Delay(2), MemoryPressure(3), MemoryPressure(None), MemoryPressure(0), Malformed("nan"),
                   Malformed("epoch"), Crash(), DropResponse())
INJECTOR_WINDOWS = (("any", None, 1, 1, 1.0), ("any", None, 1, None, 1.0), ("prefill", None, 2, 2, 1.0),
                    ("decode", "a", 1, None, 1.0), ("any", "b", 3, 1, 1.0), ("any", None, 1, None, 0.5),
                    ("cancel", None, 1, 3, 0.25), ("any", None, 1, None, 0.0))
FAULT_ARGS: dict[str, list[Any]] = {
    "delay": [0, 0.5, 3, -1, math.inf, math.nan, "1", True],
    "memory_pressure": [None, 0, 4, -2, 2.5, True],
    "malformed": list(MALFORMED_KINDS) + ["bitflip", 3],
    "crash": [None],
    "drop_response": [None],
}
#: The damages a frame or a base64 object can take ("none": sent whole; "float16": sent narrowed).
FRAME_MUTATIONS = ("none", "float16", "magic", "truncate", "trailing", "header_length", "header_json", "dtype",
                   "shape", "payload_nan", "base64_junk", "base64_length", "not_bytes", "oversize",
                   "header_length_signed")
#: The damages a text form can take ("none": sent whole).
MUTATIONS = ("none", "truncate", "drop_key", "extra_key", "object_value", "nan", "deep", "bad_utf8",
             "version", "kind", "not_text", "oversize", "oversize_bytes", "string_number", "huge_number",
             "null_value", "bool_value", "array", "bad_rule", "rule_not_object", "fault_not_object")


def frame_parts(frame: bytes) -> tuple[dict[str, Any], bytes]:
    """A binary frame's header (as JSON) and payload."""
    size = int.from_bytes(frame[4:8], "little")
    return json.loads(frame[8:8 + size]), frame[8 + size:]


def framed(head: Any, body: bytes = b"") -> bytes:
    """The frame of header ``head`` (a JSON object, or its bytes as they are) and payload ``body``."""
    text = head if isinstance(head, bytes) else json.dumps(head).encode()
    return b"FSB1" + len(text).to_bytes(4, "little") + text + body


def _first_number_key(doc: dict[str, Any]) -> Optional[str]:
    for key in sorted(doc):
        if _is_number(doc[key]):
            return key
    return None


def _build_fault(kind: str, arg: Any) -> Any:
    return {"delay": lambda: Delay(arg), "memory_pressure": lambda: MemoryPressure(arg),
            "malformed": lambda: Malformed(arg), "crash": Crash, "drop_response": DropResponse}[kind]()


def text_damage(value: Any, index: int, mutation: str) -> tuple[Any, int]:
    """``value``'s text form damaged by ``mutation``, and the size limit to read it under."""
    text = wire.dumps(value)
    doc = json.loads(text)
    key = sorted(doc)[index % len(doc)]
    number_key = _first_number_key(doc) or "kind"
    plan_doc = json.loads(wire.dumps(FaultPlan((FaultRule(Crash()),))))
    null_key = {"error": "message", "fault_plan": "seed", "fault_rule": "nth"}.get(doc["kind"], "epoch")
    broken: Callable[[], Any] = {
        "oversize_bytes": lambda: text.encode(),
        "string_number": lambda: json.dumps({**doc, number_key: "1"}),
        "huge_number": lambda: json.dumps({**doc, number_key: 1}).replace(
            f'"{number_key}": 1', f'"{number_key}": 1{"0" * 400}'),
        "null_value": lambda: json.dumps({**doc, null_key: None}),
        "bool_value": lambda: json.dumps({**doc, number_key: True}),
        "array": lambda: json.dumps([doc]),
        "bad_rule": lambda: json.dumps({**plan_doc, "rules": [{**plan_doc["rules"][0], "op": "explode"}]}),
        "rule_not_object": lambda: json.dumps({**plan_doc, "rules": [3]}),
        "fault_not_object": lambda: json.dumps({**plan_doc, "rules": [{**plan_doc["rules"][0], "fault": "crash"}]}),
        "truncate": lambda: text[: len(text) // 2],
        "drop_key": lambda: json.dumps({k: v for k, v in doc.items() if k != key}),
        "extra_key": lambda: json.dumps({**doc, "unexpected": 1}),
        "object_value": lambda: json.dumps({**doc, key: {}}),
        "nan": lambda: text[:-1] + ', "x": NaN}',
        "deep": lambda: "[" * 5000 + "]" * 5000,
        "bad_utf8": lambda: b"\xff" + text.encode(),
        "version": lambda: json.dumps({**doc, "contract": "2"}),
        "kind": lambda: json.dumps({**doc, "kind": "tensor"}),
        "not_text": lambda: 12,
        "oversize": lambda: text,
    }[mutation]
    return broken(), len(text) - 1 if mutation.startswith("oversize") else wire.MAX_TEXT_CHARS


def base64_damage(value: Any, mutation: str) -> str:
    """``value``'s text form with base64 values, damaged by ``mutation`` where its hidden
    values are; a value without them gets a base64 object where none belongs."""
    doc = json.loads(wire.dumps(value, hidden="base64"))
    if not isinstance(value, HiddenBundle):
        return json.dumps({**doc, "hidden": {"dtype": "float32", "shape": [1, 1], "base64": "AAAAAA=="}})
    target = doc["hidden"]
    replaced: Any = {
        "base64_junk": {**target, "base64": "@@@"},
        "base64_length": {**target, "base64": "AAAA"},
        "magic": {**target, "base64": 5},
        "truncate": {k: v for k, v in target.items() if k != "base64"},
        "trailing": {**target, "extra": 1},
        "dtype": {**target, "dtype": "float64"},
        "shape": {**target, "shape": [1]},
        "payload_nan": {**target, "shape": [-1, 4]},
        "header_json": "AAAA",
        "header_length": {**target, "shape": [True, 4]},
    }.get(mutation, {**target, "dtype": 32})
    return json.dumps({**doc, "hidden": replaced})


def frame_damage(value: Any, index: int, mutation: str) -> tuple[Any, int]:
    """``value``'s frame damaged by ``mutation``, and the size limit to read it under."""
    frame = wire.dumpb(value)
    header, payload = frame_parts(frame)
    hidden = isinstance(value, HiddenBundle)
    nan_payload = b"\x00\x00\xc0\x7f" + payload[4:] if hidden and payload else payload
    head = header.get("hidden") or {}
    broken: Callable[[], Any] = {
        "magic": lambda: b"FSB0" + frame[4:],
        "truncate": lambda: frame[: max(0, len(frame) - 1 - index)],
        "trailing": lambda: frame + b"\x00" * (1 + index % 5),
        "header_length": lambda: frame[:4] + (len(frame) + index).to_bytes(4, "little") + frame[8:],
        # A length of 2**31 or more: read as the unsigned 32-bit number it is, it fits no frame;
        # read as signed, this one would pick out the right header and payload.
        "header_length_signed": lambda: frame[:4] + (2**32 - 8 - len(payload) if payload else 2**31).to_bytes(
            4, "little") + frame[8:],
        "header_json": lambda: frame[:8] + b"[" + frame[9:],
        "dtype": lambda: framed({**header, "hidden": {**head, "dtype": "int8"}} if hidden
                                else {**header, "kind": "tensor"}, payload),
        "shape": lambda: framed({**header, "hidden": {**head, "shape": [index + 2, 1]}} if hidden else header,
                                payload + b"\x00" * 4),
        "payload_nan": lambda: framed(header, nan_payload) if hidden else framed({**header, "contract": "0"}, payload),
        "base64_junk": lambda: framed({**header, "hidden": {**head, "base64": "AAAA"}} if hidden else [header],
                                      payload),
        "base64_length": lambda: framed({**header, "hidden": [[0.0]]} if hidden else {}, payload),
        "not_bytes": lambda: frame.decode("latin-1"),
        "oversize": lambda: frame,
    }[mutation]
    return broken(), len(frame) - 1 if mutation == "oversize" else wire.MAX_FRAME_BYTES


class SurfaceMachine(RuleBasedStateMachine):
    """Construction of every public value from drawn arguments, and its transport."""

    machine_name = "surface"

    def __init__(self, config: MachineConfig) -> None:
        super().__init__()
        self.config = config
        self.pool: list[Any] = []
        config.runs += 1

    def teardown(self) -> None:
        count_discarded(self.config)

    def _count(self) -> None:
        self.config.steps += 1
        if self.config.on_step is not None:
            self.config.on_step(self.config)

    def _expect(self, ok: bool, build: Any,
                errors: tuple[type[BaseException], ...] = (ValueError, TypeError)) -> Any:
        """``build()`` must return when ``ok``, raise one of ``errors`` when not."""
        self._count()
        if ok:
            return build()
        try:
            value = build()
        except errors:
            return None
        raise AssertionError(f"accepted what the contract refuses: {value!r}")

    @initialize()
    def seed_pool(self) -> None:
        # The last: float32 values (as engines answer) that binary16 does not hold, so a float16
        # hop changes them and the checksum.
        self.pool += [TokenBundle("s", 0, 0, (1, 2)), FaultPlan((FaultRule(Delay(1.0)),), seed=3),
                      HiddenBundle.sealed("s", 1, 2, 1, [(0.5, -0.25, 0.0, 1.0), (0.125, 0.0, 1.5, -2.0)]),
                      FaultRule(MemoryPressure(2), "decode", "s", 2, None, 0.5),
                      HiddenBundle.sealed("s", 3, 0, 2, np.array([[0.1, 1 / 3, -2.7, 1e-3]], dtype=np.float32))]

    @rule(model_id=st.sampled_from(["m", "", 3]), n=st.sampled_from([4, 1, 0, 4.0, True]),
          start=st.sampled_from([0, 1, 3, -1, "0"]), end=st.sampled_from([4, 2, 1, 5, 0]),
          hidden=st.sampled_from([8, 4, 3, 8.0]), vocab=st.sampled_from([64, 2, 1, True]))
    def spec(self, model_id: Any, n: Any, start: Any, end: Any, hidden: Any, vocab: Any) -> None:
        """A drawn spec is built exactly when the contract's bounds hold; an engine of it answers
        a prefill, and the bundle and its answer join the pool."""
        spec = self._expect(spec_ok(model_id, n, start, end, hidden, vocab),
                            lambda: ShardSpec(model_id, n, start, end, hidden, vocab))
        if spec is None:
            return
        head, tail = spec.start_layer == 0, spec.end_layer == spec.n_layers
        assert spec.role.value == {(True, True): "full", (True, False): "head",
                                   (False, True): "tail", (False, False): "middle"}[(head, tail)]
        bundle = Feeder(self.config.factory, spec, seed=1).bundle("s", 0, 0, [1, 0, 1], 3)
        self.pool += [bundle, self.config.factory(spec, seed=1).prefill(bundle)]

    @rule(kind=st.sampled_from(sorted(FAULT_ARGS)), data=st.data(),
          op=st.sampled_from(["any", "prefill", "release", "explode", None]),
          session_id=st.sampled_from([None, "a", 3]), nth=st.sampled_from([1, 2, 0, True, 1.0]),
          count=st.sampled_from([1, None, 3, 0, 1.5]), p=st.sampled_from([1.0, 0.5, 0, 1.5, -0.1, True, "1"]),
          seed=st.sampled_from([0, 7, "7", 1.5]))
    def fault_rule(self, kind: str, data: st.DataObject, op: Any, session_id: Any, nth: Any, count: Any,
                   p: Any, seed: Any) -> None:
        """A drawn fault, rule and plan are built exactly when the Faults section allows them."""
        arg = data.draw(st.sampled_from(FAULT_ARGS[kind]))
        fault_valid = fault_ok(kind, arg)
        fault = self._expect(fault_valid, lambda: _build_fault(kind, arg))
        target: Any = fault if fault_valid else "not a fault"  # ill-typed on purpose when not valid
        made = self._expect(rule_ok(fault_valid, op, session_id, nth, count, p),
                            lambda: FaultRule(target, op, session_id, nth, count, p))
        if made is None:
            return
        rules: Any = [made]  # a list, which FaultPlan takes as its sequence of rules
        plan = self._expect(_is_int(seed), lambda: FaultPlan(rules, seed))
        if plan is not None:
            self.pool += [made, plan]

    @rule(faults=st.lists(st.sampled_from(INJECTOR_FAULTS), min_size=1, max_size=5),
          windows=st.lists(st.sampled_from(INJECTOR_WINDOWS), min_size=5, max_size=5),
          seed=st.sampled_from([0, 7, -3, 2**40]),
          calls=st.lists(st.tuples(st.sampled_from(OPS), st.sampled_from(["a", "b"])), min_size=1, max_size=12))
    def injector(self, faults: list[Any], windows: list[tuple[Any, ...]], seed: int,
                 calls: list[tuple[str, str]]) -> None:
        """``FaultInjector(plan).draw``, the contract's way for an adapter to apply a plan, against
        the Faults section read literally: rules visited in order, a match counted whatever the
        call's outcome, the window ``nth .. nth + count - 1``, a draw of the plan's generator only
        for a rule with ``probability < 1``; what is due folded as the section says (delays and
        reserves add up, ``MemoryPressure(None)`` fails the allocation, ``Malformed`` kinds in rule
        order), and each firing logged with its call (every call counted), rule, op and session."""
        self._count()
        rules = tuple(FaultRule(fault, op, session_id, nth, count, p)
                      for fault, (op, session_id, nth, count, p) in zip(faults, windows))
        plan = FaultPlan(rules, seed)
        injector, reading = FaultInjector(plan), RuleCounters(plan)  # reading: the section, as the model reads it
        log = []
        for call, (op, session_id) in enumerate(calls, 1):
            drawn = injector.draw(op, session_id)
            indexed = reading.draw_indexed(op, session_id)
            log += [(call, index, op, session_id, fault) for index, fault in indexed]
            fired = [fault for _, fault in indexed]
            due = (sum(f.seconds for f in fired if isinstance(f, Delay)),
                   any(isinstance(f, Crash) for f in fired),
                   any(isinstance(f, MemoryPressure) and f.reserve_tokens is None for f in fired),
                   sum(f.reserve_tokens or 0 for f in fired if isinstance(f, MemoryPressure)),
                   tuple(f.kind for f in fired if isinstance(f, Malformed)),
                   any(isinstance(f, DropResponse) for f in fired))
            got = (drawn.delay, drawn.crash, drawn.fail_allocation, drawn.reserve_tokens, drawn.malformed, drawn.drop)
            assert got == due, f"call {call} ({op} {session_id}) of {rules}: drew {got}, the contract says {due}"
        assert [(f.call, f.rule, f.op, f.session_id, f.fault) for f in injector.log] == log
        assert injector.calls == len(calls)
        # A fired fault as the control port's log carries it: the fault record of a rule's JSON.
        for fault in faults:
            assert wire.fault_from_dict(json.loads(wire.dumps(FaultRule(fault)))["fault"]) == fault
        self.pool.append(plan)

    @rule(ranges=st.lists(st.sampled_from([(0, 1), (0, 2), (1, 2), (1, 4), (2, 4), (3, 4), (0, 4), (2, 3)]),
                          max_size=3))
    def pipeline(self, ranges: list[tuple[int, int]]) -> None:
        """Drawn ranges make a Pipeline exactly when they tile the model (``ValueError`` when not)."""
        spec = ShardSpec("surface-model", 4, 0, 4)
        drawn = self._expect(tiles(ranges, 4), lambda: Pipeline(
            [self.config.factory(spec.with_layers(a, b)) for a, b in ranges]), (ValueError,))
        assert drawn is None or drawn.spec == spec

    @rule(index=st.integers(0, 50), mutation=st.sampled_from(MUTATIONS))
    def send_text(self, index: int, mutation: str) -> None:
        """A pool value through the text wire: back exactly, and refused under damage."""
        value = self.pool[index % len(self.pool)]
        if mutation == "none":
            self._count()
            text = wire.dumps(value)
            assert same(wire.loads(text), value) and same(wire.loads(text.encode()), value)
            return
        broken, limit = text_damage(value, index, mutation)
        self._expect(False, lambda: wire.loads(broken, max_chars=limit), (MalformedBundle,))

    @rule(index=st.integers(0, 50), mutation=st.sampled_from(FRAME_MUTATIONS),
          form=st.sampled_from(["frame", "base64"]))
    def send_binary(self, index: int, mutation: str, form: str) -> None:
        """A pool value (a hidden bundle on odd indexes) through a binary form: back exactly (or,
        narrowed to float16, a valid bundle of its shape), and refused under damage; the
        transport's structural reading raises nothing but ``MalformedBundle``."""
        hiddens = [v for v in self.pool if isinstance(v, HiddenBundle)]
        value = hiddens[index % len(hiddens)] if index % 2 else self.pool[index % len(self.pool)]
        if mutation in ("none", "float16"):
            self._round_trip(value, mutation, form)
        elif form == "base64":
            broken = base64_damage(value, mutation)
            self._expect(False, lambda: wire.loads(broken), (MalformedBundle,))
            if isinstance(value, HiddenBundle):
                try:  # the structural reading: MalformedBundle, or a bundle its receiver refuses
                    carried = wire.loads_unchecked(broken)
                except MalformedBundle:
                    return
                self._expect(False, lambda: validate(carried), (MalformedBundle,))
        else:
            damaged, limit = frame_damage(value, index, mutation)
            self._expect(False, lambda: wire.loadb(damaged, max_bytes=limit), (MalformedBundle,))
            if mutation != "oversize" and isinstance(damaged, bytes):
                try:
                    wire.loads_unchecked(damaged, frame=True)
                except MalformedBundle:
                    pass

    def _round_trip(self, value: Any, mutation: str, form: str) -> None:
        self._count()
        dtype = "float16" if mutation == "float16" else "float32"
        bundle = isinstance(value, (TokenBundle, HiddenBundle, SampleBundle))
        if form == "frame":
            back = wire.loadb(wire.dumpb(value, dtype=dtype))
            assert not bundle or same(wire.loads_unchecked(wire.dumpb(value, dtype=dtype), frame=True), back)
        else:
            back = wire.loads(wire.dumps(value, hidden="base64", dtype=dtype))
            assert not bundle or same(wire.loads_unchecked(wire.dumps(value, hidden="base64", dtype=dtype)), back)
        if isinstance(value, HiddenBundle) and dtype == "float16":
            assert back.hidden.shape == value.array().shape and validate(back) is back
        else:
            assert same(back, value)

    @rule(code=st.sampled_from(sorted(ERROR_CODES)), sid=st.sampled_from([None, "s"]),
          epoch=st.sampled_from([None, 0, 9]), bad_field=st.booleans())
    def error(self, code: str, sid: Optional[str], epoch: Optional[int], bad_field: bool) -> None:
        """An error of a drawn code pickles, compares and names itself; an unknown field, or a
        missing one its code has, is refused."""
        cls = ERROR_CODES[code]
        extra: dict[str, Any] = {name: 3 for name in cls._extra}
        err = cls("message", session_id=sid, epoch=epoch, **extra)
        self._count()
        assert pickle.loads(pickle.dumps(err)) == err and err.code == code
        assert (err == "message") is False and hash(err) == hash(cls("x", **extra))
        assert cls.__name__ in repr(err) and isinstance(err, ShardError)
        self.pool.append(err)
        if bad_field:
            self._expect(False, lambda: cls("m", unknown=1, **extra))
            if cls._extra:
                self._expect(False, lambda: cls("m"))

    @rule(start=st.sampled_from([0, 2.5, -1, math.nan, "1", True]),
          step=st.sampled_from([0, 0.25, -0.5, math.inf, None]))
    def clock(self, start: Any, step: Any) -> None:
        """A virtual clock starts and sleeps by finite seconds >= 0 only, and never goes back."""
        clock = self._expect(seconds_ok(start), lambda: VirtualClock(start))
        if clock is None:
            return
        before = clock.now()
        self._expect(seconds_ok(step), lambda: clock.sleep(step))
        assert clock.now() >= before and "VirtualClock" in repr(clock)
        real = RealClock()
        t = real.now()
        real.sleep(0)
        assert real.now() >= t and repr(real) == "RealClock()"
