"""The step interpreter: every machine rule and every replayed trace goes through here.

A step is a plain dict (JSON in a trace).  :class:`EngineRunner` builds the
engine under test from a factory, applies each step to it and to the
reference model, compares results (exception types and fields included) and
checks the invariants, recording everything in a :class:`Trace`.  The engine
is touched only through the contract's public surface.
"""

from __future__ import annotations

import array
import dataclasses
import itertools
import json
import math
from typing import Any, Callable, Optional, Sequence

import numpy as np

from fakeshard import (
    FaultPlan,
    HiddenBundle,
    SampleBundle,
    ShardError,
    ShardSpec,
    TokenBundle,
    VirtualClock,
    validate,
    wire,
)
from fakeshard._factory import makes_fixture_choices
from fakeshard._judge import Judge
from fakeshard._layer import fault_kinds_of, without_unapplied
from fakeshard.testing import _probes as probes
from fakeshard.testing._damage import break_input
from fakeshard.testing._lengths import tokens_of
from fakeshard.testing._model import OK, Expected, Model, Oracle, ReferenceFailed
from fakeshard.testing._reference_coordinator import LINK_FORMS, across
from fakeshard.testing._trace import Trace, git_commit, hypothesis_version

HIDDEN_KINDS = frozenset({"checksum", "shape", "layer", "nan", "session", "epoch", "position"})
SAMPLE_KINDS = frozenset({"token_range", "session", "epoch", "position"})

class Divergence(AssertionError):
    """The engine did something the contract (the model) says it must not."""


class InvalidStep(Exception):
    """A step the machine would never take (e.g. restart of an engine that is up).

    Replay refuses it, so reducing a trace never produces a story outside the
    contract's ground.
    """


def summarize(value: Any) -> dict[str, Any]:
    """A JSON-able summary of a call's result, for traces and tables."""
    if isinstance(value, ShardError):
        return {"outcome": value.code, **{k: v for k, v in value.fields().items() if v is not None}}
    if isinstance(value, BaseException):
        return {"outcome": "exception", "type": type(value).__name__, "message": str(value)[:200]}
    if isinstance(value, SampleBundle):
        return {"outcome": OK, "session_id": value.session_id, "epoch": value.epoch,
                "pos": value.pos, "token": value.token}
    if isinstance(value, HiddenBundle):
        rows = value.hidden if isinstance(value.hidden, (tuple, np.ndarray)) else ()
        return {"outcome": OK, "session_id": value.session_id, "epoch": value.epoch,
                "start_pos": value.start_pos, "layer": value.layer, "rows": len(rows),
                "checksum": value.checksum}
    if value is None:
        return {"outcome": OK}
    return {"outcome": "unexpected", "type": type(value).__name__}


def summarize_expected(expected: Expected) -> dict[str, Any]:
    out = {"outcome": expected.code, "row": expected.row, **expected.fields}
    if expected.output is not None:
        out["output"] = summarize(expected.output)
    if expected.malformed:
        out["malformed"] = list(expected.malformed)
    if expected.fired:
        out["fired"] = list(expected.fired)
    return out


