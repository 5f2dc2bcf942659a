"""The Pipeline failover machine: stages, spares, faults, and the reference coordinator.

Invariant: every session's tokens equal the fault-free stream (computed on
one fresh FULL engine): no token lost, none duplicated, none changed; after
every session is released, no node holds memory.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from typing import Any, Callable, Optional

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
    SampleBundle,
    ShardError,
    ShardSpec,
    VirtualClock,
    wire,
)
from fakeshard._faults import MALFORMED_KINDS
from fakeshard._judge import Judge
from fakeshard._topology import stage_ranges
from fakeshard.testing import _probes as probes
from fakeshard.testing._draws import draw_one
from fakeshard.testing._lengths import MANY_HOPS, capped, longest_prompt, tokens_of
from fakeshard.testing._machines import FinishingMachine, fit_malformed, now_and_then, seeded_runs, wide
from fakeshard.testing._reference_coordinator import LINK_FORMS, Coordinator, WireLink
from fakeshard.testing._runner import Divergence, InvalidStep, ReferenceStreams, view_state
from fakeshard.testing._trace import Trace, git_commit, hypothesis_version

SPEC = ShardSpec("failover-model", n_layers=6, start_layer=0, end_layer=6, hidden_size=4, vocab_size=64)
RANGES = stage_ranges(3)
SPARES_PER_STAGE = 1
N_NODES = len(RANGES) * (1 + SPARES_PER_STAGE)
SIDS = ("p", "q", "r")


def failover_spec(hidden_size: int = 4) -> ShardSpec:
    """The failover machine's model (``SPEC``), at the given width."""
    return dataclasses.replace(SPEC, hidden_size=hidden_size)


