"""Speed of the real-model engine: one FULL engine against a head -> middle -> tail pipeline.

    python3 benchmarks/real.py [--quick] [--layers N] [--hidden H] [--vocab V] [--quant Q]

Prints, for the tiny llama model (default 6 layers, hidden 64, vocabulary
256, F32 weights): the median decode-step time and the prefill throughput
(positions per second, one prefill of 128 positions) of one FULL engine and
of a 3-stage ``Pipeline`` (hidden rows handed from stage to stage in
process), and the pipeline's overhead ratio over FULL.  Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fakeshard import Pipeline  # noqa: E402
from fakeshard.real import GGUFShardEngine, write_tiny_gguf  # noqa: E402


def _stages(path: Path, n_layers: int, n_stages: int) -> list[GGUFShardEngine]:
    cuts = [round(i * n_layers / n_stages) for i in range(n_stages + 1)]
    return [GGUFShardEngine(path, a, b) for a, b in zip(cuts, cuts[1:])]


def decode_us(path: Path, n_layers: int, n_stages: int, steps: int, repeats: int) -> float:
    """Median over batches of one decode step's mean time (greedy: each token feeds the next)."""
    pipe = Pipeline(_stages(path, n_layers, n_stages))
    sample = pipe.prefill("s", 0, 0, [1, 2, 3, 4])
    pos, token = sample.pos, sample.token
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(steps):
            sample = pipe.decode("s", 0, pos, token)
            pos, token = sample.pos, sample.token
        samples.append((time.perf_counter() - t0) / steps * 1e6)
    return statistics.median(samples)


def prefill_per_s(path: Path, n_layers: int, n_stages: int, n: int, repeats: int, vocab: int) -> float:
    prompt = [i % vocab for i in range(n)]
    times = []
    for r in range(repeats):
        pipe = Pipeline(_stages(path, n_layers, n_stages))
        t0 = time.perf_counter()
        pipe.prefill(f"s{r}", 0, 0, prompt)
        times.append(time.perf_counter() - t0)
    return n / statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run)")
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--vocab", type=int, default=256)
    parser.add_argument("--quant", default="F32", choices=["F32", "F16", "Q8_0", "Q4_0"])
    args = parser.parse_args()
    steps, repeats = (20, 3) if args.quick else (100, 9)
    with tempfile.TemporaryDirectory() as tmp:
        path = write_tiny_gguf(Path(tmp) / "bench.gguf", n_layers=args.layers, hidden_size=args.hidden,
                               vocab_size=args.vocab, seed=0, quant=args.quant)
        figures = {}
        for label, stages in (("full", 1), ("pipeline", 3)):
            figures[f"decode_us_{label}"] = decode_us(path, args.layers, stages, steps, repeats)
            figures[f"prefill_per_s_{label}"] = prefill_per_s(path, args.layers, stages, 128, repeats,
                                                              args.vocab)
    figures["decode_overhead_ratio"] = figures["decode_us_pipeline"] / figures["decode_us_full"]
    figures["prefill_overhead_ratio"] = figures["prefill_per_s_full"] / figures["prefill_per_s_pipeline"]
    print(f"tiny llama: {args.layers} layers x hidden {args.hidden}, vocabulary {args.vocab}, {args.quant}; "
          f"python {platform.python_version()} on {platform.machine()}")
    print(f"  decode step, FULL engine        {figures['decode_us_full']:9.1f} us")
    print(f"  decode step, 3-stage pipeline   {figures['decode_us_pipeline']:9.1f} us")
    print(f"  prefill of 128, FULL engine     {figures['prefill_per_s_full']:9.0f} positions/s")
    print(f"  prefill of 128, 3-stage pipeline{figures['prefill_per_s_pipeline']:9.0f} positions/s")
    print(f"  pipeline overhead over FULL: decode {figures['decode_overhead_ratio']:.2f}x, "
          f"prefill {figures['prefill_overhead_ratio']:.2f}x (target <= 1.3)")
    print(json.dumps({k: round(v, 3) for k, v in figures.items()}))


if __name__ == "__main__":
    main()
