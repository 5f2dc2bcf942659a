"""Coordinators that differ from the kit's reference by sound choices: each must pass.

A check of the coordinator machine must fail only on what a user would call a bug, so
these designs, which a team could ship, pass it under ``ci``
(``tests/test_planted_coordinators.py``).  Each name below is a coordinator factory,
``name(stages, *, clock)``.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Sequence

from fakeshard import OutOfMemory, Pipeline, ShardError
from fakeshard.testing._async_coordinator import AsyncCoordinator
from fakeshard.testing._reference_coordinator import Coordinator, SessionState


def _quietly(call: Callable[[], Any]) -> None:
    """Cleanup is best effort: whatever it meets, the next attempt finds out and recovers."""
    try:
        call()
    except ShardError:
        pass


class CleansUpAfterFailures(Coordinator):
    """Frees what a failure left at once instead of at release: after any failing call it
    cancels the session at the failed epoch on every stage of the route (the node that
    answered ``OutOfMemory`` or dropped its response among them), and after a crash it
    releases every open session on the node it leaves; then it bumps the epoch and
    replays, as the reference does."""

    def recover(self, session_id: str, s: SessionState, pipe: Pipeline, exc: ShardError) -> None:
        failed = s.epoch
        super().recover(session_id, s, pipe, exc)
        for node in self.route:
            _quietly(lambda: node.cancel(session_id, failed))

    def reroute(self, stage: int) -> None:
        leaving = self.route[stage]
        epochs = {sid: s.epoch for sid, s in self.sessions.items() if s.open}
        super().reroute(stage)
        for sid, epoch in epochs.items():
            s = self.sessions[sid]
            if s.epoch == epoch:  # not replayed yet: it moves above the epoch released here too
                s.epoch += 1
            _quietly(lambda: leaving.release(sid, epoch))


class FencesOutOfMemoryAtANewEpoch(Coordinator):
    """On ``OutOfMemory``, fences the node that answered it off at a new epoch (a cancel
    there, which frees the session's older cache at once), then replays at the epoch above."""

    def recover(self, session_id: str, s: SessionState, pipe: Pipeline, exc: ShardError) -> None:
        super().recover(session_id, s, pipe, exc)
        stage = pipe.last_failed_stage
        if isinstance(exc, OutOfMemory) and stage is not None:
            _quietly(lambda: self.route[stage].cancel(session_id, s.epoch))
            s.epoch += 1


class ReleasesEverywhere(Coordinator):
    """Releases a session on every engine it was given, spares included, not only the route."""

    def release_route(self, session_id: str, s: SessionState, pipe: Pipeline) -> None:
        super().release_route(session_id, s, pipe)
        for pool in self.spares:
            for node in pool:
                _quietly(lambda: node.release(session_id, s.epoch))


class RecoversLazily(Coordinator):
    """One route table for every session: after a crash the stage moves to a spare for all
    of them, but only the failing session replays at once.  The others go on decoding
    optimistically and learn that their cache is gone from the ``CacheMiss`` the new node
    answers; that miss bumps their epoch and replays them there, as any failure does (one
    wasted pass, the way a tracker with one route per model behaves)."""

    def reroute(self, stage: int) -> None:
        down = self.route[stage]
        down.restart()
        self.spares[stage].append(down)
        self.route[stage] = self.spares[stage].pop(0)
        self.reroutes += 1


class RoutesEachSession(Coordinator):
    """A route per session, chosen when it starts (the current shared route): a crash moves
    only the session that met it, to a spare, after restarting the crashed node.  Another
    session routed through that node finds it empty at its next call (``CacheMiss``) and
    replays there, at a new epoch."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.routes: dict[str, list[Any]] = {}
        self._current = ""

    def start(self, session_id: str, prompt: Sequence[int]) -> None:
        super().start(session_id, prompt)
        self.routes[session_id] = list(self.route)

    def next_token(self, session_id: str) -> int:
        self._current = session_id
        return super().next_token(session_id)

    def release(self, session_id: str) -> None:
        self._current = session_id
        super().release(session_id)

    def pipeline(self) -> Pipeline:
        return Pipeline(self.routes[self._current])

    def reroute(self, stage: int) -> None:
        route = self.routes[self._current]
        down = route[stage]
        down.restart()
        nodes = [self.route[stage]] + self.spares[stage]
        route[stage] = next(node for node in nodes if node is not down)
        self.route[stage] = route[stage]  # sessions started from now on take the new route
        self.spares[stage] = [node for node in nodes if node is not route[stage]]
        self.reroutes += 1


class ReroutesOnTheNextCall(Coordinator):
    """Re-routes lazily: a crash only marks its node down (the failing session replays at a
    new epoch, as ever).  The next call of any session, before it is sent, restarts the
    nodes marked down and moves their stages to spares; the sessions that were on them
    learn it from a ``CacheMiss``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.down: set[int] = set()

    def reroute(self, stage: int) -> None:
        self.down.add(stage)

    def pipeline(self) -> Pipeline:
        for stage in sorted(self.down):
            RecoversLazily.reroute(self, stage)  # type: ignore[arg-type]
        self.down.clear()
        return super().pipeline()


SOUND = ("cleans_up_after_failures", "fences_out_of_memory_at_a_new_epoch", "releases_everywhere",
         "recovers_lazily", "routes_each_session", "reroutes_on_the_next_call")


def _factory(cls: type) -> Callable[..., Any]:
    def make(stages: Sequence[Sequence[Any]], *, clock: Any = None) -> Coordinator:
        return cls.from_stages(stages, clock=clock)

    make.__doc__ = cls.__doc__
    return make


cleans_up_after_failures = _factory(CleansUpAfterFailures)
fences_out_of_memory_at_a_new_epoch = _factory(FencesOutOfMemoryAtANewEpoch)
releases_everywhere = _factory(ReleasesEverywhere)
recovers_lazily = _factory(RecoversLazily)
routes_each_session = _factory(RoutesEachSession)
reroutes_on_the_next_call = _factory(ReroutesOnTheNextCall)


# -- async coordinators (the concurrent and program machines) ---------------------------------

class SharesOneRouteTable(AsyncCoordinator):
    """Another sound recovery, lazy: one route table for every session.  A crash or a timeout
    moves the stage to another node for all of them, but only the failing session replays
    at once; the others go on decoding and learn that their cache is not on the new node
    from its ``CacheMiss``, which bumps their epoch and replays them there."""

    def __init__(self, stages, *, clock=None):
        super().__init__(stages, clock=clock)
        self.table = [None] * len(self.stages)

    def _route(self, s):
        if len(self.table) != len(self.stages):
            self.table = [None] * len(self.stages)
        now = self._now()
        for i, stage in enumerate(self.stages):
            if self.table[i] is None or not self._present(self.table[i]):
                if not stage:
                    return None
                self.table[i] = min(stage, key=lambda node: self._suspect.get(node.name, -1.0) > now)
        s.route = list(self.table)
        return list(s.route)

    async def _recover(self, s, failed):
        await super()._recover(s, failed)
        if s.route[failed.stage] is None and self.table[failed.stage] is failed.node:
            self.table[failed.stage] = None


class ReleasesWhereverItWent(AsyncCoordinator):
    """Another sound release: on every node the session was ever sent to, including nodes
    that have left the cluster since (harmless cleanup: a node that left applies nothing, or
    frees the session's memory while it drains)."""

    async def release(self, session_id):
        s = self.sessions[session_id]
        gone = [node for node in s.touched.values() if not self._present(node)]
        await asyncio.gather(*(self._call(node, "release", session_id, s.epoch) for node in gone),
                             return_exceptions=True)
        await super().release(session_id)


class LazyAndReleasesWhereverItWent(SharesOneRouteTable, ReleasesWhereverItWent):
    """Both designs above at once, for the program machine."""


if __name__ == "__main__":
    # One of the async designs above as a coordinator program:
    #   python3 tests/sound_coordinators.py CLASS [--call-timeout SECONDS]
    import sys

    from fakeshard.testing.coordinator_program import main

    sys.exit(main(sys.argv[2:], coordinator=globals()[sys.argv[1]]))
