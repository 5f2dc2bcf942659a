"""How long a failure found takes to be reported, with Hypothesis's shrinker and without it.

For each planted coordinator (``planted/coordinators.py``) and planted engine bug
(``planted/engines.py``) whose name contains the pattern, runs its machine under the ``ci``
profile twice, each time to the saved, reduced trace (the kit's own step-removal reduction
runs in both): once as ``fakeshard check`` runs it, and once without Hypothesis's shrink
phase. Prints the seconds to the report and the reduced trace's steps of each, and their
ratio (the baseline is the first, run in the same process).

    python3 benchmarks/report.py                  # every planted coordinator and engine bug
    python3 benchmarks/report.py planted.coordinators   # the coordinators only
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hypothesis import Phase, settings  # noqa: E402

from fakeshard import FakeShardEngine  # noqa: E402
from fakeshard.testing import _profiles as profiles  # noqa: E402
from fakeshard.testing._coordinator_machine import CoordinatorMachine  # noqa: E402
from fakeshard.testing._machines import MachineConfig  # noqa: E402
from fakeshard.testing._regress import run_machine  # noqa: E402
from fakeshard.testing._trace import Trace  # noqa: E402
from planted import MACHINES  # noqa: E402
from planted.coordinators import PLANTED  # noqa: E402
from planted.engines import BUGS  # noqa: E402


def report(machine: str, factory: object, name: str, phases: list[Phase]) -> tuple[float, int]:
    """Seconds from the campaign's start to its saved reduced trace, and the trace's steps."""
    if machine == "coordinator":
        config = MachineConfig(FakeShardEngine, "fakeshard:FakeShardEngine", coordinator=factory,  # type: ignore[arg-type]
                               coordinator_name=name)
        cls = CoordinatorMachine
    else:
        config = MachineConfig(factory, name)  # type: ignore[arg-type]
        cls = MACHINES[machine]
    with tempfile.TemporaryDirectory() as folder:
        started = time.perf_counter()
        try:
            run_machine(cls, config, settings=settings(profiles.get("ci"), phases=phases), save_dir=Path(folder))
        except AssertionError:
            pass
        seconds = time.perf_counter() - started
        steps = len(Trace.load(config.saved[-1]).steps) if config.saved else -1
    return seconds, steps


def main(pattern: str = "") -> None:
    cases = [(f"planted.coordinators:{p.name}", "coordinator", p.factory()) for p in PLANTED]
    cases += [(f"planted.factories:{b.name}", b.machine, b.factory) for b in BUGS]
    cases = [c for c in cases if pattern in c[0]]
    every = list(Phase)
    without = [p for p in every if p is not Phase.shrink]
    print(f"seconds from a campaign's start to its reduced trace, {len(cases)} planted bugs, under ci")
    print(f"{'bug':<34} {'shrink s':>9} {'steps':>5} {'no-shrink s':>11} {'steps':>5} {'ratio':>6}")
    ratios, slowest = [], 0.0
    for name, machine, factory in cases:
        with_s, with_steps = report(machine, factory, name, every)
        without_s, without_steps = report(machine, factory, name, without)
        ratios.append(without_s / with_s)
        slowest = max(slowest, without_s)
        print(f"{name.rpartition(':')[2]:<34} {with_s:>9.1f} {with_steps:>5} {without_s:>11.1f} "
              f"{without_steps:>5} {without_s / with_s:>6.2f}")
    if ratios:
        print(f"median ratio (without / with the shrinker) {statistics.median(ratios):.2f}; "
              f"slowest report without it {slowest:.1f} s")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "")
