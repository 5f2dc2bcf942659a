"""Comparing two computations of the same outputs: exactly, or within a stated tolerance.

The contract says chunking a prefill, splitting the layers differently and
replaying a history change no output.  The fixture keeps that exactly.  Real
float arithmetic keeps it only up to rounding, so an engine factory may
state a ``tolerance`` (on hidden values and logits) and offer
``logits(spec, seed, tokens)`` (the full model's next-token logits after
``tokens``).  A :class:`Judge` built from the factory then accepts:

* hidden rows that differ by at most ``tolerance`` in every value;
* a greedy token that differs from the reference only where the reference
  logits put it within ``tolerance`` of the top one, i.e. where the top-2
  margin does not exceed the tolerance.  Wherever the margin exceeds it,
  tokens must be equal.

With ``tolerance == 0`` (the fixture) every comparison is exact equality.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Optional, Sequence

from fakeshard._contract import ShardSpec

__all__ = ["Judge"]


class Judge:
    """How the suites compare outputs of the engines one factory builds."""

    def __init__(self, factory: Any, tolerance: Optional[float] = None) -> None:
        tol = getattr(factory, "tolerance", 0.0) if tolerance is None else tolerance
        if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not math.isfinite(tol) or tol < 0:
            raise ValueError(f"tolerance must be a finite number >= 0, got {tol!r}")
        self.tolerance = float(tol)
        logits = getattr(factory, "logits", None)
        self._logits: Optional[Callable[..., Sequence[float]]] = logits if callable(logits) else None

    @property
    def exact(self) -> bool:
        return self.tolerance == 0.0

    def rows_match(self, a: Sequence[Sequence[float]], b: Sequence[Sequence[float]]) -> bool:
        """Same shape, and every value within the tolerance (equal, for an exact judge)."""
        if self.exact:
            return tuple(map(tuple, a)) == tuple(map(tuple, b))
        tol = self.tolerance
        return len(a) == len(b) and all(
            len(ra) == len(rb) and all(abs(x - y) <= tol for x, y in zip(ra, rb))
            for ra, rb in zip(a, b))

    def token_ok(self, spec: ShardSpec, seed: int, history: Sequence[int], expected: int, got: Any) -> bool:
        """Whether ``got`` may stand for the greedy token ``expected`` after ``history``.

        Equal tokens always pass; a different one only under a tolerance, a
        factory that offers ``logits``, and a reference logit for ``got``
        within the tolerance of the top one.
        """
        if got == expected:
            return True
        if self.exact or self._logits is None or isinstance(got, bool) or not isinstance(got, int):
            return False
        logits = self._logits(spec, seed, list(history))
        return 0 <= got < len(logits) and logits[got] >= max(logits) - self.tolerance

    def stream_problem(self, spec: ShardSpec, seed: int, prompt: Sequence[int], got: Sequence[int],
                       reference: Callable[[Sequence[int], int], list[int]]) -> Optional[str]:
        """``None`` if ``got`` is a greedy continuation of ``prompt``, else what is wrong.

        ``reference(history, n)`` is the next ``n`` greedy tokens after
        ``history`` on a reference engine.  At the first token that differs,
        the judge decides (:meth:`token_ok`); if it passes, the rest is
        checked against the reference continued from the accepted token.
        """
        done = 0
        while done < len(got):
            # The prompt itself first: a reference that keeps it by identity reads it once.
            history = prompt if done == 0 else list(prompt) + list(got[:done])
            ref = reference(history, len(got) - done)
            diff = next((i for i, (a, b) in enumerate(zip(ref, got[done:])) if a != b), None)
            if diff is None:
                return None
            at = done + diff
            if not self.token_ok(spec, seed, list(prompt) + list(got[:at]), ref[diff], got[at]):
                return (f"token {at} is {got[at]}, the reference's greedy token is {ref[diff]}"
                        + ("" if self.exact else f" (not within tolerance {self.tolerance} of the top logit)")
                        + f"; stream {list(got)}, reference from there {ref}")
            done = at + 1
        return None
