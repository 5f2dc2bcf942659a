"""A cluster under deterministic simulation: nodes, network, clock and nemesis on one event loop.

The world of a concurrent coordinator test.  Everything runs in one process on
one asyncio event loop whose time is virtual (:class:`VirtualTimeLoop`:
``asyncio.sleep``, ``loop.time()``, ``asyncio.wait_for`` follow it, and an idle
loop jumps to its next timer at once).  Every random choice (a hop's latency, a call's service
time) is drawn from one generator seeded by the scenario, in the order the loop
makes the calls, so one seed gives one interleaving, event for event.

* A :class:`SimNode` is an engine from the factory under test, with its place in
  the cluster (stage, layer range), its state on the network (reachable,
  partitioned so that calls are refused or hang, removed) and its own log of
  every call it was sent (:class:`Call`).
* An :class:`AsyncNode` is what the coordinator holds: the engine's contract
  calls as coroutines (``await node.prefill(bundle)``, ``decode``, ``cancel``,
  ``release``, ``session``, ``restart``), raising the contract's typed errors.
  Each call is a network hop: the request travels (a drawn latency), waits its
  service time on the node, is applied there at one instant, and the answer
  travels back.  A call once sent is delivered even if its caller stops
  waiting (a cancelled ``await`` does not unsend a request).
* What the network does maps to the contract as a served node's client maps it
  (``fakeshard.remote``): a refused connection (a node that left, or a
  partition that refuses) is ``EngineCrashed``, nothing applied; a partition
  that hangs swallows the request and never answers, so only the caller's
  own timeout ends the wait; a node that crashes while a call is on it answers
  ``EngineCrashed`` (whatever the call did died with the node's memory).
* :class:`Nemesis` events (crash, restart, partition and heal, a node leaving
  or joining) happen at virtual moments, between or during calls.

The checks of a run live in :mod:`fakeshard.testing._concurrent`; this module
only builds the world and records what happened in it.
"""

from __future__ import annotations

import asyncio
import inspect
import random
import selectors
from dataclasses import dataclass
from typing import Any, Callable, Optional

from fakeshard import EngineCrashed, FaultPlan, ResponseLost, ShardError, ShardSpec
from fakeshard._clock import _check_seconds
from fakeshard._pipeline import answer_problem
from fakeshard._topology import stage_ranges

__all__ = ["FAULT_OUTCOMES", "NETWORK_FAULT_OUTCOMES", "NODE_FAULT_OUTCOMES", "AsyncNode", "Call", "Deadlock",
           "LoopClock", "Nemesis", "NemesisWorld", "SimNode", "VirtualTimeLoop", "World", "is_async_coordinator",
           "new_loop"]

#: A one-way hop's latency, seconds: drawn uniformly, in whole microseconds.
HOP = (0.000_5, 0.020)
#: How long a call waits on its node before it is applied, seconds.
SERVICE = (0.0, 0.010)
#: Outcomes of a call that no coordinator can prevent, and that count as failures in its
#: budget: the node's (a fault plan's, or a crash between calls), and, where a network stands
#: between coordinator and node, the network's and a crash in the middle of a call.
NODE_FAULT_OUTCOMES = frozenset({"engine_crashed", "response_lost", "out_of_memory", "malformed_output"})
NETWORK_FAULT_OUTCOMES = frozenset({"refused", "hung", "crashed_mid_call", "reset"})
FAULT_OUTCOMES = NODE_FAULT_OUTCOMES | NETWORK_FAULT_OUTCOMES


def holds(view: Any) -> bool:
    """Whether a node's view of a session (``None``: it knows none) holds anything of it: live
    state, or cached positions. A released or cancelled session's tombstone holds neither. The
    one definition of "still held" that the coordinator machines' release and leak checks judge by."""
    return view is not None and (view.status == "live" or bool(view.cached_tokens))