class FailoverRunner:
    """Nodes built from the factory with their fault plans, a coordinator, and the reference streams."""

    def __init__(self, factory: Callable[..., Any], *, factory_name: str, seed: int,
                 plans: list[FaultPlan], tolerance: float = 0.0, hidden_size: int = 4) -> None:
        if len(plans) != N_NODES:
            raise ValueError(f"failover needs {N_NODES} fault plans, got {len(plans)}")
        self.factory, self.seed = factory, seed
        self.spec = failover_spec(hidden_size)
        self.judge = Judge(factory, tolerance)
        self.clock = VirtualClock()
        # Node k serves range k % 3; the first three form the route, the rest are spares.
        nodes = [factory(self.spec.with_layers(*RANGES[k % len(RANGES)]), seed=seed, clock=self.clock,
                         faults=plans[k]) for k in range(N_NODES)]
        links = [WireLink(node, LINK_FORMS[k % len(LINK_FORMS)]) for k, node in enumerate(nodes)]
        route = links[:len(RANGES)]
        spares = [[links[k] for k in range(len(RANGES), N_NODES) if k % len(RANGES) == i]
                  for i in range(len(RANGES))]
        self.coordinator = Coordinator(route, spares)
        self.all_nodes = nodes
        #: The next greedy tokens after a history on a fresh fault-free FULL engine (cached).
        self.continuation = ReferenceStreams(factory, self.spec, seed)
        self.trace = Trace(
            machine="failover", engine_factory=factory_name, evidence_class=str(nodes[0].evidence_class),
            config={"seed": seed, "hidden_size": hidden_size,
                    "fault_plans": [json.loads(wire.dumps(p)) for p in plans]},
            hypothesis_version=hypothesis_version(), git_commit=git_commit(),
        )

    @classmethod
    def from_trace(cls, trace: Trace, factory: Callable[..., Any], factory_name: str,
                   tolerance: float = 0.0) -> "FailoverRunner":
        plans = [wire.loads(json.dumps(p)) for p in trace.config["fault_plans"]]
        return cls(factory, factory_name=factory_name, seed=trace.config["seed"], plans=plans,
                   tolerance=tolerance, hidden_size=trace.config.get("hidden_size", 4))

    def reference(self, sid: str, n: int) -> list[int]:
        """The first ``n`` tokens a fault-free FULL engine generates for the session's prompt."""
        return self.continuation(self.coordinator.sessions[sid].prompt, n)

    def run(self, step: dict[str, Any]) -> None:
        op, sid = step["op"], step["session_id"]
        c = self.coordinator
        errors_before, fired_before = c.errors.copy(), self._fired()
        if op not in ("start", "next", "release", "cancel"):
            raise InvalidStep(f"unknown failover step {op!r}")
        is_open = sid in c.sessions and c.sessions[sid].open
        if is_open != (op != "start"):
            raise InvalidStep(f"{op} of session {sid!r}, which is {'open' if is_open else 'not open'}")
        self.trace.steps.append(step)
        before = (c.reroutes, c.replays)
        calls_before = len(c.calls)
        try:
            if op == "start":
                c.start(sid, tokens_of(step["prompt"]))
                result: Any = None
            elif op == "next":
                result = c.next_token(sid)
            elif op == "cancel":
                c.cancel(sid)
                result = None
            else:
                c.release(sid)
                result = None
        except Exception as exc:
            self.trace.actual.append({"outcome": "exception", "type": type(exc).__name__, "message": str(exc)})
            self.trace.failure = f"step {len(self.trace.steps)} ({op} {sid}): {type(exc).__name__}: {exc}"
            raise
        s = c.sessions[sid]
        self.trace.actual.append({"outcome": "ok", "token": result, "epoch": s.epoch})
        self.trace.expected.append({"outcome": "ok", "tokens": self.reference(sid, len(s.generated))})
        probes.record(["failover:" + op] + (["failover:reroute"] if c.reroutes > before[0] else [])
                      + (["failover:replay"] if c.replays > before[1] else [])
                      + [f"code:{code}" for code in (c.errors - errors_before).elements()]
                      + [f"fault:{name}" for name in (self._fired() - fired_before).elements()])
        problem = self.answers_problem(c.calls[calls_before:]) or self.invariant_problem()
        if problem is None and op == "cancel":
            problem = self.cancelled_problem(sid)
        if problem is not None:
            self.trace.failure = f"step {len(self.trace.steps)} ({op} {sid}): {problem}"
            raise Divergence(self.trace.failure)

    @staticmethod
    def answers_problem(calls: list[tuple[str, str, int, Any, Any]]) -> Optional[str]:
        """Every answer a Pipeline gave answers its request, and every error names the request's
        session and epoch (the contract's Errors table; a Pipeline checks each stage's output
        against the request before passing anything on)."""
        for op, sid, epoch, pos, outcome in calls:
            if isinstance(outcome, ShardError):
                if (outcome.session_id, outcome.epoch) != (sid, epoch):
                    return (f"{op} of {sid!r} at epoch {epoch} failed with {outcome.code} naming session "
                            f"{outcome.session_id!r} epoch {outcome.epoch!r}")
            elif op in ("prefill", "decode"):
                got = (getattr(outcome, "session_id", None), getattr(outcome, "epoch", None),
                       getattr(outcome, "pos", None))
                if not isinstance(outcome, SampleBundle) or got != (sid, epoch, pos):
                    return (f"the pipeline's {op} of {sid!r} at epoch {epoch}, for the token at {pos}, "
                            f"answered {outcome!r}")
            elif outcome is not None:
                return f"the pipeline's {op} of {sid!r} returned {outcome!r}, not None"
        return None

    def cancelled_problem(self, sid: str) -> Optional[str]:
        """After a cancel, every node of the route holds the session cancelled at its epoch, with
        nothing cached (the contract's session table, cancel column)."""
        epoch = self.coordinator.sessions[sid].epoch
        for stage, node in enumerate(self.coordinator.route):
            got = view_state(node.session(sid))
            if got != (epoch, "cancelled", 0):
                return f"after cancelling {sid!r} at epoch {epoch}, stage {stage} holds it as {got}"
        return None

    def _fired(self) -> Counter[str]:
        """Faults fired so far, by kind, where the engine reports them (``fault_log`` is not
        part of the contract: an engine without it shows none here)."""
        fired: Counter[str] = Counter()
        for node in self.all_nodes:
            for f in getattr(node, "fault_log", ()):
                fired[type(f.fault).__name__] += 1
        return fired

    def invariant_problem(self) -> Optional[str]:
        for sid, s in sorted(self.coordinator.sessions.items()):
            problem = self.judge.stream_problem(self.spec, self.seed, s.prompt, s.generated,
                                                self.continuation)
            if problem is not None:
                return f"session {sid!r} streamed {s.generated}, not the fault-free stream: {problem}"
        return None

    def finish(self) -> None:
        """Release every open session; then no node may hold memory."""
        for sid, s in sorted(self.coordinator.sessions.items()):
            if s.open:
                self.run({"op": "release", "session_id": sid})
        held = {k: node.used_tokens for k, node in enumerate(self.all_nodes) if node.used_tokens}
        if held:
            self.trace.failure = f"after releasing every session, nodes still hold positions: {held}"
            raise Divergence(self.trace.failure)


