"""The parallel machine: generated calls run concurrently, and the history checked for linearizability.

A *program* is a sequential prefix of calls and two or three branches of
calls. Running it starts a FULL engine, runs the prefix, then each branch on
its own thread (an in-process engine is shared; a served node gets one
client per branch, so the calls travel on separate connections), recording
each call's invocation and response as ticks of one shared counter. The
history must be linearizable under the contract's model
(:mod:`fakeshard.testing._linearizability`).

A race shows only in some interleavings, so each program runs several
times. Hypothesis generates the programs; a failing one is then reduced
here (branches and calls removed while some run still fails), its failing
history saved as a trace (machine ``parallel``), and ``fakeshard replay``
draws it as a timeline and runs the program again on the engine named.

Crashes come from the contract's own fault: every engine is built with a
rule ``Crash`` on a release of session ``CRASH_SESSION``, and the program's
``crash`` call is that release. ``restart`` is the protocol's.
"""

from __future__ import annotations

import itertools
import json
import random
import sys
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Optional

from hypothesis import HealthCheck, Phase, given
from hypothesis import settings as Settings
from hypothesis import strategies as st

from fakeshard import (
    CacheMiss,
    Crash,
    FaultPlan,
    FaultRule,
    PositionMismatch,
    ResponseLost,
    SampleBundle,
    ShardError,
    ShardSpec,
    TokenBundle,
    wire,
)
from fakeshard.testing import _probes as probes
from fakeshard.testing import _profiles as profiles
from fakeshard.testing._draws import search_until_found
from fakeshard.testing._lengths import EDGES, LONGEST, MANY_HOPS, longest_prompt
from fakeshard.testing._linearizability import (
    Op,
    Verdict,
    check,
    describe_call,
    describe_outcome,
    state_dict,
    states_along,
    timeline,
)
from fakeshard.testing._machines import now_and_then
from fakeshard.testing._save import keep
from fakeshard.testing._trace import Trace, git_commit, hypothesis_version
from fakeshard.testing._view import Builder, page_history
from fakeshard.testing.strategies import lengths

CRASH_SESSION = "crash-now"
SESSIONS = ("a", "b")
VOCAB = 64
CRASH_PLAN = FaultPlan((FaultRule(Crash(), op="release", session_id=CRASH_SESSION, count=None),))


class NotLinearizable(AssertionError):
    """A history no sequential order of the contract explains."""


def spec_for(hidden_size: int = 4) -> ShardSpec:
    return ShardSpec("parallel-model", 2, 0, 2, hidden_size=hidden_size, vocab_size=VOCAB)


def token_at(session_id: str, pos: int) -> int:
    """The token every program feeds ``session_id`` at ``pos``: a cached length names the history."""
    return (sum(session_id.encode()) * 7 + 13 * pos) % VOCAB


# -- programs -----------------------------------------------------------------------------

def prefill_lengths(longest: int = LONGEST) -> st.SearchStrategy[int]:
    """A prefill's positions: mostly one to three, one in eight at a length real engines
    break at (:func:`fakeshard.testing.strategies.lengths`), at most ``longest``."""
    return now_and_then(st.integers(1, 3), lengths(longest))


def decode_positions(longest: int = LONGEST) -> st.SearchStrategy[int]:
    """A decode's position: mostly one to five, one in eight at a boundary's edge, where a
    long prefill ends (at most ``longest``)."""
    return now_and_then(st.integers(1, 5), st.sampled_from([p for p in EDGES if p <= longest] or [1]))


def calls(global_ops: bool = True, longest: int = LONGEST) -> st.SearchStrategy[tuple]:
    sid, epoch = st.sampled_from(SESSIONS), st.integers(0, 2)
    choices = [
        st.tuples(st.just("prefill"), sid, epoch, st.sampled_from([0, 0, 0, 1, 2, 3]), prefill_lengths(longest)),
        st.tuples(st.just("decode"), sid, epoch, decode_positions(longest)),
        st.tuples(st.sampled_from(["cancel", "release"]), sid, epoch),
        st.tuples(st.just("view"), sid),
    ]
    if global_ops:
        choices += [st.just(("used",)), st.just(("crash",)), st.just(("restart",))]
    return st.one_of(*choices)


