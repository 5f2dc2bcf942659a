"""Speed and memory of the fixture engine: prints figures, asserts nothing.

    python3 benchmarks/engine.py [--quick]

Figures: median decode-step time of a FULL engine (8 layers x hidden 8, and
32 layers x hidden 64), one prefill of 512 positions, decode time at position
100,000 over decode time at position 10, and the resident memory added by
100,000 live sessions of 16 positions each (measured in a fresh subprocess).
Each step is a whole engine call: fault draw, validation, session checks,
the backend's layers, the output bundle.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time

from fakeshard import FakeShardEngine, ShardSpec, TokenBundle


def _median_decode_us(engine, sid: str, start: int, steps: int, repeats: int) -> float:
    """Median over ``repeats`` batches of the mean time of one decode step."""
    samples = []
    pos = start
    for _ in range(repeats):
        bundles = [TokenBundle(sid, 0, pos + i, (i % 200,)) for i in range(steps)]
        t0 = time.perf_counter()
        for b in bundles:
            engine.decode(b)
        samples.append((time.perf_counter() - t0) / steps * 1e6)
        pos += steps
    return statistics.median(samples)


def decode_step(n_layers: int, hidden: int, steps: int, repeats: int) -> float:
    engine = FakeShardEngine(ShardSpec("bench", n_layers, 0, n_layers, hidden_size=hidden))
    engine.prefill(TokenBundle("s", 0, 0, (1,)))
    return _median_decode_us(engine, "s", 1, steps, repeats)


def prefill_512(repeats: int) -> float:
    spec = ShardSpec("bench", 8, 0, 8)
    times = []
    for r in range(repeats):
        engine = FakeShardEngine(spec)
        bundle = TokenBundle(f"p{r}", 0, 0, tuple(i % 256 for i in range(512)))
        t0 = time.perf_counter()
        engine.prefill(bundle)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def position_ratio(steps: int, repeats: int) -> tuple[float, float]:
    spec = ShardSpec("bench", 8, 0, 8)
    early = FakeShardEngine(spec)
    early.prefill(TokenBundle("s", 0, 0, tuple(range(10))))
    late = FakeShardEngine(spec)
    late.prefill(TokenBundle("s", 0, 0, tuple(i % 256 for i in range(100_000))))
    # Interleave batches so machine noise hits both alike.
    at_10, at_100k = [], []
    for r in range(repeats):
        at_10.append(_median_decode_us(early, "s", 10 + r * steps, steps, 1))
        at_100k.append(_median_decode_us(late, "s", 100_000 + r * steps, steps, 1))
    return statistics.median(at_10), statistics.median(at_100k)


_RSS_CHILD = """
from fakeshard import FakeShardEngine, ShardSpec, TokenBundle
def rss():
    with open('/proc/self/status') as f:
        for line in f:
            if line.startswith('VmRSS:'):
                return int(line.split()[1]) * 1024
engine = FakeShardEngine(ShardSpec('bench', 8, 0, 8))
before = rss()
prompt = tuple(range(16))
for i in range(100_000):
    engine.prefill(TokenBundle(f'session-{i}', 0, 0, prompt))
after = rss()
assert engine.used_tokens == 1_600_000
print(after - before, after)
"""


def sessions_rss() -> tuple[float, float]:
    out = subprocess.run([sys.executable, "-c", _RSS_CHILD], capture_output=True, text=True, check=True)
    added, total = (int(x) for x in out.stdout.split())
    return added / 1e6, total / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    args = parser.parse_args()
    steps, repeats = (200, 5) if args.quick else (2000, 15)
    figures = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "decode_us_8x8": decode_step(8, 8, steps, repeats),
        "decode_us_32x64": decode_step(32, 64, steps, repeats),
        "prefill_512_ms": prefill_512(repeats),
    }
    early, late = position_ratio(steps, repeats)
    figures.update(decode_us_pos10=early, decode_us_pos100k=late, position_ratio=late / early)
    added, total = sessions_rss()
    figures.update(rss_mb_100k_sessions=added, rss_mb_total=total)
    if args.json:
        print(json.dumps(figures, indent=1))
        return
    print(f"python {figures['python']} on {figures['machine']}")
    print(f"decode step, FULL 8 layers x hidden 8:    {figures['decode_us_8x8']:8.2f} us  (target <= 5)")
    print(f"decode step, FULL 32 layers x hidden 64:  {figures['decode_us_32x64']:8.2f} us  (target <= 20)")
    print(f"prefill of 512 positions, 8 layers:       {figures['prefill_512_ms']:8.2f} ms")
    print(f"decode at position 10:                    {early:8.2f} us")
    print(f"decode at position 100,000:               {late:8.2f} us")
    print(f"position ratio (100,000 / 10):            {figures['position_ratio']:8.3f}     (target <= 1.2)")
    print(f"RSS added by 100,000 sessions x 16 pos:   {added:8.1f} MB  (target <= 200; process total {total:.1f} MB)")


if __name__ == "__main__":
    main()
