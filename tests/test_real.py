"""fakeshard.real: the GGUF writer and reader, the llama arithmetic, the cache, the judge.

The contract suite and the machines run on the real engine with
``--engine fakeshard.real:tiny_engine``; these tests check what they cannot
see: that the numbers are a llama forward pass, that files round-trip, and
that the tolerance rule accepts rounding and nothing more.
"""

from __future__ import annotations

import hashlib
import math

import pytest

np = pytest.importorskip("numpy")
gguf = pytest.importorskip("gguf")

from hypothesis import Phase, settings  # noqa: E402

from fakeshard import Pipeline, SessionEngine, ShardSpec, TokenBundle  # noqa: E402
from fakeshard._judge import Judge  # noqa: E402
from fakeshard.real import (  # noqa: E402
    GGUFError,
    GGUFShardEngine,
    LlamaBackend,
    LlamaShape,
    TinyFactory,
    open_model,
    tiny_engine,
    write_tiny_gguf,
)
from fakeshard.real._model import _tiny_weights  # noqa: E402
from fakeshard.testing import _profiles as profiles  # noqa: E402
from fakeshard.testing._machines import MachineConfig, SessionsMachine  # noqa: E402
from fakeshard.testing._regress import run_machine  # noqa: E402


@pytest.fixture(autouse=True)
def model_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("FAKESHARD_MODEL_CACHE", str(tmp_path_factory.getbasetemp() / "models"))


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """One 3-layer, 64-wide model in each weight format."""
    root = tmp_path_factory.mktemp("gguf")
    return {q: write_tiny_gguf(root / f"m-{q}.gguf", n_layers=3, hidden_size=64, vocab_size=96,
                               seed=5, quant=q) for q in ("F32", "F16", "Q8_0", "Q4_0")}


# -- an independent reference: the llama equations, one position and one head at a time ---------

