"""The concurrent machine: an async coordinator, many sessions in flight, a cluster under a nemesis.

A *scenario* (:class:`Scenario`) is everything one run is made of: a seed (the
network's latencies and the engines' seed), a cluster (stages x replicas, a
capacity), a fault plan per node, a nemesis schedule, and a workload of clients.
Each client owns a session id and runs rounds: ``start`` with a prompt, some
``next_token`` requests, ``release``; the id is reused by the next round, and a
round may *stop early*: the client releases while a ``next_token`` is in flight,
as a user's stop does.  :func:`run_scenario` runs it all on one event loop on
virtual time (:mod:`fakeshard.testing._sim`), so one scenario is one
interleaving, always the same, and the run's history (:attr:`Run.events`) is a
list of plain values that a second run must reproduce exactly.

What is checked, as each request completes and at the end:

* **Streams.**  Every token a ``next_token`` returns continues the fault-free
  greedy stream of one FULL engine for the round's prompt: nothing lost,
  duplicated or altered, whatever raced.
* **Release.**  When a ``release`` returns, no reachable node present in the
  cluster holds cache or live state for the session (a node partitioned away
  cannot be reached; the end-of-run check below catches what stays there).  From
  then on, until the id starts again, no node is sent a ``prefill`` or ``decode``
  for it (a late ``release`` or ``cancel`` is cleanup, which a coordinator may have
  to finish where a node was unreachable).  Likewise no ``prefill`` or ``decode`` is
  sent to a node after ``on_nodes_changed`` returned without it (cleanup there is allowed).
* **Budget.**  A completed request made at most the calls of the budget of
  :func:`fakeshard.testing._coordinator_machine.call_budget` for its session (sent
  while it was in flight; requests of one session that overlap share their
  budgets), with ``S`` the stages, ``N`` every node the cluster has had, and ``F``
  the failures while it was in flight: calls anywhere that failed by something no
  coordinator controls (:data:`fakeshard.testing._sim.FAULT_OUTCOMES`), a call its
  caller stopped waiting for before it ended (counted then), nemesis
  events, and a cache miss of its session on a node that lost its memory since
  the session's last call there, or after a failure anywhere in the run (which may
  have moved its route, then or later), one miss of each session per failure.
  ``GaveUp`` only when ``F`` exceeds :data:`GIVE_UP_AFTER`.  A request left
  unanswered for :data:`REQUEST_TIMEOUT` seconds fails the run.
* **At the end** (the workload done, the nemesis schedule over, and
  :data:`SETTLE` more seconds for the coordinator's own cleanup), no node present
  holds memory.

Availability (the share of ``next_token`` requests, not stopped by a release,
answered with a token) is reported, and may be required (``availability=0.9``).
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from hypothesis import strategies as st

from fakeshard import (
    Crash,
    Delay,
    DropResponse,
    FaultPlan,
    FaultRule,
    Malformed,
    MemoryPressure,
    ShardSpec,
    wire,
)
from fakeshard._faults import MALFORMED_KINDS
from fakeshard._judge import Judge
from fakeshard.testing import _probes as probes
from fakeshard.testing._coordinator_machine import GIVE_UP_AFTER, call_budget
from fakeshard.testing._lengths import MANY_HOPS, capped, token_count, tokens_of
from fakeshard.testing._machines import fit_malformed, now_and_then, seeded_runs, spread
from fakeshard.testing._probes import SITUATIONS
from fakeshard.testing._reference_coordinator import GaveUp
from fakeshard.testing._runner import Divergence, ReferenceStreams
from fakeshard.testing._save import keep
from fakeshard.testing._sim import (
    FAULT_OUTCOMES,
    Call,
    LoopClock,
    Nemesis,
    World,
    held_words,
    holds,
    is_async_coordinator,
    new_loop,
)
from fakeshard.testing._trace import Trace, git_commit, hypothesis_version
from fakeshard.testing._view import saved_history

__all__ = ["Client", "ConcurrentFailure", "Round", "Run", "SITUATIONS", "Scenario", "builds_async", "reduce",
           "replay_concurrent", "run_concurrent", "run_scenario", "scenarios"]

#: Seconds a request may stay unanswered before the run fails for it.
REQUEST_TIMEOUT = 120.0
#: Seconds the world runs on after the workload and the nemesis, for the coordinator's cleanup.
SETTLE = 30.0
#: Layers each stage serves; the model has ``stages * LAYERS_PER_STAGE`` layers.
LAYERS_PER_STAGE = 2
class ConcurrentFailure(Divergence):
    """A concurrent run broke a check; ``trace`` replays it."""

    def __init__(self, message: str, trace: Optional[Trace] = None) -> None:
        super().__init__(message)
        self.trace = trace


# -- scenarios ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Round:
    """One session of a client: ``start(prompt)``, ``tokens`` next_token requests, ``release``.

    With ``stop`` set, the release is sent ``stop_after`` seconds after the ``stop``-th
    next_token (0-based) was, while it may still be in flight; the round ends there.
    """

    prompt: Any
    tokens: int
    stop: Optional[int] = None
    stop_after: float = 0.0
    pause: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"prompt": self.prompt, "tokens": self.tokens, "stop": self.stop, "stop_after": self.stop_after,
                "pause": self.pause}


@dataclass(frozen=True)
class Client:
    session_id: str
    start_at: float
    rounds: tuple[Round, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"session_id": self.session_id, "start_at": self.start_at,
                "rounds": [r.to_dict() for r in self.rounds]}


@dataclass(frozen=True)
class Scenario:
    """A whole run: seed, cluster, fault plans, nemesis schedule and workload."""

    seed: int
    stages: int
    replicas: int
    capacity: Optional[int]
    clients: tuple[Client, ...]
    plans: tuple[FaultPlan, ...]
    nemesis: tuple[Nemesis, ...] = ()
    hidden_size: int = 4

    def to_dict(self) -> dict[str, Any]:
        return {"seed": self.seed, "stages": self.stages, "replicas": self.replicas, "capacity": self.capacity,
                "hidden_size": self.hidden_size, "clients": [c.to_dict() for c in self.clients],
                "plans": [json.loads(wire.dumps(p)) for p in self.plans],
                "nemesis": [e.to_dict() for e in self.nemesis]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Scenario":
        return cls(
            seed=d["seed"], stages=d["stages"], replicas=d["replicas"], capacity=d["capacity"],
            hidden_size=d.get("hidden_size", 4),
            clients=tuple(Client(c["session_id"], c["start_at"], tuple(Round(**r) for r in c["rounds"]))
                          for c in d["clients"]),
            plans=tuple(wire.loads(json.dumps(p)) for p in d["plans"]),
            nemesis=tuple(Nemesis.from_dict(e) for e in d["nemesis"]))

    @property
    def engine_seed(self) -> int:
        """The seed of the engines and the reference streams (0, 1 or 2, as the other machines')."""
        return self.seed % 3

    def describe(self) -> str:
        requests = sum(r.tokens + 2 for c in self.clients for r in c.rounds)
        return (f"{len(self.clients)} clients ({requests} requests) over {self.stages} stages x {self.replicas} "
                f"replicas, capacity {self.capacity}, {sum(len(p.rules) for p in self.plans)} fault rules, "
                f"{len(self.nemesis)} nemesis events, seed {self.seed}")


def _ms(lo: int, hi: int) -> st.SearchStrategy[float]:
    return st.integers(lo, hi).map(lambda ms: ms / 1000)


#: Malformed outputs of every kind (a wide integer spreads them evenly); each node's are then
#: fitted to what its output can show (:func:`fakeshard.testing._machines.fit_malformed`).
_malformed = st.integers(0, 2**16).map(lambda i: Malformed(MALFORMED_KINDS[spread(i) % len(MALFORMED_KINDS)]))
#: A dropped response is drawn twice as often as each other fault: an ambiguous failure (the call
#: applied, its answer lost) is where coordinators most often go wrong, and a rule drops one or
#: two answers where a crash fails every call until a restart.  At equal odds a ``ci`` campaign
#: met about one ambiguous decode in ten scenarios, and a program campaign's 20 real-time runs
#: caught a coordinator that mishandles one in 10 of 12 campaigns.
_faults = st.one_of(st.just(Crash()), st.just(DropResponse()), st.just(DropResponse()), _malformed,
                    st.builds(Delay, _ms(100, 3000)), st.just(MemoryPressure()))
_rules = st.builds(FaultRule, fault=_faults, op=st.sampled_from(["any", "prefill", "decode", "decode", "release"]),
                   nth=st.integers(1, 12), count=st.integers(1, 2), probability=st.sampled_from([1.0, 0.5]))
_plans = st.builds(FaultPlan, st.lists(_rules, max_size=2).map(tuple), st.integers(0, 2**32))


@st.composite
def scenarios(draw: st.DrawFn, max_clients: int = 64, longest: int = 8448, hidden_size: int = 4,
              modes: tuple[str, ...] = ("refuse", "hang")) -> Scenario:
    """Scenarios of up to ``max_clients`` clients whose prompts stop at ``longest`` positions,
    partitions of the ``modes`` given.

    Clusters from 1 x 1 to 4 x 4; one in four at tight capacity (what every session at its
    longest needs at once, on each node).  Many clients now and then (9 to ``max_clients``).
    """
    stages, replicas = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    n_clients = draw(now_and_then(st.integers(2, min(8, max_clients)), st.integers(min(9, max_clients), max_clients),
                                  odds=3))
    short = st.lists(st.integers(0, 63), min_size=1, max_size=6)
    clients = []
    for c in range(n_clients):
        rounds = []
        for _ in range(draw(st.integers(1, 3))):
            prompt = capped(draw(now_and_then(short, seeded_runs)), longest)
            tokens = draw(st.integers(1, 6))
            stop = draw(now_and_then(st.none(), st.integers(0, tokens - 1), odds=3))
            rounds.append(Round(prompt, tokens, stop, draw(_ms(0, 60)) if stop is not None else 0.0,
                                draw(_ms(0, 200))))
        clients.append(Client(f"s{c}", draw(_ms(0, 500)), tuple(rounds)))
    tight = draw(st.integers(0, 3)) == 0
    capacity = sum(max(token_count(r.prompt) + r.tokens for r in c.rounds) for c in clients) if tight else None
    plans = tuple(fit_malformed(draw(_plans), last=stage == stages - 1)
                  for stage in range(stages) for _ in range(replicas))
    nodes = stages * replicas
    events = []
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.sampled_from(["crash", "crash", "partition", "partition", "leave", "join"]))
        at = draw(_ms(0, 4000))
        if kind == "join":
            events.append(Nemesis(at, "join", stage=draw(st.integers(0, stages - 1))))
        elif kind == "crash":
            events.append(Nemesis(at, "crash", node=draw(st.integers(0, nodes - 1)),
                                  restart_after=draw(st.none() | _ms(100, 5000))))
        elif kind == "partition":
            events.append(Nemesis(at, "partition", node=draw(st.integers(0, nodes - 1)),
                                  mode=draw(st.sampled_from(list(modes))), duration=draw(_ms(100, 10000))))
        else:
            events.append(Nemesis(at, "leave", node=draw(st.integers(0, nodes - 1))))
    return Scenario(draw(st.integers(0, 2**32 - 1)), stages, replicas, capacity, tuple(clients), plans,
                    tuple(events), hidden_size)