node_faults = st.one_of(
    st.just(Crash()), st.just(DropResponse()),
    # A wide integer spreads the kinds evenly (see fakeshard.testing._machines.roles).
    st.integers(0, 2**16).map(lambda i: Malformed(MALFORMED_KINDS[i % len(MALFORMED_KINDS)])),
    st.builds(Delay, st.sampled_from([0.5, 1.0])), st.just(MemoryPressure()),
)
node_rules = st.builds(
    FaultRule, fault=node_faults, op=st.sampled_from(["any", "prefill", "decode", "release"]),
    session_id=st.none() | st.sampled_from(SIDS), nth=st.integers(1, 8), count=st.integers(1, 2),
    probability=st.sampled_from([1.0, 0.5]),
)
node_plans = st.builds(FaultPlan, st.lists(node_rules, max_size=2).map(tuple), st.integers(0, 2**32))


def _fitted(plans: list[FaultPlan]) -> list[FaultPlan]:
    """Each node's plan with its ``Malformed`` kinds fitted to its output (node ``k`` serves
    range ``k % 3``; the last range's output is a sample)."""
    return [fit_malformed(plan, last=k % len(RANGES) == len(RANGES) - 1) for k, plan in enumerate(plans)]


class FailoverMachine(FinishingMachine):
    """Sessions through head -> middle -> tail with spares, under per-node fault plans."""

    machine_name = "failover"

    @initialize(seed=st.integers(0, 2), plans=st.lists(node_plans, min_size=N_NODES, max_size=N_NODES).map(_fitted),
                wide=wide)
    def setup(self, seed: int, plans: list[FaultPlan], wide: bool) -> None:
        hidden = self.config.width(wide)
        #: The longest prompt a start sends: the factory's, and a quarter of the values a single
        #: engine's step may carry (every hop of this machine crosses the wire, each failure replays).
        self.longest = longest_prompt(self.config.max_positions, hidden, share=MANY_HOPS)
        self.runner = FailoverRunner(self.config.factory, factory_name=self.config.factory_name,
                                     seed=seed, plans=plans, tolerance=self.config.tolerance,
                                     hidden_size=hidden)

    def _sessions(self, open_: bool) -> list[str]:
        sessions = self.runner.coordinator.sessions if self.runner is not None else {}
        return [sid for sid in SIDS if (sid in sessions and sessions[sid].open) == open_]

    @precondition(lambda self: bool(self._sessions(open_=False)))
    @rule(data=st.data(), prompt=now_and_then(st.lists(st.integers(0, 63), min_size=1, max_size=6), seeded_runs))
    def start(self, data: st.DataObject, prompt: Any) -> None:
        prompt = capped(prompt, self.longest)
        sid = draw_one(data, self._sessions(open_=False))
        self._run({"op": "start", "session_id": sid, "prompt": prompt})

    @precondition(lambda self: bool(self._sessions(open_=True)))
    @rule(data=st.data())
    def next_token(self, data: st.DataObject) -> None:
        self._run({"op": "next", "session_id": draw_one(data, self._sessions(open_=True))})

    @precondition(lambda self: bool(self._sessions(open_=True)))
    @rule(data=st.data(), op=st.sampled_from(["release", "release", "cancel"]))
    def release(self, data: st.DataObject, op: str) -> None:
        self._run({"op": op, "session_id": draw_one(data, self._sessions(open_=True))})