def _values(hidden: Any) -> Any:
    """A hidden bundle's values as the contract compares them: their shape and the bytes of
    every value as float32, whichever form holds them (a 2-D array of floats or integers, or
    a tuple of equally long tuples of numbers that are no bools); other contents (malformed
    ones) by their structure, a float by its bits, so that NaN equals itself."""
    if isinstance(hidden, np.ndarray):
        if hidden.dtype == np.float32 and hidden.ndim == 2 and np.isfinite(hidden).all():
            # Finite native float32 values are their own bytes (what the line below makes of them,
            # without a Python number per value: long prompts are 2**17 of them).
            return ("float32", hidden.shape, np.ascontiguousarray(hidden).tobytes())
        if hidden.dtype.kind in "fiu" and hidden.ndim == 2:
            # Each value as a Python number, then float32: as the tuple form below reads it.
            return ("float32", hidden.shape, array.array("f", hidden.ravel().tolist()).tobytes())
        return ("array", hidden.dtype.str, hidden.shape, hidden.tobytes())
    # Tuples of numbers that are no bools (the types met, a handful, checked once each).
    numbers = isinstance(hidden, tuple) and all(isinstance(row, tuple) for row in hidden) and all(
        issubclass(t, (int, float)) and not issubclass(t, bool)
        for t in set(map(type, itertools.chain.from_iterable(hidden))))
    if numbers and len({len(row) for row in hidden}) <= 1:
        try:
            return ("float32", (len(hidden), len(hidden[0]) if hidden else 0),
                    array.array("f", itertools.chain.from_iterable(hidden)).tobytes())
        except OverflowError:  # an int beyond any float
            pass
    if isinstance(hidden, (tuple, list)):
        return (type(hidden).__name__, [_values(v) for v in hidden])
    if isinstance(hidden, float):
        return ("float", array.array("d", [hidden]).tobytes())
    if isinstance(hidden, np.generic):
        return ("numpy", hidden.dtype.str, hidden.tobytes())
    return (type(hidden).__name__, hidden)


def same(a: Any, b: Any) -> bool:
    """Whether two bundles are equal as the contract reads them (the same fields, and the same
    values whichever form holds them), judged here: a bundle's own ``__eq__`` is code under test.
    Anything else compares with ``==``."""
    if type(a) is not type(b):
        return False
    if isinstance(a, HiddenBundle):
        return (a.session_id, a.epoch, a.start_pos, a.layer, a.checksum, a.contract) == \
            (b.session_id, b.epoch, b.start_pos, b.layer, b.checksum, b.contract) \
            and _values(a.hidden) == _values(b.hidden)
    if isinstance(a, (SampleBundle, TokenBundle)):
        return dataclasses.astuple(a) == dataclasses.astuple(b)
    return bool(a == b)


def equality_problem(a: Any, b: Any) -> Optional[str]:
    """Whether the bundles' own ``==`` says what the contract says ("bundles are equal when their
    fields and values are, whichever form holds the values"); ``None`` if so, or if either is
    no bundle."""
    if not (isinstance(a, (HiddenBundle, SampleBundle)) and isinstance(b, (HiddenBundle, SampleBundle))):
        return None
    equal, said = same(a, b), a == b
    if said != equal or (b == a) != equal:
        return f"{summarize(a)} == {summarize(b)} is {said}, but the bundles are {'' if equal else 'not '}equal"
    return None


def outputs_match(expected: Any, actual: Any, judge: Judge, token_ok: Callable[[int, Any], bool]) -> bool:
    """Equal, or (for an engine with a stated tolerance) equal as the judge reads real arithmetic.

    ``token_ok(expected_token, got_token)`` decides a sampled token that differs.
    """
    if type(expected) is not type(actual):
        return False
    if same(expected, actual):
        return True
    if isinstance(expected, SampleBundle):
        return (expected.session_id, expected.epoch, expected.pos, expected.contract) == \
            (actual.session_id, actual.epoch, actual.pos, actual.contract) and token_ok(expected.token, actual.token)
    if judge.exact or (expected.session_id, expected.epoch, expected.start_pos, expected.layer,
                       expected.contract) != (actual.session_id, actual.epoch, actual.start_pos,
                                              actual.layer, actual.contract):
        return False
    # The checksum seals the values, so it differs when they do; validate() checks it.
    return isinstance(actual.hidden, (tuple, np.ndarray)) and judge.rows_match(expected.rows(), actual.rows()) \
        and not _breaks_alone(actual)