def reference_logits(path, tokens):
    """Full-model logits at every position of ``tokens``, in float64, written from the equations."""
    model = open_model(path)
    s, t = model.shape, lambda name: model.tensor(name).astype(np.float64)
    hd, group = s.head_dim, s.n_head // s.n_kv_head

    def rms(x, g):
        return x / math.sqrt(float(np.mean(x * x)) + s.rms_eps) * g

    def rope(v, pos):
        out = v.copy()
        for i in range(hd // 2):
            theta = pos * s.rope_base ** (-2.0 * i / hd)
            c, sn = math.cos(theta), math.sin(theta)
            out[2 * i] = v[2 * i] * c - v[2 * i + 1] * sn
            out[2 * i + 1] = v[2 * i] * sn + v[2 * i + 1] * c
        return out

    keys = [[] for _ in range(s.n_layers)]
    values = [[] for _ in range(s.n_layers)]
    result = []
    for pos, tok in enumerate(tokens):
        x = t("token_embd.weight")[tok]
        for layer in range(s.n_layers):
            b = f"blk.{layer}."
            h = rms(x, t(b + "attn_norm.weight"))
            q, k, v = t(b + "attn_q.weight") @ h, t(b + "attn_k.weight") @ h, t(b + "attn_v.weight") @ h
            keys[layer].append([rope(k[j * hd:(j + 1) * hd], pos) for j in range(s.n_kv_head)])
            values[layer].append([v[j * hd:(j + 1) * hd] for j in range(s.n_kv_head)])
            heads = []
            for head in range(s.n_head):
                kv = head // group
                qh = rope(q[head * hd:(head + 1) * hd], pos)
                scores = np.array([qh @ keys[layer][p][kv] for p in range(pos + 1)]) / math.sqrt(hd)
                w = np.exp(scores - scores.max())
                w /= w.sum()
                heads.append(sum(w[p] * values[layer][p][kv] for p in range(pos + 1)))
            x = x + t(b + "attn_output.weight") @ np.concatenate(heads)
            h = rms(x, t(b + "ffn_norm.weight"))
            gate, up = t(b + "ffn_gate.weight") @ h, t(b + "ffn_up.weight") @ h
            x = x + t(b + "ffn_down.weight") @ (gate / (1 + np.exp(-gate)) * up)
        result.append(t("output.weight") @ rms(x, t("output_norm.weight")))
    return np.array(result)


def our_logits(path, tokens, ranges):
    """Logits at every position, running ``ranges`` as stages that pass hidden rows on."""
    model = open_model(path)
    x = None
    for a, b in ranges:
        stage = LlamaBackend(model, a, b)
        _, x = stage.run_layers(stage.empty_cache(), 0, stage.hidden_in(tokens if x is None else x))
    return np.stack([stage.logits(row) for row in x])


@pytest.mark.parametrize("quant", ["F32", "Q8_0"])
def test_the_arithmetic_is_the_llama_forward_pass(models, quant):
    tokens = [1, 40, 7, 7, 95, 0, 33]
    expected = reference_logits(models[quant], tokens)
    got = our_logits(models[quant], tokens, [(0, 1), (1, 2), (2, 3)])
    assert np.abs(expected).max() > 1.0  # logits of a few units, not all zero
    assert np.abs(got - expected).max() < 1e-4
    # And the engine's sampled token is the argmax of those logits.
    engine = GGUFShardEngine(models[quant], 0, 3)
    assert engine.prefill(TokenBundle("s", 0, 0, tuple(tokens))).token == int(np.argmax(expected[-1]))


# -- files ------------------------------------------------------------------------------------

def test_the_spec_is_read_from_the_file(models):
    engine = GGUFShardEngine(models["F32"], 1, 2)
    assert engine.spec == ShardSpec("m-F32", n_layers=3, start_layer=1, end_layer=2, hidden_size=64,
                                    vocab_size=96)
    assert engine.evidence_class == "real-model" and isinstance(engine, SessionEngine)


@pytest.mark.parametrize("quant,matrix_type", [("F32", "F32"), ("F16", "F16"), ("Q8_0", "Q8_0"),
                                               ("Q4_0", "Q4_0")])
def test_weights_are_stored_in_the_asked_format_and_dequantize_close(models, quant, matrix_type):
    model = open_model(models[quant])
    exact = _tiny_weights(LlamaShape.tiny(3, 64, 96), 5)
    assert model.tensor_type("blk.0.attn_q.weight") == matrix_type
    assert model.tensor_type("blk.0.attn_norm.weight") == "F32"  # gains stay F32
    # Error bound of each format: half a step of its grid, relative to the block's largest value.
    step = {"F32": 0.0, "F16": 2 ** -11, "Q8_0": 1 / 127, "Q4_0": 1 / 7}[quant]
    for name in ("token_embd.weight", "blk.2.ffn_down.weight", "output.weight"):
        w, q = exact[name], model.tensor(name)
        assert q.shape == w.shape and q.dtype == np.float32
        assert np.abs(q - w).max() <= step * np.abs(w).max() + 1e-7, name


def test_rows_not_a_multiple_of_32_stay_f32_under_block_quantization(tmp_path):
    path = write_tiny_gguf(tmp_path / "narrow.gguf", n_layers=1, hidden_size=8, vocab_size=16, quant="Q8_0")
    model = open_model(path)
    assert model.tensor_type("blk.0.attn_q.weight") == "F32"
    assert GGUFShardEngine(path, 0, 1).prefill(TokenBundle("s", 0, 0, (1, 2))).token in range(16)


def test_the_same_call_writes_the_same_bytes(tmp_path):
    a = write_tiny_gguf(tmp_path / "a.gguf", n_layers=2, hidden_size=32, vocab_size=40, seed=9, quant="Q4_0")
    b = write_tiny_gguf(tmp_path / "b.gguf", n_layers=2, hidden_size=32, vocab_size=40, seed=9, quant="Q4_0",
                        name="a")
    assert a.read_bytes() == b.read_bytes()
    c = write_tiny_gguf(tmp_path / "c.gguf", n_layers=2, hidden_size=32, vocab_size=40, seed=10, quant="Q4_0",
                        name="a")
    assert c.read_bytes() != a.read_bytes()


def test_weights_are_pinned_across_platforms():
    # Golden digest: SHAKE-256 keyed streams, not numpy's generators, so this holds on any
    # machine and numpy version.  A change here changes every tiny model: bump the key's version.
    w = _tiny_weights(LlamaShape.tiny(2, 8, 16), 0)
    digest = hashlib.sha256(b"".join(w[name].astype("<f4").tobytes() for name in sorted(w))).hexdigest()
    assert digest[:16] == GOLDEN_WEIGHTS


GOLDEN_WEIGHTS = "0b25de58fd129d98"


def test_model_id_falls_back_to_the_content_hash(tmp_path):
    shape = LlamaShape.tiny(1, 8, 16)
    path = _write_gguf(tmp_path / "anon.gguf", "llama", _tiny_weights(shape, 0).items(), eps=1e-5,
                       llama__embedding_length=8, llama__block_count=1,
                       llama__feed_forward_length=shape.n_ff, llama__attention__head_count=shape.n_head,
                       llama__attention__head_count_kv=shape.n_kv_head)
    engine = GGUFShardEngine(path, 0, 1)
    assert engine.spec.model_id == "gguf-" + hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def _write_gguf(path, arch, tensors=(), eps=None, **uints):
    writer = gguf.GGUFWriter(path, arch)
    for key, value in uints.items():
        writer.add_uint32(key.replace("__", "."), value)
    if eps is not None:
        writer.add_layer_norm_rms_eps(eps)
    for name, w in tensors:
        writer.add_tensor(name, w)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


HPARAMS = {"llama__embedding_length": 8, "llama__attention__head_count": 2, "llama__block_count": 1,
           "llama__feed_forward_length": 24}
EMBEDDING = [("token_embd.weight", np.zeros((16, 8), np.float32))]


@pytest.mark.parametrize("case,match", [
    ("garbage", "not a readable GGUF"),
    ("arch", "architecture 'gpt2'"),
    ("keys", "missing metadata key 'llama.embedding_length'"),
    ("eps", "missing metadata key 'llama.attention.layer_norm_rms_epsilon'"),
    ("tensor", "missing tensor 'blk.0.attn_norm.weight'"),
    ("heads", "3 heads over 3 K/V heads do not divide hidden size 8"),
])
def test_files_the_engine_cannot_run_are_refused_by_name(tmp_path, case, match):
    path = tmp_path / "bad.gguf"
    if case == "garbage":
        path.write_bytes(b"GGUF" + bytes(60))
    elif case == "arch":
        _write_gguf(path, "gpt2")
    elif case == "keys":
        _write_gguf(path, "llama")
    elif case == "eps":
        _write_gguf(path, "llama", EMBEDDING, **HPARAMS)
    elif case == "tensor":
        _write_gguf(path, "llama", EMBEDDING, eps=1e-5, **HPARAMS)
    else:
        _write_gguf(path, "llama", EMBEDDING, eps=1e-5, **{**HPARAMS, "llama__attention__head_count": 3})
    with pytest.raises(GGUFError, match=match):
        GGUFShardEngine(path, 0, 1)


def test_a_missing_file_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        GGUFShardEngine(tmp_path / "nope.gguf", 0, 1)


@pytest.mark.parametrize("kw,match", [
    ({"hidden_size": 6}, "divisible by 4"), ({"hidden_size": 2}, "hidden_size must be an int >= 4"),
    ({"quant": "Q5_K"}, "quant must be one of"), ({"seed": 1.5}, "seed must be an int"),
    ({"vocab_size": True}, "vocab_size"), ({"name": ""}, "name must be a non-empty str"),
])
def test_write_tiny_gguf_refuses_bad_arguments_and_writes_nothing(tmp_path, kw, match):
    args = {"n_layers": 1, "hidden_size": 8, "vocab_size": 16, **kw}
    with pytest.raises(ValueError, match=match):
        write_tiny_gguf(tmp_path / "x.gguf", **args)
    assert list(tmp_path.iterdir()) == []


# -- the K/V cache ------------------------------------------------------------------------------

def test_a_forward_pass_never_changes_an_older_cache(models):
    backend = LlamaBackend(open_model(models["F32"]), 0, 2)
    c0 = backend.empty_cache()
    c1, _ = backend.forward(c0, 0, [3, 4])
    c2, out_a = backend.forward(c1, 2, [5])       # appends in place: c1 is the newest
    _, out_b = backend.forward(c1, 2, [6])        # from an older cache: must copy
    _, out_c = backend.forward(c2, 3, [7])        # c2 still sees 3, 4, 5
    fresh = LlamaBackend(open_model(models["F32"]), 0, 2)
    _, whole = fresh.forward(fresh.empty_cache(), 0, [3, 4, 5, 7])
    _, other = fresh.forward(fresh.empty_cache(), 0, [3, 4, 6])
    judge = Judge(tiny_engine)
    assert judge.rows_match(out_c, whole[3:]) and judge.rows_match(out_b, other[2:])
    assert not judge.rows_match(out_a, out_b)


def test_caches_grow_past_their_first_allocation(models):
    engine = GGUFShardEngine(models["F32"], 0, 3)
    prompt = tuple(i % 96 for i in range(40))
    out = engine.prefill(TokenBundle("s", 0, 0, prompt[:3]))
    for pos in range(3, 40):
        out = engine.decode(TokenBundle("s", 0, pos, (prompt[pos],)))
    assert out.token == GGUFShardEngine(models["F32"], 0, 3).prefill(TokenBundle("t", 0, 0, prompt)).token
    assert engine.session("s").cached_tokens == 40


def test_hidden_values_beyond_float32_saturate_and_stay_finite(models):
    engine = GGUFShardEngine(models["F32"], 1, 3)
    rows = ((1e300, -1e300) + (3e38,) * 62, (0.0,) * 64)
    from fakeshard import HiddenBundle

    out = engine.prefill(HiddenBundle.sealed("s", 0, 0, 1, rows))
    assert 0 <= out.token < 96


# -- the factory ---------------------------------------------------------------------------------

def test_tiny_engine_builds_the_model_matching_spec_and_seed():
    spec = ShardSpec("tiny-check", 4, 1, 3, hidden_size=8, vocab_size=32)
    engine = tiny_engine(spec, seed=2, capacity_tokens=5)
    assert engine.spec == spec and engine.capacity_tokens == 5 and engine.evidence_class == "real-model"
    full = spec.with_layers(0, 4)
    prompt = [1, 2, 3, 4, 5, 6]

    def run(spec, seed):
        return Pipeline([tiny_engine(spec, seed=seed)]).generate("s", prompt, 6)

    assert run(full, 2) == run(full, 2)
    assert run(full, 2) != run(full, 3)  # another seed, another model
    assert run(full, 2) != run(ShardSpec("tiny-other", 4, 0, 4, hidden_size=8, vocab_size=32), 2)


def test_tiny_engine_refuses_a_spec_it_cannot_build():
    with pytest.raises(TypeError, match="ShardSpec"):
        tiny_engine("not a spec")
    with pytest.raises(ValueError, match="divisible by 4"):
        tiny_engine(ShardSpec("odd", 2, 0, 2, hidden_size=6))
    with pytest.raises(ValueError, match="quant"):
        TinyFactory("Q5_K")


def test_the_factory_logits_are_the_full_models():
    spec = ShardSpec("tiny-logits", 3, 2, 3, hidden_size=8, vocab_size=32)
    logits = tiny_engine.logits(spec, 1, [5, 6, 7])
    assert len(logits) == 32
    token = tiny_engine(spec.with_layers(0, 3), seed=1).prefill(TokenBundle("s", 0, 0, (5, 6, 7))).token
    assert token == logits.index(max(logits))


# -- the judge -------------------------------------------------------------------------------------

class StatedLogits:
    """A factory stand-in whose reference logits are given: token 1 and 2 are within 0.01."""

    tolerance = 0.05

    @staticmethod
    def logits(spec, seed, tokens):
        return [0.0, 3.00, 2.99, 1.0]


SPEC = ShardSpec("judged", 2, 0, 2)


def test_judge_accepts_only_tokens_within_tolerance_of_the_top():
    judge = Judge(StatedLogits())
    assert judge.token_ok(SPEC, 0, [1], 1, 1)
    assert judge.token_ok(SPEC, 0, [1], 1, 2)        # margin 0.01 <= tolerance
    assert not judge.token_ok(SPEC, 0, [1], 1, 3)    # 2.0 below the top
    assert not judge.token_ok(SPEC, 0, [1], 1, 9)    # not a token
    assert not Judge(StatedLogits(), tolerance=0.001).token_ok(SPEC, 0, [1], 1, 2)
    assert not Judge(object()).token_ok(SPEC, 0, [1], 1, 2)  # no tolerance stated: exact


def test_judge_streams_continue_from_an_accepted_token():
    judge = Judge(StatedLogits())
    # The reference after any history is "the last token + 1" (mod 4).
    ref = lambda history, n: [(history[-1] + 1 + i) % 4 for i in range(n)]  # noqa: E731
    assert judge.stream_problem(SPEC, 0, [0], [1, 2, 3], ref) is None
    # Token 0 was 1 in the reference; 2 is accepted, and the rest follows 2.
    assert judge.stream_problem(SPEC, 0, [0], [2, 3, 0], ref) is None
    problem = judge.stream_problem(SPEC, 0, [0], [2, 0, 0], ref)
    assert problem is not None and "token 1 is 0" in problem


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf, True, "0.1"])
def test_judge_refuses_an_impossible_tolerance(bad):
    with pytest.raises(ValueError, match="tolerance"):
        Judge(object(), tolerance=bad)


