"""The contract's determinism section, as properties over random models and inputs.

Compared by the factory's :class:`~fakeshard._judge.Judge`: exactly for the fixture; for
an engine with a stated tolerance (real arithmetic), values within it and greedy tokens
equal wherever the top-2 margin exceeds it.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fakeshard import Pipeline, ShardSpec, TokenBundle
from fakeshard._judge import Judge

prompts = st.lists(st.integers(0, 255), min_size=1, max_size=12)
seeds = st.integers(-(2**31), 2**31)
# Narrow and wide models (real arithmetic rounds differently across chunkings at
# either width; the wide one also has several heads per K/V head).
widths = st.sampled_from([8, 64])


@st.composite
def splits(draw):
    n_layers = draw(st.integers(1, 8))
    cuts = sorted(draw(st.sets(st.integers(1, n_layers - 1), max_size=n_layers - 1))) if n_layers > 1 else []
    bounds = [0, *cuts, n_layers]
    return n_layers, list(zip(bounds, bounds[1:]))


@st.composite
def chunkings(draw, n):
    cuts = sorted(draw(st.sets(st.integers(1, n - 1), max_size=n - 1))) if n > 1 else []
    bounds = [0, *cuts, n]
    return list(zip(bounds, bounds[1:]))


def full_pipeline(factory, n_layers, seed, model_id="prop-model", hidden_size=8):
    return Pipeline([factory(ShardSpec(model_id, n_layers, 0, n_layers, hidden_size), seed=seed)])


def reference(factory, spec, seed):
    """The next ``n`` greedy tokens after a history, on a fresh FULL engine."""
    return lambda history, n: full_pipeline(factory, spec.n_layers, seed, spec.model_id,
                                            spec.hidden_size).generate("ref", history, n)



@settings(max_examples=60, deadline=None)
@given(splits(), prompts, st.integers(1, 6), seeds, widths)
def test_any_split_yields_the_full_engines_tokens(engine_factory, split, prompt, new, seed, width):
    n_layers, ranges = split
    spec = ShardSpec("prop-model", n_layers, 0, n_layers, width)
    pipe = Pipeline([engine_factory(spec.with_layers(a, b), seed=seed) for a, b in ranges])
    got = pipe.generate("s", prompt, new)
    assert len(got) == new
    problem = Judge(engine_factory).stream_problem(spec, seed, prompt, got, reference(engine_factory, spec, seed))
    assert problem is None, problem


@settings(max_examples=60, deadline=None)
@given(st.data(), prompts, seeds, widths)
def test_chunked_prefill_equals_one_prefill(engine_factory, data, prompt, seed, width):
    spec = ShardSpec("prop-model", 4, 0, 2, width)  # a head: its hidden rows are visible
    whole = engine_factory(spec, seed=seed).prefill(TokenBundle("s", 0, 0, tuple(prompt)))
    chunked = engine_factory(spec, seed=seed)
    rows = []
    for a, b in data.draw(chunkings(len(prompt))):
        rows.extend(chunked.prefill(TokenBundle("s", 0, a, tuple(prompt[a:b]))).hidden)
    assert Judge(engine_factory).rows_match(rows, whole.hidden), (rows, whole.hidden)


@settings(max_examples=40, deadline=None)
@given(prompts, st.integers(1, 6), seeds, st.integers(1, 50), widths)
def test_replay_under_a_new_epoch_reproduces_the_next_tokens(engine_factory, prompt, new, seed, epoch, width):
    judge, spec = Judge(engine_factory), ShardSpec("prop-model", 3, 0, 3, width)
    first = full_pipeline(engine_factory, 3, seed, hidden_size=width)
    tokens = first.generate("s", prompt, new, epoch=0)
    history = prompt + tokens[:-1]
    # Replay the history at a newer epoch on the same engine and on a fresh one:
    # the replayed prefill gives the last generated token again, then decoding goes on.
    for pipe in (first, full_pipeline(engine_factory, 3, seed, hidden_size=width)):
        sample = pipe.prefill("s", epoch, 0, history)
        after = pipe.decode("s", epoch, sample.pos, sample.token).token
        assert judge.token_ok(spec, seed, history, tokens[-1], sample.token)
        problem = judge.stream_problem(spec, seed, history, [sample.token, after],
                                       reference(engine_factory, spec, seed))
        assert problem is None, problem


@settings(max_examples=40, deadline=None)
@given(prompts, st.text(min_size=1, max_size=8), st.integers(0, 2**40), seeds)
def test_outputs_ignore_session_id_and_epoch(engine_factory, prompt, sid, epoch, seed):
    pipe = full_pipeline(engine_factory, 2, seed)
    assert pipe.generate(sid, prompt, 3, epoch=epoch) == pipe.generate("other", prompt, 3, epoch=0)


def test_outputs_depend_on_model_seed_and_every_earlier_token(engine_factory):
    prompt = list(range(10, 30))

    def run(model_id="prop-model", seed=0, tokens=prompt):
        return full_pipeline(engine_factory, 3, seed, model_id).generate("s", tokens, 8)

    base = run()
    assert run(seed=1) != base
    assert run(model_id="prop-model-2") != base
    # Changing the first token changes later outputs: position p sees tokens 0..p.
    assert run(tokens=[11] + prompt[1:]) != base