def broken_as(actual: Any, clean: Any, kind: str, spec: ShardSpec, n: int) -> bool:
    """Whether ``actual`` breaks the contract in the way ``Malformed(kind)`` names."""
    if kind == "session":
        return actual.session_id != clean.session_id
    if kind == "epoch":
        return actual.epoch != clean.epoch
    if isinstance(actual, SampleBundle):
        if kind == "token_range":
            return not 0 <= actual.token < spec.vocab_size
        return kind == "position" and actual.pos != clean.pos
    rows = actual.rows()
    return {
        "checksum": lambda: actual.checksum != _resealed(actual),
        "shape": lambda: len(rows) != n or any(len(r) != spec.hidden_size for r in rows),
        "layer": lambda: actual.layer != clean.layer,
        "nan": lambda: any(not math.isfinite(v) for r in rows for v in r),
        "position": lambda: actual.start_pos != clean.start_pos,
    }.get(kind, lambda: False)()


def broken_the_fixture_way(clean: Any, kinds: tuple[str, ...], spec: ShardSpec) -> Any:
    """``clean`` broken by ``kinds`` the way the fixture states it breaks outputs (``docs/reference/choices.md``, "How
    ``Malformed`` breaks an output"): the kinds other than ``checksum`` in rule order, each
    resealing the checksum over the broken contents (``shape`` drops the last column, ``layer``,
    ``epoch`` and ``position`` add 1, ``session`` appends ``~``, ``nan`` puts a NaN in the first
    value, ``token_range`` samples ``vocab_size``; a kind the output has no field for changes
    nothing), then ``checksum``, which damages the checksum only: its first hex digit becomes
    ``0``, or ``1`` where it was ``0``."""
    if isinstance(clean, SampleBundle):
        out = clean
        for kind in kinds:
            out = {"token_range": lambda: dataclasses.replace(out, token=spec.vocab_size),
                   "session": lambda: dataclasses.replace(out, session_id=out.session_id + "~"),
                   "epoch": lambda: dataclasses.replace(out, epoch=out.epoch + 1),
                   "position": lambda: dataclasses.replace(out, pos=out.pos + 1)}.get(kind, lambda: out)()
        return out
    sid, epoch, start, layer = clean.session_id, clean.epoch, clean.start_pos, clean.layer
    rows = [list(r) for r in np.asarray(clean.hidden, dtype=np.float64).tolist()]
    for kind in kinds:
        if kind == "shape":
            rows = [r[:-1] for r in rows]
        elif kind == "nan":
            rows[0][0] = math.nan
        elif kind == "layer":
            layer += 1
        elif kind == "session":
            sid += "~"
        elif kind == "epoch":
            epoch += 1
        elif kind == "position":
            start += 1
    broken = HiddenBundle.sealed(sid, epoch, start, layer, np.array(rows, dtype=np.float32))
    return dataclasses.replace(broken, checksum=damaged_checksum(broken.checksum)) if "checksum" in kinds else broken


def broken_alike(want: Any, actual: Any, kinds: tuple[str, ...], judge: Judge,
                 token_ok: Callable[[int, Any], bool]) -> bool:
    """Whether ``actual`` is ``want`` (:func:`broken_the_fixture_way`): equal for an exact judge;
    for a stated tolerance, the same fields, the values within it (NaN where ``want`` has NaN),
    and the checksum sealed over ``actual``'s own contents (damaged, for a ``checksum`` kind)."""
    if judge.exact or type(want) is not type(actual):
        return same(want, actual)
    if isinstance(want, SampleBundle):
        token = actual.token == want.token if "token_range" in kinds else token_ok(want.token, actual.token)
        return (want.session_id, want.epoch, want.pos, want.contract) == \
            (actual.session_id, actual.epoch, actual.pos, actual.contract) and token
    if (want.session_id, want.epoch, want.start_pos, want.layer, want.contract) != \
            (actual.session_id, actual.epoch, actual.start_pos, actual.layer, actual.contract):
        return False
    a, b = np.asarray(want.hidden, dtype=np.float64), np.asarray(actual.hidden, dtype=np.float64)
    if a.shape != b.shape or not np.array_equal(np.isnan(a), np.isnan(b)):
        return False
    if not judge.rows_match(np.nan_to_num(a).tolist(), np.nan_to_num(b).tolist()):
        return False
    right = _resealed(actual)
    return actual.checksum == (damaged_checksum(right) if "checksum" in kinds else right)


