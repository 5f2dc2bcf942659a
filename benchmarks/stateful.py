"""Steps per second of the Sessions machine against a trivial 5-rule dict machine.

    python3 benchmarks/stateful.py [--examples N] [--steps N]

Both run in this process under identical Hypothesis settings (derandomized,
no database); the last line is ``ratio: <ours / trivial>``.  The ratio says
whether the engine and the reference model, rather than Hypothesis itself,
are what limits the search (target >= 0.5).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hypothesis import HealthCheck, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.stateful import RuleBasedStateMachine, rule, run_state_machine_as_test  # noqa: E402

from fakeshard import FakeShardEngine  # noqa: E402
from fakeshard.testing._machines import MachineConfig, SessionsMachine  # noqa: E402

STEPS = {"count": 0}


class TrivialMachine(RuleBasedStateMachine):
    """Five rules over a dict, checked against a second dict: Hypothesis's own cost."""

    def __init__(self) -> None:
        super().__init__()
        self.real: dict[str, int] = {}
        self.model: dict[str, int] = {}

    def _step(self) -> None:
        STEPS["count"] += 1
        assert self.real == self.model

    @rule(key=st.sampled_from("abc"), value=st.integers(0, 63))
    def put(self, key: str, value: int) -> None:
        self.real[key] = value
        self.model[key] = value
        self._step()

    @rule(key=st.sampled_from("abc"))
    def delete(self, key: str) -> None:
        self.real.pop(key, None)
        self.model.pop(key, None)
        self._step()

    @rule(key=st.sampled_from("abc"), delta=st.integers(1, 4))
    def bump(self, key: str, delta: int) -> None:
        self.real[key] = self.real.get(key, 0) + delta
        self.model[key] = self.model.get(key, 0) + delta
        self._step()

    @rule(key=st.sampled_from("abc"))
    def get(self, key: str) -> None:
        assert self.real.get(key) == self.model.get(key)
        self._step()

    @rule()
    def clear(self) -> None:
        self.real.clear()
        self.model.clear()
        self._step()


def measure(factory, examples: int, steps: int) -> tuple[float, int]:
    chosen = settings(max_examples=examples, stateful_step_count=steps, deadline=None, derandomize=True,
                      database=None, suppress_health_check=list(HealthCheck))
    start = time.perf_counter()
    counter = factory(chosen)
    return time.perf_counter() - start, counter()


def run_ours(chosen: settings):
    config = MachineConfig(FakeShardEngine, "fakeshard:FakeShardEngine")
    run_state_machine_as_test(lambda: SessionsMachine(config), settings=chosen)
    return lambda: config.steps


def run_trivial(chosen: settings):
    STEPS["count"] = 0
    run_state_machine_as_test(TrivialMachine, settings=chosen)
    return lambda: STEPS["count"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=300)
    parser.add_argument("--steps", type=int, default=50)
    args = parser.parse_args()
    ours_s, ours_n = measure(run_ours, args.examples, args.steps)
    triv_s, triv_n = measure(run_trivial, args.examples, args.steps)
    ours, triv = ours_n / ours_s, triv_n / triv_s
    print(f"settings: max_examples={args.examples}, stateful_step_count={args.steps}, derandomized")
    print(f"sessions machine: {ours_n} steps in {ours_s:.2f} s = {ours:,.0f} steps/s")
    print(f"trivial machine:  {triv_n} steps in {triv_s:.2f} s = {triv:,.0f} steps/s")
    print(f"ratio: {ours / triv:.3f}")


if __name__ == "__main__":
    main()
