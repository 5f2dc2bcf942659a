"""How fast the linearizability checker decides a history.

Histories come from running generated programs on the fixture (every one
linearizable) and on a planted racy engine (some not: those search the most).
Prints histories checked per second at 3 branches x 10 calls (goal: each in
under 50 ms), the split-by-session search against the whole search (the
baseline, same histories, same process), how many programs the ci campaign
runs before it catches each planted racy engine, and the longest history
(3 branches x N calls) checked within 1 s.

    python3 benchmarks/linearizability.py
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fakeshard import FakeShardEngine  # noqa: E402
from fakeshard.testing._linearizability import check, check_whole  # noqa: E402
from fakeshard.testing._parallel import SESSIONS, Program, Tokens, run_program, spec_for  # noqa: E402
from planted import racy  # noqa: E402


def random_call(rng: random.Random, global_ops: bool) -> tuple:
    sid, epoch = rng.choice(SESSIONS), rng.randrange(3)
    kinds = ["prefill", "decode", "close", "view"] + (["used", "crash", "restart"] if global_ops else [])
    kind = rng.choice(kinds)
    if kind == "prefill":
        return ("prefill", sid, epoch, rng.choice([0, 0, 0, 1, 2, 3]), rng.randint(1, 3))
    if kind == "decode":
        return ("decode", sid, epoch, rng.randint(1, 5))
    if kind == "close":
        return (rng.choice(["cancel", "release"]), sid, epoch)
    if kind == "view":
        return ("view", sid)
    return (kind,)


def program(rng: random.Random, calls: int, global_ops: bool, capacity: object = None) -> Program:
    opening = tuple(("prefill", s, 0, 0, 2) for s in SESSIONS)
    return Program(opening, tuple(tuple(random_call(rng, global_ops) for _ in range(calls)) for _ in range(3)),
                   capacity)  # type: ignore[arg-type]


def histories(factory: object, n: int, calls: int, global_ops: bool, seed: int = 0) -> list[tuple]:
    rng = random.Random(seed)
    spec = spec_for()
    out = []
    for _ in range(n):
        p = program(rng, calls, global_ops, rng.choice([None, 6]) if global_ops else None)
        out.append((run_program(factory, spec, p), p.capacity))  # type: ignore[arg-type]
    return out


def timed(check_fn: object, cases: list[tuple], tokens: Tokens) -> tuple[list[float], int]:
    times, bad = [], 0
    for history, capacity in cases:
        t = time.perf_counter()
        verdict = check_fn(history, capacity, tokens)  # type: ignore[operator]
        times.append(time.perf_counter() - t)
        bad += not verdict.linearizable
    return times, bad


def main() -> None:
    spec = spec_for()
    tokens = Tokens(FakeShardEngine, spec)
    warm(tokens)  # the token oracle's answers, so the figures time the search alone
    print("linearizability checker (3 branches x 10 calls, after a 2-call prefix)")
    rows = []
    sources: list[tuple[str, object, bool, int]] = [
        ("fixture, sessions only", FakeShardEngine, False, 200),
        ("fixture, with used/crash/restart/capacity", FakeShardEngine, True, 200),
        ("racy engine (torn_view)", racy.torn_view, True, 200)]
    try:  # served nodes: three clients on three connections, so calls really overlap
        from fakeshard.remote import served_engine
        sources.append(("served node (extra 'serve')", served_engine, True, 50))
    except ImportError:
        print("(served nodes skipped: pip install -e '.[serve]')")
    for label, factory, global_ops, count in sources:
        cases = histories(factory, count, 10, global_ops)
        for name, fn in (("split by session", check), ("whole (baseline)", check_whole)):
            times, bad = timed(fn, cases, tokens)
            rows.append((label, name, len(cases), bad, len(cases) / sum(times),
                         1e3 * statistics.median(times), 1e3 * max(times)))
    print(f"{'histories':<44} {'search':<18} {'n':>4} {'not lin.':>8} {'per s':>9} {'median ms':>10} "
          f"{'max ms':>8}")
    for r in rows:
        print(f"{r[0]:<44} {r[1]:<18} {r[2]:>4} {r[3]:>8} {r[4]:>9.0f} {r[5]:>10.3f} {r[6]:>8.2f}")
    by = {(r[0], r[1]): r for r in rows}
    for label in dict.fromkeys(r[0] for r in rows):
        whole, split = by[(label, "whole (baseline)")], by[(label, "split by session")]
        print(f"  {label}: split/whole time {sum_ratio(split, whole):.2f}x")
    print("programs until each planted racy engine is caught (ci sizes: 250 programs x 4 runs), 3 trials:")

    from fakeshard.testing import _profiles as profiles
    from fakeshard.testing._machines import MachineConfig
    from fakeshard.testing._parallel import NotLinearizable, run_parallel

    for name in racy.RACY:
        found = []
        started = time.perf_counter()
        for _ in range(3):
            config = MachineConfig(getattr(racy, name), name)
            try:
                run_parallel(config, settings=profiles.get("ci"))
                found.append("missed")
            except NotLinearizable:
                found.append(str(config.runs))
        print(f"  {name:<28} programs: {', '.join(found):<16} "
              f"{(time.perf_counter() - started) / 3:6.2f} s per trial (search and shrink)")
    print("longest history checked within 1 s (3 branches x N calls, fixture, every call kind):")
    calls = 10
    while calls <= 640:
        cases = histories(FakeShardEngine, 5, calls, True, seed=calls)
        worst = max(timed(check, cases, tokens)[0])
        print(f"  3 x {calls:<4} calls: worst of 5 histories {worst * 1e3:9.1f} ms")
        if worst > 1.0:
            break
        calls *= 2


def warm(tokens: Tokens) -> None:
    for sid in SESSIONS:
        for length in range(1, 64):
            tokens(sid, length)


def sum_ratio(a: tuple, b: tuple) -> float:
    return (a[2] / a[4]) / (b[2] / b[4])


if __name__ == "__main__":
    main()