def damaged_checksum(checksum: str) -> str:
    """The fixture's ``checksum`` break of a right checksum: its first hex digit to ``0``, or ``1``."""
    return ("0" if checksum[0] != "0" else "1") + checksum[1:]


def _resealed(bundle: HiddenBundle) -> str:
    return HiddenBundle.sealed(bundle.session_id, bundle.epoch, bundle.start_pos, bundle.layer,
                               bundle.hidden).checksum


def compare(expected: Expected, actual: Any, spec: ShardSpec, n: int, judge: Judge,
            token_ok: Callable[[int, Any], bool], fixture_choices: bool = True) -> Optional[str]:
    """``None`` if ``actual`` is what ``expected`` allows, else what differs.

    ``fixture_choices``: hold the engine to the fixture's choice that a
    ``checksum`` break stays visible beside other ``Malformed`` kinds; the
    contract lets another kind that changes the contents mask it.
    """
    if expected.code == OK or (expected.code == "response_lost" and not isinstance(actual, ShardError)):
        if expected.code == "response_lost":
            return f"expected response_lost, got {summarize(actual)}"
        if isinstance(actual, BaseException):
            return f"expected ok, got {summarize(actual)}"
        if expected.output is None:
            return None if actual is None else f"expected None, got {summarize(actual)}"
        applies = [k for k in expected.malformed
                   if k in (SAMPLE_KINDS if isinstance(expected.output, SampleBundle) else HIDDEN_KINDS)]
        if not applies:
            if not outputs_match(expected.output, actual, judge, token_ok):
                return f"output {summarize(actual)} != expected {summarize(expected.output)}"
            return None
        if type(actual) is not type(expected.output):
            return f"expected a {type(expected.output).__name__}, got {summarize(actual)}"
        if fixture_choices:
            want = broken_the_fixture_way(expected.output, expected.malformed, spec)
            if not broken_alike(want, actual, expected.malformed, judge, token_ok):
                return (f"Malformed({', '.join(expected.malformed)}) broke the output as {summarize(actual)}, "
                        f"not the fixture's way: {summarize(want)}")
            return None
        unbroken = [k for k in applies if not broken_as(actual, expected.output, k, spec, n)]
        if not fixture_choices and len(applies) > 1 and "checksum" in unbroken:
            unbroken.remove("checksum")  # masked by a kind that changed the contents: still refused
        if unbroken:
            return f"Malformed({', '.join(unbroken)}) did not break the output {summarize(actual)}"
        return None
    if not isinstance(actual, ShardError):
        return f"expected {expected.code}, got {summarize(actual)}"
    if actual.code != expected.code:
        return f"expected {expected.code}, got {summarize(actual)}"
    got = actual.fields()
    for key, value in expected.fields.items():
        if got.get(key) != value:
            return f"{expected.code}: {key} is {got.get(key)!r}, expected {value!r}"
    return None


