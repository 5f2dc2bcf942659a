"""A toy pipeline-parallel runtime, written from the contract's text alone.

Nothing here comes from fakeshard: the arithmetic is integer arithmetic
modulo a prime (so any split of the layers gives exactly the same numbers),
and the session table is a plain dict. Its API is its own; the adapter maps
it to the contract.
"""

from __future__ import annotations

import hashlib
import math
from typing import Optional

import numpy as np

P = 65521  # every hidden value is an integer in [0, P), exact in float32


class RuntimeFailure(Exception):
    """Base of this runtime's errors; ``what`` names the rule."""

    what = "failure"

    def __init__(self, text: str, **info: int) -> None:
        super().__init__(text)
        self.info = info


class NodeDown(RuntimeFailure):
    what = "down"


class OldEpoch(RuntimeFailure):
    what = "old-epoch"


class Closed(RuntimeFailure):
    """The session was closed at this epoch; ``how`` is ``cancel`` or ``release``."""

    what = "closed"

    def __init__(self, text: str, how: str) -> None:
        super().__init__(text)
        self.how = how


class NoCache(RuntimeFailure):
    what = "no-cache"


class WrongPosition(RuntimeFailure):
    what = "wrong-position"


class NoRoom(RuntimeFailure):
    what = "no-room"


def _numbers(model_id: str, seed: int, label: str, count: int) -> np.ndarray:
    """``count`` integers in [1, P) from SHA-256 of the label: the model's 'weights'."""
    out = bytearray()
    block = 0
    while len(out) < 4 * count:
        out += hashlib.sha256(f"{model_id}|{seed}|{label}|{block}".encode()).digest()
        block += 1
    return np.frombuffer(bytes(out[:4 * count]), dtype="<u4").astype(np.int64) % (P - 1) + 1


class Session:
    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self.closed: Optional[str] = None  # None while open, else "cancel" or "release"
        self.length = 0
        self.sums: Optional[np.ndarray] = None  # per layer: running sum of the layer's inputs


class ToyRuntime:
    """Layers ``first..last`` (exclusive) of a toy model of ``n_layers`` layers.

    Layer ``l`` maps the row ``x`` at position ``p`` to
    ``(a_l * x + b_l * (x_0 + ... + x_p)) mod P``: it attends to every earlier
    position through a running sum, which is its KV cache. The head embeds
    token ``t`` as row ``t`` of a table; the tail's token is a weighted sum of
    the last row, modulo the vocabulary.
    """

    def __init__(self, model_id: str, n_layers: int, first: int, last: int, width: int,
                 vocab: int, seed: int = 0, budget: Optional[int] = None) -> None:
        self.first, self.last, self.n_layers = first, last, n_layers
        self.width, self.vocab, self.budget = width, vocab, budget
        self.a = [_numbers(model_id, seed, f"a{layer}", width) for layer in range(first, last)]
        self.b = [_numbers(model_id, seed, f"b{layer}", width) for layer in range(first, last)]
        self.table = _numbers(model_id, seed, "embed", vocab * width).reshape(vocab, width) if first == 0 else None
        self.readout = _numbers(model_id, seed, "readout", width) if last == n_layers else None
        self.sessions: dict[str, Session] = {}
        self.held = 0
        self.down = False

    def crash(self) -> None:
        self.down = True
        self.sessions.clear()
        self.held = 0

    def reboot(self) -> None:
        self.down = False
        self.sessions.clear()
        self.held = 0

    def _fence(self, sid: str, epoch: int) -> Optional[Session]:
        if self.down:
            raise NodeDown("node is down")
        s = self.sessions.get(sid)
        if s is not None and epoch < s.epoch:
            raise OldEpoch(f"epoch {epoch} is older than {s.epoch}")
        return s

    def run(self, sid: str, epoch: int, start: int, inputs, *, only_new: bool, hold_back: float = 0):
        """Run ``inputs`` (token ids, or rows) at positions ``start..``; ``hold_back`` memory is unusable.

        ``only_new``: the call may not open a session (a decode).
        Returns the output rows (int64) or the sampled token.
        """
        s = self._fence(sid, epoch)
        if s is not None and s.epoch == epoch:
            if s.closed:
                raise Closed(f"{sid} closed at epoch {epoch}", s.closed)
            if start != s.length:
                raise WrongPosition(f"{sid} holds {s.length}, got {start}", want=s.length, got=start)
            old = 0
        else:
            if only_new or start != 0:
                raise NoCache(f"{sid} not cached at epoch {epoch}", want=0, got=start)
            old = s.length if s is not None else 0
        n = len(inputs)
        if hold_back == math.inf:
            raise NoRoom("allocation refused")
        if self.budget is not None and self.held - old + n > self.budget - hold_back:
            raise NoRoom(f"{n} positions do not fit")
        sums = (s.sums.copy() if s is not None and s.epoch == epoch and s.sums is not None
                else np.zeros((self.last - self.first, self.width), dtype=np.int64))
        if self.table is not None:
            x = self.table[np.asarray(inputs, dtype=np.int64)]
        else:  # any finite value is a valid hidden value: fold it into [0, P)
            x = np.mod(np.floor(np.asarray(inputs, dtype=np.float64)), P).astype(np.int64)
        out = np.empty_like(x)
        for row in range(n):
            h = x[row]
            for i in range(self.last - self.first):
                sums[i] = (sums[i] + h) % P
                h = (self.a[i] * h + self.b[i] * sums[i]) % P
            out[row] = h
        # Nothing changed above; commit.
        if s is None or s.epoch != epoch:
            s = self.sessions[sid] = Session(epoch)
        s.length = start + n
        s.sums = sums
        self.held += n - old
        if self.readout is not None:
            return int(int((out[-1] * self.readout).sum()) % self.vocab)
        return out

    def close(self, sid: str, epoch: int, how: str) -> None:
        s = self._fence(sid, epoch)
        if s is None or s.epoch < epoch:
            if s is not None:
                self.held -= s.length
            s = self.sessions[sid] = Session(epoch)
            s.closed = how
        elif s.closed is None:
            self.held -= s.length
            s.length, s.sums, s.closed = 0, None, how
