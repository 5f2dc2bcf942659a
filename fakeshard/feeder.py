"""Inputs for an engine of any role, built from token histories.

A head or full engine takes tokens; a middle or tail engine takes the hidden
states of the layers before it.  :class:`Feeder` makes either from a session's
token history, running the upstream layers on an engine of the same factory,
spec and seed, so tests and machines can drive a middle or tail engine alone.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Callable, Sequence

from fakeshard.contract import HiddenBundle, ShardSpec, TokenBundle

__all__ = ["Feeder"]


class Feeder:
    """Builds the input bundle ``spec``'s engine expects.

    ``bundle(session_id, epoch, start_pos, history, n)`` is the input for the
    ``n`` positions ``start_pos .. start_pos + n - 1`` of a session whose
    tokens are ``history`` (at least ``start_pos + n`` of them).  Hidden rows
    come from a fresh upstream engine that prefills ``history`` from 0, so
    they are exactly what a healthy upstream stage would send.  The rows of the last
    :data:`MEMO` histories are kept: by the contract's determinism they are the same every
    time, and machines ask again for the same history (a replay, a retry, a bad call).
    """

    #: How many histories' rows a feeder keeps (the least recently used goes first).
    MEMO = 64

    def __init__(self, factory: Callable[..., Any], spec: ShardSpec, *, seed: int = 0) -> None:
        self.spec = spec
        self._factory = factory
        self._seed = seed
        self._upstream = spec.with_layers(0, spec.start_layer) if spec.start_layer else None
        self._memo: OrderedDict[tuple[int, ...], tuple[tuple[float, ...], ...]] = OrderedDict()

    def rows(self, history: Sequence[int]) -> tuple[tuple[float, ...], ...]:
        """The hidden rows entering ``spec.start_layer`` for every position of ``history``."""
        if self._upstream is None:
            raise ValueError("a head or full engine takes tokens, not hidden rows")
        key = tuple(history)
        rows = self._memo.pop(key, None)
        if rows is None:
            upstream = self._factory(self._upstream, seed=self._seed)
            rows = upstream.prefill(TokenBundle("feeder", 0, 0, key)).hidden
            while len(self._memo) >= self.MEMO:
                self._memo.popitem(last=False)
        self._memo[key] = rows
        return rows

    def bundle(self, session_id: str, epoch: int, start_pos: int, history: Sequence[int], n: int) -> Any:
        tokens = tuple(history[start_pos:start_pos + n])
        if len(tokens) != n:
            raise ValueError(f"history has {len(history)} tokens, need {start_pos + n}")
        if self._upstream is None:
            return TokenBundle(session_id, epoch, start_pos, tokens)
        rows = self.rows(history[:start_pos + n])[start_pos:]
        return HiddenBundle.sealed(session_id, epoch, start_pos, self.spec.start_layer, rows)
