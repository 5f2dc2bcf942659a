"""Lengths a real engine meets, and long token runs written compactly.

Real engines break at lengths: a KV block (16 or 32 positions), a chunked-prefill
budget (512, 2048), a context window (4096, 8192), a 16-bit position (32768).  The
machines draw prompt lengths log-uniformly from 1 to the longest (:data:`LONGEST`) and, as often,
prompts that end just below, at or just above a power of two of :data:`BOUNDARIES`;
positions and capacities at those same edges; memory reservations beyond 32-bit counters.

A long prompt is one step of a trace, written as a *seeded run* instead of thousands
of literal tokens: ``{"count": n, "seed": s}`` stands for the ``n`` tokens
``run_token(s, 0) .. run_token(s, n - 1)`` (:func:`tokens_of`).  The algorithm is
written down in ``docs/explanation/state-machines.md`` ("Long prompts") with vectors,
so another language can expand a trace.  This module needs no Hypothesis; the draws
are :func:`fakeshard.testing.strategies.lengths` and the machines' own.
"""

from __future__ import annotations

from typing import Any, Union

import numpy as np

__all__ = ["BOUNDARIES", "EDGES", "LONGEST", "BIG_RESERVES", "MAX_VALUES_PER_STEP", "run_token", "tokens_of",
           "token_count", "compact", "length_of", "scrambled", "SPAN", "longest_of", "longest_prompt", "capped",
           "MANY_HOPS", "ROUND_STEP", "GROWTH_KINDS", "growth_of", "boundaries_in",
           "MAX_VALUES_PER_SESSION", "session_bound"]

#: The powers of two the machines weight: 8 .. 32768.
BOUNDARIES = tuple(2**k for k in range(3, 16))
#: The longest prompt the machines send: its last position is just above the last boundary.
LONGEST = BOUNDARIES[-1] + 2
#: Every position just below, at and just above a boundary.
EDGES = tuple(sorted({b + d for b in BOUNDARIES for d in (-1, 0, 1)}))
#: Reservations beyond 16-, 32- and 63-bit counters (all valid on the wire).
BIG_RESERVES = (2**15, 2**16, 2**31 - 1, 2**31, 2**32, 2**32 + 1, 2**63 - 1)
#: The most values (positions x hidden width) a step's prompt may carry: a run at hidden
#: width 4 reaches 32,769 positions; one at a real width (4096) stays short.
MAX_VALUES_PER_STEP = 2**17 + 2**12

#: The most values (positions x hidden width) a session of the single-engine machines grows to:
#: at width 4, 139,264 positions, so that three sessions hold more than 2**16 in total.
MAX_VALUES_PER_SESSION = 4 * MAX_VALUES_PER_STEP

#: The share of :data:`MAX_VALUES_PER_STEP` a prompt of the machines that send it through
#: several engines (failover, parallel, coordinator, concurrent) may carry: at hidden width 4,
#: prompts to 8,448 positions, past the boundary 8,192 and its edges.  A failure replays the
#: whole history on every stage, over the wire for failover.
MANY_HOPS = 4

_MASK = 2**64 - 1


def run_token(seed: int, i: int) -> int:
    """The ``i``-th token of the run seeded ``seed``: splitmix64's output for the state
    ``seed + (i + 1) * 0x9E3779B97F4A7C15`` (mod 2**64), its top six bits (0 .. 63)."""
    z = (seed + (i + 1) * 0x9E3779B97F4A7C15) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return (z ^ (z >> 31)) >> 58


def tokens_of(form: Union[list[int], dict[str, Any]]) -> list[int]:
    """A step's ``tokens``: a list of ints as it is, or a seeded run expanded (:func:`run_token`
    for every ``i``, computed at once in unsigned 64-bit arithmetic)."""
    if not isinstance(form, dict):
        return list(form)
    z = np.arange(1, form["count"] + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15) \
        + np.uint64(form["seed"] & _MASK)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return ((z ^ (z >> np.uint64(31))) >> np.uint64(58)).tolist()


def longest_of(factory: object) -> int:
    """The longest prompt the machines send ``factory``'s engines: its ``machine_max_positions``,
    or :data:`LONGEST`."""
    return int(getattr(factory, "machine_max_positions", LONGEST))


