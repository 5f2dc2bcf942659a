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
    history (a replay, a retry, a bad call).  Where the factory is exact (it states no
    ``tolerance``), a history that begins a kept one is that one's first rows, and a
    history that extends a kept one costs the upstream call of its new tokens alone (a
    decode's one, a chunk's few), not a prefill of the whole history: by the contract,
    chunking changes nothing.  For a factory judged within a tolerance every history is
    prefilled from 0, so that rounding never depends on how the feeder got there.
    """

    #: How many histories' rows a feeder keeps (the least recently used goes first).
    MEMO = 64

    def __init__(self, factory: Callable[..., Any], spec: ShardSpec, *, seed: int = 0) -> None:
        self.spec = spec
        self._factory = factory
        self._seed = seed
        self._upstream = spec.with_layers(0, spec.start_layer) if spec.start_layer else None
        self._exact = not getattr(factory, "tolerance", 0.0)
        #: The upstream engine (made on first use): each history it computes is a session of its own.
        self._engine: Any = None
        self._sessions = 0
        #: history -> (its rows, the upstream session holding it at epoch 0 where one still does)
        self._memo: OrderedDict[tuple[int, ...], tuple[Any, Optional[str]]] = OrderedDict()

    def rows(self, history: Sequence[int]) -> Any:
        """The hidden rows entering ``spec.start_layer`` for every position of ``history``."""
        if self._upstream is None:
            raise ValueError("a head or full engine takes tokens, not hidden rows")
        key = tuple(history)
        kept = self._memo.pop(key, None)
        if kept is None:
            kept = self._begun(key) or self._extended(key) or self._prefilled(key)
            while len(self._memo) >= self.MEMO:
                _, (_, session) = self._memo.popitem(last=False)
                if session is not None:
                    self._engine.release(session, 0)
        self._memo[key] = kept
        return kept[0]

    def _prefilled(self, key: tuple[int, ...]) -> tuple[Any, str]:
        if self._engine is None:
            self._engine = self._factory(self._upstream, seed=self._seed)
        self._sessions += 1
        session = f"feeder-{self._sessions}"
        return self._engine.prefill(TokenBundle(session, 0, 0, key)).hidden, session

    def _begun(self, key: tuple[int, ...]) -> Optional[tuple[Any, None]]:
        """``key``'s rows as the first rows of a kept longer history that begins with it."""
        if not self._exact:
            return None
        n = len(key)
        for longer, (rows, _) in self._memo.items():
            if len(longer) > n and longer[:n] == key:
                return rows[:n], None
        return None

    def _extended(self, key: tuple[int, ...]) -> Optional[tuple[Any, str]]:
        """``key``'s rows from the upstream session of its longest kept beginning, which moves on
        to ``key`` by one upstream call of the tokens after it."""
        if not self._exact:
            return None
        for cut in range(len(key) - 1, 0, -1):
            shorter = self._memo.get(key[:cut])
            if shorter is not None and shorter[1] is not None:
                break
        else:
            return None
        rows, session = shorter
        assert session is not None
        self._memo[key[:cut]] = (rows, None)  # its rows stay; its session now holds ``key``
        more = TokenBundle(session, 0, cut, key[cut:])
        last = (self._engine.decode(more) if len(more.tokens) == 1 else self._engine.prefill(more)).hidden
        joined: Any
        if isinstance(rows, np.ndarray) or isinstance(last, np.ndarray):
            # float32 holds an engine's every value; rows of Python floats convert exactly.
            joined = np.concatenate([np.asarray(rows, dtype=np.float32), np.asarray(last, dtype=np.float32)])
            joined.flags.writeable = False
        else:
            joined = tuple(map(tuple, rows)) + tuple(map(tuple, last))
        return joined, session

    def bundle(self, session_id: str, epoch: int, start_pos: int, history: Sequence[int], n: int) -> Any:
        tokens = tuple(history[start_pos:start_pos + n])
        if len(tokens) != n:
            raise ValueError(f"history has {len(history)} tokens, need {start_pos + n}")
        if self._upstream is None:
            return TokenBundle(session_id, epoch, start_pos, tokens)
        rows = self.rows(history[:start_pos + n])[start_pos:]
        return HiddenBundle.sealed(session_id, epoch, start_pos, self.spec.start_layer, rows)
