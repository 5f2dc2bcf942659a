"""The linearizability checker, the parallel machine, and the racy engines it must catch."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fakeshard import FakeShardEngine
from fakeshard.testing import _parallel as parallel
from fakeshard.testing import _profiles as profiles
from fakeshard.testing._linearizability import INITIAL, Op, check, check_whole, step, timeline
from fakeshard.testing._machines import MachineConfig
from fakeshard.testing._parallel import (
    NotLinearizable,
    Program,
    Tokens,
    calls,
    run_parallel,
    run_program,
    spec_for,
)
from fakeshard.testing._trace import Trace
from planted import racy

ROOT = Path(__file__).resolve().parent.parent


def token_of(sid: str, length: int) -> int:
    """A stand-in for the engine's tokens: any function of the history will do for the checker."""
    return (len(sid) * 31 + length * 7) % 64


def op(index, branch, call, outcome, invoked, returned=None):
    return Op(index, branch, call, outcome, invoked, math.inf if returned is None else returned)


def ok(start_plus_n, sid="a"):
    return ("ok", start_plus_n, token_of(sid, start_plus_n))


# -- the checker on histories written by hand --------------------------------------------


def test_two_overlapping_prefills_at_zero_cannot_both_succeed():
    both = [op(0, 1, ("prefill", "a", 0, 0, 2), ok(2), 0, 3),
            op(1, 2, ("prefill", "a", 0, 0, 2), ok(2), 1, 2)]
    verdict = check(both, None, token_of)
    assert not verdict.linearizable
    assert verdict.stuck and verdict.stuck[0][1] == ("position_mismatch", 2, 0)
    one_refused = [both[0], op(1, 2, ("prefill", "a", 0, 0, 2), ("position_mismatch", 2, 0), 1, 2)]
    assert check(one_refused, None, token_of).linearizable


def test_real_time_order_is_respected():
    # The release returned before the prefill was invoked, so the prefill must see it.
    history = [op(0, 1, ("release", "a", 0), ("ok",), 0, 1),
               op(1, 2, ("prefill", "a", 0, 0, 1), ok(1), 2, 3)]
    assert not check(history, None, token_of).linearizable
    # Overlapping, the same outcomes are explained by prefill-then-release.
    overlapping = [op(0, 1, ("release", "a", 0), ("ok",), 0, 3),
                   op(1, 2, ("prefill", "a", 0, 0, 1), ok(1), 1, 2)]
    assert check(overlapping, None, token_of).linearizable


def test_an_ambiguous_call_may_have_applied_or_not():
    lost = op(0, 1, ("prefill", "a", 0, 0, 2), None, 0)
    applied = [lost, op(1, 2, ("view", "a"), ("view", 0, "live", 2), 1, 2)]
    not_applied = [lost, op(1, 2, ("view", "a"), ("view", None), 1, 2)]
    assert check(applied, None, token_of).linearizable
    assert check(not_applied, None, token_of).linearizable
    impossible = [lost, op(1, 2, ("view", "a"), ("view", 0, "live", 5), 1, 2)]
    assert not check(impossible, None, token_of).linearizable


def test_capacity_couples_sessions():
    history = [op(0, 1, ("prefill", "a", 0, 0, 3), ok(3), 0, 1),
               op(1, 2, ("prefill", "b", 0, 0, 3), ok(3, "b"), 2, 3)]
    assert check(history, None, token_of).linearizable
    assert not check(history, 5, token_of).linearizable  # 6 positions never fit in 5


def test_a_crash_wipes_every_session_in_the_model():
    state, outcome = step(INITIAL, ("prefill", "a", 0, 0, 2), None, token_of)
    assert outcome == ok(2)
    state, outcome = step(state, ("crash",), None, token_of)
    assert outcome == ("engine_crashed",) and state == (True, ())
    assert step(state, ("decode", "a", 0, 2), None, token_of)[1] == ("engine_crashed",)
    assert step(state, ("restart",), None, token_of) == (INITIAL, ("ok",))


def test_the_timeline_says_why_no_order_explains_the_history():
    history = [op(0, 1, ("prefill", "a", 0, 0, 2), ok(2), 0, 3),
               op(1, 2, ("prefill", "a", 0, 0, 2), ok(2), 1, 2)]
    text = timeline(history, check(history, None, token_of))
    assert "not linearizable (session 'a')" in text
    assert "observed ok 2" in text and "the model says position_mismatch 2 0" in text


# -- the checker against itself: a split by session changes no answer ----------------------


