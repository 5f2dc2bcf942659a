"""Hypothesis strategies for fakeshard's values, for a project's own property tests.

Part of the kit (``fakeshard.testing``): it needs the extra ``test`` (Hypothesis), which
``import fakeshard`` never does.  For example::

    from hypothesis import given
    from fakeshard import FakeShardEngine
    from fakeshard.testing import strategies as fs

    @given(fs.specs(), fs.histories(max_size=16))
    def test_prefill_answers_one_sample(spec, history):
        ...

* :func:`specs` -- model specs, whole or one stage of them (``role=``);
* :func:`histories` -- token histories inside a spec's vocabulary;
* :func:`lengths` -- prompt lengths as real engines meet them: log-uniform to the longest, and as
  often just below, at or just above a power of two from 8 to 32,768;
* :func:`inputs` -- valid inputs for an engine (a ``TokenBundle`` for a head or full
  engine, a sealed ``HiddenBundle`` at its first layer otherwise);
* :func:`malformed_inputs` -- the same, broken in one of the ways the contract names
  (each is refused with ``MalformedBundle``), with the kind drawn or given;
* :func:`hidden_bundles`, :func:`sample_bundles` -- valid outputs of a stage;
* :func:`faults`, :func:`fault_rules`, :func:`fault_plans` -- fault plans of every kind.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
from hypothesis import strategies as st

from fakeshard._contract import HiddenBundle, SampleBundle, ShardSpec, TokenBundle
from fakeshard._faults import (
    MALFORMED_KINDS,
    OPS,
    Crash,
    Delay,
    DropResponse,
    FaultPlan,
    FaultRule,
    Malformed,
    MemoryPressure,
)
from fakeshard.testing._damage import BAD_INPUTS, break_input
from fakeshard.testing._lengths import length_of, scrambled

__all__ = [
    "BAD_INPUT_KINDS",
    "fault_plans",
    "fault_rules",
    "faults",
    "hidden_bundles",
    "histories",
    "inputs",
    "lengths",
    "malformed_inputs",
    "sample_bundles",
    "session_ids",
    "specs",
]

ROLES = ("head", "middle", "tail", "full")


#: Every way :func:`malformed_inputs` breaks an input (the suites' own list).
BAD_INPUT_KINDS = BAD_INPUTS

session_ids = st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=8)


def specs(role: Optional[str] = None, max_layers: int = 8, hidden_sizes: tuple[int, ...] = (4, 8, 16),
          vocab_sizes: tuple[int, ...] = (16, 64, 256)) -> st.SearchStrategy[ShardSpec]:
    """A model spec; with ``role`` (head, middle, tail, full) one stage's layer range of it."""
    if role is not None and role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}, got {role!r}")
    return _specs(role, max_layers, hidden_sizes, vocab_sizes)


@st.composite
def _specs(draw: st.DrawFn, role: Optional[str], max_layers: int, hidden_sizes: tuple[int, ...],
           vocab_sizes: tuple[int, ...]) -> ShardSpec:
    n = draw(st.integers(3 if role == "middle" else 2, max(max_layers, 3)))
    if role in (None, "full"):
        start, end = 0, n
    elif role == "head":
        start, end = 0, draw(st.integers(1, n - 1))
    elif role == "tail":
        start, end = draw(st.integers(1, n - 1)), n
    else:
        start = draw(st.integers(1, n - 2))
        end = draw(st.integers(start + 1, n - 1))
    model = draw(st.sampled_from(["model-a", "model-b", "tiny"]))
    return ShardSpec(model, n, start, end, hidden_size=draw(st.sampled_from(hidden_sizes)),
                     vocab_size=draw(st.sampled_from(vocab_sizes)))


def histories(vocab_size: int = 64, min_size: int = 1, max_size: int = 32) -> st.SearchStrategy[list[int]]:
    """Token histories: lists of tokens in ``0..vocab_size - 1``."""
    return st.lists(st.integers(0, vocab_size - 1), min_size=min_size, max_size=max_size)


def lengths(max_length: int = 32770) -> st.SearchStrategy[int]:
    """Prompt lengths where real engines break: half the time log-uniform over 16 octaves
    (1 to 65,535, equal weight per octave; one past ``max_length`` is cut to it, a prompt that
    fills the context), half the time a prompt whose last position is just below, at
    or just above a power of two from 8 to 32,768 (a KV block, a chunked-prefill budget, a
    context window, a 16-bit position); at most ``max_length``.  One wide integer, scrambled, so that Hypothesis's
    favourite integers (0, the bounds) land evenly; it shrinks to a length of 1."""
    if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1:
        raise ValueError(f"max_length must be an int >= 1, got {max_length!r}")
    return st.integers(0, 2**32 - 1).map(lambda i: min(length_of(*scrambled(i)), max_length))


