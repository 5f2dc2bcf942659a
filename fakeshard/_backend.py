"""What a layer range computes, under the session rules.

The session table (:mod:`fakeshard._engine`) owns epochs, tombstones,
positions, accounting, crash and faults; a *backend* owns only the numbers:
how inputs at new positions turn into outputs, given the session's cache.
:class:`HashBackend` is the fixture's; a real-weights backend plugs in the
same way (``fakeshard.real``).

The hash backend keeps, per layer, one 64-bit running digest of every input
that layer has seen for the session (its "KV cache").  A layer's output at
position ``p`` is the digest after folding in its input at ``p``, so it is a
pure function of the layer's keys and the inputs at ``0..p``.  Because each
layer depends only on its own inputs, any split of the layers into stages
computes exactly what one full engine computes, and chunking a prefill
changes nothing.  Between stages the 64-bit state travels as a hidden row:
its four 16-bit limbs as floats in ``[-1, 1)``, the other columns derived
from them (the receiver reads the limbs back exactly).  Every value is
``k / 32768 - 1`` for a 16-bit ``k``, exact in float32, so the rows are
built as one read-only float32 array in a few vector operations.
"""

from __future__ import annotations

import functools
import hashlib
from typing import Any, Protocol, Sequence, runtime_checkable

import numpy as np

from fakeshard._contract import ShardSpec

__all__ = ["Backend", "HashBackend"]

_M = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_MIX2 = 0xBF58476D1CE4E5B9
_MIX3 = 0x94D049BB133111EB


@runtime_checkable
class Backend(Protocol):
    """The computation under one engine's session table."""

    spec: ShardSpec
    evidence_class: str

    def empty_cache(self) -> Any:
        """A session's cache before any position."""

    def forward(self, cache: Any, start_pos: int, inputs: Sequence[Any]) -> tuple[Any, Any]:
        """Run the layer range over ``inputs`` at ``start_pos, start_pos + 1, ...``.

        ``inputs`` are tokens (head, full) or hidden rows (middle, tail),
        already validated.  Returns ``(new_cache, output)``: hidden rows for
        every input position (head, middle) or the token sampled after the
        last one (tail, full).  Must not modify ``cache``: the session table
        commits ``new_cache`` only if the call succeeds.
        """


def _splitmix(z: int) -> int:
    z = (z + _GOLDEN) & _M
    z = ((z ^ (z >> 30)) * _MIX2) & _M
    z = ((z ^ (z >> 27)) * _MIX3) & _M
    return z ^ (z >> 31)


@functools.lru_cache(maxsize=4096)
def _key(model_id: str, seed: int, what: str, index: int) -> int:
    """A 64-bit key of the model, seed and layer: a pure function, so it is computed once."""
    text = f"fakeshard.hash-backend.v1\x00{model_id}\x00{seed}\x00{what}\x00{index}"
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "little")


@functools.lru_cache(maxsize=64)
def _columns(hidden_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Column j >= 4 repeats limb j % 4 under a fixed mask: each column's limb, and its mask."""
    cols = np.arange(hidden_size)
    limb_of = cols & 3
    masks = np.where(cols >= 4, (cols * 0x9E37) & 0xFFFF, 0).astype(np.uint16)
    limb_of.flags.writeable = masks.flags.writeable = False
    return limb_of, masks


class HashBackend:
    """Deterministic fixture computation: integer mixing, no floats inside a stage."""

    evidence_class = "fixture"

    __slots__ = ("spec", "seed", "_adds", "_muls", "_inits", "_embed", "_sample", "_limb_of",
                 "_masks", "_takes_tokens", "_samples")

    def __init__(self, spec: ShardSpec, seed: int = 0) -> None:
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"seed must be an int, got {seed!r}")
        self.spec = spec
        self.seed = seed
        layers = range(spec.start_layer, spec.end_layer)
        model, s = spec.model_id, seed
        self._adds = tuple(_key(model, s, "add", layer) for layer in layers)
        self._muls = tuple(_key(model, s, "mul", layer) | 1 for layer in layers)
        self._inits = tuple(_key(model, s, "init", layer) for layer in layers)
        self._embed = _key(model, s, "embed", 0)
        self._sample = _key(model, s, "sample", 0)
        self._limb_of, self._masks = _columns(spec.hidden_size)
        self._takes_tokens = spec.role.takes_tokens
        self._samples = spec.role.samples

    def empty_cache(self) -> tuple[int, ...]:
        return self._inits

    def _encode(self, xs: list[int]) -> np.ndarray:
        """One row per 64-bit state: column ``j`` is limb ``j % 4`` xor its mask, as ``k/32768 - 1``."""
        states = np.array(xs, dtype=np.uint64)
        limbs = ((states[:, None] >> _LIMB_SHIFTS) & np.uint64(0xFFFF)).astype(np.uint16)
        ks = limbs[:, self._limb_of] ^ self._masks
        rows = ks.astype(np.float32)
        rows *= np.float32(1 / 32768)
        rows -= np.float32(1.0)
        rows.flags.writeable = False
        return rows

    @staticmethod
    def _decode(inputs: Any) -> list[int]:
        """The 64-bit state in each row's first four columns (rounded half to even, mod 2**16).

        Values are read as float32, as the contract reads them (the checksum, equality): rows of
        Python floats and an array of the same float32 values are one input.  A value beyond
        float32's range saturates at its largest finite value, as the real engine's does.
        """
        first = np.asarray(inputs)[:, :4]  # only the limbs' columns are converted
        if first.dtype != np.float32:  # rows of Python numbers, or another dtype: read as float32
            first = np.clip(first.astype(np.float64), -_F32_MAX, _F32_MAX).astype(np.float32)
        first = first.astype(np.float64)  # finite float32 values: nothing below leaves float64's range
        limbs = np.mod(np.rint((first + 1.0) * 32768.0), 65536.0).astype(np.uint64)
        return ((limbs << _LIMB_SHIFTS).sum(axis=1, dtype=np.uint64)).tolist()

    def forward(
        self, cache: tuple[int, ...], start_pos: int, inputs: Sequence[Any]
    ) -> tuple[tuple[int, ...], Any]:
        digests = list(cache)
        adds, muls = self._adds, self._muls
        n = len(digests)
        states = []
        seeds = [_splitmix(self._embed ^ t) for t in inputs] if self._takes_tokens \
            else self._decode(inputs)
        for x in seeds:
            for i in range(n):
                z = (((digests[i] ^ x) + adds[i]) * muls[i]) & _M
                z ^= z >> 29
                z = (z * _MIX2) & _M
                z ^= z >> 32
                digests[i] = x = z
            states.append(x)
        if self._samples:  # from the last position's state (the engine never asks for none)
            return tuple(digests), _splitmix(states[-1] ^ self._sample) % self.spec.vocab_size
        return tuple(digests), self._encode(states)


_LIMB_SHIFTS = np.array([0, 16, 32, 48], dtype=np.uint64)
_F32_MAX = float(np.finfo(np.float32).max)
