"""The simulated cluster's own speed: the figures the simulation issue (item 8) asked for.

64 sessions in flight over a cluster of 4 stages x 3 replicas, every network hop exactly
10 ms of virtual time, no faults, no nemesis, the kit's reference async coordinator, one
process (one core). Prints:

* completed tokens per wall second: ``next_token`` requests answered with a token;
* virtual seconds simulated per wall second;
* the simulator's cost per hop as a ratio to the fixture engine's call: the wall time of
  the simulated runs per engine call they made, over the wall time per call of the same
  token streams through a plain synchronous ``Pipeline`` of fixture engines, timed in the
  same process, one after the other (so the ratio holds on a faster or busier machine);
* with ``--profile``, where the simulated run's time goes (cProfile, the functions with the
  most time of their own).

    python3 benchmarks/cluster.py [--sessions 64] [--tokens 32] [--runs 3] [--profile]

Goals (issue 60): at least 5,000 completed tokens per wall second, and at most 2x per hop.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fakeshard import FakeShardEngine, FaultPlan, Pipeline, ShardSpec  # noqa: E402
from fakeshard._topology import stage_ranges  # noqa: E402
from fakeshard.testing import _sim  # noqa: E402
from fakeshard.testing._async_coordinator import reference_async  # noqa: E402
from fakeshard.testing._concurrent import LAYERS_PER_STAGE, Client, Round, Scenario, run_scenario  # noqa: E402
from fakeshard.testing._lengths import tokens_of  # noqa: E402

STAGES, REPLICAS, HOP = 4, 3, 0.010


def scenario(sessions: int, tokens: int, seed: int) -> Scenario:
    """``sessions`` clients, all started within the first 64 ms, one round each: a 16-token
    prompt then ``tokens`` tokens (so every session is in flight at once)."""
    clients = tuple(Client(f"s{c}", c * 0.001, (Round([(c + i) % 64 for i in range(16)], tokens),))
                    for c in range(sessions))
    return Scenario(seed, STAGES, REPLICAS, None, clients, (FaultPlan(),) * (STAGES * REPLICAS))


def plain(sc: Scenario) -> tuple[float, int]:
    """The same streams through one synchronous pipeline of the scenario's stages: wall seconds
    and engine calls."""
    spec = ShardSpec("concurrent-model", sc.stages * LAYERS_PER_STAGE, 0, sc.stages * LAYERS_PER_STAGE,
                     hidden_size=sc.hidden_size, vocab_size=64)
    pipe = Pipeline([FakeShardEngine(spec.with_layers(a, b), seed=sc.engine_seed)
                     for a, b in stage_ranges(sc.stages, LAYERS_PER_STAGE)])
    started = time.perf_counter()
    for client in sc.clients:
        for epoch, rnd in enumerate(client.rounds):
            pipe.generate(client.session_id, tokens_of(rnd.prompt), rnd.tokens, epoch=epoch)
            pipe.release(client.session_id, epoch)
    wall = time.perf_counter() - started
    # Each token is a pass over every stage; the prefill one; the release one call a stage.
    calls = sum((rnd.tokens + 1) * sc.stages for c in sc.clients for rnd in c.rounds)
    return wall, calls


def simulated(sc: Scenario) -> tuple[float, int, int, float]:
    """One simulated run: wall seconds, tokens completed, node calls, virtual seconds."""
    started = time.perf_counter()
    run = run_scenario(FakeShardEngine, sc, reference_async)
    wall = time.perf_counter() - started
    if run.failure is not None:
        raise SystemExit(f"the reference failed a fault-free scenario: {run.failure}")
    tokens = sum(1 for e in run.events if e["event"] == "complete" and e.get("op") == "next_token"
                 and e.get("token") is not None)
    compute = sum(1 for c in run.calls if c.get("op") in ("prefill", "decode"))
    return wall, tokens, compute, run.events[-1]["t"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=32, help="tokens each session asks for")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="print where a simulated run's time goes")
    args = parser.parse_args()
    _sim.HOP = (HOP, HOP)  # every hop exactly 10 ms of virtual time
    sim_wall = plain_wall = virtual = 0.0
    tokens = sim_calls = plain_calls = 0
    for k in range(args.runs):
        sc = scenario(args.sessions, args.tokens, k)
        wall, done, calls, t = simulated(sc)
        sim_wall, tokens, sim_calls, virtual = sim_wall + wall, tokens + done, sim_calls + calls, virtual + t
        wall, calls = plain(sc)
        plain_wall, plain_calls = plain_wall + wall, plain_calls + calls
    print(f"{args.runs} runs of {args.sessions} sessions in flight, {args.tokens} tokens each, "
          f"{STAGES} x {REPLICAS} nodes, {HOP * 1000:.0f} ms a hop, no faults (one process)")
    print(f"completed tokens per wall second: {tokens / sim_wall:,.0f} (goal >= 5,000)")
    print(f"virtual seconds per wall second: {virtual / sim_wall:.2f}")
    per_hop, per_call = sim_wall / sim_calls, plain_wall / plain_calls
    print(f"wall per compute call: simulated {per_hop * 1e6:.0f} us, plain pipeline {per_call * 1e6:.0f} us")
    print(f"cost per hop / fixture engine call: {per_hop / per_call:.2f}x (goal <= 2x)")
    if args.profile:
        profiler = cProfile.Profile()
        profiler.runcall(run_scenario, FakeShardEngine, scenario(args.sessions, args.tokens, 0), reference_async)
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(25)
        print(out.getvalue())


if __name__ == "__main__":
    main()