def _rows(spec: ShardSpec, n: int) -> st.SearchStrategy[np.ndarray]:
    values = st.floats(-4.0, 4.0, width=32, allow_nan=False, allow_infinity=False)
    return st.lists(st.lists(values, min_size=spec.hidden_size, max_size=spec.hidden_size),
                    min_size=n, max_size=n).map(lambda rows: np.asarray(rows, dtype=np.float32))


@st.composite
def hidden_bundles(draw: st.DrawFn, spec: ShardSpec, layer: Optional[int] = None, max_positions: int = 8,
                   session_id: Optional[str] = None, epoch: Optional[int] = None) -> HiddenBundle:
    """A sealed hidden bundle of ``spec``'s width at ``layer`` (default: the spec's last layer)."""
    n = draw(st.integers(1, max_positions))
    return HiddenBundle.sealed(
        session_id if session_id is not None else draw(session_ids),
        epoch if epoch is not None else draw(st.integers(0, 4)), draw(st.integers(0, 16)),
        spec.end_layer if layer is None else layer, draw(_rows(spec, n)))


@st.composite
def sample_bundles(draw: st.DrawFn, spec: ShardSpec) -> SampleBundle:
    """A sampled token in ``spec``'s vocabulary."""
    return SampleBundle(draw(session_ids), draw(st.integers(0, 4)), draw(st.integers(1, 64)),
                        draw(st.integers(0, spec.vocab_size - 1)))


def inputs(spec: ShardSpec, op: str = "prefill", session_id: Optional[str] = None,
           epoch: Optional[int] = None, start_pos: Optional[int] = None) -> st.SearchStrategy[object]:
    """A valid input of ``op`` (prefill or decode) for an engine of ``spec``: tokens for a
    head or full engine, a sealed hidden bundle at its first layer for a middle or tail one."""
    if op not in ("prefill", "decode"):
        raise ValueError(f"op must be prefill or decode, got {op!r}")
    return _inputs(spec, op, session_id, epoch, start_pos)


@st.composite
def _inputs(draw: st.DrawFn, spec: ShardSpec, op: str, session_id: Optional[str], epoch: Optional[int],
            start_pos: Optional[int]) -> object:
    n = 1 if op == "decode" else draw(st.integers(1, 8))
    sid = session_id if session_id is not None else draw(session_ids)
    ep = epoch if epoch is not None else draw(st.integers(0, 4))
    start = start_pos if start_pos is not None else (0 if op == "prefill" else draw(st.integers(1, 16)))
    if spec.start_layer == 0:
        return TokenBundle(sid, ep, start, tuple(draw(histories(spec.vocab_size, n, n))))
    return HiddenBundle.sealed(sid, ep, start, spec.start_layer, draw(_rows(spec, n)))


def malformed_inputs(spec: ShardSpec, kind: Optional[str] = None,
                     op: str = "prefill") -> st.SearchStrategy[tuple[str, object]]:
    """``(kind, input)``: a valid input for ``spec`` broken in one named way; an engine of
    ``spec`` refuses it with ``MalformedBundle`` whatever state it is in."""
    if kind is not None and kind not in BAD_INPUT_KINDS:
        raise ValueError(f"kind must be one of {BAD_INPUT_KINDS}, got {kind!r}")
    kinds = st.just(kind) if kind is not None else st.sampled_from(BAD_INPUT_KINDS)
    return st.tuples(kinds, inputs(spec, op)).map(lambda pair: (pair[0], break_input(pair[1], pair[0], spec)))


def faults() -> st.SearchStrategy[object]:
    """One fault of any kind (every ``Malformed`` kind, both forms of ``MemoryPressure``)."""
    return st.one_of(
        st.just(Crash()), st.just(DropResponse()), st.sampled_from(MALFORMED_KINDS).map(Malformed),
        st.sampled_from([0.0, 0.5, 1.0, 2.0]).map(Delay),
        st.just(MemoryPressure()), st.integers(1, 64).map(MemoryPressure),
    )


def fault_rules(session: st.SearchStrategy[Optional[str]] = st.none()) -> st.SearchStrategy[FaultRule]:
    """A rule of any fault, op and window; ``session`` draws its ``session_id`` (default ``None``)."""
    return st.builds(FaultRule, fault=faults(), op=st.sampled_from(OPS), session_id=session,
                     nth=st.integers(1, 8), count=st.none() | st.integers(1, 3),
                     probability=st.sampled_from([1.0, 0.5, 0.25]))


def fault_plans(max_rules: int = 3,
                session: st.SearchStrategy[Optional[str]] = st.none()) -> st.SearchStrategy[FaultPlan]:
    """A seeded plan of up to ``max_rules`` rules."""
    return st.builds(FaultPlan, st.lists(fault_rules(session), max_size=max_rules).map(tuple),
                     st.integers(0, 2**32))