@dataclass(frozen=True)
class Program:
    prefix: tuple[tuple, ...]
    branches: tuple[tuple[tuple, ...], ...]
    capacity: Optional[int]

    def to_dict(self) -> dict[str, Any]:
        return {"prefix": [list(c) for c in self.prefix], "branches": [[list(c) for c in b] for b in self.branches],
                "capacity_tokens": self.capacity}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Program":
        return cls(tuple(tuple(c) for c in d["prefix"]), tuple(tuple(tuple(c) for c in b) for b in d["branches"]),
                   d["capacity_tokens"])

    def size(self) -> int:
        return len(self.prefix) + sum(len(b) for b in self.branches)


def programs(branch_calls: int = 10, longest: int = LONGEST) -> st.SearchStrategy[Program]:
    """Programs whose prefills carry at most ``longest`` positions."""
    call = calls(longest=longest)
    # The prefix mostly opens sessions, so the branches race over live caches.
    opening = st.tuples(st.just("prefill"), st.sampled_from(SESSIONS), st.integers(0, 2), st.just(0),
                        prefill_lengths(longest))
    return st.builds(
        Program,
        st.builds(lambda a, b: tuple(a + b), st.lists(opening, max_size=2), st.lists(call, max_size=2)),
        st.lists(st.lists(call, min_size=1, max_size=branch_calls).map(tuple), min_size=2, max_size=3).map(tuple),
        st.sampled_from([None, None, 6]),
    )


# -- running ------------------------------------------------------------------------------

def _outcome(engine: Any, call: tuple) -> Optional[tuple]:
    """Perform ``call`` on ``engine``; the outcome as the checker compares it (``None``: ambiguous)."""
    op = call[0]
    try:
        if op in ("prefill", "decode"):
            sid, epoch, start = call[1], call[2], call[3]
            n = call[4] if op == "prefill" else 1
            out = getattr(engine, op)(TokenBundle(sid, epoch, start, tuple(token_at(sid, p)
                                                                           for p in range(start, start + n))))
            if not isinstance(out, SampleBundle) or (out.session_id, out.epoch) != (sid, epoch):
                return ("unexpected output", repr(out))
            return ("ok", out.pos, out.token)
        if op in ("cancel", "release"):
            getattr(engine, op)(call[1], call[2])
            return ("ok",)
        if op == "view":
            view = engine.session(call[1])
            return ("view", None) if view is None else ("view", view.epoch, view.status, view.cached_tokens)
        if op == "used":
            return ("used", engine.used_tokens)
        if op == "crash":
            engine.release(CRASH_SESSION, 0)
            return ("ok",)
        engine.restart()
        return ("ok",)
    except ResponseLost:
        return None
    except ShardError as exc:
        extra = (exc.expected, exc.got) if isinstance(exc, (CacheMiss, PositionMismatch)) else ()
        return (exc.code,) + extra
    except Exception as exc:  # the contract never allows a stray exception; it matches no outcome
        return ("raised", f"{type(exc).__name__}: {exc}")


def _clients(engine: Any, n: int) -> list[Any]:
    """One client per branch for a served node (separate connections); the engine itself otherwise."""
    if type(engine).__name__ == "RemoteShardEngine":
        from fakeshard.remote import RemoteShardEngine

        return [RemoteShardEngine(engine.url, control=engine.control, name=engine.name) for _ in range(n)]
    return [engine] * n


class Tokens:
    """``token_of(session_id, length)`` for the checker: one fresh engine's answer, remembered.

    For a factory whose arithmetic has a ``tolerance`` (real weights: a
    chunked prefill may flip a near-tie), tokens are not compared here
    (``None``); the other machines judge them with the tolerance, and this
    machine judges the session rules.
    """

    def __init__(self, factory: Callable[..., Any], spec: ShardSpec) -> None:
        self.factory, self.spec = factory, spec
        self.exact = not getattr(factory, "tolerance", 0.0)
        self.known: dict[tuple[str, int], int] = {}

    def blur(self, history: list[Op]) -> list[Op]:
        """``history`` with sampled tokens dropped where tokens are not compared."""
        if self.exact:
            return history
        return [Op(op.index, op.branch, op.call, op.outcome[:2] + (None,), op.invoked, op.returned)
                if op.outcome is not None and op.outcome[0] == "ok" and len(op.outcome) == 3 else op
                for op in history]

    def __call__(self, session_id: str, length: int) -> Optional[int]:
        if not self.exact:
            return None
        key = (session_id, length)
        if key not in self.known:
            fresh = self.factory(self.spec, seed=0)
            out = fresh.prefill(TokenBundle("oracle", 0, 0, tuple(token_at(session_id, p) for p in range(length))))
            self.known[key] = out.token
        return self.known[key]


