"""Shared helpers for the unit and contract tests."""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import pytest

from fakeshard import FaultPlan, ShardError, ShardSpec, VirtualClock
from fakeshard._feeder import Feeder

N_LAYERS = 4
#: The reason given where a test checks the fixture's wording of an error message.
WORDING = "error wording (the contract fixes an error's type, code and fields, not its message)"

#: The reason given where a test checks how a factory refuses bad constructor arguments.
CONSTRUCTOR = ("constructor argument checks (the contract fixes the factory's signature, not how it "
               "refuses bad arguments)")

#: One layer range per role, over a 4-layer model.
ROLE_RANGES = {"head": (0, 2), "middle": (1, 3), "tail": (2, 4), "full": (0, 4)}
ROLES = tuple(ROLE_RANGES)


def role_spec(role: str, **kw: Any) -> ShardSpec:
    start, end = ROLE_RANGES[role]
    return ShardSpec("test-model", N_LAYERS, start, end, **kw)


class Rig:
    """One engine of a role, with inputs made from per-session token histories."""

    def __init__(
        self,
        factory: Callable[..., Any],
        role: str = "full",
        *,
        seed: int = 0,
        capacity_tokens: Optional[int] = None,
        faults: Optional[FaultPlan] = None,
        **spec_kw: Any,
    ) -> None:
        self.spec = role_spec(role, **spec_kw)
        self.clock = VirtualClock()
        self.factory = factory
        self.seed = seed
        self.engine = factory(self.spec, seed=seed, capacity_tokens=capacity_tokens,
                              clock=self.clock, faults=faults)
        self.feeder = Feeder(factory, self.spec, seed=seed)

    def bundle(self, sid: str, epoch: int, start: int, n: int = 1,
               history: Optional[Sequence[int]] = None) -> Any:
        history = list(history) if history is not None else default_history(sid, start + n)
        return self.feeder.bundle(sid, epoch, start, history, n)

    def prefill(self, sid: str, epoch: int, start: int, n: int, history: Optional[Sequence[int]] = None) -> Any:
        return self.engine.prefill(self.bundle(sid, epoch, start, n, history))

    def decode(self, sid: str, epoch: int, pos: int, history: Optional[Sequence[int]] = None) -> Any:
        return self.engine.decode(self.bundle(sid, epoch, pos, 1, history))

    def snapshot(self, *sids: str) -> tuple[Any, ...]:
        return (self.engine.used_tokens,) + tuple(self.engine.session(s) for s in sids)


def default_history(sid: str, n: int) -> list[int]:
    """A fixed token history per session id (vocabulary 256)."""
    base = sum(sid.encode()) % 200
    return [(base + 7 * i) % 256 for i in range(n)]


def raises_untouched(rig: Rig, sids: Sequence[str], error: type, fn: Callable[[], Any]) -> Any:
    """``fn()`` raises ``error`` and leaves the sessions and accounting as they were."""
    before = rig.snapshot(*sids)
    with pytest.raises(error) as info:
        fn()
    assert rig.snapshot(*sids) == before
    return info.value


def assert_carries(err: BaseException, code: str, session_id: Any, epoch: Any, **extra: Any) -> None:
    """``err`` carries what the contract says an error carries: type, code and fields, not wording.

    Where the call's ``session_id`` is a non-empty str and its ``epoch`` an
    int >= 0, the error names them; otherwise each is the call's value or ``None``.
    """
    assert isinstance(err, ShardError), repr(err)
    assert err.code == code, (err.code, code)
    if isinstance(session_id, str) and session_id and type(epoch) is int and epoch >= 0:
        assert (err.session_id, err.epoch) == (session_id, epoch), repr(err)
    else:
        assert err.session_id is None or err.session_id == session_id, repr(err)
        assert err.epoch is None or err.epoch == epoch, repr(err)
    for name, value in extra.items():
        assert getattr(err, name) == value, (name, getattr(err, name), value)


def raw_post(path: str, body: bytes, extra: bytes = b"") -> bytes:
    """An HTTP/1.1 ``POST`` of a JSON ``body`` to ``path``, byte for byte (``extra``: more header
    lines, each ending in CRLF), for tests that speak to a node on a raw socket."""
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n").encode() + extra + b"\r\n" + body


def untold_real_engine(spec: Any, **kwargs: Any) -> Any:
    """The tiny real engine, its factory stating neither a tolerance nor logits (served by
    ``fakeshard serve``, a real-model host that says nothing of how it is judged)."""
    from fakeshard.real import tiny_engine

    return tiny_engine(spec, **kwargs)


def tolerant_real_engine(spec: Any, **kwargs: Any) -> Any:
    """The tiny real engine, its factory stating a tolerance but offering no logits."""
    return untold_real_engine(spec, **kwargs)


tolerant_real_engine.tolerance = 1e-3  # type: ignore[attr-defined]
