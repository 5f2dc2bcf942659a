"""Pipeline: tiling, output checks before passing on, fan-out of cancel/release, generate."""

from __future__ import annotations

import numpy as np
import pytest

from fakeshard import (
    Crash,
    EngineCrashed,
    FaultPlan,
    FaultRule,
    Malformed,
    MalformedBundle,
    Pipeline,
    ShardSpec,
    StaleEpoch,
)
from fakeshard._faults import MALFORMED_KINDS

SPEC = ShardSpec("pipe-model", n_layers=6, start_layer=0, end_layer=6)
RANGES = ((0, 2), (2, 4), (4, 6))


def build(factory, ranges=RANGES, plans=None, **kw):
    plans = plans or {}
    return Pipeline([factory(SPEC.with_layers(a, b), faults=plans.get(i), **kw)
                     for i, (a, b) in enumerate(ranges)])


@pytest.mark.parametrize("ranges,match", [
    ((), "at least one"),
    (((0, 2), (3, 6)), "starts at layer 3, expected 2"),
    (((0, 3), (2, 6)), "starts at layer 2, expected 3"),
    (((2, 4), (0, 2), (4, 6)), "starts at layer 2, expected 0"),
    (((0, 2), (2, 4)), "end at layer 4"),
])
def test_stages_must_tile_the_model(engine_factory, ranges, match):
    with pytest.raises(ValueError, match=match):
        build(engine_factory, ranges)


def test_stages_must_be_one_model(engine_factory):
    other = ShardSpec("other-model", 6, 2, 6)
    with pytest.raises(ValueError, match="another model"):
        Pipeline([engine_factory(SPEC.with_layers(0, 2)), engine_factory(other)])
    with pytest.raises(ValueError, match="ShardSpec"):
        Pipeline([object()])


def test_generate_leaves_the_session_open(engine_factory):
    pipe = build(engine_factory)
    tokens = pipe.generate("s", [3, 1, 4], 5, epoch=2)
    assert len(tokens) == 5 and all(0 <= t < SPEC.vocab_size for t in tokens)
    for stage in pipe.stages:
        view = stage.session("s")
        assert (view.epoch, view.status, view.cached_tokens) == (2, "live", 3 + 5 - 1)
    nxt = pipe.decode("s", 2, 7, tokens[-1])
    assert nxt.pos == 8
    pipe.release("s", 2)
    assert pipe.used_tokens == 0


@pytest.mark.parametrize("bad", [0, -1, 1.0, True])
def test_generate_needs_at_least_one_token(engine_factory, bad):
    with pytest.raises(ValueError, match="max_new_tokens"):
        build(engine_factory).generate("s", [1], bad)


def test_bad_prompt_is_malformed_and_touches_nothing(engine_factory):
    pipe = build(engine_factory)
    for prompt in ([], [1, 999], ["a"]):
        with pytest.raises(MalformedBundle):
            pipe.prefill("s", 0, 0, prompt)
    assert pipe.used_tokens == 0 and all(stage.session("s") is None for stage in pipe.stages)


@pytest.mark.parametrize("stage", [0, 1, 2])
@pytest.mark.parametrize("kind", MALFORMED_KINDS)
def test_malformed_output_is_stopped_before_it_is_passed_on(engine_factory, stage, kind):
    pipe = build(engine_factory, plans={stage: FaultPlan((FaultRule(Malformed(kind), op="decode"),))})
    pipe.prefill("s", 0, 0, [1, 2])
    last = stage == len(RANGES) - 1
    has_field = kind in (("token_range", "session", "epoch", "position") if last else
                         ("checksum", "shape", "layer", "nan", "session", "epoch", "position"))
    if not has_field:
        pipe.decode("s", 0, 2, 3)  # spent without effect
        return
    with pytest.raises(MalformedBundle, match=f"stage {stage}") as info:
        pipe.decode("s", 0, 2, 3)
    assert (info.value.session_id, info.value.epoch) == ("s", 0)
    # Stages after the broken one never saw the call.
    for later in pipe.stages[stage + 1:]:
        assert later.session("s").cached_tokens == 2
    assert pipe.stages[stage].session("s").cached_tokens == 3


def test_cancel_reaches_every_stage_even_past_a_failure(engine_factory):
    pipe = build(engine_factory, plans={1: FaultPlan((FaultRule(Crash(), op="cancel"),))})
    pipe.prefill("s", 0, 0, [1, 2, 3])
    with pytest.raises(EngineCrashed):
        pipe.cancel("s", 0)
    assert pipe.stages[0].session("s").status == "cancelled"
    assert pipe.stages[2].session("s").status == "cancelled"
    assert pipe.used_tokens == 0


def test_release_raises_the_first_error_after_trying_all(engine_factory):
    pipe = build(engine_factory)
    pipe.prefill("s", 3, 0, [1])
    pipe.stages[2].release("s", 4)
    pipe.stages[1].release("s", 5)
    with pytest.raises(StaleEpoch) as info:
        pipe.release("s", 3)
    assert info.value.epoch == 3 and pipe.stages[0].session("s").status == "released"