#: The pauses a jittered run may take before a branch's call (seconds; most calls take none).
JITTER = (0.0, 0.0, 0.0, 0.00005, 0.0002, 0.001)


def run_program(factory: Callable[..., Any], spec: ShardSpec, program: Program, jitter: int = 0) -> list[Op]:
    """One run of ``program`` on a fresh engine: the history observed.

    ``jitter`` (0: none) seeds the pauses each branch takes before its calls
    (one of ``JITTER``): the same program then lines its branches' calls up
    differently from run to run, where without pauses each run mostly repeats
    the last one's interleaving.  A pause comes before the call is invoked, so
    the history's times stay the calls' own.
    """
    engine = factory(spec, seed=0, capacity_tokens=program.capacity, faults=CRASH_PLAN)
    ticks = itertools.count()
    history: list[Op] = []
    index = itertools.count()
    for call in program.prefix:
        invoked = next(ticks)
        outcome = _outcome(engine, call)
        history.append(Op(next(index), 0, call, outcome, invoked, float("inf") if outcome is None else next(ticks)))
    numbered = [[(next(index), call) for call in branch] for branch in program.branches]
    clients = _clients(engine, len(program.branches))
    barrier = threading.Barrier(len(program.branches))

    def branch(number: int, calls: list[tuple[int, tuple]], client: Any) -> None:
        pauses = random.Random(jitter * 16 + number) if jitter else None
        barrier.wait()
        for i, call in calls:
            if pauses is not None and (pause := pauses.choice(JITTER)):
                time.sleep(pause)
            invoked = next(ticks)
            outcome = _outcome(client, call)
            history.append(Op(i, number, call, outcome, invoked,
                              float("inf") if outcome is None else next(ticks)))

    threads = [threading.Thread(target=branch, args=(b + 1, calls, client), daemon=True)
               for b, (calls, client) in enumerate(zip(numbered, clients))]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads often: more interleavings per run
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
    finally:
        sys.setswitchinterval(interval)
    if any(t.is_alive() for t in threads):
        raise NotLinearizable("a branch did not finish within 120 s (a call hung)")
    for client in clients:
        if client is not engine and hasattr(client, "close"):
            client.close()
    return sorted(history, key=lambda op: op.index)


def find_failure(factory: Callable[..., Any], spec: ShardSpec, program: Program, repeats: int,
                 tokens: Tokens) -> Optional[tuple[list[Op], Verdict]]:
    """The first of ``repeats`` runs whose history is not linearizable, or ``None``: the first
    run without pauses, the others each with its own seeded jitter (:func:`run_program`)."""
    for jitter in range(repeats):
        history = tokens.blur(run_program(factory, spec, program, jitter))
        probes.record(_probes(history))
        verdict = check(history, program.capacity, tokens)
        if not verdict.linearizable:
            return history, verdict
    return None


def _probes(history: list[Op]) -> list[str]:
    """What a run reached: outcome codes, and whether calls of different branches overlapped."""
    names = {"code:" + ("response_lost" if op.outcome is None else "ok" if op.outcome[0] in ("ok", "view", "used")
                        else str(op.outcome[0])) for op in history}
    spans = sorted((op.invoked, op.returned, op.branch) for op in history if op.branch)
    if any(b[0] < a[1] and a[2] != b[2] for a, b in zip(spans, spans[1:])):
        names.add("parallel:overlap")
    return sorted(names)


