"""The data plane at real widths: prints figures as ratios against a baseline run here; asserts nothing.

    python3 benchmarks/wire.py [--rows 512] [--width 4096] [--repeats 15]

One head engine's output at hidden 4096 over a 512-position prefill (8 MiB
of float32) is encoded and decoded in every form the wire offers; each
figure is the median of ``--repeats`` runs, and each ratio divides by the
baseline measured in the same process: a bare numpy ``tobytes()`` +
``frombuffer()`` copy of the same array.

* binary frame: ``wire.dumpb`` + ``wire.loadb`` (which validates: shape,
  finiteness, checksum), over the baseline (goal <= 3);
* frame size and base64-JSON size over the raw bytes (goals <= 1.05, <= 1.4);
* the fixture head's prefill of those 512 positions (goal <= 50 ms);
* for comparison, the readable JSON-float form (``dumps`` + ``loads``).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time

import numpy as np

from fakeshard import FakeShardEngine, ShardSpec, TokenBundle, validate, wire


def _median_ms(fn, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples)


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=512)
    parser.add_argument("--width", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args(argv)
    spec = ShardSpec("bench-wire", 8, 0, 4, hidden_size=args.width, vocab_size=32000)
    prompt = TokenBundle("s", 0, 0, tuple((i * 7919) % 32000 for i in range(args.rows)))

    def prefill():
        return FakeShardEngine(spec).prefill(prompt)

    bundle = prefill()
    array = bundle.hidden
    raw = array.nbytes
    frame = wire.dumpb(bundle)
    text64 = wire.dumps(bundle, hidden="base64")
    assert wire.loadb(frame) == bundle and wire.loads(text64) == bundle  # a benchmark of working code

    baseline = _median_ms(lambda: np.frombuffer(array.tobytes(), dtype=array.dtype), args.repeats)
    frame_ms = _median_ms(lambda: wire.loadb(wire.dumpb(bundle)), args.repeats)
    b64_ms = _median_ms(lambda: wire.loads(wire.dumps(bundle, hidden="base64")), args.repeats)
    validate_ms = _median_ms(lambda: validate(wire.loadb(frame), spec.with_layers(4, 8)), args.repeats)
    prefill_ms = _median_ms(prefill, args.repeats)
    slow = max(1, args.repeats // 5)
    floats_ms = _median_ms(lambda: wire.loads(wire.dumps(bundle)), slow)

    figures = {
        "raw_bytes": raw,
        "baseline_copy_ms": round(baseline, 3),
        "frame_roundtrip_ms": round(frame_ms, 3),
        "frame_roundtrip_ratio": round(frame_ms / baseline, 2),
        "decode_and_validate_ms": round(validate_ms, 3),
        "frame_size_ratio": round(len(frame) / raw, 4),
        "base64_json_size_ratio": round(len(text64) / raw, 4),
        "base64_json_roundtrip_ms": round(b64_ms, 1),
        "floats_json_roundtrip_ms": round(floats_ms, 1),
        "floats_json_size_ratio": round(len(wire.dumps(bundle)) / raw, 2),
        "fixture_head_prefill_ms": round(prefill_ms, 2),
    }
    print(f"hidden {args.width} x {args.rows} positions ({raw / 2**20:.1f} MiB float32); "
          f"python {platform.python_version()} on {platform.machine()}, numpy {np.__version__}")
    print(f"  baseline tobytes()+frombuffer()     {baseline:9.3f} ms")
    print(f"  frame dumpb+loadb (validated)      {frame_ms:9.3f} ms   {frame_ms / baseline:5.2f}x baseline (goal <= 3)")
    print(f"  frame size / raw bytes             {len(frame) / raw:9.4f}      (goal <= 1.05)")
    print(f"  base64 JSON size / raw bytes       {len(text64) / raw:9.4f}      (goal <= 1.4)")
    print(f"  base64 JSON dumps+loads            {b64_ms:9.1f} ms")
    print(f"  readable JSON floats dumps+loads   {floats_ms:9.1f} ms   (size {len(wire.dumps(bundle)) / raw:.2f}x raw)")
    print(f"  fixture head prefill               {prefill_ms:9.2f} ms   (goal <= 50)")
    print(json.dumps(figures))
    return figures


if __name__ == "__main__":
    main(sys.argv[1:])
