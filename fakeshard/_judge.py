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

A host in another language states the same over HTTP (``GET /v1/judging`` and
``POST /v1/logits`` of its control port, docs/contract.md "Judging a real-model
host"): :func:`judging_of` is what a factory states, :func:`read_judging` reads
a host's answer and :func:`read_logits` a host's logits.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Optional, Sequence

from fakeshard._contract import ShardSpec

__all__ = ["JUDGING_FIELDS", "MACHINE_SIZES", "Judge", "JudgingError", "judging_of", "read_judging",
           "read_logits"]

#: What a factory, or a host's ``GET /v1/judging``, states of how its engines are judged and sized:
#: the tolerance, whether they make the fixture's choices, and the machines' width and lengths.
JUDGING_FIELDS = ("tolerance", "fixture_choices", "machine_hidden_size", "machine_wide_hidden_size",
                  "machine_max_positions")
#: The machines' sizes among them: each field, its least value, and whether it may be null.
MACHINE_SIZES = (("machine_hidden_size", 1, False), ("machine_max_positions", 2, False),
                 ("machine_wide_hidden_size", 1, True))


class JudgingError(ValueError):
    """A host's statement of how it is judged (or its logits) that breaks the contract; the message
    names the field."""


def judging_of(factory: Any) -> dict[str, Any]:
    """What ``factory`` states of :data:`JUDGING_FIELDS` but ``fixture_choices`` (a host speaks for
    its own choices: ``fakeshard serve`` does not for its factory's), as a host answers
    ``GET /v1/judging`` (without ``kind`` and ``contract``)."""
    out: dict[str, Any] = {}
    if hasattr(factory, "tolerance"):
        out["tolerance"] = float(factory.tolerance)
    for name, _, _ in MACHINE_SIZES:
        if hasattr(factory, name):
            value = getattr(factory, name)
            out[name] = None if value is None else int(value)
    return out


def read_judging(data: Any) -> dict[str, Any]:
    """The fields of a host's ``GET /v1/judging`` answer, checked (:class:`JudgingError` naming
    the field otherwise): ``tolerance`` a finite number >= 0 (required of a host whose nodes are
    ``real-model``, not here); ``fixture_choices`` a boolean;
    ``machine_hidden_size`` and ``machine_max_positions`` integers >= 1 (``machine_max_positions``
    at least 2: a prompt and a token); ``machine_wide_hidden_size`` an integer >= 1 or null.
    Absent fields are left out (the kit's defaults hold)."""
    if not isinstance(data, dict) or data.get("kind") != "judging":
        raise JudgingError(f'the answer is no judging object (an object with "kind": "judging"): {str(data)[:120]}')
    extra = sorted(set(data) - {"kind", "contract", *JUDGING_FIELDS})
    if extra:
        raise JudgingError(f"unknown field(s) {extra}")
    out: dict[str, Any] = {}
    if "tolerance" in data:
        tol = data["tolerance"]
        if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not math.isfinite(tol) or tol < 0:
            raise JudgingError(f"tolerance must be a finite number >= 0, got {tol!r}")
        out["tolerance"] = float(tol)
    if "fixture_choices" in data:
        if not isinstance(data["fixture_choices"], bool):
            raise JudgingError(f"fixture_choices must be true or false, got {data['fixture_choices']!r}")
        out["fixture_choices"] = data["fixture_choices"]
    for name, least, nullable in MACHINE_SIZES:
        if name not in data:
            continue
        value = data[name]
        if value is None and nullable:
            out[name] = None
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise JudgingError(f"{name} must be an integer >= {least}" + (" or null" if nullable else "")
                               + f", got {value!r}")
        out[name] = value
    return out


def read_logits(data: Any, vocab_size: int) -> list[float]:
    """The logits of a host's ``POST /v1/logits`` answer: ``vocab_size`` finite numbers
    (:class:`JudgingError` naming what is wrong otherwise)."""
    if not isinstance(data, dict) or data.get("kind") != "logits" or not isinstance(data.get("logits"), list):
        raise JudgingError(f'the answer is no logits object (an object with "kind": "logits" and a "logits" '
                           f"array): {str(data)[:120]}")
    values = data["logits"]
    if len(values) != vocab_size:
        raise JudgingError(f"logits has {len(values)} values, the spec's vocab_size is {vocab_size}")
    bad = [i for i, v in enumerate(values)
           if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)]
    if bad:
        raise JudgingError(f"logits must be finite numbers, got {values[bad[0]]!r} at index {bad[0]}")
    return [float(v) for v in values]


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
