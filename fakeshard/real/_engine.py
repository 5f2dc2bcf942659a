"""The llama forward pass in numpy, as a backend under the one session table.

:class:`LlamaBackend` computes a layer range of a llama GGUF model:
token embedding (head), per layer RMSNorm -> grouped-query attention with
rotary positions over a per-session K/V cache -> residual -> RMSNorm ->
SwiGLU feed-forward -> residual, then (tail) the output norm, the output
head and greedy sampling.  Activations are float32, as in GGUF runtimes;
RMS statistics are taken in float64, so any finite float32 activation
normalises without overflow.  Hidden values arriving beyond float32's range
saturate at its largest finite value.

:class:`GGUFShardEngine` is :class:`~fakeshard._engine.SessionEngine` over
it: the session rules, accounting, crash and faults are the fixture's own
code, only the computation differs.
"""

from __future__ import annotations

import functools
import os
from typing import Any, Optional, Sequence, Union

import numpy as np

from fakeshard._clock import Clock
from fakeshard._contract import ShardSpec
from fakeshard._engine import SessionEngine
from fakeshard._faults import FaultPlan
from fakeshard.real._model import GGUFModel, open_model

__all__ = ["GGUFShardEngine", "LlamaBackend"]

_F32_MAX = float(np.finfo(np.float32).max)


class _Tape:
    """Growable K/V buffers for one session's layers, shared by its successive caches.

    A cache is ``(tape, length)`` and sees rows ``0..length-1`` only.  A
    forward pass appends in place when its cache is the tape's newest
    (``length == tape.filled``); from any older cache it copies first, so no
    cache's visible rows ever change.
    """

    __slots__ = ("k", "v", "filled")

    def __init__(self, k: np.ndarray, v: np.ndarray, filled: int) -> None:
        self.k, self.v, self.filled = k, v, filled


_EMPTY: tuple[Optional[_Tape], int] = (None, 0)


def _frozen(a: np.ndarray) -> np.ndarray:
    """A C-ordered, read-only copy of ``a`` (engines share it)."""
    out = np.array(a, order="C", copy=True)
    out.flags.writeable = False
    return out


