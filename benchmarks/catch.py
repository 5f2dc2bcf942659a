"""How long the ci campaign takes to catch each planted bug.

For every planted bug (``planted/engines.py``: the session, fault and failover
machines), every planted racy engine (``planted/racy.py``: the parallel
machine) and every planted coordinator (``planted/coordinators.py``: the
coordinator machine, over fixture engines), runs its machine under the ``ci`` settings without shrinking and
prints the time to the first failure, then the median and the slowest, and
the same figures for the fixture running the same campaign to the end (the
baseline: what a full campaign costs on this machine, in this process).

    python3 benchmarks/catch.py            # every bug
    python3 benchmarks/catch.py leaky      # bugs whose name (or rule) contains "leaky"
    FAKESHARD_PLANTED_SEED=7 python3 benchmarks/catch.py lengths   # bugs at lengths, other positions
    python3 benchmarks/catch.py --json evidence/DGR-032/catch.json   # and keep the figures

The JSON file (``--json``) holds the command, the environment and each bug's figures; the
evidence page (``python3 -m tools.evidence``) plots it.

Goal (issue 9): every planted bug within 60 s on 2 cores, median <= 10 s.
"""

from __future__ import annotations

import json
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fakeshard import FakeShardEngine  # noqa: E402
from fakeshard.testing import _profiles as profiles  # noqa: E402,F401  (the kit's ci profile)
from fakeshard.testing._coordinator_machine import CoordinatorMachine  # noqa: E402
from fakeshard.testing._coordinator_machine import reference as reference_coordinator  # noqa: E402
from fakeshard.testing._machines import MachineConfig  # noqa: E402
from fakeshard.testing._parallel import NotLinearizable, run_parallel  # noqa: E402
from fakeshard.testing._regress import run_machine  # noqa: E402
from planted import racy  # noqa: E402
from planted.coordinators import PLANTED  # noqa: E402
from planted.engines import BUGS, LENGTH_POSITIONS, PLANTED_SEED  # noqa: E402

REFERENCE = "fakeshard.testing:reference"
# The same machines and settings as the test that asserts each bug is caught.
from planted import CI_NO_SHRINK, MACHINES  # noqa: E402


def time_machine(machine: str, factory: object, name: str) -> tuple[float, bool, int]:
    """Seconds until the machine fails (or finishes), whether it failed, and its runs.

    For the coordinator machine, ``factory`` is the coordinator factory (over fixture engines).
    """
    if machine == "coordinator":
        config = MachineConfig(FakeShardEngine, "fakeshard:FakeShardEngine", coordinator=factory,  # type: ignore[arg-type]
                               coordinator_name=name)
    else:
        config = MachineConfig(factory, name)  # type: ignore[arg-type]
    started = time.perf_counter()
    try:
        if machine == "coordinator":
            run_machine(CoordinatorMachine, config, settings=CI_NO_SHRINK, save_dir=None)
        elif machine == "parallel":
            run_parallel(config, settings=CI_NO_SHRINK)
        else:
            run_machine(MACHINES[machine], config, settings=CI_NO_SHRINK, save_dir=None)
        caught = False
    except (AssertionError, NotLinearizable):
        caught = True
    return time.perf_counter() - started, caught, config.runs


def main(pattern: str = "", json_out: str = "") -> None:
    cases = [(b.name, b.machine, b.factory) for b in BUGS]
    cases += [(name, "parallel", getattr(racy, name)) for name in racy.RACY]
    # A coordinator's trace names its factory in full: replay and reduction import it by name.
    cases += [(f"planted.coordinators:{p.name}", "coordinator", p.factory()) for p in PLANTED]
    cases = [c for c in cases if pattern in c[0]] + [(b.name, b.machine, b.factory) for b in BUGS
                                                      if pattern and pattern in b.rule and pattern not in b.name]
    print(f"length-class bugs at positions drawn from seed {PLANTED_SEED}: {LENGTH_POSITIONS}")
    print(f"time to the first failure under ci (no Hypothesis shrinking; the parallel machine's own "
          f"reduction included), {len(cases)} planted bugs")
    print(f"{'bug':<30} {'machine':<11} {'runs':>5} {'seconds':>8}  result")
    times = []
    kept = []
    for name, machine, factory in cases:
        seconds, caught, runs = time_machine(machine, factory, name)
        times.append(seconds)
        kept.append({"bug": name.rpartition(":")[2], "machine": machine, "runs": runs,
                     "seconds": round(seconds, 3), "caught": caught})
        verdict = "caught" if caught else "MISSED"
        print(f"{name.rpartition(':')[2]:<30} {machine:<11} {runs:>5} {seconds:>8.2f}  {verdict}")
    if times:
        print(f"median {statistics.median(times):.2f} s, slowest {max(times):.2f} s "
              f"(goal: median <= 10 s, every one <= 60 s)")
    print("baseline, the fixture through each whole ci campaign (nothing to catch):")
    for machine in ("sessions", "faults", "failover", "parallel", "coordinator"):
        reference = machine == "coordinator"
        seconds, caught, runs = time_machine(machine, reference_coordinator if reference else FakeShardEngine,
                                             REFERENCE if reference else "fakeshard:FakeShardEngine")
        print(f"  {machine:<11} {runs:>5} runs {seconds:>8.2f} s{'  FAILED' if caught else ''}")
    if json_out:
        Path(json_out).write_text(json.dumps({
            "command": "python3 benchmarks/catch.py" + (f" {pattern}" if pattern else "") + f" --json {json_out}",
            "python": platform.python_version(), "machine": platform.machine(),
            "what": "seconds to the first failure under ci (no Hypothesis shrinking), per planted bug",
            "planted_seed": PLANTED_SEED, "length_positions": LENGTH_POSITIONS,
            "bugs": kept}, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {json_out}")


if __name__ == "__main__":
    args = sys.argv[1:]
    out = ""
    if "--json" in args:
        at = args.index("--json")
        out = args[at + 1]
        del args[at:at + 2]
    main(args[0] if args else "", out)