def targeted(hidden_size: int = 4) -> tuple[Scenario, ...]:
    """Scenarios that every campaign runs first, each built to meet one class of mistake with
    certainty rather than by the luck of a draw (the drawn scenarios follow, unchanged):

    * **a hang meets calls in flight**: two stages of two replicas, three sessions decoding,
      and the first head swallowing every call for 3 s (a half-open connection: no answer
      ever, not even after it heals): a coordinator with no timeout on a node call hangs;
    * **answers to check**: three stages of one node; the middle answers a prefill for
      another session (``Malformed("session")``) and the tail a decode with a token outside
      the vocabulary: a coordinator that passes answers on unchecked leaves the other
      session's cache on the tail (``leak``) or streams a wrong token;
    * **faults on prefills**: a prefill's answer held (``Delay``) and one refused for memory
      (``MemoryPressure``), then a refused partition longer than a coordinator's retries
      (a give-up beyond the budget), and a crash of a node whose call is held on it.
    """
    def plan(*rules: FaultRule) -> FaultPlan:
        return FaultPlan(rules)

    clients = tuple(Client(f"s{i}", 0.01 * i, (Round([1 + i, 2, 3, 4], 6), Round([5, i], 4))) for i in range(3))
    hang = Scenario(seed=11, stages=2, replicas=2, capacity=None, clients=clients, plans=(plan(),) * 4,
                    nemesis=(Nemesis(0.02, "partition", node=0, mode="hang", duration=3.0),),
                    hidden_size=hidden_size)
    answers = Scenario(
        seed=12, stages=3, replicas=1, capacity=None,
        clients=(Client("s0", 0.0, (Round([1, 2, 3], 4),)), Client("s1", 0.3, (Round([4, 5], 3),))),
        plans=(plan(), plan(FaultRule(Malformed("session"), op="prefill", nth=1, count=1)),
               plan(FaultRule(Malformed("token_range"), op="decode", nth=2, count=1))),
        hidden_size=hidden_size)
    prefills = Scenario(
        seed=13, stages=1, replicas=2, capacity=None,
        clients=(Client("s0", 0.0, (Round([1, 2], 3), Round([3, 4], 2))), Client("s1", 0.05, (Round([6], 2),)),
                 Client("s2", 1.0, (Round([7, 8], 2),))),
        plans=(plan(FaultRule(Delay(0.5), op="prefill", nth=1, count=1),
                    FaultRule(MemoryPressure(), op="prefill", nth=2, count=1)),
               plan(FaultRule(Delay(2.0), op="decode", nth=1, count=1))),
        nemesis=(Nemesis(0.5, "crash", node=1, restart_after=0.2),
                 Nemesis(0.9, "partition", node=0, mode="refuse", duration=30.0),
                 Nemesis(0.9, "partition", node=1, mode="refuse", duration=30.0)),
        hidden_size=hidden_size)
    return hang, answers, prefills


