"""Inputs for an engine of any role, built from token histories.

A head or full engine takes tokens; a middle or tail engine takes the hidden
states of the layers before it.  :class:`Feeder` makes either from a session's
token history, running the upstream layers on an engine of the same factory,
spec and seed, so tests and machines can drive a middle or tail engine alone.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Callable, Optional, Sequence

import numpy as np

from fakeshard._contract import HiddenBundle, ShardSpec, TokenBundle

__all__ = ["Feeder"]


class Feeder:
    """Builds the input bundle ``spec``'s engine expects.

    ``bundle(session_id, epoch, start_pos, history, n)`` is the input for the
    ``n`` positions ``start_pos .. start_pos + n - 1`` of a session whose
    tokens are ``history`` (at least ``start_pos + n`` of them).  Hidden rows
    are exactly what a healthy upstream stage of the same factory, spec and seed would
    send.  The rows of the last :data:`MEMO` histories are kept: by the contract's
    determinism they are the same every time, and machines ask again for the same
    history (a replay, a retry, a bad call).  A history one token longer than a kept one
    (a decode's) costs one upstream decode, not a prefill of the whole history, where the
    factory is exact (it states no ``tolerance``): its chunking changes nothing, by the
    contract.  For a factory judged within a tolerance every history is prefilled from 0,
    so that rounding never depends on how the feeder got there.
    """

    #: How many histories' rows a feeder keeps (the least recently used goes first).
    MEMO = 64

    def __init__(self, factory: Callable[..., Any], spec: ShardSpec, *, seed: int = 0) -> None:
        self.spec = spec
        self._factory = factory
        self._seed = seed
        self._upstream = spec.with_layers(0, spec.start_layer) if spec.start_layer else None
        self._exact = not getattr(factory, "tolerance", 0.0)
        #: history -> (its rows, the upstream engine holding it at epoch 0 where one still does)
        self._memo: OrderedDict[tuple[int, ...], tuple[Any, Any]] = OrderedDict()

    def rows(self, history: Sequence[int]) -> Any:
        """The hidden rows entering ``spec.start_layer`` for every position of ``history``."""
        if self._upstream is None:
            raise ValueError("a head or full engine takes tokens, not hidden rows")
        key = tuple(history)
        kept = self._memo.pop(key, None)
        if kept is None:
            kept = self._extended(key) or self._prefilled(key)
            while len(self._memo) >= self.MEMO:
                self._memo.popitem(last=False)
        self._memo[key] = kept
        return kept[0]

    def _prefilled(self, key: tuple[int, ...]) -> tuple[Any, Any]:
        upstream = self._factory(self._upstream, seed=self._seed)
        return upstream.prefill(TokenBundle("feeder", 0, 0, key)).hidden, upstream

    def _extended(self, key: tuple[int, ...]) -> Optional[tuple[Any, Any]]:
        """``key``'s rows from the kept engine of ``key[:-1]``, which moves on to ``key``."""
        shorter = self._memo.get(key[:-1]) if self._exact and len(key) > 1 else None
        if shorter is None or shorter[1] is None:
            return None
        rows, upstream = shorter
        self._memo[key[:-1]] = (rows, None)  # its rows stay; its engine now holds ``key``
        last = upstream.decode(TokenBundle("feeder", 0, len(key) - 1, key[-1:])).hidden
        joined: Any
        if isinstance(rows, np.ndarray) and isinstance(last, np.ndarray):
            joined = np.concatenate([rows, last])
            joined.flags.writeable = False
        else:
            joined = tuple(map(tuple, rows)) + tuple(map(tuple, last))
        return joined, upstream

    def bundle(self, session_id: str, epoch: int, start_pos: int, history: Sequence[int], n: int) -> Any:
        tokens = tuple(history[start_pos:start_pos + n])
        if len(tokens) != n:
            raise ValueError(f"history has {len(history)} tokens, need {start_pos + n}")
        if self._upstream is None:
            return TokenBundle(session_id, epoch, start_pos, tokens)
        rows = self.rows(history[:start_pos + n])[start_pos:]
        return HiddenBundle.sealed(session_id, epoch, start_pos, self.spec.start_layer, rows)
