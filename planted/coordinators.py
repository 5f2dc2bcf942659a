"""Coordinators with one planted mistake each, as real coordinators make them.

Each is the kit's reference coordinator with one decision changed; the coordinator
machine must catch every one (``tests/test_planted_coordinators.py``).  Each name
below is a coordinator factory, ``name(stages, *, clock)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from fakeshard import EngineCrashed, Pipeline, PositionMismatch, ResponseLost, ShardError
from fakeshard.testing._reference_coordinator import Coordinator, SessionState


class RetriesSameCall(Coordinator):
    """Takes an ambiguous failure (a lost response) as transient: sends the same call again at
    the same epoch, and takes the position mismatch that follows as transient too."""

    def recover(self, session_id: str, s: SessionState, pipe: Pipeline, exc: ShardError) -> None:
        if isinstance(exc, (ResponseLost, PositionMismatch)):
            self.errors[exc.code] += 1
            return
        super().recover(session_id, s, pipe, exc)


class ReroutesWithoutEpochBump(Coordinator):
    """Re-routes around a crash and replays at the same epoch (the old fence still stands)."""

    def recover(self, session_id: str, s: SessionState, pipe: Pipeline, exc: ShardError) -> None:
        if isinstance(exc, EngineCrashed):
            self._failed(pipe, exc)
            s.needs_replay = True
            return
        super().recover(session_id, s, pipe, exc)

    def reroute(self, stage: int) -> None:
        epochs = {sid: s.epoch for sid, s in self.sessions.items()}
        super().reroute(stage)
        for sid, s in self.sessions.items():
            s.epoch = epochs[sid]


class ReplaysFromCachedPosition(Coordinator):
    """At a new epoch, first replays only what it thinks the nodes lack (from the cached
    position, not 0), and falls back to a full replay when that is refused."""

    def attempt(self, session_id: str, s: SessionState, pipe: Pipeline) -> Any:
        history = s.history
        if s.needs_replay and len(history) > 1 and not getattr(s, "tried_cached", False):
            s.tried_cached = True  # type: ignore[attr-defined]
            return pipe.prefill(session_id, s.epoch, len(history) - 1, history[-1:])
        s.tried_cached = False  # type: ignore[attr-defined]
        return super().attempt(session_id, s, pipe)


class _UncheckedPipeline(Pipeline):
    def _check(self, i: int, op: str, request: Any, n: int, out: Any) -> None:
        return None


class TrustsMalformedOutput(Coordinator):
    """Passes every stage's answer on unchecked, and takes the tail's token as it comes."""

    def pipeline(self) -> Pipeline:
        return _UncheckedPipeline(self.route)


class RoutesAroundWithoutRelease(Coordinator):
    """Routes around any stage that failed (a bad answer, a lost response, not only a crash),
    moving the node to the spares without releasing the session there."""

    def _failed(self, pipe: Pipeline, exc: ShardError) -> None:
        self.errors[exc.code] += 1
        stage = pipe.last_failed_stage
        if stage is None:
            return
        if isinstance(exc, EngineCrashed):
            self.reroute(stage)
        elif exc.code in ("malformed_bundle", "response_lost") and self.spares[stage]:
            self.spares[stage].append(self.route[stage])  # still holding the session's cache
            self.route[stage] = self.spares[stage].pop(0)
            for s in self.sessions.values():
                if s.open and not s.needs_replay:
                    s.needs_replay, s.epoch = True, s.epoch + 1


class FeedsLastTokenTwice(Coordinator):
    """After a replay, decodes the history's last token once more before sampling."""

    def attempt(self, session_id: str, s: SessionState, pipe: Pipeline) -> Any:
        if not s.needs_replay:
            return super().attempt(session_id, s, pipe)
        history = s.history
        pipe.prefill(session_id, s.epoch, 0, history)
        return pipe.decode(session_id, s.epoch, len(history), history[-1])


class ReleasesOnlyAtTail(Coordinator):
    """Releases a session at the tail only, taking the tail's release as the pipeline's."""

    def release_route(self, session_id: str, s: SessionState, pipe: Pipeline) -> None:
        self.route[-1].release(session_id, s.epoch)


