"""A small reference coordinator: on any failure, bump the epoch, re-route, replay.

It keeps one route (a node per stage) and a pool of spare nodes per layer
range.  When a stage reports ``EngineCrashed`` the node is restarted and sent
to the pool, and a spare takes its place.  Whatever the failure, the session's
epoch goes up and its whole history is replayed from position 0 on the next
attempt, so a stale route can never answer for it again.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Sequence

from fakeshard import EngineCrashed, MalformedBundle, Pipeline, ShardError, wire

#: How a link encodes bundles: readable JSON, base64 inside JSON, or the binary frame.
LINK_FORMS = ("json", "base64", "frame")


def across(value: Any, form: str) -> Any:
    """``value`` there and back through one of the wire's forms, read strictly."""
    if form == "frame":
        return wire.loadb(wire.dumpb(value))
    return wire.loads(wire.dumps(value, hidden="base64" if form == "base64" else "floats"))


class WireLink:
    """A node seen across a network: every bundle and error crosses the wire.

    Inputs and outputs go through one of the wire's forms (``form``: JSON,
    base64 inside JSON, or the binary frame), read strictly, so an output
    that breaks the contract visibly is refused on arrival; errors come back
    through the wire too, as a remote node's would.
    """

    def __init__(self, node: Any, form: str = "json") -> None:
        if form not in LINK_FORMS:
            raise ValueError(f"form must be one of {LINK_FORMS}, got {form!r}")
        self.node, self.form = node, form
        self.spec = node.spec
        self.evidence_class = node.evidence_class

    def _call(self, op: str, *args: Any) -> Any:
        sent = [across(a, self.form) if not isinstance(a, (str, int)) else a for a in args]
        try:
            out = getattr(self.node, op)(*sent)
        except ShardError as exc:
            raise wire.loads(wire.dumps(exc)) from None
        try:
            return None if out is None else across(out, self.form)
        except MalformedBundle as exc:
            # Refused on arrival: the error names the call's session and epoch, as an engine's would.
            session_id, epoch = (args[0].session_id, args[0].epoch) if len(args) == 1 else args
            raise MalformedBundle(f"the answer to {op} broke the contract on arrival: {exc}",
                                  session_id=session_id, epoch=epoch) from None

    def prefill(self, bundle: Any) -> Any:
        return self._call("prefill", bundle)

    def decode(self, bundle: Any) -> Any:
        return self._call("decode", bundle)

    def cancel(self, session_id: str, epoch: int) -> None:
        self._call("cancel", session_id, epoch)

    def release(self, session_id: str, epoch: int) -> None:
        self._call("release", session_id, epoch)

    def restart(self) -> None:
        self.node.restart()

    def session(self, session_id: str) -> Any:
        return self.node.session(session_id)

    @property
    def used_tokens(self) -> int:
        return self.node.used_tokens

    @property
    def capacity_tokens(self) -> Any:
        return self.node.capacity_tokens