def test_evidence_class_is_the_weakest_stage(engine_factory):
    pipe = build(engine_factory)
    assert pipe.evidence_class == pipe.stages[0].evidence_class
    assert "0..2, 2..4, 4..6" in repr(pipe)


def test_a_call_on_every_stage_forgets_the_stage_an_earlier_one_failed_on():
    from fakeshard import FakeShardEngine

    pipe = build(FakeShardEngine, plans={1: FaultPlan((FaultRule(Crash(), op="cancel"),))})
    pipe.prefill("s", 0, 0, [1, 2])
    with pytest.raises(EngineCrashed):
        pipe.cancel("s", 0)
    assert pipe.last_failed_stage == 1
    pipe.stages[1].restart()
    pipe.release("s", 0)
    assert pipe.last_failed_stage is None


def test_answer_problem_names_everything_wrong_with_an_answer():
    from fakeshard import HiddenBundle, SampleBundle, TokenBundle
    from fakeshard._pipeline import answer_problem

    head, tail, width = SPEC.with_layers(0, 2), SPEC.with_layers(4, 6), SPEC.hidden_size
    request = TokenBundle("s", 1, 3, (5, 6))

    def hidden(sid="s", epoch=1, start=3, layer=2, rows=2):
        return HiddenBundle.sealed(sid, epoch, start, layer, [[0.0] * width] * rows)

    assert answer_problem(head, request, 2, hidden(), last=False, model=SPEC) is None
    assert answer_problem(head, request, 2, SampleBundle("s", 1, 5, 0), last=False) == \
        "SampleBundle, expected HiddenBundle"
    assert answer_problem(head, request, 2, hidden("t", 2, 4, rows=1), last=False, model=SPEC) == \
        "session 't' for 's', epoch 2 for 1, start_pos 4 for 3, 1 positions for 2"
    assert answer_problem(head, request, 2, hidden(layer=5), last=False, model=SPEC) == "layer 5, expected 2"
    assert answer_problem(tail, request, 2, SampleBundle("s", 1, 5, 0), last=True, model=SPEC) is None
    assert answer_problem(tail, request, 2, SampleBundle("s", 1, 6, 0), last=True, model=SPEC) == "pos 6, expected 5"
    assert answer_problem(tail, request, 2, SampleBundle("s", 1, 5, 10**6), last=True, model=SPEC) == \
        "a bad bundle: SampleBundle: token = 1000000 is outside 0..255 (vocab_size 256)"


def test_a_pipeline_names_the_stage_and_the_call_a_bad_answer_came_from():
    from fakeshard import FakeShardEngine

    pipe = build(FakeShardEngine, plans={1: FaultPlan((FaultRule(Malformed("layer"), op="decode"),))})
    pipe.prefill("s", 0, 0, [1, 2])
    assert pipe.last_failed_stage is None
    with pytest.raises(MalformedBundle) as info:
        pipe.decode("s", 0, 2, 3)
    assert str(info.value) == "stage 1 (layers 2..4) answered decode with layer 5, expected 4"
    assert pipe.last_failed_stage == 1
    pipe.prefill("t", 0, 0, [1])  # a good call forgets the failed stage
    assert pipe.last_failed_stage is None


def test_generate_runs_at_epoch_zero_by_default():
    from fakeshard import FakeShardEngine

    pipe = build(FakeShardEngine)
    pipe.generate("s", [1, 2, 3], 2)
    assert {stage.session("s").epoch for stage in pipe.stages} == {0}


class _Stage:
    """Only what Pipeline reads of a stage before any call: its spec and evidence class."""

    def __init__(self, spec, evidence_class=None):
        self.spec = spec
        if evidence_class is not None:
            self.evidence_class = evidence_class


def test_a_pipeline_is_real_model_evidence_only_if_every_stage_is():
    ranges = [SPEC.with_layers(a, b) for a, b in RANGES]
    assert Pipeline([_Stage(s, "real-model") for s in ranges]).evidence_class == "real-model"
    for classes in (["real-model", "fixture", "real-model"], ["real-model", None, "real-model"],
                    [None, None, None], ["fixture"] * 3):
        pipe = Pipeline([_Stage(s, c) for s, c in zip(ranges, classes)])
        assert pipe.evidence_class == "fixture", classes
        assert pipe.last_failed_stage is None  # no call yet


def test_a_pipeline_refuses_stages_that_do_not_make_one_model_by_name():
    with pytest.raises(ValueError) as info:
        Pipeline([])
    assert str(info.value) == "Pipeline needs at least one stage"
    with pytest.raises(ValueError) as info:
        Pipeline([object()])
    assert str(info.value) == "stage 0 has no ShardSpec .spec (got object)"
    with pytest.raises(ValueError) as info:
        Pipeline([_Stage(SPEC.with_layers(0, 2)), _Stage(SPEC.with_layers(3, 6))])
    assert str(info.value) == "stage 1 starts at layer 3, expected 2: stage ranges must tile 0..n_layers in order"