def test_rows_match_is_exact_without_a_tolerance():
    assert Judge(object()).rows_match([(1.0, 2.0)], [(1.0, 2.0)])
    assert not Judge(object()).rows_match([(1.0, 2.0)], [(1.0, 2.0 + 1e-12)])
    assert Judge(StatedLogits()).rows_match([(1.0, 2.0)], [(1.01, 2.0)])
    assert not Judge(StatedLogits()).rows_match([(1.0, 2.0)], [(1.1, 2.0)])
    assert not Judge(StatedLogits()).rows_match([(1.0, 2.0)], [(1.0,)])


# -- the tolerance does not hide bugs ------------------------------------------------------------

class ForgetfulRope(LlamaBackend):
    """A planted bug: rotary positions restart at 0 on every call (so decode loses its place)."""

    def _rotation(self, positions):
        return super()._rotation(positions - positions[0])


def forgetful_engine(spec, *, seed=0, capacity_tokens=None, clock=None, faults=None):
    from fakeshard.real import tiny_model_path

    backend = ForgetfulRope(open_model(tiny_model_path(spec, seed)), spec.start_layer, spec.end_layer)
    return SessionEngine(backend, capacity_tokens=capacity_tokens, clock=clock, faults=faults)


# What the machines read off tiny_engine, so they run the same models (no real width: a
# 4096-wide tiny model is a 3 GB file).
for _attr in ("tolerance", "logits", "machine_hidden_size", "machine_max_positions", "machine_wide_hidden_size"):
    setattr(forgetful_engine, _attr, getattr(tiny_engine, _attr))