class EngineRunner:
    """One engine under test and its model, driven step by step."""

    def __init__(
        self,
        factory: Callable[..., Any],
        *,
        machine: str,
        factory_name: str,
        spec: ShardSpec,
        seed: int = 0,
        capacity: Optional[int] = None,
        plan: Optional[FaultPlan] = None,
        tolerance: float = 0.0,
    ) -> None:
        plan = plan if plan is not None else FaultPlan()
        self.spec, self.seed = spec, seed
        self.judge = Judge(factory, tolerance)
        self.fixture_choices = makes_fixture_choices(factory)
        self.clock = VirtualClock()
        # The plan of what the factory's engines apply (a layer in front of an engine applies no
        # MemoryPressure): the engine and the model are given the same one.
        applied = without_unapplied(plan, fault_kinds_of(factory))
        assert applied is not None
        plan = applied
        self.engine = factory(spec, seed=seed, capacity_tokens=capacity, clock=self.clock, faults=plan)
        self.model = Model(Oracle(factory, spec, seed), capacity=capacity, plan=plan)
        self.known: set[str] = set()
        #: Errors that crossed the wire whole, with the form: the same error crosses the same way.
        self._crossed: set[tuple[Any, ...]] = set()
        self.trace = Trace(
            machine=machine,
            engine_factory=factory_name,
            evidence_class=str(self.engine.evidence_class),
            config={
                "spec": dataclasses.asdict(spec),
                "seed": seed,
                "capacity_tokens": capacity,
                "fault_plan": json.loads(wire.dumps(plan)),
            },
            hypothesis_version=hypothesis_version(),
            git_commit=git_commit(),
        )

    @classmethod
    def from_trace(cls, trace: Trace, factory: Callable[..., Any], factory_name: str,
                   tolerance: float = 0.0) -> "EngineRunner":
        config = trace.config
        plan = wire.loads(json.dumps(config["fault_plan"]))
        return cls(factory, machine=trace.machine, factory_name=factory_name,
                   spec=ShardSpec(**config["spec"]), seed=config["seed"],
                   capacity=config["capacity_tokens"], plan=plan, tolerance=tolerance)

    # -- one step ------------------------------------------------------------

    def run(self, step: dict[str, Any]) -> None:
        op = step["op"]
        self.trace.steps.append(step)
        if op == "restart":
            if not self.model.crashed:
                raise InvalidStep("restart of an engine that is up: the contract defines restart "
                                  "for a crashed engine")
            self.model.restart()
            expected = Expected(OK, "restart")
            actual = _call(self.engine.restart)
            n = 0
        elif op in ("cancel", "release"):
            sid, epoch = step["session_id"], step["epoch"]
            self.known.add(sid)
            bad = step.get("bad")
            # A bad close sends an impossible epoch or a session id that is not a string.
            sent_sid: Any = 7 if bad == "session" else sid
            sent = epoch if bad == "session" else -1 if bad else epoch
            expected = self.model.close(op, sent_sid, sent, valid=bad is None)
            actual = _call(getattr(self.engine, op), sent_sid, sent)
            n = 0
        else:
            sid, epoch, start = step["session_id"], step["epoch"], step["start"]
            tokens = tokens_of(step["tokens"])
            self.known.add(sid)
            bundle = self._bundle(sid, epoch, start, tokens, step.get("bad"))
            # Faults are matched against the session the call names, even a malformed one.
            named: Any = getattr(bundle, "session_id", None)
            # An error names the epoch the call sent (a malformed call may send another).
            try:
                expected = self.model.compute(op, named, epoch, start, tokens, valid=step.get("bad") is None,
                                              sent_epoch=getattr(bundle, "epoch", None))
                if expected.output is not None and isinstance(bundle, HiddenBundle):
                    # The call applies: the rows a healthy upstream stage sends for these positions.
                    held = self.model.held(sid)
                    assert held is not None
                    bundle = self.model.oracle.inputs(held.lineage, held.history, sid, epoch, start,
                                                      start + len(tokens))
            except ReferenceFailed as exc:  # the factory's engines fail the kit's own fault-free calls
                self.trace.failure = f"step {len(self.trace.steps)} ({op}): {exc}"
                raise Divergence(self.trace.failure) from None
            actual = _call(getattr(self.engine, op), bundle)
            n = len(tokens)
        self.trace.expected.append(summarize_expected(expected))
        self.trace.actual.append(summarize(actual))
        self._probe(op, expected, step.get("bad"), step.get("start", 0), n)
        # The session's history is read only if a sampled token differs (after the model's update).
        problem = compare(expected, actual, self.spec, n, self.judge, lambda want, got: self.judge.token_ok(
            self.spec, self.seed, self.model.history(step["session_id"]), want, got), self.fixture_choices)
        if problem is not None and expected.oracle and isinstance(actual, (HiddenBundle, SampleBundle)):
            problem += f" (the expected output was computed {expected.oracle})"
        if problem is None:
            problem = equality_problem(expected.output, actual)
        if problem is None:
            problem = self._check_wire(actual)
        if problem is None:
            problem = self.invariant_problem()
        if problem is not None:
            self.trace.failure = f"step {len(self.trace.steps)} ({op}): {problem}"
            raise Divergence(self.trace.failure)

    def _probe(self, op: str, expected: Expected, bad: Optional[str], start: int, n: int) -> None:
        names = [f"{op}:{expected.row}" if op != "restart" else "restart", f"code:{expected.code}"]
        if expected.output is not None:
            names += probes.positions(start, start + n) + probes.lengths(op, start, n)
        names += probes.held(self.model.used, [view[2] for view in map(self.model.view, sorted(self.known))
                                               if view is not None])
        names += [f"fault:{name}" for name in expected.fired]
        names += probes.crossings(op, expected.holds, expected.fired, expected.code, bad,
                                  expected.allocation if self.model.capacity is not None else "")
        if expected.output is not None:
            applies = SAMPLE_KINDS if isinstance(expected.output, SampleBundle) else HIDDEN_KINDS
            names += [f"malformed:{kind}" for kind in expected.malformed if kind in applies]
        probes.record(names)

    def _bundle(self, sid: str, epoch: int, start: int, tokens: list[int], bad: Optional[str]) -> Any:
        """The call's input as far as the model needs it to decide: tokens for a head or full
        engine; for a middle or tail engine rows of zeros, which stand until the model says
        the call applies (only then do the rows' values matter, and they cost the upstream
        stage's work), broken as ``bad`` says."""
        n = len(tokens) + (bad == "two_positions")
        if self.spec.start_layer == 0:
            bundle: Any = TokenBundle(sid, epoch, start, tuple(tokens) + (0,) * (n - len(tokens)))
        else:
            zeros = np.zeros((n, self.spec.hidden_size), dtype=np.float32)
            zeros.flags.writeable = False
            bundle = HiddenBundle.sealed(sid, epoch, start, self.spec.start_layer, zeros)
        return bundle if bad is None else break_input(bundle, bad, self.spec)

    def _check_wire(self, actual: Any) -> Optional[str]:
        """Outputs and errors must survive the wire (a broken output may be refused there)."""
        if isinstance(actual, ShardError) or (
            isinstance(actual, (SampleBundle, HiddenBundle)) and not _breaks_alone(actual)
        ):
            # One form a step, in turn: readable JSON, base64 inside JSON, the binary frame. The
            # round trip depends on the output's value, not on the interleaving that led to it,
            # so every form still meets every kind of output over a run, at a third of the cost.
            form = LINK_FORMS[len(self.trace.steps) % len(LINK_FORMS)]
            # An error met again (its type, message and fields, each field's type too) crosses
            # as it did: the round trip is a function of them alone.
            key = (form, type(actual), actual.message, tuple((k, type(v), v) for k, v in actual.fields().items())) \
                if isinstance(actual, ShardError) else None
            if key in self._crossed:
                return None
            try:
                back = across(actual, form)
            except Exception as exc:
                return f"{summarize(actual)} does not survive the wire ({form}): {type(exc).__name__}: {exc}"
            if not same(back, actual):
                return f"{summarize(actual)} comes back from the wire ({form}) as {summarize(back)}"
            problem = equality_problem(back, actual)
            if problem is None and key is not None:
                self._crossed.add(key)
            return problem
        if isinstance(actual, (SampleBundle, HiddenBundle)):
            # A broken output still crosses a transport as it is, for its receiver to refuse.
            forms = [("json", lambda: wire.loads_unchecked(wire.dumps(actual)))]
            if isinstance(actual, SampleBundle) or _has_binary_form(actual):
                forms.append(("frame", lambda: wire.loads_unchecked(wire.dumpb(actual), frame=True)))
            for form, carry in forms:
                try:
                    back = carry()
                except Exception as exc:
                    return f"{summarize(actual)} cannot be carried ({form}): {type(exc).__name__}: {exc}"
                if not same(back, actual):
                    return f"{summarize(actual)} is carried ({form}) as {summarize(back)}"
                problem = equality_problem(back, actual)
                if problem:
                    return problem
        return None

    def finish(self) -> None:
        """End-of-run check (the per-step invariants already ran)."""
        problem = self.invariant_problem()
        if problem is not None:
            raise Divergence(problem)

    # -- invariants ----------------------------------------------------------

    def invariant_problem(self) -> Optional[str]:
        if self.engine.used_tokens != self.model.used:
            return f"used_tokens {self.engine.used_tokens} != model's {self.model.used}"
        capacity = self.engine.capacity_tokens
        if capacity != self.model.capacity:
            return f"capacity_tokens {capacity} != {self.model.capacity}, the capacity it was made with"
        if capacity is not None and self.engine.used_tokens > capacity:
            return f"used_tokens {self.engine.used_tokens} over capacity {capacity}"
        for sid in sorted(self.known):
            view = self.engine.session(sid)
            got = view_state(view)
            if got != self.model.view(sid):
                return f"session {sid!r} is {got}, model says {self.model.view(sid)}"
            # The contract's view has epoch, status and cached_tokens; one that names its session too
            # must name the session asked for.
            if view is not None and getattr(view, "session_id", sid) != sid:
                return f"session({sid!r}) answers a view of session {view.session_id!r}"
        if self.clock.now() != self.model.clock:
            return f"clock at {self.clock.now()}, model says {self.model.clock}"
        return None


