"""The kit's reference async coordinator: many sessions at once over a cluster of replicas.

What it does, the simplest way that is correct under concurrency:

* **One call at a time per session.**  A lock per session id: a ``release`` that
  races a ``next_token`` waits for it, so nothing is sent for a session after its
  release returns.
* **Routes over replicas, load-aware.**  A session is routed, stage by stage, to the
  reachable replica with the fewest open sessions (ties: the oldest node).
* **Every call has a timeout** (:data:`CALL_TIMEOUT` seconds of the loop's time): a
  partition that swallows calls costs a timeout, never a hang.  Within one request, each
  attempt after a timed-out one waits twice as long, up to :data:`MAX_STRETCH` times the
  timeout: a node slower than the timeout (a long prefill, a loaded machine) is waited out
  instead of asked again for ever.
* **On any failure: bump the epoch, re-route, replay.**  The failing node is avoided
  for :data:`SUSPECT_FOR` seconds; a node that answered ``EngineCrashed`` is restarted
  (empty), as a tracker restarts a runner.  The session's whole history is replayed at
  the new epoch from position 0, so a stale route can never answer for it again.
* **Cleanup that outlives unreachability.**  ``release`` releases the session on every
  node it was ever routed to; where that fails (the node is partitioned away), the
  release is retried in the background until it lands, so no node keeps a dead
  session's cache once the partition heals.
* **Churn.**  ``on_nodes_changed(stages)`` replaces the cluster; a session routed
  through a node that left is re-routed (and replayed) at its next call.

Back-off between attempts is exponential (from 50 ms, at most one second), and a
request gives up (:class:`~fakeshard.testing._reference_coordinator.GaveUp`) after
:data:`MAX_ATTEMPTS` failed attempts.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from fakeshard import EngineCrashed, MalformedBundle, ShardError, TokenBundle
from fakeshard._pipeline import answer_problem
from fakeshard.testing._reference_coordinator import GaveUp

__all__ = ["AsyncCoordinator", "CALL_TIMEOUT", "MAX_ATTEMPTS", "MAX_STRETCH", "SUSPECT_FOR", "reference_async"]

#: Seconds a call may take before the coordinator stops waiting for it.
CALL_TIMEOUT = 2.0
#: The longest a request's call may wait, in call timeouts: after each timed-out attempt the
#: next waits twice as long, up to this (1, 2, 4, 8, 8, ... timeouts).
MAX_STRETCH = 8
#: Seconds a node that failed a call is avoided when routing.
SUSPECT_FOR = 5.0
#: Failed attempts at one request before it gives up.
MAX_ATTEMPTS = 24
#: Seconds between retries of a release that could not land.
SWEEP_EVERY = 1.0


@dataclass
class _Session:
    session_id: str
    prompt: list[int]
    epoch: int
    generated: list[int] = field(default_factory=list)
    route: list[Any] = field(default_factory=list)
    needs_replay: bool = True
    open: bool = True
    #: Every node the session was ever sent to (what ``release`` must clear).
    touched: dict[str, Any] = field(default_factory=dict)

    @property
    def history(self) -> list[int]:
        return self.prompt + self.generated


class _StageFailed(Exception):
    def __init__(self, stage: int, node: Any, error: BaseException) -> None:
        super().__init__(f"stage {stage} ({getattr(node, 'name', node)}): {type(error).__name__}: {error}")
        self.stage, self.node, self.error = stage, node, error


class AsyncCoordinator:
    """The kit's reference async coordinator: sessions over ``stages`` (per stage, the nodes
    able to serve it, oldest first), for the ``concurrent`` and ``program`` machines.

    One call at a time per session (a ``release`` waits for the ``next_token`` in
    flight); routes chosen per stage by load, avoiding for :data:`SUSPECT_FOR` seconds
    a node that was down or did not answer in time; every call under
    :attr:`call_timeout` (stretched up to :data:`MAX_STRETCH` times within a request
    after timeouts); on any failure the epoch goes up and the history is replayed from
    position 0; a node that answered ``EngineCrashed`` is restarted; releases that
    cannot land are retried in the background until they do; :meth:`on_nodes_changed`
    re-routes sessions off nodes that left.  A request gives up (``GaveUp``) after
    :data:`MAX_ATTEMPTS` failed attempts.  Subclass it to vary one choice and keep the rest.
    """

    def __init__(self, stages: Sequence[Sequence[Any]], *, clock: Any = None) -> None:
        self.stages = [list(stage) for stage in stages]
        self.clock = clock
        #: Seconds a call may take (``None``: no limit).
        self.call_timeout: Optional[float] = CALL_TIMEOUT
        self.sessions: dict[str, _Session] = {}
        self.epochs: dict[str, int] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._suspect: dict[str, float] = {}
        #: Releases still to land: (node, session id, epoch).
        self._unreleased: list[tuple[Any, str, int]] = []
        self._sweeper: Optional[asyncio.Task[None]] = None
        model = self.stages[0][0].spec
        self.model = model.with_layers(0, model.n_layers)

    # -- the protocol ---------------------------------------------------------------------

    async def start(self, session_id: str, prompt: Sequence[int]) -> None:
        async with self._lock(session_id):
            epoch = self.epochs.get(session_id, -1) + 1  # a reused id goes above its old fences
            self.epochs[session_id] = epoch
            self.sessions[session_id] = _Session(session_id, list(prompt), epoch)

    async def next_token(self, session_id: str) -> int:
        async with self._lock(session_id):
            s = self.sessions[session_id]
            stretch = 1  # doubles after each attempt that timed out
            for attempt in range(MAX_ATTEMPTS):
                if attempt:
                    await asyncio.sleep(min(1.0, 0.05 * 2 ** (attempt - 1)))
                route = self._route(s)
                if route is None:
                    continue  # a stage with no reachable node: wait and look again
                history = s.history
                request = (TokenBundle(session_id, s.epoch, 0, tuple(history)) if s.needs_replay
                           else TokenBundle(session_id, s.epoch, len(history) - 1, (history[-1],)))
                op = "prefill" if s.needs_replay else "decode"
                timeout = None if self.call_timeout is None else self.call_timeout * stretch
                try:
                    sample = await self._through(s, route, op, request, timeout)
                except _StageFailed as failed:
                    if isinstance(failed.error, asyncio.TimeoutError):
                        stretch = min(2 * stretch, MAX_STRETCH)
                    await self._recover(s, failed)
                    continue
                s.needs_replay = False
                s.generated.append(sample.token)
                return int(sample.token)
            raise GaveUp(f"session {session_id!r}: no token after {MAX_ATTEMPTS} attempts")

    async def release(self, session_id: str) -> None:
        async with self._lock(session_id):
            s = self.sessions[session_id]
            s.open = False
            nodes = [node for node in s.touched.values() if self._present(node)]
            results = await asyncio.gather(*(self._call(node, "release", session_id, s.epoch) for node in nodes),
                                           return_exceptions=True)
            for node, result in zip(nodes, results):
                if isinstance(result, BaseException) and not self._released_by(result):
                    self._unreleased.append((node, session_id, s.epoch))
            if self._unreleased and self._sweeper is None:
                self._sweeper = asyncio.get_running_loop().create_task(self._sweep())

    def on_nodes_changed(self, stages: Sequence[Sequence[Any]]) -> None:
        self.stages = [list(stage) for stage in stages]
        for s in self.sessions.values():
            if s.open and any(not self._present(node) for node in s.route):
                s.route = [node if self._present(node) else None for node in s.route]

    # -- routing and recovery -------------------------------------------------------------

    def _lock(self, session_id: str) -> asyncio.Lock:
        if session_id not in self._locks:
            self._locks[session_id] = asyncio.Lock()
        return self._locks[session_id]

    def _present(self, node: Any) -> bool:
        return any(node is other for stage in self.stages for other in stage)

    def _now(self) -> float:
        return asyncio.get_running_loop().time()

    def _route(self, s: _Session) -> Optional[list[Any]]:
        """The session's route, a node chosen for each stage that lacks one; ``None`` when a
        stage has no node to choose."""
        if len(s.route) != len(self.stages):
            s.route = [None] * len(self.stages)
        for i, stage in enumerate(self.stages):
            if s.route[i] is not None:
                continue
            if not stage:
                return None
            load = {id(node): 0 for node in stage}
            for other in self.sessions.values():
                if other.open and len(other.route) > i and other.route[i] is not None and id(other.route[i]) in load:
                    load[id(other.route[i])] += 1
            now = self._now()
            choice = min(range(len(stage)), key=lambda k: (self._suspect.get(stage[k].name, -1.0) > now,
                                                           load[id(stage[k])], k))
            s.route[i] = stage[choice]
            if not s.needs_replay:  # a new node holds nothing of the session: replay there
                s.epoch += 1
                self.epochs[s.session_id] = s.epoch
                s.needs_replay = True
        return list(s.route)

    async def _through(self, s: _Session, route: list[Any], op: str, request: TokenBundle,
                       timeout: Optional[float]) -> Any:
        bundle: Any = request
        n = len(request.tokens)
        for i, node in enumerate(route):
            if not self._present(node):  # it left while the call went through the stages before it
                raise _StageFailed(i, node, EngineCrashed(f"{node.name} left the cluster"))
            s.touched[node.name] = node
            try:
                out = await asyncio.wait_for(getattr(node, op)(bundle), timeout)
            except (ShardError, asyncio.TimeoutError) as exc:
                raise _StageFailed(i, node, exc) from None
            problem = self._problem(node, request, n, out, last=i == len(route) - 1)
            if problem is not None:
                raise _StageFailed(i, node, MalformedBundle(f"{node.name} answered {op} with {problem}"))
            bundle = out
        return bundle

    def _problem(self, node: Any, request: TokenBundle, n: int, out: Any, *, last: bool) -> Optional[str]:
        """How a stage's answer breaks the contract for ``request`` (``None``: it does not): the
        session, epoch, positions, shape and token range a correct answer has."""
        return answer_problem(node.spec, request, n, out, last=last, model=self.model)

    async def _recover(self, s: _Session, failed: _StageFailed) -> None:
        """After a failed attempt: avoid the node, restart it if it says it is down, drop it from
        the route; then the epoch goes up and the history is replayed."""
        error, node = failed.error, failed.node
        if isinstance(error, (EngineCrashed, asyncio.TimeoutError)):
            self._suspect[node.name] = self._now() + SUSPECT_FOR
            if isinstance(error, EngineCrashed) and self._present(node):
                try:
                    await asyncio.wait_for(node.restart(), self.call_timeout)
                except (ShardError, asyncio.TimeoutError):
                    pass  # unreachable: the suspicion keeps routes away from it
            s.route[failed.stage] = None
        s.epoch += 1
        self.epochs[s.session_id] = s.epoch
        s.needs_replay = True

    async def _call(self, node: Any, op: str, session_id: str, epoch: int) -> None:
        await asyncio.wait_for(getattr(node, op)(session_id, epoch), self.call_timeout)

    @staticmethod
    def _released_by(error: BaseException) -> bool:
        """Whether a release that raised ``error`` still leaves the node holding nothing."""
        return isinstance(error, ShardError) and error.code in ("stale_epoch", "released", "cancelled")

    async def _sweep(self) -> None:
        """Retry releases that did not land until each lands or its node leaves."""
        while self._unreleased:
            await asyncio.sleep(SWEEP_EVERY)
            pending, self._unreleased = self._unreleased, []
            for node, session_id, epoch in pending:
                if not self._present(node):
                    continue
                try:
                    await self._call(node, "release", session_id, epoch)
                except (ShardError, asyncio.TimeoutError) as exc:
                    if not self._released_by(exc):
                        self._unreleased.append((node, session_id, epoch))
        self._sweeper = None


def reference_async(stages: Sequence[Sequence[Any]], *, clock: Any = None) -> AsyncCoordinator:
    """The kit's reference async coordinator (:class:`AsyncCoordinator`)."""
    return AsyncCoordinator(stages, clock=clock)