@st.composite
def histories(draw):
    """Calls on a model in some order, given overlapping spans; sometimes one outcome is altered."""
    chosen = draw(st.lists(calls(global_ops=False), min_size=1, max_size=9))
    order = draw(st.permutations(range(len(chosen))))
    state, outcomes = INITIAL, {}
    for i in order:
        state, outcomes[i] = step(state, chosen[i], None, token_of)
    ops = []
    for i, call in enumerate(chosen):
        start = draw(st.integers(0, 12))
        outcome = outcomes[i]
        if draw(st.integers(0, 5)) == 0:
            outcome = None  # ambiguous
        elif draw(st.integers(0, 5)) == 0:
            outcome = ("stale_epoch",)
        ops.append(Op(i, 1 + i % 3, call, outcome, start,
                      math.inf if outcome is None else start + draw(st.integers(1, 8)) + 0.5))
    return ops


@settings(max_examples=300)
@given(histories())
def test_splitting_by_session_gives_the_whole_search_answer(history):
    assert check(history, None, token_of).linearizable == check_whole(history, None, token_of).linearizable


@settings(max_examples=100)
@given(st.lists(calls(), min_size=1, max_size=20))
def test_a_sequential_history_of_the_fixture_is_linearizable(chosen):
    spec = spec_for()
    history = run_program(FakeShardEngine, spec, Program(tuple(chosen), ((), ()), None))
    assert check(history, None, Tokens(FakeShardEngine, spec)).linearizable


# -- testing the tester: every planted racy engine is caught under the ci profile --------------


@pytest.mark.slow
@pytest.mark.parametrize("name", racy.RACY)
def test_a_racy_engine_is_caught(name, tmp_path, monkeypatch):
    config = MachineConfig(getattr(racy, name), f"planted.racy:{name}")
    found, original = [], parallel.shrink

    def shrink(factory, spec, program, *args, **kwargs):
        found.append(program)
        return original(factory, spec, program, *args, **kwargs)

    monkeypatch.setattr(parallel, "shrink", shrink)
    with pytest.raises(NotLinearizable) as info:
        run_parallel(config, settings=profiles.get("ci"), save_dir=tmp_path)
    assert "not linearizable" in str(info.value)
    (path,) = tmp_path.glob("parallel-*.json")
    trace = Trace.load(path)
    program = Program.from_dict(trace.config["program"])
    # Reduced, never grown.  How far a race's program shrinks depends on how often the machine
    # schedules the race, which its load changes (17 or 19 calls on a loaded machine, 12 or
    # fewer on an idle one): the reduction's own reach is pinned without threads, below.
    (first,) = found
    assert program.size() <= first.size(), (program, first)
    # ``fakeshard replay`` draws the timeline; the fixture passes the same program.
    shown = subprocess.run([sys.executable, "-m", "fakeshard", "replay", str(path)], cwd=ROOT,
                           capture_output=True, text=True, timeout=300)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert "not linearizable" in shown.stdout and "passes on fakeshard:FakeShardEngine" in shown.stdout


def test_the_reduction_reaches_the_smallest_program_a_rare_race_keeps(monkeypatch):
    """The reduction, without threads: a race that needs two calls, one in each of two branches,
    and shows in one run of every 200 (what a loaded machine leaves of it).  Whatever else the
    program holds is removed, since each candidate gets up to 64 times the campaign's runs."""
    needed = {("release", "a", 0), ("decode", "a", 0, 2, 1)}
    runs = []

    def find_failure(factory, spec, program, repeats, tokens):
        for _ in range(repeats):
            runs.append(program)
            shows = len(runs) % 200 == 0
            if shows and all(any(call in branch for branch in program.branches) for call in needed) \
                    and not any(needed <= set(branch) for branch in program.branches):
                return ["history"], "verdict"
        return None

    monkeypatch.setattr(parallel, "find_failure", find_failure)
    noise = [("prefill", "b", 0, 0, 3), ("release", "b", 1), ("decode", "b", 0, 3, 1), ("cancel", "c", 2)]
    program = Program(tuple(noise[:2]), ((("release", "a", 0), *noise), (*noise[1:], ("decode", "a", 0, 2, 1)),
                                         tuple(noise)), 6)
    small, history, verdict = parallel.shrink(None, None, program, (["history"], "verdict"), 12, None)
    assert small == Program((), ((("release", "a", 0),), (("decode", "a", 0, 2, 1),)), None)
    assert (history, verdict) == (["history"], "verdict")
