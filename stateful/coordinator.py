"""A small reference coordinator: on any failure, bump the epoch, re-route, replay.

It keeps one route (a node per stage) and a pool of spare nodes per layer
range.  When a stage reports ``EngineCrashed`` the node is restarted and sent
to the pool, and a spare takes its place.  Whatever the failure, the session's
epoch goes up and its whole history is replayed from position 0 on the next
attempt, so a stale route can never answer for it again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from fakeshard import EngineCrashed, Pipeline, ShardError


class GaveUp(Exception):
    """The coordinator ran out of attempts (the faults never stopped)."""


@dataclass
class SessionState:
    prompt: list[int]
    epoch: int = 0
    generated: list[int] = field(default_factory=list)
    needs_replay: bool = True
    open: bool = True

    @property
    def history(self) -> list[int]:
        return self.prompt + self.generated


class Coordinator:
    """Routes sessions over ``route`` (one node per stage), with ``spares[i]`` for stage ``i``."""

    def __init__(self, route: Sequence[Any], spares: Sequence[Sequence[Any]], max_attempts: int = 64) -> None:
        self.route = list(route)
        self.spares = [list(pool) for pool in spares]
        self.max_attempts = max_attempts
        self.sessions: dict[str, SessionState] = {}
        self.reroutes = 0
        self.replays = 0

    @property
    def nodes(self) -> list[Any]:
        return self.route + [node for pool in self.spares for node in pool]

    def _reroute(self, stage: int) -> None:
        down = self.route[stage]
        down.restart()  # back, empty; it waits in the pool
        self.spares[stage].append(down)
        self.route[stage] = self.spares[stage].pop(0)
        self.reroutes += 1

    def _failed(self, pipe: Pipeline, exc: ShardError) -> None:
        if isinstance(exc, EngineCrashed) and pipe.last_failed_stage is not None:
            self._reroute(pipe.last_failed_stage)

    def start(self, session_id: str, prompt: Sequence[int]) -> None:
        """Open a session; a reused id continues above its old epoch, so old fences hold."""
        old = self.sessions.get(session_id)
        self.sessions[session_id] = SessionState(list(prompt), epoch=old.epoch + 1 if old else 0)

    def next_token(self, session_id: str) -> int:
        """Produce the session's next token, surviving any bounded run of faults."""
        s = self.sessions[session_id]
        for _ in range(self.max_attempts):
            pipe = Pipeline(self.route)
            try:
                if s.needs_replay:
                    sample = pipe.prefill(session_id, s.epoch, 0, s.history)
                else:
                    history = s.history
                    sample = pipe.decode(session_id, s.epoch, len(history) - 1, history[-1])
            except ShardError as exc:
                self._failed(pipe, exc)
                s.epoch += 1
                s.needs_replay = True
                self.replays += 1
                continue
            s.needs_replay = False
            s.generated.append(sample.token)
            return sample.token
        raise GaveUp(f"session {session_id!r}: no token after {self.max_attempts} attempts")

    def release(self, session_id: str) -> None:
        """Release the session on every stage of the route (retrying through faults)."""
        s = self.sessions[session_id]
        for _ in range(self.max_attempts):
            pipe = Pipeline(self.route)
            try:
                pipe.release(session_id, s.epoch)
            except ShardError as exc:
                self._failed(pipe, exc)
                continue
            s.open = False
            return
        raise GaveUp(f"session {session_id!r}: release kept failing")
