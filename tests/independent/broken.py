"""The independent engine with one contract rule broken each: the suites must fail on every one.

Each factory has ``make_engine``'s signature; ``RULES`` names the rule it breaks.
"""

from __future__ import annotations

from typing import Any

import fakeshard as fs
from tests.independent import adapter, runtime


class _UnfencedRuntime(runtime.ToyRuntime):
    """Closes at any epoch: a cancel or release from an older epoch is obeyed, not refused."""

    def close(self, sid: str, epoch: int, how: str) -> None:
        s = self.sessions.get(sid)
        if s is not None and epoch < s.epoch:
            epoch = s.epoch
        super().close(sid, epoch, how)


class _LeakyRuntime(runtime.ToyRuntime):
    """Replacing an older epoch's cache at a new epoch forgets to free the old positions."""

    def run(self, sid: str, epoch: int, start: int, inputs: Any, **kw: Any) -> Any:
        s = self.sessions.get(sid)
        old = s.length if s is not None and s.epoch < epoch and not s.closed else 0
        out = super().run(sid, epoch, start, inputs, **kw)
        self.held += old
        return out


class _EarlyDropAdapter(adapter.Adapter):
    """A dropped response is dropped before the call is applied (the contract: applied, then lost)."""

    def _enter(self, op: str, session_id: Any, epoch: Any) -> Any:
        due = super()._enter(op, session_id, epoch)
        if due.drop and not self.rt.down:
            raise fs.ResponseLost("response lost", session_id=session_id, epoch=epoch)
        return due


def _with_runtime(cls: type) -> Any:
    def make(spec: fs.ShardSpec, **kw: Any) -> adapter.Adapter:
        engine = adapter.make_engine(spec, **kw)
        engine.rt.__class__ = cls
        return engine
    return make


unfenced_close = _with_runtime(_UnfencedRuntime)
leaky_replace = _with_runtime(_LeakyRuntime)


def early_drop(spec: fs.ShardSpec, **kw: Any) -> adapter.Adapter:
    return _EarlyDropAdapter(spec, **kw)


RULES = {
    "unfenced_close": "cancel/release at an epoch older than the session's is StaleEpoch",
    "leaky_replace": "a prefill at a newer epoch frees the older epoch's cache",
    "early_drop": "DropResponse: the call is applied, then the response is lost",
}