# -- what the machines build inputs and expectations from -------------------------------------

class _Counting:
    """A factory of fixture engines that counts the engines it builds and the positions they
    compute, by op (``calls["prefill"]``: the positions of every prefill)."""

    def __init__(self):
        self.built = 0
        self.calls = {"prefill": 0, "decode": 0}

    def __call__(self, spec, **kw):
        from fakeshard import FakeShardEngine

        self.built += 1
        engine = FakeShardEngine(spec, **kw)
        for op in ("prefill", "decode"):
            setattr(engine, op, self._counted(op, getattr(engine, op)))
        return engine

    def _counted(self, op, call):
        def counted(bundle):
            self.calls[op] += len(bundle.tokens)
            return call(bundle)
        return counted


def test_a_feeder_gives_the_upstream_rows_and_computes_a_history_once_while_it_is_kept():
    from fakeshard import FakeShardEngine, TokenBundle
    from fakeshard._feeder import Feeder

    factory = _Counting()
    feeder = Feeder(factory, SPEC.with_layers(2, 4), seed=5)
    history = [3, 1, 4, 1, 5]
    upstream = FakeShardEngine(SPEC.with_layers(0, 2), seed=5)
    expected = upstream.prefill(TokenBundle("u", 0, 0, tuple(history))).array()
    assert np.array_equal(np.asarray(feeder.rows(history)), expected)
    bundle = feeder.bundle("s", 2, 3, history, 2)
    assert (bundle.start_pos, bundle.epoch) == (3, 2) and np.array_equal(bundle.array(), expected[3:])
    assert factory.calls["prefill"] == 5  # the same history three times: computed once
    assert np.array_equal(np.asarray(feeder.rows(history[:2])), expected[:2])  # a beginning: no call
    assert factory.calls == {"prefill": 5, "decode": 0}
    for n in range(Feeder.MEMO):  # as many other histories as it keeps: the first is gone
        feeder.rows([9, n, n])
    assert factory.calls["prefill"] == 5 + 3 * Feeder.MEMO
    feeder.rows(history)
    assert factory.calls["prefill"] == 10 + 3 * Feeder.MEMO
    assert factory.built == 1  # one upstream engine; each history a session of its own
    assert feeder._engine.used_tokens <= 3 * Feeder.MEMO + 5  # what it forgets, it releases


def test_a_feeder_extends_a_kept_history_by_its_new_tokens_only_for_an_exact_factory():
    from fakeshard import FakeShardEngine, TokenBundle
    from fakeshard._feeder import Feeder

    history = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5]
    whole = FakeShardEngine(SPEC.with_layers(0, 2), seed=5).prefill(TokenBundle("u", 0, 0, tuple(history))).array()
    factory = _Counting()
    feeder = Feeder(factory, SPEC.with_layers(2, 4), seed=5)
    for n in range(3, 9):  # a prompt of 3, then a token a step
        rows = feeder.rows(history[:n])
        assert np.array_equal(np.asarray(rows), whole[:n]) and not np.asarray(rows).flags.writeable
    assert factory.calls == {"prefill": 3, "decode": 5}  # moved on by a decode each step
    assert np.array_equal(np.asarray(feeder.rows(history)), whole)  # a chunk of 3: one prefill of 3
    assert factory.calls == {"prefill": 6, "decode": 5}
    assert np.array_equal(np.asarray(feeder.rows(history[:4])), whole[:4])  # the rows it passed stay
    assert factory.calls == {"prefill": 6, "decode": 5}

    class Tolerant(_Counting):
        tolerance = 1e-3

    tolerant = Tolerant()
    feeder = Feeder(tolerant, SPEC.with_layers(2, 4), seed=5)
    for n in range(3, 9):
        assert np.array_equal(np.asarray(feeder.rows(history[:n])), whole[:n])
    # Within a tolerance, every history from 0.
    assert tolerant.calls == {"prefill": sum(range(3, 9)), "decode": 0}


def test_a_reference_stream_that_grows_a_token_a_step_is_generated_a_few_times_and_is_greedy():
    from fakeshard import FakeShardEngine
    from fakeshard.testing._runner import ReferenceStreams

    factory = _Counting()
    streams = ReferenceStreams(factory, SPEC, seed=2)
    whole = Pipeline([FakeShardEngine(SPEC, seed=2)]).generate("r", [7, 8], 40)
    assert [streams([7, 8], n) for n in range(41)] == [whole[:n] for n in range(41)]
    assert factory.built <= 7  # 1, 2, 4, ... 64 tokens: not one generation per step
    assert streams([8, 7], 3) == Pipeline([FakeShardEngine(SPEC, seed=2)]).generate("r", [8, 7], 3)
