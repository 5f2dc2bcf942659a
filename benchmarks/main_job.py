"""How long the README's main job takes: ``python3 -m fakeshard check --workers 2``.

    python3 benchmarks/main_job.py                 # the main job as the README gives it
    python3 benchmarks/main_job.py --json FILE     # and keep the figures
    python3 benchmarks/main_job.py -- --machines sessions   # other check arguments after --

Runs the command in a child process from the checkout's root (its output goes to a temporary
folder: ``--out`` and ``--traces`` are set there) and prints its wall time and the CPU time
of its processes.  A wall time alone says as much about the machine as about the job, so the
same process also times a baseline before and after the job: a fixed pure-Python workload
(the fixture's hash chain, :class:`fakeshard._backend` forward over 2**18 positions, which is
what the campaign spends most of its engine time on).  The job's time in baselines reads the
same on a faster or a busier machine; a load that changes during the run shows as the two
baselines disagreeing, and the figure is then not worth keeping.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fakeshard import FakeShardEngine, ShardSpec, TokenBundle  # noqa: E402


def baseline() -> float:
    """Seconds for a fixed workload: one prefill of 2**18 positions on a fixture head engine."""
    engine = FakeShardEngine(ShardSpec("baseline", 4, 0, 2, hidden_size=4, vocab_size=64))
    tokens = tuple(i % 64 for i in range(2**18))
    started = time.perf_counter()
    engine.prefill(TokenBundle("s", 0, 0, tokens))
    return time.perf_counter() - started


def main(argv: list[str]) -> int:
    json_out = ""
    if "--json" in argv:
        at = argv.index("--json")
        json_out = argv[at + 1]
        del argv[at:at + 2]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    before = baseline()
    with tempfile.TemporaryDirectory() as tmp:
        command = [sys.executable, "-m", "fakeshard", "check", "--workers", "2", *extra,
                   "--out", str(Path(tmp, "out")), "--traces", str(Path(tmp, "traces"))]
        started = time.perf_counter()
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                              env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
        wall = time.perf_counter() - started
    after = baseline()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = children.ru_utime + children.ru_stime
    unit = (before + after) / 2
    shown = "python3 -m fakeshard check --workers 2" + "".join(f" {a}" for a in extra)
    print(f"{shown}: exit {done.returncode}, wall {wall:.0f} s, CPU {cpu:.0f} s over {os.cpu_count()} cores")
    print(f"baseline (a prefill of 2**18 positions on the fixture): {before:.2f} s before, {after:.2f} s after")
    print(f"ratio: the main job takes {wall / unit:.0f} baselines")
    if abs(before - after) > 0.25 * unit:
        print("warning: the baselines differ by more than a quarter: the machine's load changed during the run")
    if done.returncode != 0:
        print(done.stdout[-2000:], done.stderr[-2000:], sep="\n")
    if json_out:
        Path(json_out).write_text(json.dumps({
            "command": f"python3 benchmarks/main_job.py --json {json_out}"
                       + (" -- " + " ".join(extra) if extra else ""),
            "measured": shown, "exit": done.returncode, "wall_seconds": round(wall, 1),
            "cpu_seconds": round(cpu, 1), "cores": os.cpu_count(),
            "baseline_seconds": [round(before, 3), round(after, 3)],
            "python": platform.python_version(), "machine": platform.machine()}, indent=1) + "\n", encoding="utf-8")
    return done.returncode


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
