"""``tiny_engine``: a factory with :class:`~fakeshard.FakeShardEngine`'s signature over real weights.

``tiny_engine(spec, seed=...)`` writes (once, into a cache directory) the
tiny llama GGUF whose shape matches ``spec`` and whose weights come from
``(spec.model_id, seed)``, and returns a :class:`GGUFShardEngine` for
``spec``'s layer range.  So ``--engine fakeshard.real:tiny_engine`` points
the contract suite and the machines at a real engine.

The factory also carries what the suites need to judge real arithmetic:

* ``tolerance``: how far two computations of the same value may differ
  (on hidden values and logits) when the contract's "exactly" meets
  floating point (chunked prefill, replay, a different split);
* ``logits(spec, seed, tokens)``: the full model's logits after ``tokens``,
  computed in one pass, by which a differing greedy token is accepted only
  when its logit is within ``tolerance`` of the top one;
* ``machine_hidden_size``: the width the state machines should give their
  models: 64, four query heads over two K/V heads of width 16 (eight rotary
  frequencies), where the machines' default width of 4 would leave one K/V
  head of width 2;
* ``machine_max_positions`` (1,026) and ``machine_wide_hidden_size`` (``None``): the
  machines' long prompts stop at 1,026 positions (the last at position 1,025) (the tiny model's prefill attention grows
  with the square of the prompt), and no run takes a real width.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Optional, Sequence

from fakeshard._clock import Clock
from fakeshard._contract import ShardSpec
from fakeshard._faults import FaultPlan
from fakeshard.real._engine import GGUFShardEngine, LlamaBackend
from fakeshard.real._model import QUANTS, open_model, write_tiny_gguf

__all__ = ["CACHE_ENV", "TinyFactory", "cache_dir", "tiny_engine", "tiny_model_path"]

#: Where the tiny models are cached (default: ``$XDG_CACHE_HOME/fakeshard/models``).
CACHE_ENV = "FAKESHARD_MODEL_CACHE"


def cache_dir() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "fakeshard" / "models"


def _weight_seed(model_id: str, seed: int) -> int:
    """One 64-bit weight seed from the model's identity and the caller's seed."""
    text = f"fakeshard.tiny-engine.v1\x00{model_id}\x00{seed}"
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little")


_PATHS: dict[tuple[Any, ...], Path] = {}


def tiny_model_path(spec: ShardSpec, seed: int = 0, quant: str = "F32") -> Path:
    """The cached tiny GGUF for ``spec``'s model and ``seed``, written if it is not there yet."""
    key = (spec.model_id, spec.n_layers, spec.hidden_size, spec.vocab_size, seed, quant)
    path = _PATHS.get(key)
    if path is not None and path.exists():
        return path
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an int, got {seed!r}")
    digest = hashlib.sha256(json.dumps(list(key)).encode("utf-8", "surrogatepass")).hexdigest()[:20]
    path = cache_dir() / f"tiny-{spec.n_layers}x{spec.hidden_size}-v{spec.vocab_size}-{quant}-{digest}.gguf"
    if not path.exists():
        write_tiny_gguf(path, n_layers=spec.n_layers, hidden_size=spec.hidden_size,
                        vocab_size=spec.vocab_size, seed=_weight_seed(spec.model_id, seed),
                        quant=quant, name=spec.model_id)
    _PATHS[key] = path
    return path


class TinyFactory:
    """An engine factory over tiny models of one weight format (``quant``)."""

    def __init__(self, quant: str = "F32", tolerance: float = 1e-3, machine_hidden_size: int = 64) -> None:
        if quant not in QUANTS:
            raise ValueError(f"quant must be one of {', '.join(QUANTS)}, got {quant!r}")
        self.quant = quant
        self.tolerance = tolerance
        #: Its engines are SessionEngines: they make every choice the fixture makes.
        self.fixture_choices = True
        self.machine_hidden_size = machine_hidden_size
        self.machine_max_positions = 1026
        self.machine_wide_hidden_size = None

    def __call__(
        self,
        spec: ShardSpec,
        *,
        seed: int = 0,
        capacity_tokens: Optional[int] = None,
        clock: Optional[Clock] = None,
        faults: Optional[FaultPlan] = None,
    ) -> GGUFShardEngine:
        if not isinstance(spec, ShardSpec):
            raise TypeError(f"spec must be a ShardSpec, got {type(spec).__name__}")
        path = tiny_model_path(spec, seed, self.quant)
        engine = GGUFShardEngine(path, spec.start_layer, spec.end_layer,
                                 capacity_tokens=capacity_tokens, clock=clock, faults=faults)
        engine.seed = seed
        return engine

    def logits(self, spec: ShardSpec, seed: int, tokens: Sequence[int]) -> list[float]:
        """The full model's logits for the next token after ``tokens`` (one pass from position 0)."""
        model = open_model(tiny_model_path(spec, seed, self.quant))
        full = LlamaBackend(model, 0, spec.n_layers)
        _, x = full.run_layers(full.empty_cache(), 0, full.hidden_in(tokens))
        return [float(v) for v in full.logits(x[-1])]

    def __repr__(self) -> str:
        return f"TinyFactory(quant={self.quant!r}, tolerance={self.tolerance})"


#: The default real-model factory: F32 tiny models (``--engine fakeshard.real:tiny_engine``).
tiny_engine = TinyFactory("F32")