def held_words(node: Any, view: Any) -> str:
    """What node ``node`` (its name or index) holds of a session, in words."""
    return f"node {node} holds it {view.status} at epoch {view.epoch} with {view.cached_tokens} cached positions"


class Deadlock(RuntimeError):
    """Every task waits, and no timer is set: on virtual time nothing can ever happen again."""


class _VirtualSelector(selectors.DefaultSelector):
    """The loop's selector: I/O is polled without waiting; where the loop would wait for a
    timer, virtual time jumps to it instead."""

    def __init__(self, loop: "VirtualTimeLoop") -> None:
        super().__init__()
        self._loop = loop

    def select(self, timeout: Optional[float] = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = super().select(0)
        if ready or timeout == 0:
            return ready
        if timeout is None:
            raise Deadlock("every task waits for something no timer will bring: the run can never go on")
        self._loop.advance(timeout)
        return []


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An asyncio event loop whose time is virtual: it starts at 0 and moves only when every
    task waits, straight to the next timer.  ``asyncio.sleep``, ``loop.time()``,
    ``asyncio.wait_for`` and every other timeout follow it; the wall clock is never read.

    Written here rather than taken from ``looptime``: looptime (0.8, 0.9) installs a pytest
    plugin that fails every fixture's setup where pytest-asyncio is not installed, and this
    kit runs inside its users' pytest sessions.  What is needed is small: a selector that
    never waits, and a clock it moves.
    """

    def __init__(self) -> None:
        self._virtual_now = 0.0
        super().__init__(selector=_VirtualSelector(self))

    def time(self) -> float:
        return self._virtual_now

    def advance(self, seconds: float) -> None:
        if seconds > 0:
            self._virtual_now += seconds


def new_loop() -> VirtualTimeLoop:
    """A fresh event loop on virtual time, starting at 0."""
    return VirtualTimeLoop()


def is_async_coordinator(coordinator: Any) -> bool:
    """Whether ``coordinator``'s ``start``, ``next_token`` and ``release`` are coroutine functions."""
    return all(inspect.iscoroutinefunction(getattr(coordinator, m, None)) for m in ("start", "next_token", "release"))


class LoopClock:
    """The clock an async coordinator is given: the loop's virtual time.

    ``now()`` is ``loop.time()``; ``await clock.sleep(s)`` is ``asyncio.sleep(s)``.  A
    coordinator may as well use ``asyncio`` directly: both follow the same virtual time.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def now(self) -> float:
        return self._loop.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class _EngineClock:
    """An engine's clock inside the simulation: ``now()`` is the loop's time plus what the
    current call has slept; ``sleep`` (a ``Delay`` fault) adds to that, and the node then
    holds the answer that long on the loop's time."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop, self.slept = loop, 0.0

    def now(self) -> float:
        return self._loop.time() + self.slept

    def sleep(self, seconds: float) -> None:
        self.slept += _check_seconds(seconds)

    def take(self) -> float:
        slept, self.slept = self.slept, 0.0
        return slept


@dataclass
class Call:
    """One call as its node's log keeps it."""

    seq: int
    node: int
    op: str
    session_id: Any
    epoch: Any
    #: For prefill and decode: the first position and how many the call carries.
    start_pos: Optional[int]
    positions: int
    sent: float
    arrived: Optional[float] = None
    #: When the node sent its answer back (``None``: it never did).
    answered: Optional[float] = None
    done: Optional[float] = None
    #: ``ok``, an error code, ``malformed_output``, ``refused``, ``hung``, ``crashed_mid_call``;
    #: ``pending`` until known.  ``abandoned`` marks a call whose caller stopped waiting.
    outcome: str = "pending"
    abandoned: bool = False
    #: Faults the node's plan fired on this call, by kind.
    fired: tuple[str, ...] = ()
    #: Seconds the node held its answer (a ``Delay`` fault).
    held: float = 0.0
    #: Whether the node lost its memory (a crash, a restart) since the session's previous call
    #: there was applied: a cache miss it explains is no fault of the coordinator.
    after_wipe: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "node": self.node, "op": self.op, "session_id": self.session_id,
                "epoch": self.epoch, "start_pos": self.start_pos, "positions": self.positions,
                "sent": self.sent, "arrived": self.arrived, "answered": self.answered, "done": self.done,
                "outcome": self.outcome, "abandoned": self.abandoned, "fired": list(self.fired), "held": self.held,
                "after_wipe": self.after_wipe}


