"""Async coordinators with one planted mistake each, as concurrent coordinators make them.

Each is the kit's reference async coordinator (``fakeshard.testing._async_coordinator``)
with one decision changed; the concurrent machine must catch every one
(``tests/test_concurrent.py``).  Each name in :data:`PLANTED` is a coordinator factory,
``name(stages, *, clock)``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from fakeshard import TokenBundle
from fakeshard.testing._async_coordinator import CALL_TIMEOUT, AsyncCoordinator


class ReleasesWithoutWaiting(AsyncCoordinator):
    """Releases at once, without waiting for the session's call in flight (no session lock
    on release): the call goes on computing for a released session."""

    async def release(self, session_id: str) -> None:
        s = self.sessions[session_id]
        s.open = False
        await asyncio.gather(*(self._call(node, "release", session_id, s.epoch) for node in s.touched.values()
                               if self._present(node)), return_exceptions=True)


class ReplaysAtSameEpoch(AsyncCoordinator):
    """Replays the history after a failure without bumping the epoch (a stale route's cache
    at that epoch is taken for the session's)."""

    async def _recover(self, s: Any, failed: Any) -> None:
        epoch = s.epoch
        await super()._recover(s, failed)
        s.epoch = epoch
        self.epochs[s.session_id] = epoch


class NeverTimesOut(AsyncCoordinator):
    """Waits for every call as long as it takes: a partition that swallows calls hangs it."""

    def __init__(self, stages: Sequence[Sequence[Any]], *, clock: Any = None) -> None:
        super().__init__(stages, clock=clock)
        self.call_timeout = None


class KeepsNodesThatLeft(AsyncCoordinator):
    """Ignores churn: a node that left stays in its routes and its view of the cluster."""

    def on_nodes_changed(self, stages: Sequence[Sequence[Any]]) -> None:
        for i, stage in enumerate(stages):
            self.stages[i].extend(node for node in stage if not any(node is old for old in self.stages[i]))

    def _present(self, node: Any) -> bool:
        return True


class ReleasesOnlyAtTail(AsyncCoordinator):
    """Releases only on the tail, as if one release reached the whole pipeline."""

    async def release(self, session_id: str) -> None:
        async with self._lock(session_id):
            s = self.sessions[session_id]
            s.open = False
            if s.route and s.route[-1] is not None:
                try:
                    await asyncio.wait_for(s.route[-1].release(session_id, s.epoch), CALL_TIMEOUT)
                except Exception:
                    pass


class ForgetsEpochOnReuse(AsyncCoordinator):
    """Starts a reused session id at epoch 0 again, under the fences its last release left."""

    async def start(self, session_id: str, prompt: Sequence[int]) -> None:
        self.epochs.pop(session_id, None)
        await super().start(session_id, prompt)


class ReplaysWithoutAFailure(AsyncCoordinator):
    """Re-caches every session after each token: the history but the new token replayed at a
    new epoch over the route before the request returns, one more pass with no failure to
    answer.  (Requests a client sends back to back once shared their budgets: this passed.)"""

    async def next_token(self, session_id: str) -> int:
        token = await super().next_token(session_id)
        async with self._lock(session_id):
            s = self.sessions[session_id]
            route = self._route(s)
            if route is not None:
                s.epoch += 1
                self.epochs[session_id] = s.epoch
                history = s.history[:-1]
                try:
                    await self._through(s, route, "prefill", TokenBundle(session_id, s.epoch, 0, tuple(history)),
                                        self.call_timeout)
                except Exception:
                    s.needs_replay = True
        return token


class PassesAnswersUnchecked(AsyncCoordinator):
    """Passes every stage's answer on unchecked, and takes the tail's token as it comes."""

    def _problem(self, node: Any, request: Any, n: int, out: Any, *, last: bool) -> None:
        return None


@dataclass(frozen=True)
class PlantedAsync:
    name: str
    cls: type
    mistake: str

    def factory(self) -> Callable[..., Any]:
        cls = self.cls

        def make(stages: Sequence[Sequence[Any]], *, clock: Any = None) -> AsyncCoordinator:
            return cls(stages, clock=clock)

        make.__doc__ = cls.__doc__
        return make


PLANTED = (
    PlantedAsync("releases_without_waiting", ReleasesWithoutWaiting,
                 "a release that does not wait for the session's call in flight"),
    PlantedAsync("replays_at_same_epoch", ReplaysAtSameEpoch, "a replay after a failure at the same epoch"),
    PlantedAsync("never_times_out", NeverTimesOut, "no timeout on calls: a hung partition hangs it"),
    PlantedAsync("keeps_nodes_that_left", KeepsNodesThatLeft, "a node that left kept in the routes"),
    PlantedAsync("releases_only_at_tail", ReleasesOnlyAtTail, "release only at the tail"),
    PlantedAsync("forgets_epoch_on_reuse", ForgetsEpochOnReuse, "a reused session id started at epoch 0 again"),
    PlantedAsync("passes_answers_unchecked", PassesAnswersUnchecked, "a node's malformed answer passed on"),
    PlantedAsync("replays_without_a_failure", ReplaysWithoutAFailure, "a replay on every request, without a failure"),
)

for _p in PLANTED:  # each by name, for --coordinator planted.async_coordinators:<name>
    globals()[_p.name] = _p.factory()