class LlamaBackend:
    """Layers ``start_layer..end_layer`` of a llama GGUF model."""

    evidence_class = "real-model"

    def __init__(self, model: GGUFModel, start_layer: int, end_layer: int) -> None:
        s = model.shape
        self.model = model
        self.spec = ShardSpec(model.model_id, s.n_layers, start_layer, end_layer,
                              hidden_size=s.hidden_size, vocab_size=s.vocab_size)
        self.shape = s
        t = model.tensor
        role = self.spec.role
        self._takes_tokens, self._samples = role.takes_tokens, role.samples
        self._embed = t("token_embd.weight") if role.takes_tokens else None
        if role.samples:
            self._out_norm = t("output_norm.weight")
            self._out_t = model.prepared(("output",), lambda: _frozen(t("output.weight").T))
        self._layers = [model.prepared(("layer", str(i)), functools.partial(self._layer_weights, i))
                        for i in range(start_layer, end_layer)]
        hd = s.head_dim
        # Rotary frequencies as llama.cpp's "normal" mode: pairs (2i, 2i+1), base^(-2i/hd).
        self._inv_freq = s.rope_base ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)
        self._scale = np.float32(1.0 / np.sqrt(hd))

    def _layer_weights(self, i: int) -> tuple[np.ndarray, ...]:
        """Layer ``i``'s weights, each matrix transposed for rows @ W (built once per model)."""
        t, b = self.model.tensor, f"blk.{i}."
        return (
            t(b + "attn_norm.weight"),
            # Q, K and V in one matrix.
            _frozen(np.concatenate([t(b + "attn_q.weight"), t(b + "attn_k.weight"), t(b + "attn_v.weight")]).T),
            _frozen(t(b + "attn_output.weight").T),
            t(b + "ffn_norm.weight"),
            _frozen(np.concatenate([t(b + "ffn_gate.weight"), t(b + "ffn_up.weight")]).T),
            _frozen(t(b + "ffn_down.weight").T),
        )

    def empty_cache(self) -> tuple[Optional[_Tape], int]:
        return _EMPTY

    # -- the pieces ----------------------------------------------------------

    def _rms(self, x: np.ndarray, gain: np.ndarray) -> np.ndarray:
        x64 = x.astype(np.float64)
        # The mean as np.mean takes it (a float64 sum, then / n), without its wrapper's cost.
        mean = np.add.reduce(x64 * x64, axis=-1, keepdims=True) / x64.shape[-1]
        inv = 1.0 / np.sqrt(mean + self.shape.rms_eps)
        return (x64 * inv).astype(np.float32) * gain

    def _rotation(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The rotary cos and sin for ``positions``, shaped to broadcast over ``(n, heads, hd / 2)``."""
        angle = positions[:, None] * self._inv_freq[None, :]
        return np.cos(angle).astype(np.float32)[:, None, :], np.sin(angle).astype(np.float32)[:, None, :]

    def _rope(self, x: np.ndarray, rotation: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        """Rotate ``x`` of shape ``(n, heads, hd)`` by its positions' ``rotation``."""
        cos, sin = rotation
        x0, x1 = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = x0 * cos - x1 * sin
        out[..., 1::2] = x0 * sin + x1 * cos
        return out

    def _tape_for(self, cache: tuple[Optional[_Tape], int], need: int) -> _Tape:
        tape, length = cache
        s = self.shape
        if tape is not None and tape.filled == length and tape.k.shape[1] >= need:
            return tape
        size = max(16, need, 2 * (tape.k.shape[1] if tape is not None else 0))
        dims = (len(self._layers), size, s.n_kv_head, s.head_dim)
        k, v = np.zeros(dims, np.float32), np.zeros(dims, np.float32)
        if tape is not None and length:
            k[:, :length], v[:, :length] = tape.k[:, :length], tape.v[:, :length]
        return _Tape(k, v, length)

    def hidden_in(self, inputs: Sequence[Any]) -> np.ndarray:
        """The residual stream entering the first layer: embeddings or the given rows."""
        if self._embed is not None:  # a head or full engine: tokens in
            return self._embed[np.asarray(inputs, dtype=np.intp)]  # indexing copies
        rows = np.asarray(inputs, dtype=np.float64)
        return np.clip(rows, -_F32_MAX, _F32_MAX).astype(np.float32)

    @np.errstate(over="ignore")  # exp(-gate) of a large negative gate is inf: silu -> 0
    def run_layers(self, cache: tuple[Optional[_Tape], int], start_pos: int, x: np.ndarray
                   ) -> tuple[tuple[_Tape, int], np.ndarray]:
        """Every layer over ``x`` (positions ``start_pos..``); the new cache and the output stream."""
        s = self.shape
        n, end = x.shape[0], start_pos + x.shape[0]
        tape = self._tape_for(cache, end)
        n_q, n_kv, hd = s.n_head * s.head_dim, s.n_kv_head * s.head_dim, s.head_dim
        group = s.n_head // s.n_kv_head
        rotation = self._rotation(np.arange(start_pos, end, dtype=np.float64))  # the same in every layer
        # Causal mask: new position i (absolute start_pos + i) sees cache rows 0..start_pos + i.
        mask = np.arange(end)[None, :] > (start_pos + np.arange(n))[:, None]
        for i, (attn_norm, wqkv, wo, ffn_norm, w_gate_up, w_down) in enumerate(self._layers):
            qkv = self._rms(x, attn_norm) @ wqkv
            q = self._rope(qkv[:, :n_q].reshape(n, s.n_head, hd), rotation)
            tape.k[i, start_pos:end] = self._rope(qkv[:, n_q:n_q + n_kv].reshape(n, s.n_kv_head, hd),
                                                  rotation)
            tape.v[i, start_pos:end] = qkv[:, n_q + n_kv:].reshape(n, s.n_kv_head, hd)
            keys = tape.k[i, :end].transpose(1, 2, 0)  # (kv heads, hd, positions)
            values = tape.v[i, :end].transpose(1, 0, 2)  # (kv heads, positions, hd)
            # Query heads grouped under their K/V head: (kv heads, group, n, hd).
            qg = q.reshape(n, s.n_kv_head, group, hd).transpose(1, 2, 0, 3)
            scores = (qg @ keys[:, None]) * self._scale
            scores[..., mask] = -np.inf
            scores -= scores.max(axis=-1, keepdims=True)
            weights = np.exp(scores)
            weights /= weights.sum(axis=-1, keepdims=True)
            attn = (weights @ values[:, None]).transpose(2, 0, 1, 3).reshape(n, n_q)
            x = x + attn @ wo
            gate_up = self._rms(x, ffn_norm) @ w_gate_up
            gate, up = gate_up[:, :s.n_ff], gate_up[:, s.n_ff:]
            x = x + ((gate / (1.0 + np.exp(-gate))) * up) @ w_down
        tape.filled = end
        return (tape, end), x

    def logits(self, x_last: np.ndarray) -> np.ndarray:
        """The output head over one position's final residual stream."""
        return self._rms(x_last[None, :], self._out_norm)[0] @ self._out_t

    # -- the backend protocol --------------------------------------------------

    def forward(self, cache: tuple[Optional[_Tape], int], start_pos: int, inputs: Sequence[Any]
                ) -> tuple[tuple[_Tape, int], Any]:
        new_cache, x = self.run_layers(cache, start_pos, self.hidden_in(inputs))
        if self._samples:
            return new_cache, int(np.argmax(self.logits(x[-1])))
        x.flags.writeable = False  # the bundle's rows: float32, shared with nobody
        return new_cache, x


class GGUFShardEngine(SessionEngine):
    """A contract engine over layers ``start_layer..end_layer`` of a llama GGUF file.

    ``.spec`` is read from the file: ``model_id`` is its ``general.name``
    (else ``gguf-`` and 16 hex digits of its SHA-256), with its layer count,
    hidden size and vocabulary size.
    """

    evidence_class = "real-model"
    #: The seed of the tiny model it runs, where ``tiny_engine`` built it (``None`` for a file of one's own).
    seed: Optional[int] = None

    def __init__(
        self,
        gguf_path: Union[str, os.PathLike[str]],
        start_layer: int,
        end_layer: int,
        *,
        capacity_tokens: Optional[int] = None,
        clock: Optional[Clock] = None,
        faults: Optional[FaultPlan] = None,
    ) -> None:
        backend = LlamaBackend(open_model(gguf_path), start_layer, end_layer)
        super().__init__(backend, capacity_tokens=capacity_tokens, clock=clock, faults=faults)
        self.gguf_path = backend.model.path