@dataclass
class SimNode:
    """A node of the cluster: an engine, where it sits, and its state on the network."""

    index: int
    stage: int
    spec: ShardSpec
    engine: Any
    clock: _EngineClock
    #: ``None`` (reachable), ``"refuse"`` or ``"hang"``.
    partition: Optional[str] = None
    removed: bool = False
    #: Goes up at every crash and removal: a call that sees it move while on the node lost its node.
    lives: int = 0
    #: Goes up whenever the node loses its memory (a crash, a restart, a removal).
    wipes: int = 0
    #: When the coordinator's ``on_nodes_changed`` returned after this node left (``None``: not
    #: told): a call sent to the node after that is a call to a node it knows is gone.
    told_gone: Optional[float] = None

    @property
    def name(self) -> str:
        return f"n{self.index}"

    def can_crash(self) -> bool:
        return callable(getattr(self.engine, "crash", None))


@dataclass(frozen=True)
class Nemesis:
    """One event of the nemesis schedule, at virtual time ``at``.

    ``kind`` is ``crash`` (the node goes down; ``restart_after`` seconds later it is
    restarted empty, or never by the nemesis when ``None``), ``partition`` (for
    ``duration`` seconds the node's calls are refused, ``mode="refuse"``, hang,
    ``mode="hang"``, or are applied and their answers cut, ``mode="reset"``), ``leave``
    (the node is removed from the cluster) or ``join`` (a new node for ``stage`` joins).
    Churn is announced to the coordinator.
    """

    at: float
    kind: str
    node: Optional[int] = None
    stage: Optional[int] = None
    mode: Optional[str] = None
    duration: Optional[float] = None
    restart_after: Optional[float] = None

    KINDS = ("crash", "partition", "leave", "join")

    def __post_init__(self) -> None:
        if self.kind not in self.KINDS:
            raise ValueError(f"Nemesis.kind must be one of {self.KINDS}, got {self.kind!r}")
        if self.kind == "join" and self.stage is None:
            raise ValueError("a join names the stage the new node serves")
        if self.kind != "join" and self.node is None:
            raise ValueError(f"a {self.kind} names its node")
        if self.kind == "partition" and (self.mode not in ("refuse", "hang", "reset") or not self.duration):
            raise ValueError("a partition has mode 'refuse', 'hang' or 'reset' and a duration > 0")

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Nemesis":
        return cls(**d)

    def describe(self) -> str:
        if self.kind == "crash":
            back = "" if self.restart_after is None else f", restarted {self.restart_after:g} s later"
            return f"t={self.at:g} crash n{self.node}{back}"
        if self.kind == "partition":
            return f"t={self.at:g} partition n{self.node} ({self.mode}) for {self.duration:g} s"
        if self.kind == "leave":
            return f"t={self.at:g} n{self.node} leaves"
        return f"t={self.at:g} a node joins stage {self.stage}"


