"""The adapter a team writes to run fakeshard's suites on its own runtime.

``make_engine`` has ``FakeShardEngine``'s signature. It checks input with
``fakeshard.validate``, maps the runtime's errors to the contract's, and
honours a fault plan: ``fakeshard.FaultInjector`` says which faults are due
on a call, and this file applies them as the contract's fault table says.
How it breaks a ``Malformed`` output is its own choice (not the fixture's).
"""

from __future__ import annotations

import dataclasses
import math
import threading
from typing import Any, Optional

import numpy as np

import fakeshard as fs
from fakeshard import FaultInjector
from tests.independent import runtime as rt


@dataclasses.dataclass(frozen=True)
class View:
    session_id: str
    epoch: int
    status: str
    cached_tokens: int


_STATUS = {None: "live", "cancel": "cancelled", "release": "released"}


class Adapter:
    evidence_class = "fixture"  # toy arithmetic: not a real model

    def __init__(self, spec: fs.ShardSpec, *, seed: int = 0, capacity_tokens: Optional[int] = None,
                 clock: Any = None, faults: Optional[fs.FaultPlan] = None, rows: bool = False) -> None:
        self.spec = spec
        self.rows = rows
        self.clock = clock if clock is not None else fs.VirtualClock()
        self.faults = FaultInjector(faults)
        self.lock = threading.Lock()
        self.rt = rt.ToyRuntime(spec.model_id, spec.n_layers, spec.start_layer, spec.end_layer,
                                spec.hidden_size, spec.vocab_size, seed, capacity_tokens)

    capacity_tokens = property(lambda self: self.rt.budget)
    used_tokens = property(lambda self: self.rt.held)

    def session(self, session_id: str) -> Optional[View]:
        with self.lock:
            s = self.rt.sessions.get(session_id)
            return None if s is None else View(session_id, s.epoch, _STATUS[s.closed], s.length)

    def restart(self) -> None:
        with self.lock:
            self.rt.reboot()

    # One call at a time: the contract asks every call to be atomic (linearizable).
    # (The first version had no lock; the parallel machine caught it.)

    def prefill(self, bundle: Any) -> Any:
        with self.lock:
            return self._call("prefill", bundle)

    def decode(self, bundle: Any) -> Any:
        with self.lock:
            return self._call("decode", bundle)

    def cancel(self, session_id: str, epoch: int) -> None:
        with self.lock:
            self._close("cancel", session_id, epoch)

    def release(self, session_id: str, epoch: int) -> None:
        with self.lock:
            self._close("release", session_id, epoch)

    # -- glue ----------------------------------------------------------------

    def _enter(self, op: str, session_id: Any, epoch: Any) -> Any:
        due = self.faults.draw(op, session_id)
        if due.delay:
            self.clock.sleep(due.delay)
        if due.crash:
            self.rt.crash()
        return due

    def _call(self, op: str, bundle: Any) -> Any:
        sid, epoch = getattr(bundle, "session_id", None), getattr(bundle, "epoch", None)
        due = self._enter(op, sid, epoch)
        ids = dict(session_id=sid if isinstance(sid, str) else None,
                   epoch=epoch if type(epoch) is int else None)
        if self.rt.down:
            raise fs.EngineCrashed("node down", **ids)
        wanted = fs.TokenBundle if self.spec.role.takes_tokens else fs.HiddenBundle
        if type(bundle) is not wanted:
            raise fs.MalformedBundle(f"wanted {wanted.__name__}", **ids)
        try:
            fs.validate(bundle, self.spec)
        except fs.MalformedBundle:  # this runtime words its own errors
            raise fs.MalformedBundle("bad input", **ids) from None
        if wanted is fs.HiddenBundle and bundle.layer != self.spec.start_layer:
            raise fs.MalformedBundle("wrong layer", **ids)
        inputs = bundle.tokens if wanted is fs.TokenBundle else bundle.array()
        if op == "decode" and len(inputs) != 1:
            raise fs.MalformedBundle("decode is one position", **ids)
        hold = math.inf if due.fail_allocation else due.reserve_tokens
        out = self._map(lambda: self.rt.run(sid, epoch, bundle.start_pos, inputs,
                                           only_new=op == "decode", hold_back=hold), ids)
        end = bundle.start_pos + len(inputs)
        if self.spec.role.samples:
            result: Any = fs.SampleBundle(sid, epoch, end, out)
        else:
            result = fs.HiddenBundle.sealed(sid, epoch, bundle.start_pos, self.spec.end_layer,
                                            out.astype(np.float32))
        for kind in due.malformed:
            result = _break(result, kind, self.spec, nan=math.nan if self.rows else math.inf)
        if self.rows and isinstance(result, fs.HiddenBundle):
            # The contract's other form: rows of Python floats (float32's values exactly).
            result = dataclasses.replace(result, hidden=result.rows())
        if due.drop:
            raise fs.ResponseLost("response lost", **ids)
        return result

    def _close(self, op: str, session_id: Any, epoch: Any) -> None:
        due = self._enter(op, session_id, epoch)
        ids = dict(session_id=session_id if isinstance(session_id, str) else None,
                   epoch=epoch if type(epoch) is int else None)
        if self.rt.down:
            raise fs.EngineCrashed("node down", **ids)
        if not isinstance(session_id, str) or not session_id or type(epoch) is not int or epoch < 0:
            raise fs.MalformedBundle("bad session id or epoch", **ids)
        self._map(lambda: self.rt.close(session_id, epoch, op), ids)
        if due.drop:
            raise fs.ResponseLost("response lost", **ids)

    @staticmethod
    def _map(call: Any, ids: dict) -> Any:
        try:
            return call()
        except rt.NodeDown:
            raise fs.EngineCrashed("node down", **ids) from None
        except rt.OldEpoch as e:
            raise fs.StaleEpoch(str(e), **ids) from None
        except rt.Closed as e:
            kind = fs.SessionCancelled if e.how == "cancel" else fs.SessionReleased
            raise kind(str(e), **ids) from None
        except rt.NoCache as e:
            raise fs.CacheMiss(str(e), expected=e.info["want"], got=e.info["got"], **ids) from None
        except rt.WrongPosition as e:
            raise fs.PositionMismatch(str(e), expected=e.info["want"], got=e.info["got"], **ids) from None
        except rt.NoRoom as e:
            raise fs.OutOfMemory(str(e), **ids) from None