def _smaller(program: Program) -> list[Program]:
    """Programs one piece smaller: a branch, a call, or a prefix call fewer; capacity gone."""
    out = []
    if len(program.branches) > 2:
        out += [Program(program.prefix, program.branches[:b] + program.branches[b + 1:], program.capacity)
                for b in range(len(program.branches))]
    for b, branch in enumerate(program.branches):
        if len(branch) > 1:
            out += [Program(program.prefix, program.branches[:b] + (branch[:i] + branch[i + 1:],)
                            + program.branches[b + 1:], program.capacity) for i in range(len(branch))]
    out += [Program(program.prefix[:i] + program.prefix[i + 1:], program.branches, program.capacity)
            for i in range(len(program.prefix))]
    if program.capacity is not None:
        out.append(Program(program.prefix, program.branches, None))
    return out


def shrink(factory: Callable[..., Any], spec: ShardSpec, program: Program, found: tuple[list[Op], Verdict],
           repeats: int, tokens: Tokens, budget: int = 24000) -> tuple[Program, list[Op], Verdict]:
    """Remove pieces while some run of the smaller program still fails; at most ``budget`` runs.

    A smaller program may fail in fewer interleavings, so each candidate gets
    four times the campaign's runs before it is judged sound; once a whole
    pass finds no smaller failing program, the search goes on with sixteen
    times the campaign's runs per candidate until a pass finds none again, then
    sixty-four times (a loaded machine schedules threads differently from run to
    run, and a race a smaller program keeps may show in few of them).
    """
    runs = 0
    for tries in (repeats * 4, repeats * 16, repeats * 64):
        progress = True
        while progress and runs < budget:
            progress = False
            for candidate in _smaller(program):
                if runs >= budget:
                    break
                runs += tries
                failure = find_failure(factory, spec, candidate, tries, tokens)
                if failure is not None:
                    program, found, progress = candidate, failure, True
                    break
    return program, found[0], found[1]


