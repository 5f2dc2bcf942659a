"""What the concurrent machine's simulation costs over the computation it drives.

For scenarios of many sessions in flight (64 clients by default, over a 4 x 4
cluster, no faults, no nemesis), prints the wall time of a whole simulated run
with the kit's reference async coordinator, and, as the baseline in the same
process, the wall time of the same token streams computed with no simulation:
each client's rounds through a plain synchronous ``Pipeline`` of the same four
stages, one call after another.  The last line is ``ratio: <simulated / plain>``:
the price of the event loop, the network hops, the node logs and the checks per
unit of engine work.  Also printed: requests completed per wall second and
virtual seconds simulated per wall second.

    python3 benchmarks/simulation.py [--clients N] [--scenarios N]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fakeshard import FakeShardEngine, FaultPlan, Pipeline, ShardSpec  # noqa: E402
from fakeshard._topology import stage_ranges  # noqa: E402
from fakeshard.testing._async_coordinator import reference_async  # noqa: E402
from fakeshard.testing._concurrent import LAYERS_PER_STAGE, Client, Round, Scenario, run_scenario  # noqa: E402
from fakeshard.testing._lengths import tokens_of  # noqa: E402


def scenario(clients: int, seed: int) -> Scenario:
    """``clients`` clients of three rounds each (a 6-token prompt, 6 tokens; one round in three
    a 512-token prompt), over 4 x 4 nodes with no faults."""
    made = []
    for c in range(clients):
        rounds = tuple(Round({"count": 512, "seed": seed + c} if r == 1 else [c % 64, 1, 2, 3, 4, 5], 6, pause=0.01)
                       for r in range(3))
        made.append(Client(f"s{c}", c * 0.001, rounds))
    return Scenario(seed, 4, 4, None, tuple(made), (FaultPlan(),) * 16)


def plain(sc: Scenario) -> int:
    """The same streams through one synchronous pipeline of the scenario's stages; calls made."""
    spec = ShardSpec("concurrent-model", sc.stages * LAYERS_PER_STAGE, 0, sc.stages * LAYERS_PER_STAGE,
                     hidden_size=sc.hidden_size, vocab_size=64)
    pipe = Pipeline([FakeShardEngine(spec.with_layers(a, b), seed=sc.seed % 3)
                     for a, b in stage_ranges(sc.stages, LAYERS_PER_STAGE)])
    calls = 0
    for client in sc.clients:
        for epoch, rnd in enumerate(client.rounds):
            pipe.generate(client.session_id, tokens_of(rnd.prompt), rnd.tokens, epoch=epoch)
            pipe.release(client.session_id, epoch)
            calls += rnd.tokens + 1
    return calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--scenarios", type=int, default=3)
    args = parser.parse_args()
    sim_wall = plain_wall = 0.0
    requests = 0
    virtual = 0.0
    for k in range(args.scenarios):
        sc = scenario(args.clients, k)
        started = time.perf_counter()
        run = run_scenario(FakeShardEngine, sc, reference_async)
        sim_wall += time.perf_counter() - started
        if run.failure is not None:
            raise SystemExit(f"the reference failed a fault-free scenario: {run.failure}")
        requests += sum(1 for e in run.events if e["event"] == "complete")
        virtual += run.events[-1]["t"]
        started = time.perf_counter()
        plain(sc)
        plain_wall += time.perf_counter() - started
    print(f"{args.scenarios} scenarios of {args.clients} clients (4 x 4 nodes, no faults)")
    print(f"simulated: {sim_wall:.2f} s wall, {requests / sim_wall:,.0f} requests/s, "
          f"{virtual / sim_wall:.1f} virtual s per wall s")
    print(f"plain pipeline, same streams: {plain_wall:.2f} s wall")
    print(f"ratio: {sim_wall / plain_wall:.2f}")


if __name__ == "__main__":
    main()
