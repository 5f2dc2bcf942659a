"""The Surface machine: every way into the library, good input and bad, against a model.

The session machines build valid worlds and break the calls made in them;
this one breaks the world's construction and its transport.  Each rule draws
arguments from mixes of valid and invalid values, asks a model written from
the contract and its choices (``docs/reference/choices.md``) whether they are acceptable, and checks the
library agrees: a value when they are, a typed error (``ValueError`` /
``TypeError`` for constructors, ``MalformedBundle`` for the wire) when not.
Along the way it keeps a pool of values that must survive the wire exactly.
"""

from __future__ import annotations

import dataclasses
import json
import math
import pickle
import warnings
from typing import Any, Optional

import numpy as np
import xxhash
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule

from fakeshard import (
    Crash,
    Delay,
    DropResponse,
    EngineCrashed,
    FaultPlan,
    FaultRule,
    HiddenBundle,
    Malformed,
    MalformedBundle,
    MemoryPressure,
    OutOfMemory,
    Pipeline,
    RealClock,
    SampleBundle,
    ShardError,
    ShardSpec,
    StaleEpoch,
    TokenBundle,
    VirtualClock,
    validate,
    wire,
)
from fakeshard.errors import ERROR_CODES
from fakeshard.factory import FactoryError, load_factory
from fakeshard.faults import MALFORMED_KINDS, OPS
from fakeshard.feeder import Feeder
from fakeshard.pipeline import answer_problem
from fakeshard.testing.machines import MachineConfig
from fakeshard.testing.model import RuleCounters, well_typed
from fakeshard.testing.runner import damaged_checksum, same


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def wire_rows(value: Any) -> Any:
    """A JSON array as the wire's structural reading holds it: arrays of arrays as tuples of tuples."""
    return tuple(tuple(v) if isinstance(v, list) else v for v in value) if isinstance(value, list) else value


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# -- the model: which arguments the contract (and its written choices) accept -----------

def spec_ok(model_id: Any, n: Any, start: Any, end: Any, hidden: Any, vocab: Any) -> bool:
    return (isinstance(model_id, str) and model_id != "" and _is_int(n) and n >= 1
            and _is_int(hidden) and hidden >= 4 and _is_int(vocab) and vocab >= 2
            and _is_int(start) and _is_int(end) and 0 <= start < end <= n)


#: The edges of each of ``ShardSpec``'s bounds, one argument of ``("m", 4, 0, 4, 8, 64)`` moved to
#: either side; what ``spec_ok`` (the contract's reading) says of each is what is expected.
SPEC_EDGES = (("m", 4, 0, 4, 8, 2), ("m", 4, 0, 4, 8, 1), ("m", 4, 0, 4, 8, 64.0), ("m", 4, 0, 4, 8, True),
              ("m", 4, 0, 4, 4, 64), ("m", 4, 0, 4, 3, 64), ("m", 4, 0, 4, 8.0, 64),
              ("m", 1, 0, 1, 8, 64), ("m", 0, 0, 0, 8, 64), ("m", 4.0, 0, 4, 8, 64), ("m", True, 0, 1, 8, 64),
              ("m", 4, 2, 2, 8, 64), ("m", 4, 2, 3, 8, 64), ("m", 4, 0, 5, 8, 64), ("m", 4, -1, 4, 8, 64),
              ("m", 4, 3, 4, 8, 64), ("m", 4, 0, 4.0, 8, 64), ("", 4, 0, 4, 8, 64), (3, 4, 0, 4, 8, 64),
              (None, 4, 0, 4, 8, 64), (b"m", 4, 0, 4, 8, 64))


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


#: Ways to cut the surface machine's four-layer model into a pipeline's stages.
TILINGS = (((0, 4),), ((0, 2), (2, 4)), ((0, 1), (1, 4)), ((0, 3), (3, 4)), ((0, 1), (1, 2), (2, 4)),
           ((0, 1), (1, 3), (3, 4)))


#: Faults and rule windows the injector rule combines (op, session_id, nth, count, probability).
INJECTOR_FAULTS = (Delay(0.5), Delay(2), MemoryPressure(3), MemoryPressure(None), MemoryPressure(0), Malformed("nan"),
                   Malformed("epoch"), Crash(), DropResponse())
INJECTOR_WINDOWS = (("any", None, 1, 1, 1.0), ("any", None, 1, None, 1.0), ("prefill", None, 2, 2, 1.0),
                    ("decode", "a", 1, None, 1.0), ("any", "b", 3, 1, 1.0), ("any", None, 1, None, 0.5),
                    ("cancel", None, 1, 3, 0.25), ("any", None, 1, None, 0.0))

#: The wire section's kinds, by the type of value, and the keys of its bundles and errors.
WIRE_KINDS = {"TokenBundle": "token_bundle", "HiddenBundle": "hidden_bundle", "SampleBundle": "sample_bundle",
              "FaultPlan": "fault_plan", "FaultRule": "fault_rule", "ShardError": "error"}
_IDENTITY = {"kind", "contract", "session_id", "epoch"}
WIRE_KEYS = {"token_bundle": _IDENTITY | {"start_pos", "tokens"}, "sample_bundle": _IDENTITY | {"pos", "token"},
             "hidden_bundle": _IDENTITY | {"start_pos", "layer", "hidden", "checksum"},
             "error": _IDENTITY | {"code", "message"}}

FAULT_ARGS = {
    "delay": [0, 0.5, 3, -1, math.inf, math.nan, "1", True],
    "memory_pressure": [None, 0, 4, -2, 2.5, True],
    "malformed": list(MALFORMED_KINDS) + ["bitflip", 3],
    "crash": [None],
    "drop_response": [None],
}
#: A rule that meets a list of cases meets this share of them in one step (a short campaign meets
#: every case many times; a long one does not repeat them all in every step).
PARTS = 3
FRAME_MUTATIONS = ("none", "float16", "magic", "truncate", "trailing", "header_length", "header_json", "dtype",
                   "shape", "payload_nan", "base64_junk", "base64_length", "not_bytes", "oversize",
                   "header_length_signed")
MUTATIONS = ("none", "truncate", "drop_key", "extra_key", "object_value", "nan", "deep", "bad_utf8",
             "version", "kind", "not_text", "oversize", "oversize_bytes", "string_number", "huge_number",
             "null_value", "bool_value", "array", "bad_rule", "rule_not_object", "fault_not_object")


def _check_names_the_bundle(err: MalformedBundle, bundle: Any, what: str) -> None:
    """A refusal names the bundle's well-typed session id and epoch; otherwise each is the value or None."""
    _check_names(err, bundle.session_id, bundle.epoch, what)


def _check_names(err: ShardError, session_id: Any, epoch: Any, what: str) -> None:
    """An error names the call's well-typed session id and epoch; otherwise each is the value or None."""
    if well_typed(session_id, epoch):
        assert (err.session_id, err.epoch) == (session_id, epoch), \
            f"the refusal of {what} names session {err.session_id!r} epoch {err.epoch!r}, not {session_id!r} {epoch!r}"
    else:
        assert err.session_id in (None, session_id) and err.epoch in (None, epoch), (what, err)


def contract_checksum(session_id: Any, epoch: Any, start_pos: Any, layer: Any, hidden: Any) -> str:
    """The hidden checksum as the contract's section writes it (its layout, not the library's code)."""
    values = np.array(hidden, dtype=np.float64)
    rows, cols = values.shape if values.ndim == 2 else (0, 0)  # no rows: 0x0
    header = f"1\0{session_id}\0{epoch}\0{start_pos}\0{layer}\0{rows}x{cols}\0"
    data = header.encode("utf-8", "surrogatepass") + values.astype("<f4").tobytes()
    return xxhash.xxh3_64(data).hexdigest()


class _HalfEngine:
    """A factory result that lacks most of the engine surface."""

    def __init__(self, spec: Any, **kw: Any) -> None:
        self.spec = spec


def half_engine(spec: Any, **kw: Any) -> Any:
    return _HalfEngine(spec, **kw)


def gold_engine(spec: Any, **kw: Any) -> Any:
    """A complete engine claiming an evidence class the contract does not know."""
    from fakeshard import FakeShardEngine

    engine = FakeShardEngine(spec, **kw)
    engine.evidence_class = "gold"
    return engine


def _first_number_key(doc: dict[str, Any]) -> Optional[str]:
    for key in sorted(doc):
        if _is_number(doc[key]):
            return key
    return None


def _frame_parts(frame: bytes) -> tuple[dict[str, Any], bytes]:
    """A binary frame's header (as JSON) and payload."""
    size = int.from_bytes(frame[4:8], "little")
    return json.loads(frame[8:8 + size]), frame[8 + size:]


