"""Long prompts: the seeded-run format, the length draws, the position probes, and the
reference model's two paths (from scratch, and by a reference session cut at boundaries)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fakeshard import FakeShardEngine, FaultPlan, HiddenBundle, SampleBundle
from fakeshard.testing import _probes as probes
from fakeshard.testing._lengths import (
    BOUNDARIES,
    EDGES,
    GROWTH_KINDS,
    LONGEST,
    SPAN,
    boundaries_in,
    compact,
    growth_of,
    length_of,
    run_token,
    scrambled,
    token_count,
    tokens_of,
)
from fakeshard.testing._machines import role_spec
from fakeshard.testing._model import Oracle, cuts
from fakeshard.testing._runner import Divergence, EngineRunner
from fakeshard.testing.strategies import lengths
from planted.engines import BUGS


def test_seeded_runs_match_the_documented_vectors():
    # docs/explanation/state-machines.md, "Long prompts": another language expands a trace by these.
    assert tokens_of({"count": 8, "seed": 0}) == [56, 27, 1, 62, 6, 20, 11, 49]
    assert tokens_of({"count": 4, "seed": 4294967295}) == [28, 24, 59, 4]


@given(st.integers(0, 2**64 - 1), st.integers(0, 300))
def test_a_run_expanded_at_once_is_its_tokens_one_by_one(seed, count):
    run = tokens_of({"count": count, "seed": seed})
    assert run == [run_token(seed, i) for i in range(count)]
    assert all(0 <= t < 64 for t in run) and token_count({"count": count, "seed": seed}) == count


def test_a_literal_list_stays_as_it_is():
    assert tokens_of([3, 1, 2]) == [3, 1, 2] and token_count([3, 1, 2]) == 3


def test_compact_forms_read_short():
    assert compact({"count": 4098, "seed": 7}) == "<4098 tokens seeded 7>"
    assert compact([1, 2, 3]) == "[1, 2, 3]"
    assert compact(list(range(20))) == "<20 tokens: 0, 1, 2, ..., 18, 19>"


@given(st.integers(0, 2**32 - 1))
def test_lengths_are_log_uniform_or_end_at_a_boundarys_edge(i):
    kind, u = scrambled(i)
    n = length_of(kind, u)
    assert n >= 1
    if kind >= 3:
        assert n - 1 in EDGES  # the prompt's last position is just below, at or just above a boundary


def test_log_uniform_lengths_grow_with_the_draw_and_span_sixteen_octaves():
    seen = [length_of(0, u) for u in range(0, SPAN, 97)]
    assert seen == sorted(seen) and seen[0] == 1 and seen[-1] > LONGEST
    octaves = {n.bit_length() for n in seen}
    assert octaves == set(range(1, 17))


def test_boundary_lengths_reach_every_boundary():
    ends = {length_of(kind, u) - 1 for kind in (3, 4, 5) for u in range(0, SPAN, 64)}
    assert ends == set(EDGES)


@settings(max_examples=200)
@given(lengths(max_length=100))
def test_lengths_keep_under_their_bound(n):
    assert 1 <= n <= 100


@pytest.mark.parametrize("bad", [0, -1, True, 2.5, "9"])
def test_lengths_refuse_a_bound_that_is_no_positive_int(bad):
    with pytest.raises(ValueError, match="max_length"):
        lengths(max_length=bad)


def test_position_probes_name_the_edges_a_call_covers():
    assert probes.positions(0, 7) == []
    assert probes.positions(0, 8) == ["position:7"]
    assert probes.positions(511, 513) == ["position:511", "position:512"]
    assert probes.positions(4097, 4098) == ["position:4097"]
    assert probes.positions(0, LONGEST) == [f"position:{p}" for p in EDGES]


def test_a_factory_with_a_shorter_longest_prompt_is_not_held_to_positions_past_it():
    required = probes.required(1026)
    assert "position:1025" in required and "position:2047" not in required
    # Three sessions of four prompts of 1,026 positions hold at most 12,312: no total past 2**16.
    assert probes.required() - required == {f"position:{p}" for p in EDGES if p >= 1026} | {
        "length:total_past_65536"}


def test_boundaries_are_the_powers_of_two_and_the_multiples_of_a_hundred_in_a_range():
    assert boundaries_in(5, 70, "power") == [8, 16, 32, 64]
    assert boundaries_in(64, 64, "power") == [64]
    assert boundaries_in(99, 401, "round") == [100, 200, 300, 400]
    assert boundaries_in(0, 99, "round") == [] and boundaries_in(10, 9, "power") == []


@given(start=st.integers(0, 2**17), kind=st.integers(0, GROWTH_KINDS - 1), u=st.integers(0, SPAN - 1),
       longest=st.integers(1, 40_000))
def test_a_growth_is_a_call_the_machine_may_send(start, kind, u, longest):
    assert 1 <= growth_of(start, kind, u, longest) <= longest


@pytest.mark.parametrize("start", [0, 1, 700, 4095, 30_000, 65_530])
def test_growths_to_a_boundary_end_on_its_edge_wherever_the_session_stands(start):
    # Kinds 3 and 4 end the call's last position at b - 1, b or b + 1 for some boundary b of
    # their class the call can reach; every such boundary is met by some draw.
    for kind, cls in ((3, "power"), (4, "round")):
        # b - 1 .. b + 1 meets the positions a call computes, start .. start + 8447.
        reachable = set(boundaries_in(start - 1, start + 8448, cls))
        met = set()
        for u in range(3 * 4096):  # every edge at every place
            last = start + growth_of(start, kind, u, 8448) - 1
            near = [b for b in reachable if abs(last - b) <= 1]
            assert near or not reachable, (kind, start, last)
            met.update(near)
        assert met == reachable, (kind, start, sorted(reachable - met)[:5])


def test_length_probes_name_the_class_a_call_or_a_view_crosses():
    assert probes.lengths("decode", 64, 1) == ["length:across:power"]  # a session from 64 to 65
    assert probes.lengths("prefill", 63, 2) == ["length:across:power", "length:split_prefill"]
    assert probes.lengths("prefill", 0, 5000) == []  # a whole prompt: the position probes' part
    assert probes.lengths("decode", 99, 1) == [] and probes.lengths("decode", 100, 1) == ["length:across:round"]
    assert probes.held(2**16, [101]) == ["length:view_past:round"]
    assert probes.held(2**16 + 1, [129, 8]) == ["length:total_past_65536", "length:view_past:power"]
    assert probes.held(0, [103, 131]) == []


def test_cuts_fall_on_every_boundary_strictly_inside():
    assert cuts(0, 0) == []
    assert cuts(5, 6) == [(5, 6)]
    assert cuts(0, 20) == [(0, 8), (8, 16), (16, 20)]
    assert cuts(16, 17) == [(16, 17)]
    assert [a for a, _ in cuts(0, LONGEST)[1:]] == list(BOUNDARIES)


@pytest.mark.parametrize("role", ["head", "middle", "tail", "full"])
def test_the_reference_path_agrees_with_a_prefill_from_scratch(role):
    """Past 64 positions the oracle computes only the new positions, on a session of its own;
    on a correct engine that is what one prefill of the whole history gives."""
    spec = role_spec(role)
    oracle = Oracle(FakeShardEngine, spec, 0)
    history = tokens_of({"count": 700, "seed": 11})
    fresh = Oracle(FakeShardEngine, spec, 0)  # its inputs from an upstream of its own
    start = 0
    for end in (100, 513, 514, 700):  # a long prompt, a chunk across 512, a decode, a chunk
        got = oracle.output("s", 3, start, history[:end], lineage=1, op="decode" if end - start == 1 else "prefill")
        whole = FakeShardEngine(spec, seed=0).prefill(fresh.inputs(2, history, "w", 0, 0, end))
        if isinstance(whole, SampleBundle):
            assert (got.session_id, got.epoch, got.pos, got.token) == ("s", 3, whole.pos, whole.token)
        else:
            assert isinstance(got, HiddenBundle) and got.start_pos == start
            assert got.rows() == whole.rows()[start:end]
        assert "cut at" in oracle.path or end - start == 1 or start >= 512
        start = end


def test_a_decode_that_disagrees_with_a_prefill_is_caught_at_position_30000():
    """The oracle's path differs from the engine's: a decode deep in a long session is judged
    against a one-token prefill on the reference, at the cost of the new position alone."""
    bug = next(b for b in BUGS if b.name == "drift_from_12")
    runner = EngineRunner(bug.factory, machine="sessions", factory_name="planted", spec=role_spec("full"),
                          plan=FaultPlan())
    runner.run({"op": "prefill", "session_id": "a", "epoch": 0, "start": 0, "tokens": {"count": 30000, "seed": 1}})
    with pytest.raises(Divergence, match="by prefill"):
        runner.run({"op": "decode", "session_id": "a", "epoch": 0, "start": 30000, "tokens": [5]})


def test_a_long_session_passes_on_a_correct_engine_at_every_role():
    for role in ("head", "middle", "tail", "full"):
        runner = EngineRunner(FakeShardEngine, machine="sessions", factory_name="fixture",
                              spec=role_spec(role), plan=FaultPlan())
        steps = [{"op": "prefill", "session_id": "a", "epoch": 0, "start": 0, "tokens": {"count": 4097, "seed": 2}},
                 {"op": "decode", "session_id": "a", "epoch": 0, "start": 4097, "tokens": [1]},
                 {"op": "prefill", "session_id": "a", "epoch": 0, "start": 4098, "tokens": [1, 2, 3]},
                 {"op": "decode", "session_id": "a", "epoch": 0, "start": 33, "tokens": [1]},  # refused
                 {"op": "prefill", "session_id": "a", "epoch": 1, "start": 0, "tokens": {"count": 600, "seed": 3}},
                 {"op": "release", "session_id": "a", "epoch": 1}]
        for step in steps:
            runner.run(step)
        runner.finish()
        assert runner.trace.actual[3]["outcome"] == "position_mismatch"


def test_a_single_engines_plan_is_simplified_like_a_nodes():
    from fakeshard.testing._regress import simpler_plans

    rule = {"fault": {"kind": "drop_response"}, "op": "any", "session_id": None, "nth": 3, "count": None,
            "probability": 0.5}
    config = {"seed": 0, "fault_plan": {"rules": [rule], "seed": 1}}
    worlds = list(simpler_plans(config))
    assert worlds[0]["fault_plan"]["rules"] == []  # the rule dropped first
    assert {"nth": 1}.items() <= worlds[1]["fault_plan"]["rules"][0].items()
    assert any(w["fault_plan"]["rules"][0]["probability"] == 1.0 for w in worlds[1:])
    assert all("fault_plans" not in w for w in worlds)


def test_an_engine_failing_the_kits_own_fault_free_calls_is_reported_in_words():
    # The expected output is computed on engines of the same factory (an upstream stage for a
    # middle engine's input rows, a reference session by another path): a spurious cache miss
    # there is the engine's failure too, reported as the call it was, not as a crash of the kit.
    from planted.engines import MissAcrossPowerOfTwo, _wrapped

    class MissAt64(MissAcrossPowerOfTwo):
        at = 64

    runner = EngineRunner(_wrapped(MissAt64), machine="sessions", factory_name="planted", seed=0,
                          spec=role_spec("middle"), capacity=None, plan=FaultPlan(()), tolerance=0.0)
    runner.run({"op": "prefill", "session_id": "a", "epoch": 0, "start": 0, "tokens": list(range(40))})
    with pytest.raises(Divergence, match=r"positions 64\.\.69 .* raised CacheMiss: .* the contract says it succeeds"):
        runner.run({"op": "prefill", "session_id": "a", "epoch": 0, "start": 40, "tokens": [1] * 30})
    assert "upstream engine" in runner.trace.failure


def test_reduction_cuts_a_long_prompt_to_where_the_failure_still_shows():
    from fakeshard.testing._regress import SHORT_PROMPT, _shorter_prompts

    steps = [{"op": "start", "session_id": "a", "prompt": {"count": 8448, "seed": 7}},
             {"op": "start", "session_id": "b", "prompt": list(range(40))}, {"op": "next", "session_id": "a"}]

    def fails_past(n):  # a failure that needs session a's prompt longer than n tokens
        return lambda candidate: token_count(candidate[0]["prompt"]) > n

    cut = _shorter_prompts(steps, fails_past(0))  # the prompt plays no part: both cut short
    assert [token_count(s["prompt"]) for s in cut[:2]] == [SHORT_PROMPT, SHORT_PROMPT]
    assert cut[0]["prompt"]["seed"] == 7 and cut[1]["prompt"] == list(range(SHORT_PROMPT)) and cut[2] == steps[2]
    kept = _shorter_prompts(steps, fails_past(5000))  # a length bug: halving would lose it
    assert token_count(kept[0]["prompt"]) == 8448
    halved = _shorter_prompts(steps, fails_past(3000))  # half still fails: half it is
    assert token_count(halved[0]["prompt"]) == 4224
    assert steps[0]["prompt"]["count"] == 8448  # the steps given are left as they were
