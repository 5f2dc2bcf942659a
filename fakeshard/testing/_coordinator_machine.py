"""Test a coordinator: its protocol, the machine that drives it, and what the machine checks.

A coordinator under test is built by a factory ``factory(stages, *, clock)``:
``stages`` lists, head to tail, the engines able to serve each layer range (the
first of each is the initial route, the others spares), all sleeping on ``clock``.
It offers ``start(session_id, prompt)``, ``next_token(session_id) -> int`` and
``release(session_id)``.  Engines are reached only through their contract calls
(``prefill``, ``decode``, ``cancel``, ``release``, ``restart``, ``session``).

:class:`CoordinatorMachine` drives several sessions at once, interleaved (start,
next token, release, reuse of an id), over engines from the factory under test,
each with a drawn fault plan (every fault kind), crashes between steps, and
optionally tight capacity.  One start in eight sends a long prompt (a seeded run, at a
length real engines break at: see :mod:`fakeshard.testing._lengths`), and one run in
eight is at a real hidden width (4096) with short prompts.  After every step it checks what a user of the
coordinator relies on:

* each session's tokens are the fault-free stream of one FULL engine;
* after ``release``, no node holds cache or live state for the session,
  including nodes the session was routed away from;
* no node sees a call for a session after its release (until the id is started again);
* the step kept to the budget below; ``GaveUp`` only beyond it.

The budget, per step, with ``S`` stages, ``N`` engines and ``F`` the calls of that step
that failed by something outside the coordinator (answered ``EngineCrashed``,
``ResponseLost`` or ``OutOfMemory``, or with an output that breaks the contract).  It
counts compute calls (``prefill``, ``decode``) apart from cleanup calls (``cancel``,
``release``), and the step's own session apart from the others:

* compute for the step's session: at most ``S * (1 + F)`` for ``start`` and
  ``next_token``, one pass over the route for each failing call and one that succeeds
  (what re-route-and-replay costs: a replay at a new epoch needs no release first, since
  a prefill at a newer epoch drops the older cache); ``S * F`` for ``release``, which
  needs none;
* cleanup for the step's session: at most ``N * F`` for ``next_token``, one call on each
  engine for each failing call (a coordinator may free what a failure left, on the node
  that failed, on the route it leaves, anywhere); ``N * (1 + F)`` for ``start`` and
  ``release``, which may clear or release the id on every engine;
* any other session: only after a failure, which may move its route too: at most
  ``S * F`` compute (a replay over the route for each failing call) and ``N * F``
  cleanup;
* the coordinator's own virtual time (the clock's advance outside engine calls) <= ``F`` seconds;
* :class:`~fakeshard.testing._reference_coordinator.GaveUp` only when ``F > GIVE_UP_AFTER``.

A step without a failure thus makes one pass over the route and nothing else (a
``release``: a release on every engine): what catches a coordinator that retries without
a failure to answer, or cleans up on every step.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from hypothesis import strategies as st
from hypothesis.stateful import initialize, precondition, rule

from fakeshard import (
    Crash,
    Delay,
    DropResponse,
    FaultPlan,
    FaultRule,
    Malformed,
    MemoryPressure,
    ShardError,
    ShardSpec,
    VirtualClock,
    wire,
)
from fakeshard._factory import import_callable
from fakeshard._faults import MALFORMED_KINDS
from fakeshard._judge import Judge
from fakeshard._topology import stage_ranges
from fakeshard.testing import _probes as probes
from fakeshard.testing._draws import draw_one
from fakeshard.testing._lengths import MANY_HOPS, capped, longest_prompt, token_count, tokens_of
from fakeshard.testing._machines import FinishingMachine, fit_malformed, now_and_then, seeded_runs, spread, wide
from fakeshard.testing._reference_coordinator import Coordinator, GaveUp
from fakeshard.testing._runner import Divergence, InvalidStep, ReferenceStreams
from fakeshard.testing._sim import (
    NODE_FAULT_OUTCOMES,
    breaks_contract,
    fault_count,
    fired_since,
    held_words,
    holds,
    is_async_coordinator,
)
from fakeshard.testing._trace import Trace, git_commit, hypothesis_version

__all__ = [
    "BUDGET_SECONDS_PER_FAULT",
    "CoordinatorError",
    "CoordinatorMachine",
    "CoordinatorRunner",
    "GIVE_UP_AFTER",
    "Node",
    "ReferenceStreams",
    "call_budget",
    "load_coordinator",
    "reference",
]

SPEC = ShardSpec("coordinator-model", n_layers=6, start_layer=0, end_layer=6, hidden_size=4, vocab_size=64)
RANGES = stage_ranges(3)
#: Engines per stage: the initial route's and one spare.
PER_STAGE = 2
SIDS = ("p", "q", "r")
#: A short prompt has at most this many tokens; a session generates while its history
#: (prompt and tokens) is shorter than :data:`MAX_HISTORY`, or, after a long prompt, than the
#: prompt and this many more.
MAX_PROMPT = 6
#: A session with a short prompt stays within this many positions.
MAX_HISTORY = 12
#: Tight capacity: every session at its longest fits on a node, and nothing more.  Runs at
#: tight capacity send short prompts only (a long one would never fit).
TIGHT_CAPACITY = len(SIDS) * MAX_HISTORY
#: A step may end in ``GaveUp`` only when more calls than this failed by a fault.
GIVE_UP_AFTER = 8
#: The coordinator's own virtual time (back-off) allowed per failing call.
BUDGET_SECONDS_PER_FAULT = 1.0
#: Outcomes of an engine call that a coordinator cannot prevent: they count in ``F``.  Calls
#: here reach their node in process, so only the node's own faults can happen (no network).
FAULT_OUTCOMES = NODE_FAULT_OUTCOMES
#: Engine calls that count against the budget (inspection and restart do not), by kind.
COMPUTE, CLEANUP = ("prefill", "decode"), ("cancel", "release")
CALLS = COMPUTE + CLEANUP


def call_budget(op: str, faults: int, kind: str = "compute", own: bool = True, *,
                stages: int = len(RANGES), engines: int = len(RANGES) * PER_STAGE) -> int:
    """The most ``kind`` calls (``"compute"`` or ``"cleanup"``) step ``op`` (``start``,
    ``next`` or ``release``) may make for one session (the step's ``own``, or another), with
    ``faults`` calls failing by a fault, over ``stages`` stages and ``engines`` engines (by
    default this machine's)."""
    return _budget(op, faults, kind, own, stages, engines)[0]


def _budget(op: str, faults: int, kind: str, own: bool, stages: int = len(RANGES),
            engines: int = len(RANGES) * PER_STAGE) -> tuple[int, str]:
    """:func:`call_budget` with its reason, in words."""
    if kind == "compute":
        base = int(own and op != "release")
        why = ("one pass over the route (S = {s}) for each failing call and one that succeeds" if base else
               "a replay over the route (S = {s}) for each failing call, none without one")
        return stages * (base + faults), why.format(s=stages)
    base = int(own and op != "next")
    why = ("a call on every engine (N = {n}) for the id, and one more on each for each failing call" if base else
           "a call on each engine (N = {n}) for each failing call, none without one")
    return engines * (base + faults), why.format(n=engines)


class CoordinatorError(Exception):
    """A coordinator factory name that cannot be imported or called."""


def reference(stages: Sequence[Sequence[Any]], *, clock: Any = None) -> Coordinator:
    """The kit's reference coordinator: on any failure, bump the epoch, re-route around a
    crashed node (restarted, back to the spares) and replay from position 0."""
    return Coordinator.from_stages(stages, clock=clock)


def load_coordinator(name: str) -> Callable[..., Any]:
    """Import ``module:callable`` and check that it builds a coordinator from stages."""
    factory = import_callable(name, "coordinator factory", CoordinatorError)
    from fakeshard import FakeShardEngine

    clock = VirtualClock()
    stages = [[FakeShardEngine(SPEC.with_layers(a, b), clock=clock)] for a, b in RANGES]
    try:
        coordinator = factory(stages, clock=clock)
    except Exception as exc:
        raise CoordinatorError(f"coordinator factory {name!r} failed to build a coordinator from "
                               f"factory(stages, clock=clock): {type(exc).__name__}: {exc}") from None
    missing = [m for m in ("start", "next_token", "release") if not callable(getattr(coordinator, m, None))]
    if missing:
        raise CoordinatorError(f"coordinator factory {name!r} builds {type(coordinator).__name__}, "
                               f"which lacks {', '.join(missing)}")
    return factory


@dataclass
class CallLog:
    """Every engine call of a run, as the machine saw it, and the current step's totals."""

    clock: VirtualClock
    #: Sessions released and not started again: a call naming one is a violation.
    released: set[str] = field(default_factory=set)
    calls: int = 0
    faults: int = 0
    node_seconds: float = 0.0
    violations: list[str] = field(default_factory=list)
    #: (node, op, session, epoch, outcome) of the current step's calls.
    current: list[tuple[int, str, Any, Any, str]] = field(default_factory=list)
    #: Failures in the whole run so far: calls that failed by a fault, and crashes between steps.
    failures: int = 0
    #: How many of each session's cache misses the run's failures have excused.
    excused: Counter[str] = field(default_factory=Counter)

    def new_step(self) -> None:
        self.calls, self.faults, self.node_seconds, self.current = 0, 0, 0.0, []

    def crashed(self) -> None:
        """A node crashed between steps: a failure, as one a call meets."""
        self.failures += 1

    def record(self, node: int, op: str, session_id: Any, epoch: Any, outcome: str, seconds: float) -> None:
        self.calls += 1
        if outcome in FAULT_OUTCOMES:
            self.faults += 1
            self.failures += 1
        elif outcome == "cache_miss" and isinstance(session_id, str) and self.failures > self.excused[session_id]:
            # A failure anywhere in the run (a crash between steps, another session's failing call)
            # may have wiped the session's cache or moved its route, then or at a later step, and a
            # coordinator may learn so lazily, from this miss, and recover as from any failure.
            # Each failure excuses one miss of each session: a route moved for nothing, or again
            # and again for one failure, is still the coordinator's.
            self.excused[session_id] += 1
            self.faults += 1
        self.node_seconds += seconds
        self.current.append((node, op, session_id, epoch, outcome))
        probes.record([f"coordinator:call:{outcome}", f"code:{outcome}"])
        if session_id in self.released:
            self.violations.append(f"node {node} got {op} for session {session_id!r} (epoch {epoch}) "
                                   "after the session was released")


class Node:
    """An engine as the coordinator under test sees it: every call is recorded and judged.

    It offers the engine's contract surface; what it adds is bookkeeping (the call, its
    outcome, the virtual time it took), never a change to what the engine answers.
    """

    def __init__(self, engine: Any, index: int, log: CallLog) -> None:
        self.engine, self.index, self.log = engine, index, log
        self.spec = engine.spec
        self.evidence_class = engine.evidence_class

    def __repr__(self) -> str:
        return f"Node({self.index}, layers {self.spec.start_layer}..{self.spec.end_layer})"

    def _call(self, op: str, session_id: Any, epoch: Any, *args: Any) -> Any:
        started = self.log.clock.now()
        outcome = "error"
        before = fault_count(self.engine)
        try:
            out = getattr(self.engine, op)(*args)
            outcome = "ok"
            if op in ("prefill", "decode") and breaks_contract(self.spec, args[0], out):
                outcome = "malformed_output"
            return out
        except ShardError as exc:
            outcome = exc.code
            raise
        finally:
            probes.record([f"fault:{kind}" for kind in fired_since(self.engine, before)])
            self.log.record(self.index, op, session_id, epoch, outcome, self.log.clock.now() - started)

    def prefill(self, bundle: Any) -> Any:
        return self._call("prefill", getattr(bundle, "session_id", None), getattr(bundle, "epoch", None), bundle)

    def decode(self, bundle: Any) -> Any:
        return self._call("decode", getattr(bundle, "session_id", None), getattr(bundle, "epoch", None), bundle)

    def cancel(self, session_id: str, epoch: int) -> None:
        return self._call("cancel", session_id, epoch, session_id, epoch)

    def release(self, session_id: str, epoch: int) -> None:
        return self._call("release", session_id, epoch, session_id, epoch)

    def restart(self) -> None:
        self.engine.restart()

    def session(self, session_id: str) -> Any:
        return self.engine.session(session_id)

    @property
    def used_tokens(self) -> int:
        return self.engine.used_tokens

    @property
    def capacity_tokens(self) -> Any:
        return self.engine.capacity_tokens


@dataclass
class _Session:
    prompt: list[int]
    tokens: list[int] = field(default_factory=list)
    open: bool = True
    gave_up: bool = False

    @property
    def length(self) -> int:
        return len(self.prompt) + len(self.tokens)

    @property
    def limit(self) -> int:
        """The longest history the machine grows this session to."""
        return max(MAX_HISTORY, len(self.prompt) + MAX_PROMPT)


class CoordinatorRunner:
    """Engines from the factory with their fault plans, the coordinator under test over them,
    and the checks; ``run(step)`` performs one step and raises :class:`Divergence` on a break."""

    def __init__(self, factory: Callable[..., Any], *, factory_name: str, coordinator: str, seed: int,
                 plans: list[FaultPlan], capacity: Optional[int] = None, tolerance: float = 0.0,
                 hidden_size: int = 4, coordinator_factory: Optional[Callable[..., Any]] = None) -> None:
        if len(plans) != len(RANGES) * PER_STAGE:
            raise ValueError(f"the coordinator machine needs {len(RANGES) * PER_STAGE} fault plans, got {len(plans)}")
        self.factory, self.seed = factory, seed
        self.spec = dataclasses.replace(SPEC, hidden_size=hidden_size)
        self.judge = Judge(factory, tolerance)
        self.clock = VirtualClock()
        self.log = CallLog(self.clock)
        self.engines = [factory(self.spec.with_layers(*RANGES[k // PER_STAGE]), seed=seed,
                                capacity_tokens=capacity, clock=self.clock, faults=plans[k])
                        for k in range(len(plans))]
        self.nodes = [Node(engine, k, self.log) for k, engine in enumerate(self.engines)]
        stages = [self.nodes[i * PER_STAGE:(i + 1) * PER_STAGE] for i in range(len(RANGES))]
        make = coordinator_factory or load_coordinator(coordinator)
        self.coordinator = make(stages, clock=self.clock)
        if is_async_coordinator(self.coordinator):
            raise CoordinatorError(f"{coordinator} builds an async coordinator ({type(self.coordinator).__name__}): "
                                   "the concurrent machine tests it, over async engines")
        self.sessions: dict[str, _Session] = {}
        self.streams = ReferenceStreams(factory, self.spec, seed)
        self.trace = Trace(
            machine="coordinator", engine_factory=factory_name, evidence_class=str(self.engines[0].evidence_class),
            config={"seed": seed, "hidden_size": hidden_size, "capacity": capacity, "coordinator": coordinator,
                    "fault_plans": [json.loads(wire.dumps(p)) for p in plans]},
            hypothesis_version=hypothesis_version(), git_commit=git_commit(),
        )

    @classmethod
    def from_trace(cls, trace: Trace, factory: Callable[..., Any], factory_name: str,
                   tolerance: float = 0.0) -> "CoordinatorRunner":
        c = trace.config
        return cls(factory, factory_name=factory_name, coordinator=c["coordinator"], seed=c["seed"],
                   plans=[wire.loads(json.dumps(p)) for p in c["fault_plans"]], capacity=c.get("capacity"),
                   tolerance=tolerance, hidden_size=c.get("hidden_size", 4))

    # -- a step ---------------------------------------------------------------

    def open_sessions(self) -> list[str]:
        return [sid for sid in SIDS if sid in self.sessions and self.sessions[sid].open]

    def run(self, step: dict[str, Any]) -> None:
        op = step["op"]
        self._check_step(step)
        self.trace.steps.append(step)
        self.log.new_step()
        started = self.clock.now()
        outcome: dict[str, Any] = {"outcome": "ok"}
        try:
            if op == "crash":
                self.engines[step["node"]].crash()
                self.log.crashed()
            else:
                outcome = self._coordinate(op, step["session_id"], step)
        except Divergence:
            raise
        except Exception as exc:
            self.trace.actual.append({"outcome": "exception", "type": type(exc).__name__, "message": str(exc)})
            self._fail(f"the coordinator raised {type(exc).__name__}: {exc}")
        self.trace.actual.append({**outcome, "calls": self.log.calls, "faults": self.log.faults})
        sid: Any = step.get("session_id")
        self.trace.expected.append({"outcome": "ok", "tokens": self.streams(self.sessions[sid].prompt, len(
            self.sessions[sid].tokens))} if op == "next" else {"outcome": "ok"})
        probes.record([f"coordinator:{op}"] + (["coordinator:faulted_step"] if self.log.faults else []))
        problem = self.invariant_problem() or self.budget_problem(self.clock.now() - started)
        if problem is not None:
            self._fail(problem)

    def _check_step(self, step: dict[str, Any]) -> None:
        op = step.get("op")
        if op == "crash":
            if not 0 <= step.get("node", -1) < len(self.engines) or not hasattr(self.engines[step["node"]], "crash"):
                raise InvalidStep(f"crash of node {step.get('node')!r}, which cannot be crashed")
            return
        sid: Any = step.get("session_id")
        is_open = sid in self.open_sessions()
        if op not in ("start", "next", "release") or is_open != (op != "start"):
            raise InvalidStep(f"{op} of session {sid!r}, which is {'open' if is_open else 'not open'}")
        if op == "next" and self.sessions[sid].length >= self.sessions[sid].limit:
            raise InvalidStep(f"next of session {sid!r}, already at {self.sessions[sid].limit} positions")

    def history(self, sid: str) -> list[int]:
        """The session's prompt and the tokens the coordinator gave for it."""
        s = self.sessions[sid]
        return s.prompt + s.tokens

    def _coordinate(self, op: str, sid: str, step: dict[str, Any]) -> dict[str, Any]:
        c = self.coordinator
        if op == "start":
            self.log.released.discard(sid)
            self.sessions[sid] = _Session(tokens_of(step["prompt"]))
            c.start(sid, list(self.sessions[sid].prompt))
            return {"outcome": "ok"}
        s = self.sessions[sid]
        try:
            if op == "release":
                c.release(sid)
                s.open = False
                self.log.released.add(sid)
                return {"outcome": "ok"}
            token = c.next_token(sid)
        except GaveUp as exc:
            if self.log.faults <= GIVE_UP_AFTER:
                self._fail(f"{op}({sid!r}) gave up ({exc}) after {self.log.faults} failing calls; "
                           f"the budget allows giving up only beyond {GIVE_UP_AFTER}")
            probes.record(["coordinator:gave_up"])
            s.gave_up = True
            return {"outcome": "gave_up"}
        s.tokens.append(token)
        return {"outcome": "ok", "token": token}

    def _fail(self, problem: str) -> None:
        self.trace.failure = f"step {len(self.trace.steps)} ({_describe(self.trace.steps[-1])}): {problem}"
        raise Divergence(self.trace.failure)

    # -- the checks -----------------------------------------------------------

    def budget_problem(self, elapsed: float) -> Optional[str]:
        log = self.log
        step = self.trace.steps[-1]
        counts: dict[tuple[Any, str], int] = {}
        for _, op, sid, _, _ in log.current:
            key = (sid if isinstance(sid, str) else repr(sid), "compute" if op in COMPUTE else "cleanup")
            counts[key] = counts.get(key, 0) + 1
        for (sid, kind), n in counts.items():
            own = sid == step.get("session_id")
            allowed, why = _budget(step["op"], log.faults, kind, own)
            if n > allowed:
                whose = "the step's session" if own else "another session"
                return (f"{n} {kind} calls ({', '.join(COMPUTE if kind == 'compute' else CLEANUP)}) for "
                        f"{whose} {sid!r} in one step with {log.faults} failing by a fault; the budget is "
                        f"{allowed}: {why}: {_calls(log.current)}")
        own = elapsed - log.node_seconds
        if own > BUDGET_SECONDS_PER_FAULT * log.faults + 1e-9:
            return (f"the coordinator spent {own:g} s of virtual time of its own in one step with "
                    f"{log.faults} failing calls; the budget is {BUDGET_SECONDS_PER_FAULT * log.faults:g} s")
        return None

    def invariant_problem(self) -> Optional[str]:
        if self.log.violations:
            return self.log.violations[0]
        for sid, s in sorted(self.sessions.items()):
            problem = self.judge.stream_problem(self.spec, self.seed, s.prompt, s.tokens, self.streams)
            if problem is not None:
                return f"session {sid!r} streamed {s.tokens}, not the fault-free stream: {problem}"
        for sid, s in sorted(self.sessions.items()):
            if not s.open:
                held = self.held(sid)
                if held:
                    return f"session {sid!r} was released, but {held}"
        return None

    def held(self, sid: str) -> str:
        """What the nodes still hold for ``sid`` (cache or live state), or ``""``."""
        parts = []
        for node in self.nodes:
            view = node.session(sid)
            if holds(view):
                parts.append(held_words(node.index, view))
        return "; ".join(parts)

    def finish(self) -> None:
        """Release every open session; then no node may hold memory."""
        for sid in self.open_sessions():
            self.run({"op": "release", "session_id": sid})
        held = {node.index: node.used_tokens for node in self.nodes if node.used_tokens}
        if held:
            self.trace.failure = f"after releasing every session, nodes still hold positions: {held}"
            raise Divergence(self.trace.failure)


def _describe(step: dict[str, Any]) -> str:
    if step["op"] == "crash":
        return f"crash node {step['node']}"
    if step["op"] == "start" and token_count(step["prompt"]) > MAX_PROMPT:
        return f"start {step['session_id']} with {token_count(step['prompt'])} tokens"
    return f"{step['op']} {step['session_id']}"


def _calls(calls: list[tuple[int, str, Any, Any, str]]) -> str:
    return ", ".join(f"node {n} {op}({sid!r}, epoch {epoch}) -> {outcome}" for n, op, sid, epoch, outcome in calls)


# -- the machine ------------------------------------------------------------------

#: Malformed outputs twice as often as each other kind: most of their kinds are refused by
#: the next engine anyway, and the ones that are not are what a coordinator must catch.
malformed = st.integers(0, 2**16).map(lambda i: Malformed(MALFORMED_KINDS[spread(i) % len(MALFORMED_KINDS)]))
node_faults = st.one_of(
    st.just(Crash()), st.just(DropResponse()), malformed, malformed,
    st.builds(Delay, st.sampled_from([0.5, 1.0])), st.just(MemoryPressure()),
    st.just(MemoryPressure(reserve_tokens=TIGHT_CAPACITY - MAX_HISTORY)),
)
#: Rules fire early in a node's life (a short run reaches them) and mostly on the calls that
#: carry outputs.
node_rules = st.builds(
    FaultRule, fault=node_faults, op=st.sampled_from(["any", "prefill", "decode", "decode", "release"]),
    session_id=st.none() | st.sampled_from(SIDS), nth=st.integers(1, 4), count=st.integers(1, 3),
    probability=st.sampled_from([1.0, 0.5]),
)
node_plans = st.builds(FaultPlan, st.lists(node_rules, max_size=2).map(tuple), st.integers(0, 2**32))
#: At most this many crashes between steps in one run.
MAX_CRASHES = 3


def _fitted(plans: list[FaultPlan]) -> list[FaultPlan]:
    """Each node's plan with its ``Malformed`` kinds fitted to its output (node ``k`` serves
    range ``k // PER_STAGE``; the last range's output is a sample)."""
    return [fit_malformed(plan, last=k // PER_STAGE == len(RANGES) - 1) for k, plan in enumerate(plans)]


class CoordinatorMachine(FinishingMachine):
    """Sessions through the coordinator under test, over engines with drawn faults."""

    machine_name = "coordinator"

    @initialize(seed=st.integers(0, 2), capacity=st.sampled_from([None, None, TIGHT_CAPACITY]),
                plans=st.lists(node_plans, min_size=len(RANGES) * PER_STAGE, max_size=len(RANGES) * PER_STAGE)
                .map(_fitted),
                wide=wide)
    def setup(self, seed: int, capacity: Optional[int], plans: list[FaultPlan], wide: bool) -> None:
        self.crashes = 0
        config = self.config
        hidden = config.width(wide)
        #: The longest prompt a start sends: short at tight capacity; otherwise the factory's,
        #: and a quarter of the values one engine's step may carry (a failure replays the whole
        #: history on every stage).
        self.longest = (MAX_PROMPT if capacity is not None
                        else longest_prompt(config.max_positions, hidden, share=MANY_HOPS))
        self.runner = CoordinatorRunner(
            config.factory, factory_name=config.factory_name, coordinator=config.coordinator_name,
            coordinator_factory=config.coordinator, seed=seed, plans=plans, capacity=capacity,
            tolerance=config.tolerance, hidden_size=hidden)

    def _sessions(self, open_: bool) -> list[str]:
        open_now = self.runner.open_sessions() if self.runner is not None else []
        return [sid for sid in SIDS if (sid in open_now) == open_]

    def _growing(self) -> list[str]:
        sessions = self.runner.sessions
        return [sid for sid in self._sessions(open_=True)
                if sessions[sid].length < sessions[sid].limit and not sessions[sid].gave_up]

    @precondition(lambda self: bool(self._sessions(open_=False)))
    @rule(data=st.data(), prompt=now_and_then(st.lists(st.integers(0, 63), min_size=1, max_size=MAX_PROMPT),
                                              seeded_runs))
    def start(self, data: st.DataObject, prompt: Any) -> None:
        prompt = capped(prompt, self.longest)
        sid = draw_one(data, self._sessions(open_=False))
        self._run({"op": "start", "session_id": sid, "prompt": prompt})

    @precondition(lambda self: bool(self._growing()))
    @rule(data=st.data())
    def next_token(self, data: st.DataObject) -> None:
        self._run({"op": "next", "session_id": draw_one(data, self._growing())})

    @precondition(lambda self: bool(self._sessions(open_=True)))
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        self._run({"op": "release", "session_id": draw_one(data, self._sessions(open_=True))})

    @precondition(lambda self: self.runner is not None and self.crashes < MAX_CRASHES
                  and hasattr(self.runner.engines[0], "crash"))
    @rule(node=st.integers(0, len(RANGES) * PER_STAGE - 1))
    def crash(self, node: int) -> None:
        self.crashes += 1
        self._run({"op": "crash", "node": node})