class NemesisWorld:
    """What a nemesis schedule does to a cluster, whichever cluster it is: when each event
    happens, which events are skipped (no such node, a node that left, a stage's last node),
    what is recorded, when the coordinator is told, and what is undone later.  A world says
    how (``_join``, ``_crash``, ``_partition``, ``_leave``, ``_left``, ``_restart``, ``_heal``,
    ``stages``, ``record``); :class:`World` on virtual time, the served cluster of
    :mod:`fakeshard.testing._program` in real time.
    """

    loop: asyncio.AbstractEventLoop
    nodes: list[Any]
    #: Tasks the world started and has not seen end (a restart or heal to come, a call on its way).
    in_flight: set["asyncio.Task[Any]"]
    #: Called with the new stages after churn (set by the runner: it tells the coordinator).
    on_nodes_changed: Optional[Callable[[Any], Any]]
    #: Seconds of the loop's time per second of the schedule.
    scale = 1.0

    async def run_nemesis(self, schedule: list["Nemesis"]) -> None:
        """Apply ``schedule`` at its moments (its events sorted by time, ties in order)."""
        for event in sorted(schedule, key=lambda e: e.at):
            delay = event.at * self.scale - self.loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            await self.apply(event)

    async def apply(self, event: "Nemesis") -> None:
        if event.kind == "join":
            node = await self._join(event.stage or 0)
            self.record("nemesis", kind="join", node=node.index, stage=node.stage)
            await self._announce()
            return
        if event.node is None or not 0 <= event.node < len(self.nodes):
            self.record("nemesis", kind=event.kind, node=event.node, skipped="no such node")
            return
        node = self.nodes[event.node]
        if node.removed:
            self.record("nemesis", kind=event.kind, node=node.index, skipped="the node left")
            return
        if event.kind == "crash":
            refused = await self._crash(node)
            if refused is not None:
                self.record("nemesis", kind="crash", node=node.index, skipped=refused)
                return
            self.record("nemesis", kind="crash", node=node.index)
            if event.restart_after is not None:
                self._later(event.restart_after * self.scale, lambda: self._restart(node))
        elif event.kind == "partition":
            await self._partition(node, event.mode)
            self.record("nemesis", kind="partition", node=node.index, mode=event.mode)
            self._later((event.duration or 0.0) * self.scale, lambda: self._heal(node, event.mode))
        else:  # leave; a stage keeps one node at least: a layer range nobody serves is no test of a coordinator
            if not any(other is not node and other.stage == node.stage and not other.removed for other in self.nodes):
                self.record("nemesis", kind="leave", node=node.index, skipped="the stage's last node")
                return
            await self._leave(node)
            self.record("nemesis", kind="leave", node=node.index)
            if await self._announce():
                node.told_gone = self.loop.time()
            await self._left(node)

    def _later(self, delay: float, action: Callable[[], Any]) -> None:
        async def later() -> None:
            await asyncio.sleep(delay)
            await action()

        task = self.loop.create_task(later())
        self.in_flight.add(task)
        task.add_done_callback(self.in_flight.discard)

    async def _announce(self) -> bool:
        """Tell the coordinator the cluster's new shape; whether it was told."""
        if self.on_nodes_changed is None:
            return False
        result = self.on_nodes_changed(self.stages())
        if inspect.isawaitable(result):
            await result
        return True

    async def _left(self, node: Any) -> None:
        """After a node left and the coordinator was told (nothing more, unless the world says)."""

    # What each world does, and how.
    def record(self, event: str, **data: Any) -> None:
        raise NotImplementedError

    def stages(self) -> Any:
        raise NotImplementedError

    async def _join(self, stage: int) -> Any:
        raise NotImplementedError

    async def _crash(self, node: Any) -> Optional[str]:
        """Crash ``node``; ``None``, or why it could not be."""
        raise NotImplementedError

    async def _partition(self, node: Any, mode: Optional[str]) -> None:
        raise NotImplementedError

    async def _leave(self, node: Any) -> None:
        """Take ``node`` out of the cluster (before the coordinator is told)."""
        raise NotImplementedError

    async def _restart(self, node: Any) -> None:
        raise NotImplementedError

    async def _heal(self, node: Any, mode: Optional[str]) -> None:
        raise NotImplementedError