def _framed(head: Any, body: bytes = b"") -> bytes:
    """The frame of header ``head`` (a JSON object, or its bytes as they are) and payload ``body``."""
    text = head if isinstance(head, bytes) else json.dumps(head).encode()
    return b"FSB1" + len(text).to_bytes(4, "little") + text + body


def _objects(doc: Any, path: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    """Every JSON object in ``doc`` with its path (keys and indexes), ``doc`` itself first."""
    if isinstance(doc, dict):
        found = [(path, doc)]
        for key, item in doc.items():
            found += _objects(item, (*path, key))
        return found
    if isinstance(doc, list):
        return [found for i, item in enumerate(doc) for found in _objects(item, (*path, i))]
    return []


def key_twice(doc: Any, path: tuple[Any, ...], key: str, again: Any) -> str:
    """``doc`` as JSON text in which the object at ``path`` names ``key`` a second time, last,
    with the value ``again`` (which ``json.dumps`` of a dict cannot write)."""
    if not path:
        return json.dumps(doc)[:-1] + f", {json.dumps(key)}: {json.dumps(again)}}}"
    step, rest = path[0], path[1:]
    if isinstance(doc, dict):
        items = (f"{json.dumps(k)}: {key_twice(v, rest, key, again) if k == step else json.dumps(v)}"
                 for k, v in doc.items())
        return "{" + ", ".join(items) + "}"
    return "[" + ", ".join(key_twice(v, rest, key, again) if i == step else json.dumps(v)
                           for i, v in enumerate(doc)) + "]"


def _build_fault(kind: str, arg: Any) -> Any:
    return {"delay": lambda: Delay(arg), "memory_pressure": lambda: MemoryPressure(arg),
            "malformed": lambda: Malformed(arg), "crash": Crash, "drop_response": DropResponse}[kind]()


class SurfaceMachine(RuleBasedStateMachine):
    """Construction, transport and inspection of every public value."""

    machine_name = "surface"
    #: Each rule meets every case it has within a few steps, so a long campaign's examples past
    #: these repeat them (``ci``'s 500 run as 250; ``mutate``'s 25 stay 25).
    examples_cap = 250

    def __init__(self, config: MachineConfig) -> None:
        super().__init__()
        self.config = config
        self.pool: list[Any] = []
        config.runs += 1

    def _count(self) -> None:
        self.config.steps += 1
        if self.config.on_step is not None:
            self.config.on_step(self.config)

    def _expect(self, ok: bool, build: Any, errors: tuple[type, ...] = (ValueError, TypeError)) -> Any:
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
        spec = self._expect(spec_ok(model_id, n, start, end, hidden, vocab),
                            lambda: ShardSpec(model_id, n, start, end, hidden, vocab))
        # Every bound, each step: one argument of a right spec moved to either side of its edge.
        for args in SPEC_EDGES:
            self._expect(spec_ok(*args), lambda: ShardSpec(*args))
        if spec is None:
            return
        head, tail = spec.start_layer == 0, spec.end_layer == spec.n_layers
        assert spec.role.value == {(True, True): "full", (True, False): "head",
                                   (False, True): "tail", (False, False): "middle"}[(head, tail)]
        engine = self.config.factory(spec, seed=1)
        assert engine.spec == spec and engine.session("x") is None and engine.used_tokens == 0
        assert isinstance(repr(engine), str)
        feeder = Feeder(self.config.factory, spec, seed=1)
        history = [1, 0, 1]
        bundle = feeder.bundle("s", 0, 0, history, 3)
        out = engine.prefill(bundle)
        self.pool += [bundle, out]
        self._expect(False, lambda: feeder.bundle("s", 0, 2, history, 2))  # history too short
        if spec.start_layer == 0:
            self._expect(False, lambda: feeder.rows(history))  # a head takes tokens

    @rule(kind=st.sampled_from(sorted(FAULT_ARGS)), data=st.data(),
          op=st.sampled_from(["any", "prefill", "release", "explode", None]),
          session_id=st.sampled_from([None, "a", 3]), nth=st.sampled_from([1, 2, 0, True, 1.0]),
          count=st.sampled_from([1, None, 3, 0, 1.5]), p=st.sampled_from([1.0, 0.5, 0, 1.5, -0.1, True, "1"]),
          seed=st.sampled_from([0, 7, "7", 1.5]))
    def fault_rule(self, kind: str, data: st.DataObject, op: Any, session_id: Any, nth: Any, count: Any,
                   p: Any, seed: Any) -> None:
        arg = data.draw(st.sampled_from(FAULT_ARGS[kind]))
        fault_valid = fault_ok(kind, arg)
        fault = self._expect(fault_valid, lambda: _build_fault(kind, arg))
        target = fault if fault_valid else "not a fault"
        made = self._expect(rule_ok(fault_valid, op, session_id, nth, count, p),
                            lambda: FaultRule(target, op, session_id, nth, count, p))
        if made is None:
            return
        plan = self._expect(_is_int(seed), lambda: FaultPlan([made], seed))
        if plan is not None:
            self.pool += [made, plan]
        self._expect(False, lambda: FaultPlan(("not a rule",)))

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
        from fakeshard.faults import FaultInjector

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
        # The section's own example, met every step (drawn rules fire together only now and
        # then): two delays on one call add up, and so do two reserves.
        both = FaultInjector(FaultPlan((FaultRule(Delay(0.5)), FaultRule(MemoryPressure(3)), FaultRule(Delay(2)),
                                        FaultRule(MemoryPressure(3))))).draw("prefill", "a")
        assert (both.delay, both.reserve_tokens, both.fail_allocation) == (2.5, 6, False), both
        self._replace_faults()
        # A fired fault as the control port's log carries it: the fault record of a rule's JSON.
        for fault in faults:
            assert wire.fault_from_dict(json.loads(wire.dumps(FaultRule(fault)))["fault"]) == fault
        for junk in (3, [], {"type": "meltdown"}, {"type": "delay"}, {"type": "crash", "seconds": 1}):
            self._expect(False, lambda: wire.fault_from_dict(junk), (MalformedBundle,))
        # The edges of a rule's numbers: each is refused on the far side of its bound only.
        for build, ok in ((lambda: FaultRule(Crash(), probability=0), True),
                          (lambda: FaultRule(Crash(), probability=1), True),
                          (lambda: FaultRule(Crash(), probability=1.0000001), False),
                          (lambda: FaultRule(Crash(), probability=-1e-9), False),
                          (lambda: FaultRule(Crash(), probability=True), False),
                          (lambda: FaultRule(Crash(), nth=True), False),
                          (lambda: FaultRule(Crash(), nth=0), False), (lambda: FaultRule(Crash(), nth=0.5), False),
                          (lambda: FaultRule(Crash(), count=0), False), (lambda: FaultRule(Crash(), count=0.5), False),
                          (lambda: Delay(0), True), (lambda: Delay(1e-9), True), (lambda: Delay(-1e-9), False),
                          (lambda: Delay(True), False), (lambda: Delay("0"), False),
                          (lambda: MemoryPressure(0), True), (lambda: MemoryPressure(-1), False)):
            self._expect(ok, build)

    def _defaults(self) -> None:
        """The factory's defaults, as the contract writes its signature: ``seed=0``, and without a
        clock a ``Delay`` passes on the engine's own clock (the call answers as without it)."""
        spec = ShardSpec("surface-model", 4, 0, 4)
        bundle = TokenBundle("s", 0, 0, (1, 2))
        self._count()
        plain = self.config.factory(spec).prefill(bundle)
        assert plain == self.config.factory(spec, seed=0).prefill(bundle), "the default seed is not 0"
        delayed = self.config.factory(spec, faults=FaultPlan((FaultRule(Delay(1.0), op="prefill"),)))
        assert delayed.prefill(bundle) == plain

    def _capacity_edges(self) -> None:
        """``capacity_tokens`` at its edges, with a reserve: a ``MemoryPressure(2)`` leaves 2 of 4
        positions for the call, so 3 do not fit and 2 exactly do; a prefill at a newer epoch counts
        the older cache it replaces as free, so 2 fit again; a failed allocation holds nothing."""
        spec = ShardSpec("surface-model", 4, 0, 4)
        engine = self.config.factory(spec, capacity_tokens=4,
                                     faults=FaultPlan((FaultRule(MemoryPressure(2), op="prefill", count=None),)))
        self._count()
        self._expect(False, lambda: engine.prefill(TokenBundle("a", 0, 0, (1, 2, 3))), (OutOfMemory,))
        assert engine.used_tokens == 0 and engine.session("a") is None
        assert engine.prefill(TokenBundle("a", 0, 0, (1, 2))).pos == 2 and engine.used_tokens == 2
        assert engine.prefill(TokenBundle("a", 1, 0, (2, 1))).pos == 2 and engine.used_tokens == 2
        self._expect(False, lambda: engine.prefill(TokenBundle("b", 0, 0, (1,))), (OutOfMemory,))
        assert engine.used_tokens == 2 and engine.session("b") is None
        assert engine.decode(TokenBundle("a", 1, 2, (1,))).pos == 3 and engine.used_tokens == 3  # decode: no reserve

    def _replace_faults(self) -> None:
        """An engine that can swap its plan (as a served node's control port does: "replace the
        plan (fresh counters, generator and log)"): the new plan runs from its first call, ``None``
        runs none, and anything else is a ``TypeError`` that keeps the plan in force."""
        engine = self.config.factory(ShardSpec("surface-model", 4, 0, 4), faults=FaultPlan(
            (FaultRule(Crash(), op="prefill", nth=1, count=1),)))
        if not callable(getattr(engine, "replace_faults", None)):
            return
        self._count()
        first = TokenBundle("s", 0, 0, (1, 2))
        self._expect(False, lambda: engine.prefill(first), (EngineCrashed,))
        engine.restart()
        # Where the engine shows whether it is down (beyond the contract), it is a bool.
        assert getattr(engine, "crashed", False) is False
        engine.replace_faults(FaultPlan((FaultRule(Crash(), op="prefill", nth=1, count=1),)))
        self._expect(False, lambda: engine.prefill(first), (EngineCrashed,))  # fresh counters
        engine.restart()
        assert engine.prefill(first).pos == 2  # the window of the new plan has passed
        engine.replace_faults(FaultPlan((FaultRule(Crash(), op="decode"),)))
        for junk in (3, "crash", FaultRule(Crash()), [FaultRule(Crash())]):
            self._expect(False, lambda: engine.replace_faults(junk), (TypeError,))
        self._expect(False, lambda: engine.decode(TokenBundle("s", 0, 2, (1,))), (EngineCrashed,))
        engine.restart()
        engine.replace_faults(None)
        assert engine.prefill(first).pos == 2 and engine.decode(TokenBundle("s", 0, 2, (1,))).pos == 3

    @rule(ranges=st.lists(st.sampled_from([(0, 1), (0, 2), (1, 2), (1, 4), (2, 4), (3, 4), (0, 4), (2, 3)]),
                          max_size=3),
          cuts=st.sampled_from(TILINGS))
    def pipeline(self, ranges: list[tuple[int, int]], cuts: tuple[tuple[int, int], ...]) -> None:
        """Drawn ranges make a Pipeline exactly when they tile the model (``ValueError`` when
        not); then a pipeline over a drawn tiling, every step (a drawn list tiles only now and
        then), meets each rule of the contract's Pipeline row."""
        spec = ShardSpec("surface-model", 4, 0, 4)
        drawn = self._expect(tiles(ranges, 4), lambda: Pipeline(
            [self.config.factory(spec.with_layers(a, b)) for a, b in ranges]), (ValueError,))
        assert drawn is None or drawn.spec == spec
        self._count()
        pipe = Pipeline([self.config.factory(spec.with_layers(a, b)) for a, b in cuts])
        # The whole model's spec; no stage has failed yet.
        assert pipe.spec == spec and pipe.last_failed_stage is None
        assert isinstance(repr(pipe), str) and pipe.used_tokens == 0
        self._expect(False, lambda: pipe.generate("s", [1], 0))
        # generate runs at epoch 0 unless told, and leaves the session open: the prompt and every
        # new token but the last are cached, so the next decode feeds the last at
        # len(prompt) + max_new_tokens - 1.
        tokens = pipe.generate("s", [1, 0], 2)
        assert len(tokens) == 2 and pipe.used_tokens == 3 * len(cuts)
        assert pipe.decode("s", 0, 3, tokens[-1]).pos == 4 and pipe.used_tokens == 4 * len(cuts)
        pipe.cancel("s", 0)
        assert pipe.used_tokens == 0 and pipe.last_failed_stage is None
        # After a failed call, a right one leaves last_failed_stage None again.
        self._expect(False, lambda: pipe.release("s", -1), (MalformedBundle,))
        assert pipe.last_failed_stage == 0
        pipe.release("s", 0)
        assert pipe.last_failed_stage is None
        # What does not tile is refused with ValueError (the contract's Pipeline row).
        self._expect(False, lambda: Pipeline([]), (ValueError,))
        self._expect(False, lambda: Pipeline([object()]), (ValueError,))
        other = ShardSpec("other-model", 4, 2, 4)
        self._expect(False, lambda: Pipeline([self.config.factory(spec.with_layers(0, 2)),
                                              self.config.factory(other)]), (ValueError,))

    @rule(session_id=st.sampled_from(["s", "", 7, None]), epoch=st.sampled_from([0, -1, True, "1", 1.5, None]))
    def bad_calls(self, session_id: Any, epoch: Any) -> None:
        """Cancel and release with an ill-typed identity, on a fresh engine of the factory:
        ``MalformedBundle`` (the check after engine up), naming the call as the Errors table
        says, and nothing recorded: no tombstone, nothing held, so a prefill at epoch 0 after
        them is served."""
        if well_typed(session_id, epoch):
            return
        engine = self.config.factory(ShardSpec("surface-model", 4, 0, 4))
        for op in ("cancel", "release"):
            self._count()
            try:
                getattr(engine, op)(session_id, epoch)
            except MalformedBundle as err:
                _check_names(err, session_id, epoch, f"{op}({session_id!r}, {epoch!r})")
            else:
                raise AssertionError(f"{op}({session_id!r}, {epoch!r}) was not refused")
        assert engine.used_tokens == 0
        if isinstance(session_id, str) and session_id:
            assert engine.session(session_id) is None, f"a refused call left {engine.session(session_id)!r}"
            assert engine.prefill(TokenBundle(session_id, 0, 0, (1, 2))).pos == 2

    @rule(kind=st.sampled_from(MALFORMED_KINDS))
    def pipeline_answers(self, kind: str) -> None:
        """A pipeline judges each stage's answer against its request (the Faults section's
        ``Malformed`` row): a stage whose output breaks in the drawn way is refused with
        ``MalformedBundle`` naming the call, before anything is passed on, and ``last_failed_stage``
        names it; ``answer_problem``, the same judgement for any caller, finds each way an answer
        can differ from its request and nothing in a right one. Cancel reaches every stage and
        raises the first stage's error."""
        spec = ShardSpec("surface-model", 4, 0, 4)
        ranges = ((0, 1), (1, 3), (3, 4))
        hidden_kinds = ("checksum", "shape", "layer", "nan")
        where = [i for i in range(len(ranges)) if (kind in hidden_kinds and i < 2) or (kind == "token_range" and i == 2)
                 or kind in ("session", "epoch", "position")]
        for broken in where:
            plans = [FaultPlan((FaultRule(Malformed(kind), op="prefill", count=1),)) if i == broken else None
                     for i in range(len(ranges))]
            pipe = Pipeline([self.config.factory(spec.with_layers(a, b), faults=plans[i])
                             for i, (a, b) in enumerate(ranges)])
            self._count()
            try:
                pipe.prefill("s", 2, 0, [1, 2])
            except MalformedBundle as err:
                assert (err.session_id, err.epoch) == ("s", 2), err
                assert pipe.last_failed_stage == broken, (kind, broken, pipe.last_failed_stage)
            else:
                raise AssertionError(f"a pipeline passed on stage {broken}'s output broken by Malformed({kind!r})")
            for later in pipe.stages[broken + 1:]:
                assert later.used_tokens == 0, f"stage {broken}'s broken output reached a later stage"
        # A right run leaves last_failed_stage None; a stale cancel raises stage 0's StaleEpoch.
        pipe = Pipeline([self.config.factory(spec.with_layers(a, b)) for a, b in ranges])
        sample = pipe.prefill("s", 2, 0, [1, 2])
        assert pipe.last_failed_stage is None and sample.pos == 2 and pipe.used_tokens == 6
        try:
            pipe.cancel("s", 1)
        except StaleEpoch as err:
            assert (err.session_id, err.epoch) == ("s", 1) and pipe.last_failed_stage == 0, \
                f"a stale cancel raised {err!r} with last_failed_stage {pipe.last_failed_stage}, not stage 0's"
        else:
            raise AssertionError("a cancel at an older epoch than every stage has seen was not refused")
        assert pipe.used_tokens == 6  # a refused cancel changes nothing
        # generate gives exactly max_new_tokens tokens, an int >= 1.
        assert len(pipe.generate("g", [1, 2], 3)) == 3 and len(pipe.generate("h", [1], 1)) == 1
        for bad in (0, -1, True, 1.0, "2"):
            self._expect(False, lambda: pipe.generate("i", [1], bad))
        # A pipeline is real-model only if every stage is (docs/reference/choices.md, "a pipeline's evidence_class").
        stages = [self.config.factory(spec.with_layers(a, b)) for a, b in ranges]
        classes = [getattr(stage, "evidence_class", None) for stage in stages]
        assert Pipeline(stages).evidence_class == ("real-model" if set(classes) == {"real-model"} else "fixture")
        if set(classes) == {"fixture"}:
            claims = [gold_engine(stage.spec) for stage in stages]
            for claim in claims:
                claim.evidence_class = "real-model"
            assert Pipeline(claims).evidence_class == "real-model"
            assert Pipeline([stages[0]] + claims[1:]).evidence_class == "fixture"
            assert Pipeline(claims[:2] + [stages[2]]).evidence_class == "fixture"
        # answer_problem: a right answer has none; each difference from the request is one.
        request = TokenBundle("s", 2, 3, (1, 2))
        rows = [(0.5, 0.0, -0.5, 1.0, 0.25, 0.0, 0.0, 2.0)] * 2
        right = HiddenBundle.sealed("s", 2, 3, 1, rows)
        head = spec.with_layers(0, 1)
        assert answer_problem(head, request, 2, right, last=False, model=spec) is None
        assert answer_problem(spec.with_layers(3, 4), request, 2, SampleBundle("s", 2, 5, 7), last=True) is None
        damaged = dataclasses.replace(right, checksum=damaged_checksum(right.checksum))
        wrong = [(head, HiddenBundle.sealed("t", 2, 3, 1, rows), False),
                 (head, HiddenBundle.sealed("s", 1, 3, 1, rows), False),
                 (head, HiddenBundle.sealed("s", 2, 2, 1, rows), False),
                 (head, HiddenBundle.sealed("s", 2, 3, 1, rows[:1]), False),
                 (head, HiddenBundle.sealed("s", 2, 3, 2, rows), False), (head, damaged, False),
                 (head, HiddenBundle.sealed("s", 2, 3, 1, [r[:4] for r in rows]), False),
                 (head, SampleBundle("s", 2, 5, 7), False), (head, right, True),
                 (spec.with_layers(3, 4), SampleBundle("s", 2, 4, 7), True),
                 (spec.with_layers(3, 4), SampleBundle("s", 2, 5, spec.vocab_size), True),
                 (spec.with_layers(3, 4), SampleBundle("t", 2, 5, 7), True)]
        for stage, out, last in wrong:
            problem = answer_problem(stage, request, 2, out, last=last, model=spec)
            assert isinstance(problem, str) and problem, (stage, out, last, problem)

    @rule(index=st.integers(0, 50), part=st.integers(0, PARTS - 1))
    def send_text(self, index: int, part: int) -> None:
        """A pool value through the text wire: back exactly, and refused under damage (every
        kind of damage in :data:`PARTS` steps)."""
        for mutation in MUTATIONS[part::PARTS]:
            self._send_text(index, mutation)
        # A field the reader looks a name up by (kind, code, a fault's type, dtype) holding an
        # array or an object: MalformedBundle, like any value of the wrong JSON type.
        value = self.pool[index % len(self.pool)]
        doc = json.loads(wire.dumps(value, hidden="base64"))
        names = [(doc, k) for k, v in doc.items() if isinstance(v, str)]
        names += [(doc["hidden"], "dtype")] if isinstance(doc.get("hidden"), dict) else []
        names += [(r["fault"], "type") for r in doc.get("rules", [])]
        for where, key in names:
            for junk in ([], {}):
                kept = where[key]
                where[key] = junk
                broken = json.dumps(doc)
                where[key] = kept
                self._expect(False, lambda: wire.loads(broken), (MalformedBundle,))
                if key in ("kind", "code", "dtype") and isinstance(value, (TokenBundle, HiddenBundle, SampleBundle,
                                                                           ShardError)):
                    # The structural reading takes values as sent, but reads by these names.
                    self._expect(False, lambda: wire.loads_unchecked(broken), (MalformedBundle,))

    def _send_text(self, index: int, mutation: str) -> None:
        value = self.pool[index % len(self.pool)]
        text = wire.dumps(value)
        if mutation == "none":
            self._count()
            assert same(wire.loads(text), value) and same(wire.loads(text.encode()), value)
            return
        doc = json.loads(text)
        key = sorted(doc)[index % len(doc)]
        number_key = _first_number_key(doc) or "kind"
        plan_doc = json.loads(wire.dumps(FaultPlan((FaultRule(Crash()),))))
        broken: Any = {
            "oversize_bytes": lambda: text.encode(),
            "string_number": lambda: json.dumps({**doc, number_key: "1"}),
            "huge_number": lambda: json.dumps({**doc, number_key: 1}).replace(
                f'"{number_key}": 1', f'"{number_key}": 1{"0" * 400}'),
            "null_value": lambda: json.dumps({**doc, {"error": "message", "fault_plan": "seed",
                                                      "fault_rule": "nth"}.get(doc["kind"], "epoch"): None}),
            "bool_value": lambda: json.dumps({**doc, number_key: True}),
            "array": lambda: json.dumps([doc]),
            "bad_rule": lambda: json.dumps({**plan_doc, "rules": [{**plan_doc["rules"][0], "op": "explode"}]}),
            "rule_not_object": lambda: json.dumps({**plan_doc, "rules": [3]}),
            "fault_not_object": lambda: json.dumps(
                {**plan_doc, "rules": [{**plan_doc["rules"][0], "fault": "crash"}]}),
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
        }[mutation]()
        limit = len(text) - 1 if mutation.startswith("oversize") else wire.MAX_TEXT_CHARS
        self._expect(False, lambda: wire.loads(broken, max_chars=limit), (MalformedBundle,))

    @rule(index=st.integers(0, 50), part=st.integers(0, PARTS - 1))
    def send_binary(self, index: int, part: int) -> None:
        """The binary forms: a round trip gives the value back; any damage is MalformedBundle
        (every kind of damage in :data:`PARTS` steps)."""
        for mutation in FRAME_MUTATIONS[part::PARTS]:
            for form in ("frame", "base64"):
                self._send_binary(index, mutation, form)

    def _send_binary(self, index: int, mutation: str, form: str) -> None:
        hiddens = [v for v in self.pool if isinstance(v, HiddenBundle)]
        value = hiddens[index % len(hiddens)] if index % 2 else self.pool[index % len(self.pool)]
        hidden = isinstance(value, HiddenBundle)
        if mutation in ("none", "float16"):
            self._count()
            dtype = "float16" if mutation == "float16" else "float32"
            bundle = isinstance(value, (TokenBundle, HiddenBundle, SampleBundle))
            if form == "frame":
                back = wire.loadb(wire.dumpb(value, dtype=dtype))
                assert not bundle or same(wire.loads_unchecked(wire.dumpb(value, dtype=dtype), frame=True), back)
            else:
                back = wire.loads(wire.dumps(value, hidden="base64", dtype=dtype))
                assert not bundle or same(wire.loads_unchecked(wire.dumps(value, hidden="base64", dtype=dtype)), back)
            if hidden and dtype == "float16":
                assert back.hidden.shape == value.array().shape and validate(back) is back
            else:
                assert same(back, value)
            return
        if form == "base64":
            doc = json.loads(wire.dumps(value, hidden="base64"))
            if not hidden:  # no binary values to damage: a base64 object where none belongs
                doc = {**doc, "hidden": {"dtype": "float32", "shape": [1, 1], "base64": "AAAAAA=="}}
                self._expect(False, lambda: wire.loads(json.dumps(doc)), (MalformedBundle,))
                return
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
            broken: Any = json.dumps({**doc, "hidden": replaced})
            self._expect(False, lambda: wire.loads(broken), (MalformedBundle,))
            # The transport's structural reading: MalformedBundle, or a bundle its receiver refuses.
            try:
                carried = wire.loads_unchecked(broken)
            except MalformedBundle:
                return
            self._expect(False, lambda: validate(carried), (MalformedBundle,))
            return
        frame = wire.dumpb(value)
        header, payload = _frame_parts(frame)

        def rebuilt(head: dict, body: bytes = payload) -> bytes:
            return _framed(head, body)

        nan_payload = payload
        if hidden and payload:
            nan_payload = b"\x00\x00\xc0\x7f" + payload[4:]
        broken = {
            "magic": lambda: b"FSB0" + frame[4:],
            "truncate": lambda: frame[: max(0, len(frame) - 1 - index)],
            "trailing": lambda: frame + b"\x00" * (1 + index % 5),
            "header_length": lambda: frame[:4] + (len(frame) + index).to_bytes(4, "little") + frame[8:],
            # A length of 2**31 or more: read as the unsigned 32-bit number it is, it fits no frame;
            # read as signed, this one would pick out the right header and payload.
            "header_length_signed": lambda: frame[:4] + (2**32 - 8 - len(payload) if payload else 2**31).to_bytes(
                4, "little") + frame[8:],
            "header_json": lambda: frame[:8] + b"[" + frame[9:],
            "dtype": lambda: rebuilt({**header, "hidden": {**header["hidden"], "dtype": "int8"}}
                                     if hidden else {**header, "kind": "tensor"}),
            "shape": lambda: rebuilt({**header, "hidden": {**header["hidden"], "shape": [index + 2, 1]}}
                                     if hidden else header, payload + b"\x00" * 4),
            "payload_nan": lambda: rebuilt(header, nan_payload) if hidden else rebuilt({**header, "contract": "0"}),
            "base64_junk": lambda: rebuilt({**header, "hidden": {**header["hidden"], "base64": "AAAA"}}
                                           if hidden else [header]),
            "base64_length": lambda: rebuilt({**header, "hidden": [[0.0]]} if hidden else {}),
            "not_bytes": lambda: frame.decode("latin-1"),
            "oversize": lambda: frame,
        }[mutation]()
        limit = len(frame) - 1 if mutation == "oversize" else wire.MAX_FRAME_BYTES
        self._expect(False, lambda: wire.loadb(broken, max_bytes=limit), (MalformedBundle,))
        if mutation != "oversize" and isinstance(broken, bytes):
            try:  # the transport's reading is structural only, but never anything but MalformedBundle
                wire.loads_unchecked(broken, frame=True)
            except MalformedBundle:
                pass

    @rule(index=st.integers(0, 50))
    def reader_edges(self, index: int) -> None:
        """The edges the wire section draws for a reader, each met on both sides in one step.

        Integers are signed 64-bit (the schema's bounds), each of a binary shape's two numbers is
        below 2**31, base64 is RFC 4648 section 4 (its alphabet and padding only), a size limit
        admits a value of exactly its size, and the transport's reading gives an error back as the
        error and refuses an error frame with a payload.  Where the structure reads, the value
        stands or falls by its own rules: ``loads`` gives what the constructor and ``validate``
        give the same fields, ``loads_unchecked`` gives the fields as sent.
        """
        value = self.pool[index % len(self.pool)]
        bundle = isinstance(value, (TokenBundle, HiddenBundle, SampleBundle))
        text = wire.dumps(value)
        self._count()
        # A limit admits exactly its size, in characters for text and bytes for bytes and frames.
        frame = wire.dumpb(value)
        assert same(wire.loads(text, max_chars=len(text)), value)
        assert same(wire.loads(text.encode(), max_chars=len(text.encode())), value)
        assert same(wire.loadb(frame, max_bytes=len(frame)), value)
        self._expect(False, lambda: wire.loadb(frame, max_bytes=len(frame) - 1), (MalformedBundle,))
        if bundle or isinstance(value, ShardError):
            assert same(wire.loads_unchecked(text, max_bytes=len(text)), value)
            assert same(wire.loads_unchecked(text.encode()), value)
            assert same(wire.loads_unchecked(frame, frame=True, max_bytes=len(frame)), value)
            self._expect(False, lambda: wire.loads_unchecked(text, max_bytes=len(text) - 1), (MalformedBundle,))
            self._expect(False, lambda: wire.loads_unchecked(frame, frame=True, max_bytes=len(frame) - 1),
                         (MalformedBundle,))
        if isinstance(value, ShardError):
            self._expect(False, lambda: wire.loadb(frame + b"\x00"), (MalformedBundle,))
            self._expect(False, lambda: wire.loads_unchecked(frame + b"\x00", frame=True), (MalformedBundle,))
        # Integers: signed 64-bit, then the value's own rules.
        doc = json.loads(text)
        ints = sorted(k for k, v in doc.items() if _is_int(v))
        if ints and dataclasses.is_dataclass(value):
            key = ints[index % len(ints)]
            for number in (2**63 - 1, -(2**63), 2**63, -(2**63) - 1):
                edited = json.dumps({**doc, key: number})
                if not -(2**63) <= number < 2**63:
                    self._expect(False, lambda: wire.loads(edited), (MalformedBundle,))
                    if bundle:
                        self._expect(False, lambda: wire.loads_unchecked(edited), (MalformedBundle,))
                    continue
                try:
                    expected: Any = dataclasses.replace(value, **{key: number})
                    if bundle:
                        validate(expected)
                except (ValueError, TypeError, MalformedBundle):
                    expected = None
                if expected is None:
                    self._expect(False, lambda: wire.loads(edited), (MalformedBundle,))
                else:
                    assert same(wire.loads(edited), expected), (key, number)
                if bundle:
                    assert getattr(wire.loads_unchecked(edited), key) == number
        # An integer field's items are integers within 64 bits too (tokens), on both readings; a
        # hidden value is a number, not an integer field: a big integer literal among the rows
        # (or in rows of the wrong shape) is taken as sent by the transport's reading.
        lists = sorted(k for k, v in doc.items() if isinstance(v, list) and v and all(_is_int(x) for x in v))
        if bundle and lists:
            key = lists[0]
            for number in (2**63, -(2**63) - 1):
                edited = json.dumps({**doc, key: [*doc[key][:-1], number]})
                self._expect(False, lambda: wire.loads(edited), (MalformedBundle,))
                self._expect(False, lambda: wire.loads_unchecked(edited), (MalformedBundle,))
            edited = json.dumps({**doc, key: [*doc[key][:-1], 2**63 - 1]})
            assert getattr(wire.loads_unchecked(edited), key)[-1] == 2**63 - 1
        if isinstance(value, HiddenBundle) and isinstance(doc["hidden"], list):
            for hidden in ([[2**70] + doc["hidden"][0][1:]] + doc["hidden"][1:], [2**70]):
                edited = json.dumps({**doc, "hidden": hidden})
                assert wire.loads_unchecked(edited).hidden == wire_rows(hidden), hidden
        # An error object without one of its fields is refused, as any object missing a key, and
        # so is one with a key its code does not have (exact keys: `expected` and `got` belong to
        # cache_miss and position_mismatch only).
        if isinstance(value, ShardError):
            for key in sorted(doc):
                partial = json.dumps({k: v for k, v in doc.items() if k != key})
                self._expect(False, lambda: wire.loads(partial), (MalformedBundle,))
                self._expect(False, lambda: wire.loads_unchecked(partial), (MalformedBundle,))
            for key in ("note", "expected", "got"):
                if key not in doc:
                    more = json.dumps({**doc, key: 0})
                    self._expect(False, lambda: wire.loads(more), (MalformedBundle,))
                    self._expect(False, lambda: wire.loads_unchecked(more), (MalformedBundle,))
        if isinstance(value, FaultPlan) and value.rules:
            # A number is a JSON number: no string, no bool, in any field that holds one.
            for where in ("probability", "seconds"):
                for number in ("1", True):
                    rules = [dict(r) for r in doc["rules"]]
                    if where == "seconds" and rules[0]["fault"].get("type") == "delay":
                        rules[0]["fault"] = {**rules[0]["fault"], "seconds": number}
                    else:
                        rules[0]["probability"] = number
                    edited = json.dumps({**doc, "rules": rules})
                    self._expect(False, lambda: wire.loads(edited), (MalformedBundle,))
        # Every object has its kind and the contract's version; a bundle's and an error's keys are
        # exactly the wire section's.
        assert doc.get("contract") == "1" and doc.get("kind") == WIRE_KINDS[type(value).__name__ if not isinstance(
            value, ShardError) else "ShardError"], doc
        keys = WIRE_KEYS.get(doc["kind"])
        if keys is not None:
            extra = {"expected", "got"} if doc["kind"] == "error" and doc["code"] in ("cache_miss",
                                                                                    "position_mismatch") else set()
            assert set(doc) == keys | extra, (sorted(doc), sorted(keys | extra))
        self._repeated_keys(value, index, frame)
        if isinstance(value, TokenBundle):
            # A frame's header may be 1 MiB, not a byte more (JSON's whitespace fills it here).
            head = json.dumps(doc).encode()
            for size, ok in ((2**20, True), (2**20 + 1, False)):
                framed = _framed(head + b" " * (size - len(head)))
                if ok:
                    assert same(wire.loadb(framed), value)
                else:
                    self._expect(False, lambda: wire.loadb(framed), (MalformedBundle,))
        if not isinstance(value, HiddenBundle):
            return
        # float16: the values rounded to binary16 and resealed over them; a checksum that did not
        # match its values is kept, so the damage stays visible.
        half = value.array().astype(np.float16).astype(np.float32)
        resealed = contract_checksum(value.session_id, value.epoch, value.start_pos, value.layer, half)
        for back in (wire.loadb(wire.dumpb(value, dtype="float16")),
                     wire.loads(wire.dumps(value, hidden="base64", dtype="float16"))):
            assert np.array_equal(back.array(), half) and back.checksum == resealed, (back, resealed)
        damaged = dataclasses.replace(value, checksum=damaged_checksum(value.checksum))
        for dtype in ("float32", "float16"):
            frame_sent, text_sent = wire.dumpb(damaged, dtype=dtype), wire.dumps(damaged, hidden="base64", dtype=dtype)
            self._expect(False, lambda: wire.loadb(frame_sent), (MalformedBundle,))
            self._expect(False, lambda: wire.loads(text_sent), (MalformedBundle,))
            assert wire.loads_unchecked(frame_sent, frame=True).checksum == damaged.checksum
            assert wire.loads_unchecked(text_sent).checksum == damaged.checksum
        # NaN: the strict reader refuses it; the transport's reading carries it to the receiver.
        nan_text = json.dumps({**doc, "hidden": [[math.nan] + doc["hidden"][0][1:]] + doc["hidden"][1:]})
        self._expect(False, lambda: wire.loads(nan_text), (MalformedBundle,))
        assert math.isnan(wire.loads_unchecked(nan_text).hidden[0][0])
        # Base64: the alphabet and the padding, nothing else.
        doc = json.loads(wire.dumps(value, hidden="base64"))
        code = doc["hidden"]["base64"]
        cut = (index % (len(code) // 4)) * 4 + 2  # inside a quantum, where a lenient reader skips
        for damaged in (code[:cut] + "\n" + code[cut:], code[:cut] + "*" + code[cut:], code + "AAAA",
                        code.rstrip("=") if code.endswith("=") else code + "="):
            broken = json.dumps({**doc, "hidden": {**doc["hidden"], "base64": damaged}})
            self._expect(False, lambda: wire.loads(broken), (MalformedBundle,))
            self._expect(False, lambda: wire.loads_unchecked(broken), (MalformedBundle,))
        # A binary shape's numbers are each below 2**31; a shape of no values reads as sent.
        header, _ = _frame_parts(frame)
        for shape in ([2**31 - 1, 0], [0, 2**31 - 1], [0, 0], [2**31, 0], [0, 2**31]):
            empty = _framed({**header, "hidden": {**header["hidden"], "shape": shape}})
            self._expect(False, lambda: wire.loadb(empty), (MalformedBundle,))  # no row holds a value
            if max(shape) < 2**31:
                assert wire.loads_unchecked(empty, frame=True).array().shape == tuple(shape)
            else:
                self._expect(False, lambda: wire.loads_unchecked(empty, frame=True), (MalformedBundle,))

    def _repeated_keys(self, value: Any, index: int, frame: bytes) -> None:
        """Exact keys: an object that names a key twice is refused by every reader, at any depth
        (a bundle, a base64 hidden object, a plan's rule and its fault, ``frame``'s header; and
        ``wire.read_json``, the HTTP API's and a topology file's reader), whether the two values
        agree or not; a reader that kept either one would read what a reader in
        another language may read differently."""
        bundle = isinstance(value, (TokenBundle, HiddenBundle, SampleBundle))
        clean = json.loads(wire.dumps(value, hidden="base64"))
        sent: list[tuple[dict[str, Any], Optional[bytes]]] = [(clean, None)]
        if bundle:  # the frame's header, before the payload the value has
            sent.append(_frame_parts(frame))
        clean_text = json.dumps(clean)
        for read in (clean_text, clean_text.encode()):  # the HTTP API's and topology's reader
            assert wire.read_json(read) == clean
        for doc, payload in sent:
            for path, where in _objects(doc):
                if not where:  # an empty object has no key to repeat
                    continue
                key = sorted(where)[index % len(where)]
                for again in (where[key], None):
                    text = key_twice(doc, path, key, again)
                    if payload is not None:
                        broken = _framed(text.encode(), payload)
                        self._expect(False, lambda: wire.loadb(broken), (MalformedBundle,))
                        self._expect(False, lambda: wire.loads_unchecked(broken, frame=True), (MalformedBundle,))
                        continue
                    self._expect(False, lambda: wire.loads(text), (MalformedBundle,))
                    self._expect(False, lambda: wire.read_json(text), (wire.RepeatedKey,))
                    if bundle or isinstance(value, ShardError):
                        self._expect(False, lambda: wire.loads_unchecked(text), (MalformedBundle,))

    BINARY_EDGES = ("dumps_type", "dumps_form", "dumps_dtype", "junk_binary", "ragged_binary", "cube_rows",
                    "cube_binary", "compare", "junk_array", "loadb_type", "loadb_bytearray", "unchecked_types",
                    "unchecked_fields", "unchecked_kind", "unchecked_text", "unchecked_deep", "unchecked_error",
                    "unchecked_oversize", "none_array", "text_array", "bool_array", "none_binary", "bool_binary",
                    "dumps_dtype_list", "no_warnings", "numpy_rows", "array_row_binary", "range_row_base64")

    @rule(part=st.integers(0, PARTS - 1))
    def binary_edges(self, part: int) -> None:
        """Misuse of the data plane's API (every case in :data:`PARTS` steps)."""
        for what in self.BINARY_EDGES[part::PARTS]:
            self._binary_edge(what)

    def _binary_edge(self, what: str) -> None:
        """Misuse of the data plane's API: each a typed error, or an answer the contract allows."""
        sealed = HiddenBundle.sealed("s", 0, 0, 1, np.array([[0.5, 0.25, 0.0, -0.5]], dtype=np.float32))
        junk = HiddenBundle("s", 0, 0, 1, (("x", None),), sealed.checksum)
        cube = HiddenBundle("s", 0, 0, 1, np.zeros((1, 2, 2), dtype=np.float32), sealed.checksum)
        token_text = wire.dumps(TokenBundle("s", 0, 0, (1,)))
        if what == "compare":
            self._count()
            rows = HiddenBundle("s", 0, 0, 1, sealed.rows(), sealed.checksum)
            assert sealed == rows and sealed != junk and junk != sealed and (sealed == "s") is False
            assert cube.rows() is cube.hidden and rows.array().dtype == np.float32
            assert rows.rows() is rows.hidden and hash(rows) == hash(sealed)
            assert sealed != HiddenBundle.sealed("s", 1, 0, 1, sealed.hidden)
            assert HiddenBundle.sealed("s", 0, 0, 1, []).checksum == HiddenBundle.sealed("s", 0, 0, 1, ()).checksum
            return
        if what == "cube_rows":
            self._count()
            assert json.loads(wire.dumps(cube))["hidden"] == [[[0.0, 0.0], [0.0, 0.0]]]
            return
        if what == "loadb_bytearray":
            self._count()
            assert wire.loadb(bytearray(wire.dumpb(sealed))) == sealed
            return
        if what == "junk_array":
            # array() converts numbers only, and its refusal names the bundle it came from.
            self._count()
            try:
                junk.array()
            except MalformedBundle as exc:
                assert (exc.session_id, exc.epoch) == ("s", 0), (exc.session_id, exc.epoch)
            else:
                raise AssertionError("array() of rows holding a str and None answered")
            return
        if what == "numpy_rows":
            # numpy's float64 values are floats: rows of them convert and travel as plain ones do.
            plain = ((0.5, 0.25), (-1.0, 2.0))
            rows = tuple(tuple(map(np.float64, row)) for row in plain)
            self._count()
            numpy_sealed = HiddenBundle.sealed("s", 0, 0, 1, rows)
            assert numpy_sealed.array().tolist() == [list(row) for row in plain]
            assert wire.loadb(wire.dumpb(numpy_sealed)).array().tolist() == [list(row) for row in plain]
            assert numpy_sealed == HiddenBundle.sealed("s", 0, 0, 1, np.array(plain, dtype=np.float32))
            return
        if what == "no_warnings":
            # A value beyond a narrower float's range becomes inf, as any cast makes it, without a
            # warning (a warning is an error where warnings are errors): float64 beyond float32
            # in the checksum, float32 beyond float16 on the binary wire.
            self._count()
            wide = np.array([[1e39, 0.5, 0.0, -1e39]])
            loud = HiddenBundle.sealed("s", 0, 0, 1, np.array([[7e4, 0.5, 0.0, -7e4]], dtype=np.float32))
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                assert HiddenBundle.sealed("s", 0, 0, 1, wide).checksum == contract_checksum(
                    "s", 0, 0, 1, np.array([[np.inf, 0.5, 0.0, -np.inf]], dtype=np.float32))
                for form in (lambda: wire.loads_unchecked(wire.dumpb(loud, dtype="float16"), frame=True),
                             lambda: wire.loads_unchecked(wire.dumps(loud, hidden="base64", dtype="float16"))):
                    assert np.isinf(form().array()[0, [0, 3]]).all()
            return
        failing = {
            "dumps_type": (lambda: wire.dumps(object()), (TypeError,)),
            "dumps_form": (lambda: wire.dumps(sealed, hidden="hex"), (ValueError,)),
            "dumps_dtype": (lambda: wire.dumpb(sealed, dtype="float64"), (ValueError,)),
            "junk_binary": (lambda: wire.dumpb(junk), (TypeError,)),
            "ragged_binary": (lambda: wire.dumps(HiddenBundle("s", 0, 0, 1, ((1.0,), (1.0, 2.0)), "0"),
                                                 hidden="base64"), (TypeError,)),
            "cube_binary": (lambda: wire.dumpb(cube), (TypeError,)),
            # Rows of what is no number have no array and no binary form (numpy alone would read
            # None as NaN, "1.5" as 1.5, True as 1.0).
            "none_array": (lambda: HiddenBundle("s", 0, 0, 1, ((None, 0.5),), "0").array(), (MalformedBundle,)),
            "text_array": (lambda: HiddenBundle("s", 0, 0, 1, (("1.5", 0.5),), "0").array(), (MalformedBundle,)),
            "bool_array": (lambda: HiddenBundle("s", 0, 0, 1, ((0.5, True),), "0").array(), (MalformedBundle,)),
            "none_binary": (lambda: wire.dumpb(HiddenBundle.sealed("s", 0, 0, 1, ((None, 0.5),))), (TypeError,)),
            "bool_binary": (lambda: wire.dumps(HiddenBundle.sealed("s", 0, 0, 1, ((0.5, True),)), hidden="base64"),
                            (TypeError,)),
            "dumps_dtype_list": (lambda: wire.dumpb(sealed, dtype=["float32"]), (ValueError,)),
            # A row held as an array or a range, which validate refuses, has no binary form (numpy
            # would read it as a row of floats, and it would arrive as a valid bundle).
            "array_row_binary": (lambda: wire.dumpb(HiddenBundle("s", 0, 0, 1, tuple(sealed.array()), sealed.checksum)),
                                 (TypeError,)),
            "range_row_base64": (lambda: wire.dumps(HiddenBundle("s", 0, 0, 1, (range(4),), "0" * 16),
                                                    hidden="base64"), (TypeError,)),
            "loadb_type": (lambda: wire.loadb("FSB1"), (MalformedBundle,)),
            "unchecked_types": (lambda: wire.loads_unchecked(5), (MalformedBundle,)),
            "unchecked_fields": (lambda: wire.loads_unchecked(token_text.replace('"epoch"', '"era"')),
                                 (MalformedBundle,)),
            "unchecked_kind": (lambda: wire.loads_unchecked(wire.dumpb(FaultPlan()), frame=True),
                               (MalformedBundle,)),
            "unchecked_text": (lambda: wire.loads_unchecked("[1]"), (MalformedBundle,)),
            "unchecked_deep": (lambda: wire.loads_unchecked("[" * 5000 + "]" * 5000), (MalformedBundle,)),
            "unchecked_error": (lambda: wire.loads_unchecked(wire.dumpb(ERROR_CODES["cancelled"]("m")) + b"x",
                                                             frame=True), (MalformedBundle,)),
            "unchecked_oversize": (lambda: wire.loads_unchecked(token_text, max_bytes=5), (MalformedBundle,)),
        }
        build, errors = failing[what]
        self._expect(False, build, errors)

    @rule(session_id=st.sampled_from(["s", "模型-ü", "s\udc80", "", 3]),
          epoch=st.sampled_from([0, 5, -1, True, "1"]))
    def bundle_rules(self, session_id: Any, epoch: Any) -> None:
        """Every rule ``validate`` holds a bundle to, met on both sides in each step.

        The cases come from the contract's Names and Session rules: positions, tokens within
        ``0..vocab_size-1``, a hidden bundle's layer a boundary inside the model, its values
        finite floats of the spec's width, as rows or a 2-D float array, sealed by the
        checksum the contract defines (computed here from its layout, :func:`contract_checksum`).
        A refusal is ``MalformedBundle`` naming the bundle's session id and epoch where they
        are well-typed (the Errors table).  Each step meets every case, so a short campaign
        checks them all; the drawn identity decides which side a case must land on.
        """
        spec = ShardSpec("surface-model", 4, 0, 4, hidden_size=4, vocab_size=64)
        wide = ShardSpec("surface-model", 4, 0, 4, hidden_size=8, vocab_size=64)
        well = well_typed(session_id, epoch)
        row = (0.5, -0.25, 0.0, 1.0)
        f32 = np.array([row], dtype=np.float32)

        def hidden(rows: Any = (row,), layer: int = 1, checksum: Any = None, start: Any = 0) -> HiddenBundle:
            if checksum is None:
                checksum = contract_checksum(session_id, epoch, start, layer, rows)
            return HiddenBundle(session_id, epoch, start, layer, rows, checksum)

        def tokens(values: Any, start: Any = 0, contract: str = "1") -> TokenBundle:
            return TokenBundle(session_id, epoch, start, values, contract)

        def sample(pos: Any, token: Any) -> SampleBundle:
            return SampleBundle(session_id, epoch, pos, token)

        cases: list[tuple[str, Any, Optional[ShardSpec], bool]] = [
            ("tokens", tokens((0, 63)), spec, True),
            ("tokens at a later position", tokens((1,), start=3), spec, True),
            ("no tokens", tokens(()), None, False),
            ("a token at vocab_size", tokens((1, 64)), spec, False),
            ("a token at vocab_size, no spec", tokens((1, 64)), None, True),
            ("a negative token", tokens((-1,)), None, False),
            ("a bool token", tokens((True,)), None, False),
            ("a float token", tokens((1.0,)), None, False),
            ("a negative start_pos", tokens((1,), start=-1), None, False),
            ("a bool start_pos", tokens((1,), start=True), None, False),
            ("another contract", tokens((1,), contract="2"), None, False),
            ("rows", hidden(), spec, True),
            ("rows into the last layer", hidden(layer=3), spec, True),
            ("a layer at n_layers", hidden(layer=4), spec, False),
            ("a layer at n_layers, no spec", hidden(layer=4), None, True),
            ("layer 0", hidden(layer=0), None, False),
            ("rows of one value, no spec", hidden(rows=((0.5,), (1.0,))), None, True),
            ("rows of one value", hidden(rows=((0.5,), (1.0,))), spec, False),
            ("rows wider than the spec", hidden(rows=(row + row,)), spec, False),
            ("no rows", hidden(rows=()), None, False),
            ("an empty row", hidden(rows=((),)), None, False),
            ("ragged rows", HiddenBundle.sealed(session_id, epoch, 0, 1, (row, row[:3])), None, False),
            ("NaN", hidden(rows=((math.nan,) + row[1:],)), None, False),
            ("infinity", hidden(rows=(row[:3] + (-math.inf,),)), None, False),
            ("an int beyond float64", hidden(rows=((10**400,) + row[1:],), checksum="0" * 16), None, False),
            ("a wrong checksum", hidden(checksum="0" * 16), None, False),
            ("a checksum of another layer", hidden(checksum=contract_checksum(session_id, epoch, 0, 2, (row,))),
             None, False),
            ("a checksum not a str", hidden(checksum=12), None, False),
            ("a float32 array", hidden(rows=f32), spec, True),
            ("a float64 array", hidden(rows=f32.astype(np.float64)), spec, True),
            ("an int array", hidden(rows=np.array([[1, 2, 3, 4]]), checksum="0" * 16), None, False),
            ("a 1-D array", hidden(rows=f32[0], checksum="0" * 16), None, False),
            ("a 3-D array", hidden(rows=f32.reshape(1, 2, 2), checksum="0" * 16), None, False),
            ("an array of no rows", hidden(rows=np.zeros((0, 4), dtype=np.float32)), None, False),
            ("an array of empty rows", hidden(rows=np.zeros((1, 0), dtype=np.float32)), None, False),
            ("an array holding NaN", hidden(rows=np.array([[0.5, np.nan, 0.0, 1.0]], dtype=np.float32)),
             None, False),
            ("an array wider than the spec", hidden(rows=np.zeros((1, 5), dtype=np.float32)), spec, False),
            ("an array of nothing but NaN", hidden(rows=np.full((2, 4), np.nan, dtype=np.float32)), None, False),
            ("rows of numpy float64 values", hidden(rows=(tuple(np.float64(v) for v in row),)), spec, True),
            ("rows of numpy float64 values, one NaN", hidden(rows=((np.float64(0.5), np.float64(math.nan), 0.0, 1.0),)),
             None, False),
            ("a sample", sample(1, 63), spec, True),
            ("a sample token at vocab_size", sample(1, 64), spec, False),
            ("a sample token at vocab_size, no spec", sample(1, 64), None, True),
            ("a sample at pos 0", sample(0, 1), None, False),
            ("a negative sample token", sample(1, -1), None, False),
            ("a bool sample pos", sample(True, 1), None, False),
        ]
        for what, bundle, against, ok in cases:
            self._count()
            if ok and well:
                assert validate(bundle, against) is bundle, what
                continue
            try:
                validate(bundle, against)
            except MalformedBundle as err:
                _check_names_the_bundle(err, bundle, what)
            else:
                raise AssertionError(f"validate accepted what the contract refuses ({what}): {bundle!r}")
        for value in (None, 3, "bundle", {"session_id": "s"}, spec):
            self._expect(False, lambda: validate(value, spec), (MalformedBundle,))
        self._expect(False, lambda: HiddenBundle.sealed("s", 0, 0, 1, [("x", None)]), (MalformedBundle,))
        # The frame of the contract's first test vector, byte for byte (its compact header).
        header = (b'{"kind":"hidden_bundle","contract":"1","session_id":"s1","epoch":0,"start_pos":0,"layer":1,'
                  b'"hidden":{"dtype":"float32","shape":[1,4]},"checksum":"312b2ef2fb97af6d"}')
        assert wire.dumpb(HiddenBundle.sealed("s1", 0, 0, 1, [row])) == \
            _framed(header, np.array([row], dtype="<f4").tobytes())
        if not well:
            return
        # Lists are held as tuples; rows, an array and a float64 array of the same float32 values
        # are equal and share the checksum, and a bundle's values are frozen.
        assert tokens([1, 2]).tokens == (1, 2) and validate(tokens([1, 2]), spec).tokens == (1, 2)
        listed = hidden(rows=[list(row)])
        assert listed.hidden == (row,) and listed == hidden() == hidden(rows=f32) == hidden(rows=f32.astype(np.float64))
        other = hidden(rows=((0.5, -0.25, 0.0, 2.0),), checksum=hidden().checksum)
        assert other != hidden() and hidden() != other and other != hidden(rows=f32) and hidden(rows=f32) != other
        for sealed_rows in ([row], f32, f32.astype(np.float64), []):
            # The drawn identity, and in every step the ids whose UTF-8 is an edge of the header's
            # encoding (a lone surrogate, which only `surrogatepass` encodes; characters beyond ASCII).
            for sid in (session_id, "s\udc80", "模型-ü"):
                sealed = HiddenBundle.sealed(sid, epoch, 0, 1, sealed_rows)
                assert sealed.checksum == contract_checksum(sid, epoch, 0, 1, sealed_rows), (sid, sealed_rows)
        # sealed holds rows (tuples or lists; a row given as an array) as rows of Python numbers,
        # a 2-D array as an array: each a valid bundle equal to the one of plain rows.
        for given in ([row], [list(row)], list(f32), list(f32.astype(np.float16)), f32, f32.astype(np.float64)):
            sealed = HiddenBundle.sealed(session_id, epoch, 0, 1, given)
            shown = f"HiddenBundle.sealed of {type(given).__name__} rows {given!r}"
            try:
                assert validate(sealed, spec) is sealed and sealed == hidden(), shown
            except MalformedBundle as err:
                raise AssertionError(f"{shown} is refused: {err}") from None
            if isinstance(given, np.ndarray):
                assert isinstance(sealed.hidden, np.ndarray), shown
            else:
                assert all(type(v) is float for r in sealed.hidden for v in r) and \
                    isinstance(sealed.hidden, tuple) and all(isinstance(r, tuple) for r in sealed.hidden), shown
        assert hidden(rows=()).array().shape == (0, 0)  # the checksum's 0x0: no rows
        writable = f32.copy()
        held = hidden(rows=writable)
        writable[0, 0] = 9.0
        assert held.rows() == (row,) and not held.hidden.flags.writeable
        # Frozen means nothing can write to it: a read-only view of writable memory is copied
        # too; an array read-only all the way down (as a frame's payload is) is held as it is,
        # not copied (the data plane's memory speed).
        under = f32.copy()
        view = under.view()
        view.flags.writeable = False
        viewed = hidden(rows=view)
        under[0, 0] = 9.0
        assert viewed.rows() == (row,), "a read-only view of writable memory was held, not copied"
        payload = np.frombuffer(f32.tobytes(), dtype=np.float32).reshape(1, 4)
        owned = f32.copy()
        owned.flags.writeable = False
        for kept in (payload, owned):
            assert hidden(rows=kept).hidden is kept, "a read-only array was copied"
        # Rows of ints are numbers too: their array is float32.
        ints = hidden(rows=((1, 0, 2, -1),))
        assert validate(ints, spec) is ints and ints.array().dtype == np.float32
        assert ints.array().tolist() == [[1.0, 0.0, 2.0, -1.0]]
        for bundle in (held, hidden()):
            out = bundle.array()
            assert out.dtype == np.float32 and not out.flags.writeable and out.tolist() == [list(row)]
        # A bundle found valid for one width is not valid for another.
        once = hidden()
        assert validate(once, spec) is once and validate(once) is once
        self._expect(False, lambda: validate(once, wide), (MalformedBundle,))

    @rule(code=st.sampled_from(sorted(ERROR_CODES)), sid=st.sampled_from([None, "s"]),
          epoch=st.sampled_from([None, 0, 9]), bad_field=st.booleans())
    def error(self, code: str, sid: Optional[str], epoch: Optional[int], bad_field: bool) -> None:
        cls = ERROR_CODES[code]
        extra = {name: 3 for name in cls._extra}
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

    @rule(name=st.sampled_from(["fakeshard:FakeShardEngine", "fakeshard", "no_such_module:x",
                                "fakeshard:NoSuch", "fakeshard:ShardSpec", "fakeshard:__version__",
                                "fakeshard:Pipeline"]),
          capacity=st.sampled_from([None, 0, 5, -1, "5", True]),
          clock=st.sampled_from(["none", "virtual", "object"]),
          faults=st.sampled_from(["none", "plan", "list"]))
    def engine_arguments(self, name: str, capacity: Any, clock: str, faults: str) -> None:
        self._capacity_edges()
        self._defaults()
        self._expect(name == "fakeshard:FakeShardEngine", lambda: load_factory(name), (FactoryError,))
        self._expect(False, lambda: load_factory("fakeshard.testing.surface:half_engine"), (FactoryError,))
        self._expect(False, lambda: load_factory("fakeshard.testing.surface:gold_engine"), (FactoryError,))
        ok = (capacity is None or (_is_int(capacity) and capacity >= 0)) and clock != "object" \
            and faults != "list"
        spec = ShardSpec("surface-model", 2, 0, 2)
        chosen_clock = {"none": None, "virtual": VirtualClock(), "object": object()}[clock]
        chosen_faults = {"none": None, "plan": FaultPlan(), "list": [FaultRule(Crash())]}[faults]

        def build() -> Any:
            return self.config.factory(spec, capacity_tokens=capacity, clock=chosen_clock, faults=chosen_faults)

        if not self.config.fixture_choices:
            # How a factory refuses bad arguments is its own choice; the contract
            # fixes only what an engine built from good ones reports.
            if ok:
                self._count()
                assert build().capacity_tokens == capacity
            return
        engine = self._expect(ok, build)
        if engine is not None:
            assert engine.capacity_tokens == capacity
            # Inspection beyond the contract, where the engine offers it, must be consistent.
            if hasattr(engine, "session_ids"):
                assert engine.session_ids() == () and engine.crashed is False
                assert engine.fault_plan == (chosen_faults or FaultPlan()) and engine.fault_log == ()
        # Every capacity edge in each step: None or an int >= 0, nothing else.
        for each in (None, 0, 1, 5, -1, "5", True, 2.0):
            made = self._expect(each is None or (_is_int(each) and each >= 0),
                                lambda: self.config.factory(spec, capacity_tokens=each))
            assert made is None or made.capacity_tokens == each
        self._expect(False, lambda: self.config.factory({"model_id": "m"}))
        self._expect(False, lambda: self.config.factory(spec, seed="1"))