class GaveUp(Exception):
    """A coordinator stops trying: the faults never stopped.

    The kit's coordinator machine accepts it only beyond the budget it states
    (``fakeshard.testing._coordinator_machine.GIVE_UP_AFTER`` failing calls in one step).
    """


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
    """Routes sessions over ``route`` (one node per stage), with ``spares[i]`` for stage ``i``.

    The policy is split into small methods (``pipeline``, ``attempt``, ``recover``,
    ``reroute``, ``release_route``) so that a variant can change one decision and keep
    the rest; the kit's planted coordinators are such variants.
    """

    def __init__(self, route: Sequence[Any], spares: Sequence[Sequence[Any]], max_attempts: int = 64,
                 clock: Any = None) -> None:
        self.route = list(route)
        self.spares = [list(pool) for pool in spares]
        self.max_attempts = max_attempts
        self.clock = clock
        self.sessions: dict[str, SessionState] = {}
        self.reroutes = 0
        self.replays = 0
        #: Error codes the coordinator has handled, by code.
        self.errors: Counter[str] = Counter()
        #: Every pipeline call it made, in order: ``(op, session_id, epoch, pos, outcome)``, where
        #: ``pos`` is where the token it asks for will sit (``None`` for cancel and release)
        #: and ``outcome`` the answer (a ``SampleBundle``, or ``None``) or the ``ShardError``.
        self.calls: list[tuple[str, str, int, Any, Any]] = []

    @classmethod
    def from_stages(cls, stages: Sequence[Sequence[Any]], *, clock: Any = None) -> "Coordinator":
        """From a coordinator factory's ``stages``: each stage's first engine is on the route,
        the others are its spares."""
        return cls([stage[0] for stage in stages], [list(stage[1:]) for stage in stages], clock=clock)

    @property
    def nodes(self) -> list[Any]:
        return self.route + [node for pool in self.spares for node in pool]

    def reroute(self, stage: int) -> None:
        """Replace the route's node at ``stage`` (it crashed) by a spare; the crashed one is
        restarted (empty) and waits in the pool."""
        down = self.route[stage]
        down.restart()
        self.spares[stage].append(down)
        self.route[stage] = self.spares[stage].pop(0)
        self.reroutes += 1
        # The node taking over holds no session's cache: every open session replays there
        # (at a new epoch) instead of drawing a cache miss first.
        for s in self.sessions.values():
            if s.open and not s.needs_replay:
                s.needs_replay = True
                s.epoch += 1

    def pipeline(self) -> Pipeline:
        """The route as a pipeline (which checks every stage's answer before passing it on)."""
        return Pipeline(self.route)

    def attempt(self, session_id: str, s: SessionState, pipe: Pipeline) -> Any:
        """One try at the session's next token: replay the history, or decode the last token."""
        if s.needs_replay:
            return pipe.prefill(session_id, s.epoch, 0, s.history)
        history = s.history
        return pipe.decode(session_id, s.epoch, len(history) - 1, history[-1])

    def recover(self, session_id: str, s: SessionState, pipe: Pipeline, exc: ShardError) -> None:
        """After a failed try: re-route around a crash, bump the epoch, replay next time."""
        self._failed(pipe, exc)
        s.epoch += 1
        s.needs_replay = True
        self.replays += 1

    def release_route(self, session_id: str, s: SessionState, pipe: Pipeline) -> None:
        """Release the session on every stage of the route."""
        pipe.release(session_id, s.epoch)

    def _failed(self, pipe: Pipeline, exc: ShardError) -> None:
        self.errors[exc.code] += 1
        if isinstance(exc, EngineCrashed) and pipe.last_failed_stage is not None:
            self.reroute(pipe.last_failed_stage)

    def start(self, session_id: str, prompt: Sequence[int]) -> None:
        """Open a session; a reused id continues above its old epoch, so old fences hold."""
        old = self.sessions.get(session_id)
        self.sessions[session_id] = SessionState(list(prompt), epoch=old.epoch + 1 if old else 0)

    def next_token(self, session_id: str) -> int:
        """Produce the session's next token, surviving any bounded run of faults."""
        s = self.sessions[session_id]
        for _ in range(self.max_attempts):
            pipe = self.pipeline()
            op, epoch, pos = "prefill" if s.needs_replay else "decode", s.epoch, len(s.history)
            try:
                sample = self.attempt(session_id, s, pipe)
            except ShardError as exc:
                self.calls.append((op, session_id, epoch, pos, exc))
                self.recover(session_id, s, pipe, exc)
                continue
            self.calls.append((op, session_id, epoch, pos, sample))
            s.needs_replay = False
            s.generated.append(sample.token)
            return sample.token
        raise GaveUp(f"session {session_id!r}: no token after {self.max_attempts} attempts")

    def release(self, session_id: str) -> None:
        """Release the session on every stage of the route (retrying through faults)."""
        self._close("release", session_id, self.release_route)

    def cancel(self, session_id: str) -> None:
        """Cancel the session on every stage of the route (retrying through faults): each
        stage frees its cache and refuses the session's epoch from then on."""
        self._close("cancel", session_id, lambda sid, s, pipe: pipe.cancel(sid, s.epoch))

    def _close(self, op: str, session_id: str, close: Any) -> None:
        s = self.sessions[session_id]
        for _ in range(self.max_attempts):
            pipe = self.pipeline()
            epoch = s.epoch
            try:
                close(session_id, s, pipe)
            except ShardError as exc:
                self.calls.append((op, session_id, epoch, None, exc))
                self._failed(pipe, exc)
                continue
            self.calls.append((op, session_id, epoch, None, None))
            s.open = False
            return
        raise GaveUp(f"session {session_id!r}: {op} kept failing")