class World(NemesisWorld):
    """Nodes, network and nemesis of one run, on ``loop``; every call logged.

    ``factory(spec, seed=, capacity_tokens=, clock=, faults=)`` builds each node's
    engine.  ``events`` collects what happened, in order, as plain dicts (what a
    determinism check compares and a trace keeps).
    """

    #: Seconds after the coordinator was told a node left within which a call may still reach
    #: it (none here: a call is logged as it is sent).
    gone_grace = 0.0

    def __init__(self, loop: asyncio.AbstractEventLoop, factory: Callable[..., Any], spec: ShardSpec, *,
                 stages: int, replicas: int, seed: int, capacity: Optional[int], plans: list[FaultPlan]) -> None:
        if len(plans) != stages * replicas:
            raise ValueError(f"a cluster of {stages} x {replicas} needs {stages * replicas} fault plans, "
                             f"got {len(plans)}")
        self.loop, self.factory, self.spec = loop, factory, spec
        self.seed, self.capacity = seed, capacity
        self.ranges = stage_ranges(stages, spec.n_layers // stages)
        self.rng = random.Random(seed)
        self.nodes: list[SimNode] = []
        self.calls: list[Call] = []
        #: Each session's calls, in the order they were sent.
        self.by_session: dict[Any, list[Call]] = {}
        self.events: list[dict[str, Any]] = []
        #: The nemesis events among ``events``.
        self.nemesis_log: list[dict[str, Any]] = []
        self.in_flight: set[asyncio.Task[Any]] = set()
        #: (session, node) -> the node's wipes when the session's last call there was applied.
        self._seen: dict[tuple[Any, int], int] = {}
        #: Called with every finished call (the checks watch the log as it grows).
        self.on_call: Optional[Callable[[Call], None]] = None
        #: Called with a call and the moment its caller stopped waiting for it (before it ended).
        self.on_abandoned: Optional[Callable[[Call, float], None]] = None
        #: Called with the new stages after churn (set by the runner: it tells the coordinator).
        self.on_nodes_changed: Optional[Callable[[list[list["AsyncNode"]]], Any]] = None
        for stage in range(stages):
            for _ in range(replicas):
                self._add(stage, plans[len(self.nodes)])
        self.handles = [AsyncNode(self, node) for node in self.nodes]

    # -- the cluster -------------------------------------------------------------------------

    def _add(self, stage: int, plan: Optional[FaultPlan]) -> SimNode:
        a, b = self.ranges[stage]
        clock = _EngineClock(self.loop)
        spec = self.spec.with_layers(a, b)
        engine = self.factory(spec, seed=self.seed, capacity_tokens=self.capacity, clock=clock, faults=plan)
        node = SimNode(len(self.nodes), stage, spec, engine, clock)
        self.nodes.append(node)
        return node

    def stages(self) -> list[list["AsyncNode"]]:
        """The cluster as a coordinator is told of it: per stage, the nodes present, oldest first."""
        out: list[list[AsyncNode]] = [[] for _ in self.ranges]
        for node, handle in zip(self.nodes, self.handles):
            if not node.removed:
                out[node.stage].append(handle)
        return out

    def record(self, event: str, **data: Any) -> None:
        self.events.append({"t": self.loop.time(), "event": event, **data})
        if event == "nemesis":
            self.nemesis_log.append(self.events[-1])

    def known_at(self, call: Call) -> float:
        """When the world's checks learn how ``call`` ended: as it ends, on the loop's time."""
        return self.loop.time()

    @staticmethod
    def view(node: SimNode, session_id: str) -> Any:
        """What ``node`` holds of the session (a ``SessionView`` or ``None``)."""
        return node.engine.session(session_id)

    @staticmethod
    def used(node: SimNode) -> int:
        """Positions ``node`` holds."""
        return int(node.engine.used_tokens)

    def hop(self) -> float:
        return round(self.rng.uniform(*HOP), 6)

    def service(self) -> float:
        return round(self.rng.uniform(*SERVICE), 6)

    # -- the nemesis (when and what: :class:`NemesisWorld`) -------------------------------------

    async def _join(self, stage: int) -> SimNode:
        node = self._add(stage, None)
        self.handles.append(AsyncNode(self, node))
        return node

    async def _crash(self, node: SimNode) -> Optional[str]:
        if not node.can_crash():
            return "the engine cannot be crashed"
        node.engine.crash()
        node.lives += 1
        node.wipes += 1
        return None

    async def _partition(self, node: SimNode, mode: Optional[str]) -> None:
        node.partition = mode

    async def _leave(self, node: SimNode) -> None:
        node.removed = True
        node.lives += 1
        node.wipes += 1

    async def _restart(self, node: SimNode) -> None:
        if not node.removed:
            node.engine.restart()
            node.wipes += 1
            self.record("nemesis", kind="restart", node=node.index)

    async def _heal(self, node: SimNode, mode: Optional[str]) -> None:
        if node.partition == mode:
            node.partition = None
            self.record("nemesis", kind="heal", node=node.index)

    # -- a call ------------------------------------------------------------------------------

    async def call(self, node: SimNode, op: str, args: tuple[Any, ...], session_id: Any, epoch: Any) -> Any:
        """Send ``op(*args)`` to ``node`` and wait for the answer (see the module's docstring)."""
        request = args[0] if op in ("prefill", "decode") else None
        entry = Call(len(self.calls), node.index, op, session_id, epoch,
                     getattr(request, "start_pos", None), _positions(request), sent=self.loop.time())
        self.calls.append(entry)
        self.by_session.setdefault(session_id, []).append(entry)
        answer: asyncio.Future[Any] = self.loop.create_future()
        task = self.loop.create_task(self._deliver(node, op, args, request, entry, answer))
        self.in_flight.add(task)
        task.add_done_callback(self.in_flight.discard)
        try:
            return await answer
        except asyncio.CancelledError:
            entry.abandoned = True  # the request still arrives: a cancelled await unsends nothing
            if self.on_abandoned is not None and entry.outcome == "pending":
                self.on_abandoned(entry, self.loop.time())
            raise

    async def _deliver(self, node: SimNode, op: str, args: tuple[Any, ...], request: Any,
                       entry: Call, answer: asyncio.Future[Any]) -> None:
        await asyncio.sleep(self.hop())
        if node.removed or node.partition == "refuse":
            why = "left the cluster" if node.removed else "is partitioned away (connection refused)"
            self._answer(entry, answer, "refused", error=_down(entry, f"node {node.name} {why}; nothing was applied"))
            return
        if node.partition == "hang":
            entry.outcome = "hung"  # the request is swallowed: no answer will ever come
            if self.on_call is not None:
                self.on_call(entry)
            return
        entry.arrived = self.loop.time()
        lives = node.lives
        service = self.service()
        if service:
            await asyncio.sleep(service)
        if node.lives != lives:
            self._answer(entry, answer, "crashed_mid_call",
                         error=_down(entry, f"node {node.name} went down while the call waited on it"))
            return
        before = fault_count(node.engine)
        outcome, out, error = "ok", None, None
        seen = (entry.session_id, node.index)
        was_up = not getattr(node.engine, "crashed", False)
        try:
            out = getattr(node.engine, op)(*args)
            if op in ("prefill", "decode") and breaks_contract(node.spec, request, out):
                outcome = "malformed_output"
        except ShardError as exc:
            outcome, error = exc.code, exc
        if op == "restart" or (was_up and getattr(node.engine, "crashed", False)):
            node.wipes += 1  # restarted, or taken down by its own fault plan
        if isinstance(entry.session_id, str):
            entry.after_wipe = self._seen.get(seen, node.wipes) != node.wipes
            self._seen[seen] = node.wipes
        entry.fired = fired_since(node.engine, before)
        held = entry.held = node.clock.take()
        lives = node.lives
        if held:
            await asyncio.sleep(held)
        if node.lives != lives:
            self._answer(entry, answer, "crashed_mid_call", error=_down(entry, f"node {node.name} went down before "
                                                                            "it answered"))
            return
        entry.answered = self.loop.time()
        if node.partition == "reset":  # applied; the answer is cut halfway and the connection reset
            self._answer(entry, answer, "reset", error=ResponseLost(
                f"{op}: node {node.name} reset the connection mid-answer; the call was applied",
                session_id=entry.session_id if isinstance(entry.session_id, str) else None,
                epoch=entry.epoch if isinstance(entry.epoch, int) else None))
            return
        await asyncio.sleep(self.hop())
        self._answer(entry, answer, outcome, out=out, error=error)

    def _answer(self, entry: Call, answer: asyncio.Future[Any], outcome: str, *, out: Any = None,
                error: Optional[BaseException] = None) -> None:
        entry.done = self.loop.time()
        entry.outcome = outcome
        if not answer.done():
            if error is not None:
                answer.set_exception(error)
            else:
                answer.set_result(out)
        if self.on_call is not None:
            self.on_call(entry)


def _down(call: Call, why: str) -> EngineCrashed:
    """The error a call gets from a node it could not use, naming the call's session and epoch."""
    return EngineCrashed(f"{call.op}: {why}", session_id=call.session_id if isinstance(call.session_id, str) else None,
                         epoch=call.epoch if isinstance(call.epoch, int) else None)


def fault_count(engine: Any) -> int:
    """How many faults ``engine`` has fired so far (0 for an engine that keeps no ``fault_log``)."""
    return len(getattr(engine, "fault_log", ()))


def fired_since(engine: Any, before: int) -> tuple[str, ...]:
    """The kinds of the faults ``engine`` fired after its first ``before``, in order."""
    return tuple(type(f.fault).__name__ for f in getattr(engine, "fault_log", ())[before:])


def breaks_contract(spec: ShardSpec, request: Any, out: Any) -> bool:
    """Whether ``out``, a node of ``spec`` answering the prefill or decode ``request``, breaks the
    contract (:func:`fakeshard._pipeline.answer_problem`, the model the whole of ``spec``'s)."""
    return answer_problem(spec, request, _positions(request), out, last=spec.end_layer == spec.n_layers,
                          model=spec.with_layers(0, spec.n_layers)) is not None


def _positions(request: Any) -> int:
    """How many positions a prefill or decode request carries (0 for anything else)."""
    for attr in ("tokens", "hidden"):
        value = getattr(request, attr, None)
        if value is not None:
            try:
                return len(value)
            except TypeError:
                return 0
    return 0


class AsyncNode:
    """A node as an async coordinator holds it: the contract's calls, awaited.

    Inspection that is no network call (``spec``, ``name``, ``evidence_class``) is a
    plain attribute.  ``session`` and ``restart`` are calls like the others: they
    travel, and a node that is unreachable refuses them.
    """

    def __init__(self, world: World, node: SimNode) -> None:
        self._world, self._node = world, node
        self.spec: ShardSpec = node.spec
        self.name: str = node.name
        self.index: int = node.index
        self.evidence_class: str = getattr(node.engine, "evidence_class", "fixture")

    def __repr__(self) -> str:
        return f"AsyncNode({self.name}, layers {self.spec.start_layer}..{self.spec.end_layer})"

    async def prefill(self, bundle: Any) -> Any:
        return await self._world.call(self._node, "prefill", (bundle,), getattr(bundle, "session_id", None),
                                      getattr(bundle, "epoch", None))

    async def decode(self, bundle: Any) -> Any:
        return await self._world.call(self._node, "decode", (bundle,), getattr(bundle, "session_id", None),
                                      getattr(bundle, "epoch", None))

    async def cancel(self, session_id: str, epoch: int) -> None:
        return await self._world.call(self._node, "cancel", (session_id, epoch), session_id, epoch)

    async def release(self, session_id: str, epoch: int) -> None:
        return await self._world.call(self._node, "release", (session_id, epoch), session_id, epoch)

    async def session(self, session_id: str) -> Any:
        return await self._world.call(self._node, "session", (session_id,), session_id, None)

    async def restart(self) -> None:
        return await self._world.call(self._node, "restart", (), None, None)