class ForgetsEpochOnReuse(Coordinator):
    """Starts a reused session id at epoch 0 again, under the old session's fence."""

    def start(self, session_id: str, prompt: Sequence[int]) -> None:
        self.sessions[session_id] = SessionState(list(prompt))


class ReplaysReleasedSessions(Coordinator):
    """Keeps released sessions warm for a quick resume: after a re-route it replays them on the
    new route (calls for a session after its release)."""

    def reroute(self, stage: int) -> None:
        super().reroute(stage)
        for sid, s in self.sessions.items():
            if s.open:
                continue
            try:
                Pipeline(self.route).prefill(sid, s.epoch + 1, 0, s.history)
            except ShardError:
                s.needs_replay = True
            else:
                s.epoch, s.needs_replay = s.epoch + 1, False


class GivesUpEarly(Coordinator):
    """Gives up after two failed tries."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.max_attempts = 2


class BacksOffWithoutCap(Coordinator):
    """Sleeps 2**n seconds before the n-th retry of a step (no cap)."""

    def recover(self, session_id: str, s: SessionState, pipe: Pipeline, exc: ShardError) -> None:
        self.retries = getattr(self, "retries", 0) + 1
        self.clock.sleep(2.0 ** self.retries)
        super().recover(session_id, s, pipe, exc)

    def next_token(self, session_id: str) -> int:
        self.retries = 0
        return super().next_token(session_id)


class CleansUpOnEveryStep(Coordinator):
    """Cancels the session on every spare before each token, failure or not, "to be safe"."""

    def next_token(self, session_id: str) -> int:
        s = self.sessions[session_id]
        for pool in self.spares:
            for node in pool:
                try:
                    node.cancel(session_id, s.epoch)
                except ShardError:
                    pass
        return super().next_token(session_id)


@dataclass(frozen=True)
class PlantedCoordinator:
    name: str
    cls: type
    mistake: str

    def factory(self) -> Callable[..., Any]:
        return globals()[self.name]


PLANTED = (
    PlantedCoordinator("retries_same_call", RetriesSameCall,
                       "a retry after ResponseLost at the same epoch, without replay"),
    PlantedCoordinator("reroutes_without_epoch_bump", ReroutesWithoutEpochBump,
                       "a re-route without an epoch bump"),
    PlantedCoordinator("replays_from_cached_position", ReplaysFromCachedPosition,
                       "a replay from the cached position instead of 0 at a new epoch"),
    PlantedCoordinator("trusts_malformed_output", TrustsMalformedOutput, "trusting a malformed output"),
    PlantedCoordinator("routes_around_without_release", RoutesAroundWithoutRelease,
                       "the old route's cache never released"),
    PlantedCoordinator("feeds_last_token_twice", FeedsLastTokenTwice, "feeding the last token twice"),
    PlantedCoordinator("releases_only_at_tail", ReleasesOnlyAtTail, "release only at the tail"),
    PlantedCoordinator("forgets_epoch_on_reuse", ForgetsEpochOnReuse,
                       "a reused session id started at epoch 0 under the old fence"),
    PlantedCoordinator("replays_released_sessions", ReplaysReleasedSessions,
                       "calls for a session after its release (a warm-up replays released sessions)"),
    PlantedCoordinator("gives_up_early", GivesUpEarly, "GaveUp within the budget (two tries)"),
    PlantedCoordinator("backs_off_without_cap", BacksOffWithoutCap,
                       "back-off beyond the time budget (2**n s, no cap)"),
    PlantedCoordinator("cleans_up_on_every_step", CleansUpOnEveryStep,
                       "cleanup calls on every step, with no failure to clean up after"),
)


def _factory(cls: type) -> Callable[..., Any]:
    def make(stages: Sequence[Sequence[Any]], *, clock: Any = None) -> Coordinator:
        return cls.from_stages(stages, clock=clock)

    make.__doc__ = cls.__doc__
    return make


for _p in PLANTED:
    globals()[_p.name] = _factory(_p.cls)