def longest_prompt(max_positions: int, hidden_size: int, share: int = 1) -> int:
    """The longest prompt a step sends: at most ``max_positions``, and at most ``1 / share`` of
    :data:`MAX_VALUES_PER_STEP` values at ``hidden_size`` a position (at least one position)."""
    return max(1, min(max_positions, MAX_VALUES_PER_STEP // share // hidden_size))


def session_bound(max_positions: int, hidden_size: int) -> int:
    """How many positions a session of the single-engine machines grows to: four of the
    factory's longest prompts, within :data:`MAX_VALUES_PER_SESSION` values."""
    return max(1, min(4 * max_positions, MAX_VALUES_PER_SESSION // hidden_size))


def capped(form: Union[list[int], dict[str, Any]], longest: int) -> Union[list[int], dict[str, Any]]:
    """A step's ``tokens``, a seeded run cut to ``longest`` tokens."""
    if isinstance(form, dict) and form["count"] > longest:
        return {**form, "count": longest}
    return form


def token_count(form: Union[list[int], dict[str, Any]]) -> int:
    """How many tokens a step's ``tokens`` stands for, without expanding a run."""
    return form["count"] if isinstance(form, dict) else len(form)


def compact(form: Union[list[int], dict[str, Any]], keep: int = 8) -> str:
    """A step's ``tokens`` as a person reads it: a short list in full, a seeded run as
    ``<n tokens seeded s>``, a long list by its length and ends."""
    if isinstance(form, dict):
        return f"<{form['count']} tokens seeded {form['seed']}>"
    if len(form) <= keep:
        return str(list(form))
    return f"<{len(form)} tokens: {', '.join(map(str, form[:3]))}, ..., {', '.join(map(str, form[-2:]))}>"


_OCTAVES = 16  # 1 .. 65535, past the longest prompt (a draw past it is cut to it)
#: How many values the draw of a length spans (``length_of``'s ``u`` is below it).
SPAN = _OCTAVES << 12


def scrambled(i: int) -> tuple[int, int]:
    """``length_of``'s ``(kind, u)`` from one integer (0 maps to ``(0, 0)``, a length of 1):
    ``i`` scrambled by a 64-bit multiplicative hash, so that small and extreme integers, which
    Hypothesis draws most often, spread over every kind and octave."""
    mixed = ((i * 0x9E3779B97F4A7C15) & _MASK) >> 16
    return mixed % 6, mixed // 6 % SPAN


def length_of(kind: int, u: int) -> int:
    """A prompt length from two drawn integers, ``kind`` in 0..5 and ``u`` below :data:`SPAN`:
    for ``kind`` 0..2 log-uniform from 1 to 65,535 (the octave ``u >> 12``, then a place in it);
    for 3, 4, 5 a prompt whose last position is just below, at or just above the boundary ``u``
    picks (``b``, ``b + 1`` or ``b + 2`` tokens, so its last position is one of :data:`EDGES`).
    Integers only, and monotone in ``u``."""
    if kind < 3:
        octave, place = u >> 12, u & 4095
        return (1 << octave) + ((place << octave) >> 12)
    return BOUNDARIES[u * len(BOUNDARIES) // SPAN] + kind - 3


#: Round decimal lengths are the multiples of this (100, 1,000, 10,000 among them).
ROUND_STEP = 100
#: How many kinds of growth :func:`growth_of` draws from.
GROWTH_KINDS = 6


def boundaries_in(low: int, high: int, kind: str) -> list[int]:
    """The boundaries of ``kind`` from ``low`` to ``high`` inclusive: ``"power"`` every 2**k
    (k >= 1), ``"round"`` every multiple of :data:`ROUND_STEP`."""
    if high < low:
        return []
    if kind == "power":  # 2**k from the first at or above low (k >= 1) to the last at or below high
        return [1 << k for k in range(max(1, (max(low, 1) - 1).bit_length()), max(high, 0).bit_length())]
    first = -(-max(low, 1) // ROUND_STEP) * ROUND_STEP
    return list(range(first, high + 1, ROUND_STEP))


def growth_of(start: int, kind: int, u: int, longest: int, shortest: int = 1) -> int:
    """How many positions a session holding ``start`` grows by in one call (1 .. ``longest``),
    from two drawn integers, ``kind`` below :data:`GROWTH_KINDS` and ``u`` below :data:`SPAN`:

    * 0, 1: log-uniform from ``shortest`` to ``longest`` (by octaves, as :func:`length_of`);
    * 2: a long haul, from half of ``longest`` to all of it, so that sessions pass 2**16;
    * 3, 4: to a power of two (3) or a round decimal length (4) the call can reach: the call's
      last position lands just below, at or just above it (``u`` picks the edge, and the
      boundary: each power of two in reach as likely, round lengths log-uniformly by their
      rank, the nearest most often);
    * 5: the same, to either kind, one position further, so that the *next* call starts on
      the boundary's edge.

    Lengths anywhere, then, and boundaries wherever a session happens to stand: a bug at a
    position nobody listed meets a call across it.  Integers only; with no boundary in reach a
    kind 3..5 growth is log-uniform instead."""
    longest = max(1, longest)
    if kind in (0, 1):
        low, high = max(1, min(shortest, longest)).bit_length() - 1, longest.bit_length()
        octave, place = low + (u >> 12) * (high - low) // (SPAN >> 12), u & 4095  # each octave alike
        return max(1, min(shortest, longest), min((1 << octave) + ((place << octave) >> 12), longest))
    if kind == 2:
        return max(1, longest // 2 + u * (longest - longest // 2) // SPAN)
    edge = u % 3 - 1  # the last position computed: b - 1, b or b + 1
    target = "power" if kind == 3 or (kind == 5 and u % 2) else "round"
    # Boundaries b whose edge b + edge is a position the call can end on: start .. start + longest - 1.
    reachable = boundaries_in(start - edge, start + longest - 1 - edge, target)
    if not reachable:
        return max(1, min(length_of(0, u), longest))
    place = u // 3 % 4096
    if target == "power":
        b = reachable[place * len(reachable) // 4096]
    else:  # the rank log-uniform: as many draws to the 2nd .. 3rd nearest as to the 20th .. 40th
        b = reachable[int((len(reachable) + 1) ** (place / 4096)) - 1]
    last = b + edge + (1 if kind == 5 else 0)
    return max(1, min(last - start + 1, longest))