def test_a_real_engine_bug_is_caught_under_the_tolerance(tmp_path):
    config = MachineConfig.for_factory(forgetful_engine, "tests.test_real:forgetful_engine")
    assert config.hidden_size == 64 and config.tolerance == 1e-3
    quick = settings(profiles.get("ci"), max_examples=100,
                     phases=[Phase.explicit, Phase.reuse, Phase.generate])
    with pytest.raises(AssertionError):
        run_machine(SessionsMachine, config, settings=quick, save_dir=tmp_path)
    trace = config.failures[-1]
    assert "output" in trace.failure and len(trace.steps) <= 6


def test_open_models_are_shared_and_bounded(tmp_path, monkeypatch):
    from fakeshard.real import _model as model_module

    monkeypatch.setattr(model_module, "OPEN_MODELS_MAX", 2)
    paths = [write_tiny_gguf(tmp_path / f"m{i}.gguf", n_layers=1, hidden_size=8, vocab_size=16, seed=i)
             for i in range(3)]
    first = open_model(paths[0])
    assert open_model(paths[0]) is first
    open_model(paths[1])
    open_model(paths[0])  # now the most recent
    open_model(paths[2])  # drops paths[1], the least recent
    assert open_model(paths[0]) is first
    assert len([k for k in model_module._OPEN if k[0].startswith(str(tmp_path))]) == 2
    # A rewritten file is a new model.
    write_tiny_gguf(paths[0], n_layers=1, hidden_size=8, vocab_size=16, seed=7)
    assert open_model(paths[0]) is not first