def with_targeted(hidden_size: int) -> Callable[[Any], Any]:
    """A campaign's search (a Hypothesis test of one ``sc``) that runs the :func:`targeted`
    scenarios first, as explicit examples: the drawn ones that follow are unchanged."""
    from hypothesis import example

    def decorate(search: Any) -> Any:
        for sc in reversed(targeted(hidden_size)):
            search = example(sc=sc)(search)
        return search
    return decorate


# -- a run ---------------------------------------------------------------------------------------

@dataclass
class _Request:
    rid: int
    session_id: str
    op: str
    invoked: float
    returned: Optional[float] = None
    outcome: str = "pending"
    token: Optional[int] = None
    error: str = ""
    #: Where its invocation and its completion stand among the run's (one count for both): the
    #: order in which they happened, which the loop's time does not tell apart at one instant.
    invoked_at: int = 0
    returned_at: Optional[int] = None


@dataclass
class Run:
    """What one run did: its events (the history a determinism check compares), its requests'
    outcomes, the situations it met, and the first failure (``None`` if every check held)."""

    events: list[dict[str, Any]] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)
    reached: Counter[str] = field(default_factory=Counter)
    next_requests: int = 0
    answered: int = 0
    failure: Optional[str] = None
    #: Which check failed: ``stream``, ``release``, ``after_release``, ``gone_node``, ``budget``,
    #: ``gave_up``, ``unanswered``, ``raised`` or ``leak``.
    check: Optional[str] = None
    without_effect: list[str] = field(default_factory=list)
    #: Plan faults that fired without an effect the node's log shows, by kind.
    quiet_faults: Counter[str] = field(default_factory=Counter)

    @property
    def availability(self) -> float:
        return self.answered / self.next_requests if self.next_requests else 1.0

    def add(self, run: "Run") -> None:
        """Add a run's counts into this campaign's total: its situations, requests and answers,
        and its nemesis events and plan faults without effect (every campaign sums the same)."""
        self.reached.update(set(run.reached))
        self.next_requests += run.next_requests
        self.answered += run.answered
        self.without_effect += run.without_effect
        self.quiet_faults.update(run.quiet_faults)

    def notes(self) -> list[str]:
        """What a campaign reports besides its situations: availability, and the nemesis events
        whose effect no node's log shows."""
        out = [f"availability {self.availability:.3f} ({self.answered} of {self.next_requests} next_token "
               "requests not stopped by a release answered with a token)"]
        if self.without_effect:
            shown = ", ".join(self.without_effect[:3]) + (", ..." if len(self.without_effect) > 3 else "")
            out.append(f"{len(self.without_effect)} nemesis events with no effect any node's log shows "
                       f"(drawn where no call met them; not a failure): {shown}")
        if self.quiet_faults:
            kinds = ", ".join(f"{kind} {n}" for kind, n in sorted(self.quiet_faults.items()))
            out.append(f"plan faults fired with no effect the node's own log shows (not a failure): {kinds}")
        return out


class _Failed(Exception):
    """Stops a run at its first broken check."""


class CoordinatorBroke(Exception):
    """The coordinator answered in a way no request may end in (a program that broke its
    protocol, or exited): fails the run at once, under ``check``."""

    def __init__(self, check: str, message: str) -> None:
        super().__init__(message)
        self.check = check


#: Rounds of cancellation :func:`stop_tasks` makes before it leaves tasks as they are.
STOP_ROUNDS = 20