def _break(out: Any, kind: str, spec: fs.ShardSpec, nan: float = math.inf) -> Any:
    """``out`` broken as ``Malformed(kind)`` asks, this adapter's way (``nan``: the non-finite
    value the ``nan`` kind puts in the last value)."""
    if isinstance(out, fs.HiddenBundle):
        fields = dict(session_id=out.session_id, epoch=out.epoch, start_pos=out.start_pos,
                      layer=out.layer, hidden=out.array())
        if kind == "checksum":
            right = fs.HiddenBundle.sealed(**fields).checksum
            return dataclasses.replace(out, checksum=format(int(right, 16) ^ 1, "016x"))
        if kind == "shape":
            fields["hidden"] = np.zeros((len(out.array()), spec.hidden_size + 1), np.float32)
        elif kind == "layer":
            fields["layer"] = out.layer + 2
        elif kind == "nan":
            h = np.array(out.array())
            h[-1, -1] = nan
            fields["hidden"] = h
        elif kind == "session":
            fields["session_id"] = "not-" + out.session_id
        elif kind == "epoch":
            fields["epoch"] = out.epoch + 3
        elif kind == "position":
            fields["start_pos"] = out.start_pos + 5
        else:
            return out
        return fs.HiddenBundle.sealed(**fields)
    if kind == "token_range":
        return dataclasses.replace(out, token=spec.vocab_size + 7)
    changes = {"session": dict(session_id="not-" + out.session_id), "epoch": dict(epoch=out.epoch + 3),
               "position": dict(pos=out.pos + 5)}.get(kind)
    return dataclasses.replace(out, **changes) if changes else out


def make_engine(spec: fs.ShardSpec, *, seed: int = 0, capacity_tokens: Optional[int] = None,
                clock: Any = None, faults: Optional[fs.FaultPlan] = None) -> Adapter:
    return Adapter(spec, seed=seed, capacity_tokens=capacity_tokens, clock=clock, faults=faults)


def make_rows_engine(spec: fs.ShardSpec, *, seed: int = 0, capacity_tokens: Optional[int] = None,
                     clock: Any = None, faults: Optional[fs.FaultPlan] = None) -> Adapter:
    """The same engine answering hidden values as rows of Python floats, as the contract
    allows, and breaking a ``nan`` output with a real NaN: the suites must not care which."""
    return Adapter(spec, seed=seed, capacity_tokens=capacity_tokens, clock=clock, faults=faults, rows=True)