def view_state(view: Any) -> Optional[tuple[int, str, int]]:
    """A session view as the contract reads it, ``(epoch, status, cached_tokens)``, or ``None``."""
    return None if view is None else (view.epoch, view.status, view.cached_tokens)


def _breaks_alone(bundle: Any) -> bool:
    """Whether the bundle alone shows it breaks the contract (so the wire may refuse it)."""
    try:
        validate(bundle)
    except Exception:
        return True
    return False


def _has_binary_form(bundle: HiddenBundle) -> bool:
    rows = bundle.hidden
    return isinstance(rows, np.ndarray) or (
        isinstance(rows, tuple) and bool(rows) and all(isinstance(r, tuple) and len(r) == len(rows[0]) for r in rows))


def _call(fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception as exc:  # the comparison decides whether this was allowed
        return exc


class ReferenceStreams:
    """Fault-free greedy continuations on a fresh FULL engine, cached by history.

    A greedy stream's first ``n`` tokens are the first ``n`` of any longer one, so a stream
    that must grow is generated again at twice its length (at least ``n``): a session that
    asks for one token more at each step costs a few generations, not one per step.
    """

    def __init__(self, factory: Callable[..., Any], spec: ShardSpec, seed: int) -> None:
        self.factory, self.spec, self.seed = factory, spec, seed
        self._have: dict[tuple[int, ...], list[int]] = {}
        #: id of a history list asked for before -> (the list, its key): a session's prompt, asked
        #: for on every step, is not read again (a prompt of thousands of tokens costs nothing).
        self._keys: dict[int, tuple[Sequence[int], tuple[int, ...]]] = {}

    def __call__(self, history: Sequence[int], n: int) -> list[int]:
        from fakeshard import Pipeline

        kept = self._keys.get(id(history))
        if kept is not None and kept[0] is history and len(kept[1]) == len(history):
            key = kept[1]
        else:
            key = tuple(history)
            self._keys[id(history)] = (history, key)
        have = self._have.get(key, [])
        if len(have) < n:
            have = Pipeline([self.factory(self.spec, seed=self.seed)]).generate(
                "reference", list(key), max(n, 2 * len(have)))
            self._have[key] = have
        return have[:n]