def stop_tasks(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel every task left on ``loop`` and run it until they end.  A task that goes on after
    its cancellation, or one started meanwhile, is cancelled in the next round (Python 3.11's
    ``wait_for`` can swallow a cancellation); each round waits at most a second of the loop's
    time, and after :data:`STOP_ROUNDS` rounds what is left is left, so a run always ends."""
    for _ in range(STOP_ROUNDS):
        pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
        if not pending:
            return
        for task in pending:
            task.cancel()
        loop.run_until_complete(asyncio.wait(pending, timeout=1.0))


class _Runner:
    def __init__(self, factory: Callable[..., Any], scenario: Scenario, coordinator: Callable[..., Any],
                 tolerance: float = 0.0) -> None:
        self.factory, self.scenario, self.make = factory, scenario, coordinator
        self.spec = ShardSpec("concurrent-model", scenario.stages * LAYERS_PER_STAGE, 0,
                              scenario.stages * LAYERS_PER_STAGE, hidden_size=scenario.hidden_size, vocab_size=64)
        self.judge = Judge(factory, tolerance)
        self.streams = ReferenceStreams(factory, self.spec, scenario.engine_seed)
        self.run = Run()
        self.rids = itertools.count()
        self.moments = itertools.count()
        self.open: dict[str, list[_Request]] = {}
        #: Each session's completed requests, in order.
        self.done: dict[str, list[_Request]] = {}
        #: Session id -> when its release returned (compute calls after it break the rules).
        self.released: dict[str, float] = {}
        #: Session id -> the highest epoch of any call sent for it before its current round
        #: started: a cleanup call at that epoch or below is an earlier round's, not this round's.
        self.floor: dict[str, int] = {}
        #: How many of each session's cache misses the run's failures have excused (:meth:`_excused`).
        self.excused: Counter[str] = Counter()
        #: When each failure no coordinator controls became known (a failing call, a cache miss
        #: its node's own memory loss explains), in order: what a request's budget counts.
        self.fault_times: list[float] = []
        #: A broken rule seen in a callback (which must not raise), failed at the next check.
        self.pending_failure: Optional[tuple[str, str]] = None
        self.in_flight = self.max_in_flight = 0
        #: Sessions started and not released: churn while one is, is churn mid-session.
        self.live: set[str] = set()
        #: Seconds a request may stay unanswered before the run fails for it.
        self.request_timeout = REQUEST_TIMEOUT

    # -- driving --------------------------------------------------------------------------

    def go(self) -> Run:
        loop = new_loop()
        try:
            loop.run_until_complete(self._main(loop))
        except _Failed:
            pass
        finally:
            stop_tasks(loop)
            loop.close()
        self.run.events = self.world.events
        self.run.calls = [c.to_dict() for c in self.world.calls]
        return self.run

    async def _main(self, loop: asyncio.AbstractEventLoop) -> None:
        sc = self.scenario
        self.world = World(loop, self.factory, self.spec, stages=sc.stages, replicas=sc.replicas,
                           seed=sc.engine_seed, capacity=sc.capacity, plans=list(sc.plans))
        self.world.on_call = self._on_call
        self.world.on_abandoned = self._abandoned
        self.coordinator = self.make(self.world.stages(), clock=LoopClock(loop))
        if not is_async_coordinator(self.coordinator):
            raise TypeError(f"{type(self.coordinator).__name__} is not an async coordinator: start, next_token "
                            "and release must be coroutine functions")
        changed = getattr(self.coordinator, "on_nodes_changed", None)
        self.world.on_nodes_changed = self._nodes_changed(changed) if callable(changed) else None
        nemesis = loop.create_task(self.world.run_nemesis(list(sc.nemesis)))
        clients = [loop.create_task(self._client(c)) for c in sc.clients]
        await asyncio.gather(*clients)
        await nemesis
        await asyncio.sleep(SETTLE)
        self._final()

    def _nodes_changed(self, changed: Callable[..., Any]) -> Callable[..., Any]:
        def announce(stages: Any) -> Any:
            if self.live:
                self.run.reached["sim:churn_mid_session"] += 1
            return changed(stages)
        return announce

    async def _sleep(self, seconds: float) -> None:
        """Wait ``seconds`` of the scenario's time."""
        await asyncio.sleep(seconds)

    async def _observe(self, req: _Request) -> None:
        """Learn what the world saw while ``req`` was in flight, before it is judged (the
        simulation saw it all as it happened)."""

    async def _client(self, client: Client) -> None:
        await self._sleep(client.start_at)
        sid = client.session_id
        for rnd in client.rounds:
            got: list[int] = []
            prompt = tokens_of(rnd.prompt)
            self.released.pop(sid, None)
            self.floor[sid] = max((c.epoch for c in self.world.by_session.get(sid, ())
                                   if isinstance(c.epoch, int)), default=-1)
            self.live.add(sid)
            await self._request(sid, "start", prompt, prompt=prompt, got=got)
            stopped = False
            for i in range(rnd.tokens):
                if rnd.stop == i:
                    inflight = asyncio.get_running_loop().create_task(
                        self._request(sid, "next_token", prompt=prompt, got=got))
                    try:
                        await self._sleep(rnd.stop_after)
                        await self._request(sid, "release", prompt=prompt, got=got)
                    finally:
                        # Its outcome is judged in it; a failure in either ends the run.
                        await asyncio.gather(inflight, return_exceptions=True)
                    if inflight.exception() is not None:
                        raise inflight.exception()  # type: ignore[misc]
                    stopped = True
                    break
                if not await self._request(sid, "next_token", prompt=prompt, got=got):
                    break  # the coordinator gave up (beyond the budget): the user stops, and releases
            if not stopped:
                await self._request(sid, "release", prompt=prompt, got=got)
            await self._sleep(rnd.pause)

    async def _request(self, sid: str, op: str, *args: Any, prompt: list[int], got: list[int]) -> bool:
        """One request; whether it succeeded.  Judged when it completes."""
        loop = asyncio.get_running_loop()
        req = _Request(next(self.rids), sid, op, loop.time(), invoked_at=next(self.moments))
        self.open.setdefault(sid, []).append(req)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        self.world.record("invoke", request=req.rid, session=sid, op=op)
        try:
            result = await asyncio.wait_for(getattr(self.coordinator, op)(sid, *args), self.request_timeout)
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                # The run is stopping, and wait_for swallowed the cancellation: it returns the
                # result of a request that ended as it was cancelled (Python 3.11).
                raise asyncio.CancelledError
            req.outcome = "ok"
            if op == "next_token":
                req.token = result
        except asyncio.TimeoutError:
            req.outcome = "unanswered"
        except GaveUp as exc:
            req.outcome, req.error = "gave_up", str(exc)
        except CoordinatorBroke as exc:
            self._fail(exc.check, f"{op}({sid!r}): {exc}")
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # the run itself is stopping
            # The coordinator cancelled its own work for the request (a release that stops the
            # call in flight): judged below as any other exception.
            req.outcome, req.error = "raised", "CancelledError: the coordinator cancelled the request"
        except Exception as exc:  # judged below: only a raced next_token may end so
            req.outcome, req.error = "raised", f"{type(exc).__name__}: {exc}"
        req.returned = loop.time()
        req.returned_at = next(self.moments)
        self.open[sid].remove(req)
        self.in_flight -= 1
        self.world.record("complete", request=req.rid, session=sid, op=op, outcome=req.outcome, token=req.token)
        self.done.setdefault(sid, []).append(req)
        await self._observe(req)
        self._judge(req, prompt, got)
        return req.outcome == "ok"

    # -- the checks -------------------------------------------------------------------------

    def _fail(self, check: str, problem: str) -> None:
        if self.run.failure is None:
            self.run.failure = f"t={asyncio.get_running_loop().time():g}: {problem}"
            self.run.check = check
            self.world.record("failure", check=check, message=problem)
        raise _Failed(problem)

    def _on_call(self, call: Call) -> None:
        node = self.world.nodes[call.node]
        sid = call.session_id
        reached = self.run.reached
        reached[f"code:{call.outcome}"] += 1
        for kind in call.fired:
            reached[f"fault:{kind}"] += 1
            reached[f"sim:fault:{kind}:{call.op}"] += 1
        if call.outcome in ("refused", "hung", "crashed_mid_call"):
            reached[f"sim:call:{call.outcome}"] += 1
        if isinstance(sid, str) and call.op in ("prefill", "decode"):
            since = self.released.get(sid)
            if since is not None and call.sent >= since:
                self._fail_later("after_release",
                                 f"node {node.name} was sent {call.op} for session {sid!r} (epoch {call.epoch}) "
                                 f"at t={call.sent:g}, after its release returned at t={since:g}")
            if call.op == "prefill" and call.start_pos == 0 and call.outcome == "ok" and call.epoch:
                reached["sim:replay_new_epoch"] += 1
        if (call.op in ("prefill", "decode") and node.told_gone is not None
                and call.sent >= node.told_gone + self.world.gone_grace):
            # Compute sent there means the node is still in a route.  Cleanup (cancel, release)
            # is not: like a late release after a partition, it frees what the node may hold,
            # and on a node that left it harms nothing.
            self._fail_later("gone_node", f"node {node.name} was sent {call.op} for session {sid!r} at "
                             f"t={call.sent:g}, after the coordinator was told (t={node.told_gone:g}) that it "
                             "left the cluster: it is still in a route")
        if call.outcome in FAULT_OUTCOMES or (call.outcome == "cache_miss" and self._excused(call)):
            bisect.insort(self.fault_times, self.world.known_at(call))

    def _excused(self, call: Call) -> bool:
        """Whether a cache miss is a failure no coordinator controls: its node lost its memory
        since the session's last call there, or a failure happened anywhere in the run that has
        not yet excused a miss of this session.  A failure may move a shared route at once or at
        any later call (after a restart, at the next request), and a coordinator may learn so
        lazily, from the miss, and recover as from any failure; each failure excuses one miss of
        each session, so a route moved for nothing, or again and again, is still the coordinator's."""
        sid = call.session_id
        if call.after_wipe or not isinstance(sid, str):
            return call.after_wipe
        if self._faults_between(0.0, self.world.known_at(call)) > self.excused[sid]:
            self.excused[sid] += 1
            return True
        return False

    def _abandoned(self, call: Call, at: float) -> None:
        """A call its caller stopped waiting for (its own timeout on a late answer) failed, for
        the budget, when it did (unless it failed by a fault too, counted already)."""
        if call.outcome not in FAULT_OUTCOMES:
            bisect.insort(self.fault_times, at)

    def _fail_later(self, check: str, problem: str) -> None:
        if self.pending_failure is None:
            self.pending_failure = (check, problem)

    def _faults_between(self, start: float, end: float) -> int:
        """Failures no coordinator controls in ``[start, end]``: failing calls, excused cache
        misses (both as the loop's time when they were known) and nemesis events."""
        times = self.fault_times
        nemesis = self.world.nemesis_log
        return (bisect.bisect_right(times, end) - bisect.bisect_left(times, start)
                + bisect.bisect_right(nemesis, end, key=_at) - bisect.bisect_left(nemesis, start, key=_at))

    def _failures(self, req: _Request) -> int:
        """``F`` of completed ``req``'s budget: the failures while it was in flight."""
        assert req.returned is not None
        return self._faults_between(req.invoked, req.returned) + self._unseen_failures(req)

    def _unseen_failures(self, req: _Request) -> int:
        """Failures of ``req``'s calls that no node saw (none: the simulation sees every call)."""
        return 0

    def _sent_between(self, sid: str, start: float, end: float) -> list[Call]:
        """The session's calls sent in ``[start, end]``."""
        calls = self.world.by_session.get(sid, [])
        return calls[bisect.bisect_left(calls, start, key=_sent):bisect.bisect_right(calls, end, key=_sent)]

    def _judge(self, req: _Request, prompt: list[int], got: list[int]) -> None:
        if self.pending_failure is not None:
            self._fail(*self.pending_failure)
        assert req.returned is not None
        sid, op = req.session_id, req.op
        overlapping = self._overlapping(req)
        raced = op == "next_token" and any(r.op == "release" for r in overlapping)
        if raced:
            self.run.reached["sim:release_raced_token"] += 1
        faults = self._failures(req)
        if req.outcome == "unanswered":
            self._fail("unanswered", f"{op}({sid!r}) was left unanswered for {self.request_timeout:g} s"
                       + self._unanswered_why(req))
        if req.outcome == "gave_up":
            self.run.reached["sim:gave_up"] += 1
            if faults <= GIVE_UP_AFTER:
                self._fail("gave_up", f"{op}({sid!r}) gave up ({req.error}) with {faults} failures while it "
                           f"was in flight; giving up is allowed only beyond {GIVE_UP_AFTER}")
        elif req.outcome == "raised" and not raced:
            self._fail("raised", f"{op}({sid!r}) raised {req.error}")
        if op == "next_token" and not raced:
            self.run.next_requests += 1
            self.run.answered += req.outcome == "ok"
        if op == "next_token" and req.outcome == "ok":
            got.append(req.token)  # type: ignore[arg-type]
            problem = self.judge.stream_problem(self.spec, self.scenario.engine_seed, prompt, got, self.streams)
            if problem is not None:
                self._fail("stream", f"session {sid!r} streamed {got}, not the fault-free stream: {problem}")
        self._check_budget(req, overlapping, faults)
        if op == "release":
            self.live.discard(sid)
        if op == "release" and req.outcome == "ok":
            self.released[sid] = req.returned
            held = self._held(sid, self._unreachable(sid, req.invoked, req.returned))
            if held:
                self._fail("release", f"session {sid!r} was released, but {held}")

    def _unanswered_why(self, req: _Request) -> str:
        """What the calls of a request left unanswered say of why (appended to the failure)."""
        return self._hung_why(req)

    def _hung_why(self, req: _Request) -> str:
        """The request's last call, when a ``hang`` partition swallowed it: the coordinator sent
        nothing for the session after it, as one with no timeout on a node call does."""
        assert req.returned is not None
        calls = self._sent_between(req.session_id, req.invoked, req.returned)
        if not calls or calls[-1].outcome != "hung":
            return ""
        c = calls[-1]
        return (f"; its {c.op} to node {self.world.nodes[c.node].name} (epoch {c.epoch}, sent at t={c.sent:g}) was "
                "swallowed by a partition that hangs, and the coordinator sent nothing for the session after it: "
                "a node call with no timeout waits for ever")

    def _overlapping(self, req: _Request) -> list[_Request]:
        """The session's other requests in flight at some moment of completed ``req``."""
        assert req.returned is not None
        # A session's requests overlap one another only while a release races a next_token: the
        # last few completed ones are all that can.
        # In the order things happened, not by the clock: a request invoked after the one before
        # it returned (a client's next request, sent at the instant the last answer arrived) does
        # not overlap it, while a release sent at the instant its session's next_token ended, but
        # before it did, does.
        assert req.returned_at is not None
        return [r for r in self.done.get(req.session_id, [])[-3:] + self.open.get(req.session_id, [])
                if r is not req and r.invoked_at < req.returned_at
                and (r.returned_at is None or r.returned_at > req.invoked_at)]

    def _check_budget(self, req: _Request, overlapping: list[_Request], faults: int) -> None:
        problem = self._budget_problem(req, overlapping, faults)
        if problem is not None:
            self._fail("budget", problem)

    def _budget_problem(self, req: _Request, overlapping: list[_Request], faults: int) -> Optional[str]:
        """How completed ``req`` broke the budget, with ``faults`` failures while it was in flight
        (``None``: it kept to it)."""
        assert req.returned is not None
        sid = req.session_id
        floor = self.floor.get(sid, -1)
        window = [c for c in self._sent_between(sid, req.invoked, req.returned)
                  if not (c.op in ("cancel", "release") and isinstance(c.epoch, int) and c.epoch <= floor)]
        stages, nodes = self.scenario.stages, len(self.world.nodes)
        ops = [req.op] + [r.op for r in overlapping]
        for kind, names in (("compute", ("prefill", "decode")), ("cleanup", ("cancel", "release"))):
            made = sum(1 for c in window if c.op in names)
            allowed = sum(call_budget(_OPS[op], faults, kind, stages=stages, engines=nodes) for op in ops)
            if made > allowed:
                calls = ", ".join(f"{self.world.nodes[c.node].name} {c.op}(epoch {c.epoch}) -> {c.outcome}"
                                  for c in window)
                return (f"{req.op}({sid!r}) made {made} {kind} calls with {faults} failures while it was in "
                        f"flight; the budget is {allowed} (S = {stages} stages, N = {nodes} nodes): {calls}")
        return None

    def _unreachable(self, sid: str, start: float, end: float) -> set[int]:
        """Nodes a release in ``[start, end]`` could not be sure to reach: partitioned at some
        moment of it, or whose call for ``sid`` in it failed by a fault.  What they hold is
        judged at the end of the run instead."""
        out = {c.node for c in self._sent_between(sid, start, end) if c.outcome in FAULT_OUTCOMES | {"pending"}}
        # The events so far end at ``end``: a partition overlaps the release when it is still on
        # or healed at ``start`` or later.
        cut: set[int] = set()
        for e in self.world.nemesis_log:
            if e["kind"] == "partition" and "skipped" not in e:
                cut.add(e["node"])
            elif e["kind"] == "heal":
                cut.discard(e["node"])
                if e["t"] >= start:
                    out.add(e["node"])
        return out | cut

    def _held(self, sid: str, unreachable: set[int]) -> str:
        """What reachable nodes hold of the session's current round (an earlier round's rows,
        left where a release could not land, are judged at the end of the run)."""
        parts = []
        floor = self.floor.get(sid, -1)
        for node in self.world.nodes:
            if node.removed or node.partition is not None or node.index in unreachable:
                continue
            view = self.world.view(node, sid)
            if holds(view) and view.epoch > floor:
                parts.append(held_words(node.name, view))
        return "; ".join(parts)

    def _final(self) -> None:
        if self.pending_failure is not None:
            self._fail(*self.pending_failure)
        held = {node.name: self.world.used(node) for node in self.world.nodes
                if not node.removed and self.world.used(node)}
        if held:
            who = "; ".join(f"node {node.name} holds {self.world.used(node)} positions{self._holders(node)}"
                            for node in self.world.nodes if not node.removed and self.world.used(node))
            self._fail("leak", f"after every session was released and the cluster settled, nodes still hold positions: "
                       f"{held}: {who}")
        self._situations()

    def sessions_seen(self, node: Any) -> list[str]:
        """The session ids ``node`` was sent calls for, in the order first seen (a malformed
        answer passed on unchecked names a session no client opened, as ``'s0~'``)."""
        return [sid for sid, calls in self.world.by_session.items()
                if isinstance(sid, str) and any(c.node == node.index for c in calls)]

    def _holders(self, node: Any) -> str:
        """Which sessions ``node`` holds, and how, as words (``""`` when none is known)."""
        parts = []
        for sid in self.sessions_seen(node):
            view = self.world.view(node, sid)
            if holds(view):
                opened = "" if sid in self.floor else ", a session no client opened"
                parts.append(f"session {sid!r} {view.status} at epoch {view.epoch} with {view.cached_tokens} "
                             f"cached positions{opened}")
        return f" ({'; '.join(parts)})" if parts else ""

    def _situations(self) -> None:
        reached, nemesis = self.run.reached, self.world.nemesis_log
        for e in nemesis:
            if "skipped" not in e:
                reached[f"sim:nemesis:{e['kind']}"] += 1
        for k in (8, 32):
            if self.max_in_flight >= k:
                reached[f"sim:in_flight:{k}"] += 1
        # A re-route: a session's compute calls at one stage moving to another node.
        last: dict[tuple[str, int], int] = {}
        for c in self.world.calls:
            if c.op in ("prefill", "decode") and isinstance(c.session_id, str):
                key = (c.session_id, self.world.nodes[c.node].stage)
                if key in last and last[key] != c.node:
                    reached["sim:reroute"] += 1
                last[key] = c.node
        self.run.without_effect = self._without_effect()
        self.run.quiet_faults = self._quiet_faults()
        healed = {e["node"]: e["t"] for e in nemesis if e["kind"] == "heal"}
        if any(c.node in healed and c.sent >= healed[c.node] and c.outcome == "ok" for c in self.world.calls):
            reached["sim:partition_healed"] += 1

    def _without_effect(self) -> list[str]:
        """Nemesis events whose effect no node's log shows: a crash of a node no call then found
        down and that held nothing, a partition no call met, a join no call used."""
        quiet = []
        events = [e for e in self.world.nemesis_log if "skipped" not in e]
        calls = self.world.calls
        for e in events:
            node, t = e["node"], e["t"]
            if e["kind"] == "crash":
                seen = any(c.node == node and c.sent <= t and (c.done is None or c.done >= t) for c in calls) or any(
                    c.node == node and c.sent >= t and c.outcome in ("engine_crashed", "crashed_mid_call")
                    for c in calls)
            elif e["kind"] == "partition":
                seen = any(c.node == node and c.outcome in ("refused", "hung") and c.sent >= t for c in calls)
            elif e["kind"] == "join":
                seen = any(c.node == node for c in calls)
            else:
                continue
            if not seen:
                quiet.append(f"{e['kind']} of n{node} at t={t:g}")
        return quiet

    def _quiet_faults(self) -> Counter[str]:
        """Plan faults that fired on a call whose effect the node's own log does not show, by kind:
        a crash the call did not answer ``engine_crashed`` to, a dropped response not answered
        ``response_lost``, a malformed output the call's own check did not see (another stage or
        the stream check may), a delay that held nothing, memory pressure no later call on the
        node ran into."""
        quiet: Counter[str] = Counter()
        calls = self.world.calls
        answers = {"Crash": "engine_crashed", "DropResponse": "response_lost", "Malformed": "malformed_output"}
        for c in calls:
            for kind in c.fired:
                if kind == "MemoryPressure":
                    seen = any(o.node == c.node and o.outcome == "out_of_memory" for o in calls[c.seq:])
                elif kind == "Delay":
                    seen = c.held > 0
                else:
                    seen = answers.get(kind) == c.outcome
                if not seen:
                    quiet[kind] += 1
        return quiet


#: A request's name in the budget of :func:`call_budget`.
_OPS = {"start": "start", "next_token": "next", "release": "release"}


def run_scenario(factory: Callable[..., Any], scenario: Scenario, coordinator: Callable[..., Any], *,
                 tolerance: float = 0.0) -> Run:
    """Run ``scenario`` with the async coordinator ``coordinator(stages, clock=...)`` over
    engines from ``factory``; the run, with ``failure`` set at the first broken check."""
    return _Runner(factory, scenario, coordinator, tolerance).go()


def make_trace(scenario: Scenario, run: Run, *, factory_name: str, coordinator_name: str,
               evidence_class: str, note: str = "") -> Trace:
    """A run as a trace: the scenario (which replays it exactly), its events and its calls."""
    return Trace(machine="concurrent", engine_factory=factory_name, evidence_class=evidence_class,
                 config={"scenario": scenario.to_dict(), "coordinator": coordinator_name, "check": run.check},
                 steps=run.events, actual=run.calls, failure=run.failure, note=note,
                 hypothesis_version=hypothesis_version(), git_commit=git_commit())


def probes_of(run: Run) -> None:
    """Record the situations the run met (each once) where campaigns add probes up."""
    probes.record(sorted(run.reached))


def _at(event: dict[str, Any]) -> float:
    return float(event["t"])


def _sent(call: Call) -> float:
    return call.sent


# -- reduction ---------------------------------------------------------------------------------

#: The most re-runs a reduction makes (each a whole run; counted, not timed, so that a
#: reduction is as deterministic as the runs).
REDUCE_BUDGET = 200


def _fewer_replicas(sc: Scenario) -> Optional[Scenario]:
    """``sc`` with the last replica of every stage gone (its plan, the nemesis events on it)."""
    if sc.replicas < 2:
        return None
    r, k = sc.replicas, sc.replicas - 1
    first = sc.stages * r

    def moved(node: int) -> Optional[int]:
        if node >= first:  # a node that joined: numbered after the initial ones
            return node - sc.stages
        stage, replica = divmod(node, r)
        return None if replica == k else stage * k + replica

    events = []
    for e in sc.nemesis:
        if e.node is None:
            events.append(e)
        elif moved(e.node) is not None:
            events.append(Nemesis(**{**e.__dict__, "node": moved(e.node)}))
    plans = tuple(p for i, p in enumerate(sc.plans) if i % r != k)
    return Scenario(sc.seed, sc.stages, k, sc.capacity, sc.clients, plans, tuple(events), sc.hidden_size)


def _fewer_stages(sc: Scenario) -> Optional[Scenario]:
    """``sc`` with its last stage gone (its nodes' plans, the nemesis events on them, joins to it):
    a smaller model, split over one stage fewer."""
    if sc.stages < 2:
        return None
    r, last = sc.replicas, sc.stages - 1
    first = sc.stages * r
    joins = [e for e in sorted(sc.nemesis, key=lambda e: e.at) if e.kind == "join"]  # numbered as they happen

    def moved(node: int) -> Optional[int]:
        if node < first:
            return None if node // r == last else node
        join = joins[node - first] if node - first < len(joins) else None
        if join is None or join.stage == last:
            return None
        return first - r + sum(1 for j in joins[:node - first] if j.stage != last)

    events = []
    for e in sc.nemesis:
        if e.kind == "join":
            if e.stage != last:
                events.append(e)
        elif e.node is not None and moved(e.node) is not None:
            events.append(Nemesis(**{**e.__dict__, "node": moved(e.node)}))
    return Scenario(sc.seed, last, r, sc.capacity, sc.clients, sc.plans[:last * r], tuple(events), sc.hidden_size)


def _candidates(sc: Scenario) -> list[Scenario]:
    """Simpler scenarios than ``sc`` (fewer clients, nemesis events, stages, replicas, fault rules,
    rounds, tokens; shorter prompts), the biggest cuts first."""
    out = []
    n = len(sc.clients)
    for size in (n // 2, n // 4):
        if size >= 1:
            out += [_with(sc, clients=sc.clients[:size]), _with(sc, clients=sc.clients[size:])]
    out += [_with(sc, nemesis=sc.nemesis[:i] + sc.nemesis[i + 1:]) for i in range(len(sc.nemesis))]
    out += [_with(sc, clients=sc.clients[:i] + sc.clients[i + 1:]) for i in range(n) if n > 1]
    out += [fewer for fewer in (_fewer_stages(sc), _fewer_replicas(sc)) if fewer is not None]
    for i, plan in enumerate(sc.plans):
        for j in range(len(plan.rules)):
            simpler = FaultPlan(plan.rules[:j] + plan.rules[j + 1:], plan.seed)
            out.append(_with(sc, plans=sc.plans[:i] + (simpler,) + sc.plans[i + 1:]))
    for i, client in enumerate(sc.clients):
        rounds = client.rounds
        out += [_client(sc, i, rounds[:j] + rounds[j + 1:]) for j in range(len(rounds)) if len(rounds) > 1]
        for j, rnd in enumerate(rounds):
            if rnd.tokens > 1 and rnd.stop is None:
                out.append(_client(sc, i, rounds[:j] + (Round(rnd.prompt, 1, None, 0.0, rnd.pause),) + rounds[j + 1:]))
            if token_count(rnd.prompt) > 1:
                out.append(_client(sc, i, rounds[:j] + (Round([0], rnd.tokens, rnd.stop, rnd.stop_after, rnd.pause),)
                                   + rounds[j + 1:]))
    return out


def _with(sc: Scenario, **changes: Any) -> Scenario:
    return Scenario(**{**sc.__dict__, **changes})


def _client(sc: Scenario, i: int, rounds: tuple[Round, ...]) -> Scenario:
    clients = list(sc.clients)
    clients[i] = Client(clients[i].session_id, clients[i].start_at, rounds)
    return _with(sc, clients=tuple(clients))


def reduce(scenario: Scenario, fails: Callable[[Scenario], bool], budget: int = REDUCE_BUDGET) -> Scenario:
    """A simpler scenario for which ``fails`` still holds: greedy, the biggest cuts first, to a
    fixed point or ``budget`` re-runs."""
    tried = 0
    while tried < budget:
        for candidate in _candidates(scenario):
            if tried >= budget:
                break
            tried += 1
            if fails(candidate):
                scenario = candidate
                break
        else:
            break
    return scenario


# -- the campaign ------------------------------------------------------------------------------

#: The async coordinator a campaign tests when the one named is not async (or none is).
DEFAULT_ASYNC_COORDINATOR = "fakeshard.testing._async_coordinator:reference_async"


def examples_for(settings: Any) -> int:
    """Scenarios per campaign: a fifth of the profile's examples (a scenario is a whole run of
    many sessions), at least four."""
    return scenarios_for(settings.max_examples)


def scenarios_for(max_examples: int) -> int:
    """:func:`examples_for` of a profile of ``max_examples`` examples."""
    return max(max_examples // 5, 4)


def run_concurrent(config: Any, *, settings: Any = None, save_dir: Any = None, seed: Optional[int] = None,
                   availability: Optional[float] = None, reduce_failure: Optional[bool] = None) -> Run:
    """Run the concurrent campaign; the runs' situations summed into one :class:`Run`.

    ``config.coordinator`` (an async coordinator factory) is under test, else the kit's
    reference.  On the first failing scenario: reduce it (unless the profile says not
    to), save its trace under ``save_dir`` and raise :class:`ConcurrentFailure`.  With
    ``availability``, a campaign whose share of answered ``next_token`` requests is below
    it fails too.
    """
    from hypothesis import HealthCheck, Phase, given
    from hypothesis import settings as Settings

    from fakeshard.testing import _profiles as profiles
    from fakeshard.testing._draws import search_until_found
    from fakeshard.testing._lengths import longest_prompt

    settings = settings if settings is not None else Settings.default
    make, name = coordinator_of(config)
    total = Run()
    found: list[tuple[Scenario, Run]] = []
    longest = longest_prompt(config.max_positions, config.hidden_size, share=MANY_HOPS)

    def once(sc: Scenario) -> Run:
        return run_scenario(config.factory, sc, make, tolerance=config.tolerance)

    @with_targeted(config.hidden_size)
    @Settings(settings, max_examples=examples_for(settings), phases=[Phase.explicit, Phase.generate],
              database=None, deadline=None, suppress_health_check=list(HealthCheck), print_blob=False)
    @given(scenarios(longest=longest, hidden_size=config.hidden_size))
    def search(sc: Scenario) -> None:
        if found:
            return
        run = once(sc)
        config.runs += 1
        config.steps += sum(1 for e in run.events if e["event"] == "complete")
        if config.on_step is not None:
            config.on_step(config)
        total.add(run)
        probes_of(run)
        if run.failure is not None:
            found.append((sc, run))
            raise ConcurrentFailure("found")

    search_until_found(search, found, seed)
    if not found:
        return check_availability(total, availability)
    scenario, run = found[0]
    if reduce_failure is None:
        reduce_failure = profiles.reduces_failures()
    if reduce_failure:
        check = run.check
        scenario = reduce(scenario, lambda c: once(c).check == check)
        run = once(scenario)
    evidence = getattr(config.factory, "evidence_class", "fixture")
    trace = make_trace(scenario, run, factory_name=config.factory_name, coordinator_name=name,
                       evidence_class=evidence if isinstance(evidence, str) else "fixture")
    message = f"concurrent run failed on {config.factory_name} with {name}: {run.failure}\n{scenario.describe()}"
    path = keep(trace, config, save_dir, lambda: saved_history(trace))
    if path is not None:
        message += f"\nfakeshard: trace saved to {path}"
    config.last_failure = trace
    raise ConcurrentFailure(message, trace)


def check_availability(total: Run, availability: Optional[float]) -> Run:
    """``total``, a campaign's runs summed, unless its share of answered ``next_token`` requests is
    below ``availability`` (``None``: not judged): then :class:`ConcurrentFailure` saying so."""
    if availability is not None and total.availability < availability:
        raise ConcurrentFailure(f"availability {total.availability:.3f} ({total.answered} of "
                                f"{total.next_requests} next_token requests answered) is below {availability}")
    return total


def coordinator_of(config: Any) -> tuple[Callable[..., Any], str]:
    """The async coordinator factory a campaign tests, and its name."""
    from fakeshard._factory import import_callable

    make = getattr(config, "coordinator", None)
    name = getattr(config, "coordinator_name", None)
    if make is not None and name and builds_async(make):
        return make, name
    return import_callable(DEFAULT_ASYNC_COORDINATOR, "coordinator factory", TypeError), DEFAULT_ASYNC_COORDINATOR


def builds_async(make: Callable[..., Any]) -> bool:
    """Whether ``make`` builds an async coordinator (tried on a small cluster)."""
    from fakeshard import FakeShardEngine

    loop = new_loop()
    try:
        world = World(loop, FakeShardEngine, ShardSpec("probe", 2, 0, 2, hidden_size=4, vocab_size=64),
                      stages=1, replicas=1, seed=0, capacity=None, plans=[FaultPlan()])
        return is_async_coordinator(make(world.stages(), clock=LoopClock(loop)))
    except Exception:
        return False
    finally:
        loop.close()


@dataclass
class Replayed:
    """A concurrent trace run again: the new run, and whether its history is the saved one."""

    run: Run
    same_history: bool


def replay_concurrent(trace: Trace, factory: Callable[..., Any], coordinator: Optional[str] = None,
                      tolerance: float = 0.0) -> Replayed:
    """Run ``trace``'s scenario again (with ``coordinator``, else the one it names)."""
    from fakeshard._factory import import_callable

    scenario = Scenario.from_dict(trace.config["scenario"])
    name = coordinator or trace.config.get("coordinator") or DEFAULT_ASYNC_COORDINATOR
    make = import_callable(name, "coordinator factory", TypeError)
    run = run_scenario(factory, scenario, make, tolerance=tolerance)
    return Replayed(run, run.events == trace.steps)


def timeline(events: list[dict[str, Any]], limit: int = 60) -> str:
    """A run's events as text, one a line (the last ``limit``, ending at a failure)."""
    lines = []
    for e in events:
        data = " ".join(f"{k}={v}" for k, v in e.items() if k not in ("t", "event") and v is not None)
        lines.append(f"  t={e['t']:<10g} {e['event']:<9} {data}")
    if len(lines) > limit:
        lines = [f"  ... {len(lines) - limit} earlier events"] + lines[-limit:]
    return "\n".join(lines)
