"""Coordinators that differ from the kit's reference by sound choices: each must pass.

A check of the coordinator machine must fail only on what a user would call a bug, so
these designs, which a team could ship, pass it under ``ci``
(``tests/test_planted_coordinators.py``).  Each name below is a coordinator factory,
``name(stages, *, clock)``.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from fakeshard import OutOfMemory, Pipeline, ShardError
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


SOUND = ("cleans_up_after_failures", "fences_out_of_memory_at_a_new_epoch", "releases_everywhere")


def _factory(cls: type) -> Callable[..., Any]:
    def make(stages: Sequence[Sequence[Any]], *, clock: Any = None) -> Coordinator:
        return cls.from_stages(stages, clock=clock)

    make.__doc__ = cls.__doc__
    return make


cleans_up_after_failures = _factory(CleansUpAfterFailures)
fences_out_of_memory_at_a_new_epoch = _factory(FencesOutOfMemoryAtANewEpoch)
releases_everywhere = _factory(ReleasesEverywhere)
