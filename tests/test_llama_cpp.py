"""Opt-in: our engine, run as head -> middle -> tail, against llama.cpp on the same GGUF files.

Skipped unless ``llama-cpp-python`` is installed (it compiles llama.cpp, a few
minutes on two cores)::

    python3 -m pip install -e '.[real,test,llama_cpp]' && python3 -m pytest -m llama_cpp tests/test_llama_cpp.py

llama.cpp runs with an F32 K/V cache (its default is F16, which alone moves
F32 logits by about 6e-3) so that what is compared is the model's
arithmetic.  With F16 weights llama.cpp multiplies in F16, and with Q8_0 and
Q4_0 weights it quantizes the activations to 8 bits before each product: the
tolerances below are per weight format, measured here and rounded up.
Greedy tokens must agree wherever our top-2 margin exceeds twice the
tolerance (where both argmaxes are then the same token by arithmetic alone).
"""

from __future__ import annotations

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("gguf")
llama_cpp = pytest.importorskip("llama_cpp")

from fakeshard import HiddenBundle, TokenBundle, wire  # noqa: E402
from fakeshard.real import GGUFShardEngine, LlamaBackend, open_model, write_tiny_gguf  # noqa: E402

pytestmark = pytest.mark.llama_cpp

#: Largest |our logit - llama.cpp's logit| allowed, by weight format (measured: see module doc).
TOLERANCE = {"F32": 1e-4, "F16": 0.03, "Q8_0": 0.3, "Q4_0": 0.3}
PROMPTS = ([1, 5, 9, 200, 17], [3] * 12, list(range(40, 70)), [255, 0, 128, 64, 32, 16, 8, 4, 2, 1])
GGML_TYPE_F32 = 0


@pytest.fixture(scope="module", params=sorted(TOLERANCE))
def model(request, tmp_path_factory):
    quant = request.param
    path = write_tiny_gguf(tmp_path_factory.mktemp("llama") / f"tiny-{quant}.gguf", n_layers=6,
                           hidden_size=64, vocab_size=256, seed=3, quant=quant)
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=128, logits_all=True, verbose=False,
                          n_threads=2, seed=0, type_k=GGML_TYPE_F32, type_v=GGML_TYPE_F32)
    yield quant, path, llm
    llm.close()


def ours_as_three_stages(path, prompt):
    """Every position's logits: head and middle engines pass hidden rows over the wire to the tail's layers."""
    head, middle = GGUFShardEngine(path, 0, 2), GGUFShardEngine(path, 2, 4)
    tail = GGUFShardEngine(path, 4, 6)
    rows = wire.loads(wire.dumps(head.prefill(TokenBundle("s", 0, 0, tuple(prompt)))))
    rows = wire.loads(wire.dumps(middle.prefill(rows)))
    token = tail.prefill(rows).token
    # The tail engine samples only the last position; its layers give every position's logits.
    layers = LlamaBackend(open_model(path), 4, 6)
    _, x = layers.run_layers(layers.empty_cache(), 0, layers.hidden_in(rows.hidden))
    logits = np.stack([layers.logits(r) for r in x])
    assert isinstance(rows, HiddenBundle) and token == int(np.argmax(logits[-1]))
    return logits


@pytest.mark.parametrize("prompt", PROMPTS, ids=lambda p: f"{len(p)}-tokens")
def test_logits_agree_with_llama_cpp(model, prompt):
    quant, path, llm = model
    llm.reset()
    llm.eval(prompt)
    theirs = np.array(llm.scores[:len(prompt)], dtype=np.float64)
    ours = ours_as_three_stages(path, prompt)
    worst = float(np.abs(ours - theirs).max())
    print(f"\n{quant} {len(prompt)} tokens: max |ours - llama.cpp| = {worst:.3g} "
          f"(logits up to {np.abs(theirs).max():.2f})")
    assert worst <= TOLERANCE[quant]
    top2 = np.sort(ours, axis=1)[:, -2:]
    decisive = (top2[:, 1] - top2[:, 0]) > 2 * TOLERANCE[quant]
    assert (ours.argmax(1) == theirs.argmax(1))[decisive].all()
    assert decisive.any()  # the comparison of tokens is not empty