def examples_for(max_examples: int) -> int:
    """The programs a campaign of a profile of ``max_examples`` examples runs: half, at least four
    (each program runs several times: its linearizations are searched, and it is repeated)."""
    return max(max_examples // 2, 4)


@dataclass
class ParallelConfig:
    """How big a campaign is; by default from the loaded Hypothesis profile."""

    programs: int
    branch_calls: int
    repeats: int

    @classmethod
    def from_settings(cls, settings: Settings) -> "ParallelConfig":
        return cls(programs=examples_for(settings.max_examples),
                   branch_calls=max(min(settings.stateful_step_count // 8, 10), 3), repeats=12)


def run_parallel(config: Any, *, settings: Optional[Settings] = None, save_dir: Any = None,
                 seed: Optional[int] = None, sizes: Optional[ParallelConfig] = None,
                 reduce_failure: Optional[bool] = None) -> int:
    """Run the parallel campaign on ``config.factory``; the number of programs run.

    On a history that is not linearizable: reduce the program, save the
    trace under ``save_dir`` (when given) and raise :class:`NotLinearizable`
    with the timeline.
    """
    settings = settings if settings is not None else Settings.default
    assert settings is not None  # a profile is always loaded
    sizes = sizes or ParallelConfig.from_settings(settings)
    spec = spec_for(config.hidden_size)
    tokens = Tokens(config.factory, spec)
    found: list[tuple[Program, list[Op], Verdict]] = []
    ran = [0]

    @Settings(settings, max_examples=sizes.programs, phases=[Phase.explicit, Phase.generate], database=None,
              deadline=None, suppress_health_check=list(HealthCheck), print_blob=False)
    # A program runs several times and each long prefill crosses to a served node: a quarter of
    # the values one engine's step may carry (see ``fakeshard.testing._lengths``).
    @given(programs(sizes.branch_calls, longest_prompt(config.max_positions, config.hidden_size, share=MANY_HOPS)))
    def search(program: Program) -> None:
        if found:
            return
        ran[0] += 1
        config.runs += 1
        config.steps += program.size()
        if config.on_step is not None:
            config.on_step(config)
        failure = find_failure(config.factory, spec, program, sizes.repeats, tokens)
        if failure is not None:
            found.append((program, *failure))
            raise NotLinearizable("found")

    search_until_found(search, found, seed)
    if not found:
        return ran[0]
    program, history, verdict = found[0]
    if reduce_failure is None:  # by default, all but the ``mutate`` profile's runs shrink
        reduce_failure = profiles.reduces_failures()
    if reduce_failure:
        program, history, verdict = shrink(config.factory, spec, program, (history, verdict), sizes.repeats, tokens)
    trace = make_trace(config, spec, program, history, verdict)
    message = f"not linearizable on {config.factory_name}:\n{trace.failure}"
    path = keep(trace, config, save_dir, lambda: page_history(trace, lambda b: fill_history(trace, config.factory, b)))
    if path is not None:
        message += f"\nfakeshard: trace saved to {path}"
    raise NotLinearizable(message)


def make_trace(config: Any, spec: ShardSpec, program: Program, history: list[Op], verdict: Verdict) -> Trace:
    engine_class = getattr(config.factory, "evidence_class", None)
    return Trace(
        machine="parallel", engine_factory=config.factory_name,
        evidence_class=str(engine_class if isinstance(engine_class, str) else
                           config.factory(spec, seed=0).evidence_class),
        config={"spec": asdict(spec), "seed": 0, "capacity_tokens": program.capacity,
                "fault_plan": json.loads(wire.dumps(CRASH_PLAN)), "program": program.to_dict()},
        steps=[op.to_dict() for op in history], failure=timeline(history, verdict),
        hypothesis_version=hypothesis_version(), git_commit=git_commit())


@dataclass
class ParallelReplay:
    saved: str  # the saved history's timeline, re-checked
    failed: bool  # whether a run of the program on the engine named was not linearizable
    message: Optional[str]


def replay_parallel(trace: Trace, factory: Callable[..., Any], repeats: int = 20) -> ParallelReplay:
    """Re-check the saved history, and run its program ``repeats`` times on ``factory``'s engines."""
    spec = ShardSpec(**trace.config["spec"])
    program = Program.from_dict(trace.config["program"])
    tokens = Tokens(factory, spec)
    history = tokens.blur([Op.from_dict(d) for d in trace.steps])
    saved = timeline(history, check(history, program.capacity, tokens))
    failure = find_failure(factory, spec, program, repeats, tokens)
    if failure is None:
        return ParallelReplay(saved, False, None)
    return ParallelReplay(saved, True, timeline(*failure))


def fill_history(trace: Trace, factory: Callable[..., Any], builder: Builder) -> None:
    """Put a ``parallel`` trace's history in ``builder``: each branch's calls, in ticks, and the
    linearization the checker finds again (or its longest partial one, and what could not go next)."""
    spec = ShardSpec(**trace.config["spec"])
    program = Program.from_dict(trace.config["program"])
    tokens = Tokens(factory, spec)
    history = tokens.blur([Op.from_dict(d) for d in trace.steps])
    verdict = check(history, program.capacity, tokens)
    states = states_along(history, verdict, program.capacity, tokens)
    end = max([op.invoked + 1 for op in history] + [int(op.returned) for op in history if not op.ambiguous])
    ids: dict[int, int] = {}
    for op in sorted(history, key=lambda o: (o.branch, o.invoked)):
        before, after = states.get(op.index, (None, None))
        ids[op.index] = builder.call(
            builder.track("branch", str(op.branch)), op.invoked, None if op.ambiguous else op.returned,
            describe_call(op.call), None if op.outcome is None else str(op.outcome[0]),
            {"call": op.index, "branch": op.branch, "observed": describe_outcome(op.outcome),
             "invoked": op.invoked, "returned": None if op.ambiguous else op.returned},
            None if before is None else state_dict(before), None if after is None else state_dict(after))
    builder.data["end"] = end
    by_index = {op.index: op for op in history}
    builder.data["linearization"] = {
        "linearizable": verdict.linearizable, "explored": verdict.explored, "part": verdict.part,
        "order": [ids[i] for i in verdict.order],
        "stuck": [{"call": ids[i], "model": describe_outcome(wanted),
                   "observed": describe_outcome(by_index[i].outcome)} for i, wanted in verdict.stuck]}
    if not verdict.linearizable:
        first = verdict.stuck[0][0] if verdict.stuck else None
        where = f" (session {verdict.part!r})" if verdict.part is not None else ""
        builder.fail(f"not linearizable{where}: the longest order that explains its calls has "
                     f"{len(verdict.order)} calls, then no call can go next", None,
                     None if first is None else ids[first], "linearizability")
