"""The single-engine machines: Sessions, and Faults (Sessions under a drawn fault plan).

Rules only choose a step; :class:`~fakeshard.testing._runner.EngineRunner` applies it
to the engine and the model and compares.  Configuration is passed in, not
read from globals: ``run_state_machine_as_test(lambda: SessionsMachine(cfg))``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Optional

from hypothesis import strategies as st
from hypothesis.errors import StopTest
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from fakeshard import (
    Crash,
    Delay,
    DropResponse,
    FaultPlan,
    FaultRule,
    HiddenBundle,
    Malformed,
    MemoryPressure,
    ShardSpec,
)
from fakeshard._factory import makes_fixture_choices
from fakeshard._faults import HIDDEN_MALFORMED_KINDS, MALFORMED_KINDS, SAMPLE_MALFORMED_KINDS, Fault
from fakeshard._feeder import Feeder
from fakeshard.testing._damage import BAD_INPUTS
from fakeshard.testing._lengths import (
    BIG_RESERVES,
    EDGES,
    GROWTH_KINDS,
    LONGEST,
    SPAN,
    capped,
    growth_of,
    longest_of,
    longest_prompt,
    session_bound,
)
from fakeshard.testing._runner import EngineRunner
from fakeshard.testing._trace import Trace
from fakeshard.testing.strategies import lengths

N_LAYERS = 4
ROLE_RANGES = {"head": (0, 2), "middle": (1, 3), "tail": (2, 4), "full": (0, 4)}
#: The contract takes any non-empty str as a session id, so two of the three are ones a
#: transport can mangle: the dot segment ``..`` of a URL path, and an id holding a path's
#: separators, a newline and a lone surrogate (which has no UTF-8 form).
SIDS = ("a", "..", "b/?#%\n\udc80")
#: A call on this session crashes the engine: the Sessions machine's way to
#: crash it through the public surface (a fault plan), not a private method.
CRASH_SID = "crash!"


@dataclass
class MachineConfig:
    """What a machine run needs: the engine factory and where failures go."""

    factory: Callable[..., Any]
    factory_name: str
    tolerance: float = 0.0
    #: Width of the machines' models.  Narrow keeps the fixture fast; a factory whose
    #: models need more room (real attention heads) asks for a wider one with a
    #: ``machine_hidden_size`` attribute.
    hidden_size: int = 4
    #: A real width some runs use (with short prompts, so a step moves a bounded number of
    #: values), so that size-dependent code paths are met; ``None`` for none.  A factory
    #: states another, or ``None``, with a ``machine_wide_hidden_size`` attribute.
    wide_hidden_size: Optional[int] = 4096
    #: The longest prompt a step sends.  A factory whose prefill grows faster than linearly
    #: (real attention) states a shorter one with a ``machine_max_positions`` attribute.
    max_positions: int = LONGEST
    #: Whether the engines make the fixture's choices where the contract is
    #: silent (``fixture_choices`` on the factory): steps whose outcome rests
    #: on such a choice hold other engines to the contract alone.
    fixture_choices: bool = False
    #: The trace of the most recent failing run (Hypothesis replays the
    #: shrunk example last, so after a failure this is the shrunk one).
    last_failure: Optional[Trace] = None
    #: Runs started, and those of them Hypothesis threw away partway (:func:`count_discarded`):
    #: the examples a campaign reports are ``runs - discarded``.
    runs: int = 0
    discarded: int = 0
    steps: int = 0
    failures: list[Trace] = field(default_factory=list)
    #: Called after every step (progress display); ``None`` for none.
    on_step: Optional[Callable[["MachineConfig"], None]] = None
    #: Re-runs of a failure found made so far (the program machine reduces and confirms a
    #: failure by running it again, in real time); the progress display says so.
    reruns: int = 0
    #: Paths of the traces saved for failures.
    saved: list[str] = field(default_factory=list)
    #: The coordinator machine's coordinator: its factory (``None``: import it by name) and
    #: its ``module:callable`` name, which traces record.
    coordinator: Optional[Callable[..., Any]] = None
    coordinator_name: str = "fakeshard.testing:reference"

    @property
    def examples(self) -> int:
        """The runs that count as examples: those started, less those Hypothesis threw away
        (:func:`count_discarded`; the machines that draw whole scenarios throw none away)."""
        return self.runs - self.discarded

    def width(self, wide: bool) -> int:
        """A run's hidden width: the real one (``wide_hidden_size``) when the run drew ``wide`` and
        the factory takes one, else the machines' narrow one."""
        return self.wide_hidden_size if wide and self.wide_hidden_size else self.hidden_size

    @classmethod
    def for_factory(cls, factory: Callable[..., Any], factory_name: str, **kw: Any) -> "MachineConfig":
        """A config with what the factory states: its ``tolerance`` and ``machine_hidden_size``."""
        return cls(factory, factory_name, tolerance=getattr(factory, "tolerance", 0.0),
                   hidden_size=getattr(factory, "machine_hidden_size", 4),
                   wide_hidden_size=getattr(factory, "machine_wide_hidden_size", 4096),
                   max_positions=longest_of(factory),
                   fixture_choices=makes_fixture_choices(factory), **kw)


def role_spec(role: str, hidden_size: int = 4) -> ShardSpec:
    start, end = ROLE_RANGES[role]
    return ShardSpec("machine-model", N_LAYERS, start, end, hidden_size=hidden_size, vocab_size=64)


tokens = st.integers(0, 63)
#: One to four new tokens in two draws (a list costs a draw per item and one per "more?"):
#: a count, then one integer whose base-64 digits are the tokens; both shrink to few zeros.
chunks = st.tuples(st.integers(1, 4), st.integers(0, 64**4 - 1)).map(
    lambda drawn: [drawn[1] >> (6 * i) & 63 for i in range(drawn[0])])


def now_and_then(common: st.SearchStrategy[Any], rare: st.SearchStrategy[Any],
                 odds: int = 7) -> st.SearchStrategy[Any]:
    """``common``, and one draw in ``odds + 1`` ``rare`` (``st.one_of`` would not do: it takes
    a strategy given twice as one branch).  Shrinks towards ``common``."""
    return st.integers(0, odds).flatmap(lambda k: rare if k == odds else common)


#: A long prompt as a seeded run (``fakeshard.testing._lengths.tokens_of``): one step of a
#: trace however long.
seeded_runs = st.builds(lambda n, seed: {"count": n, "seed": seed}, lengths(), st.integers(0, 2**32 - 1))
#: Start positions, capacities, at a boundary's edge (7, 8, 9, ..., 32769).
edges = st.sampled_from(EDGES)
#: A prefill's new tokens: mostly a chunk, one time in eight a long prompt at a length real
#: engines break at (a seeded run, one step of a trace however long).
prompts = now_and_then(chunks, seeded_runs)
#: Capacities: none or a few positions, one run in eight one at a boundary's edge (7 .. 32769).
capacities = now_and_then(st.none() | st.integers(0, 10), edges)
#: A run's width: one run in eight a real one (``MachineConfig.wide_hidden_size``).
wide = st.integers(0, 7).map(lambda i: i == 0)
#: Whether a run grows its sessions long (the ``sessions`` machine's ``grow``): one run in 32 (each
#: position a step computes costs the engine and the model alike, so the rest grow by at most
#: :data:`SHORT_GROWTH` positions a call, still across every boundary below it).
long_runs = st.integers(0, 31).map(lambda i: i == 0)
#: The most positions one ``grow`` of a run that is not long adds.
SHORT_GROWTH = 600
#: The capacities of the long runs that have one: past 2**16, within what three long sessions hold.
LONG_CAPACITIES = (2**16 + 2**12, 2**16 + 2**14, 3 * 2**15)


def spread(i: int) -> int:
    """``i`` scrambled (a 64-bit multiplicative hash), so that Hypothesis's favourite
    integers (0, small ones, powers of two, the bounds) land evenly modulo a short length."""
    return ((i * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF) >> 29


#: Hypothesis draws from short lists unevenly (it favours the first items); a wide
#: integer, scrambled and taken modulo the list's length, spreads the choice evenly over runs.
roles = st.integers(0, 2**16).map(lambda i: sorted(ROLE_RANGES)[spread(i) % len(ROLE_RANGES)])
# Each rule draws few values (Hypothesis's drawing and shrinking cost grows with
# them); lists repeat the common choice to weight it.
#: Which session: "live:i" picks the i-th live one (if any), "any:i" the i-th of all.
who_choices = st.sampled_from(["live:0", "live:1", "live:2", "any:0", "any:1", "any:2"])
#: Which epoch, relative to the session's newest: mostly the same one.
epoch_moves = st.sampled_from(["same"] * 4 + ["up", "down", 0, 1, 2, 3])
#: Which start position: mostly the next one, sometimes 0 or a fixed one, now and then one at
#: a boundary's edge (7, 8, 9, ..., 32769).
positions = now_and_then(st.sampled_from(["next"] * 3 + ["zero", 0, 1, 2, 3, 5]), edges)
#: Mostly well-formed input; sometimes each kind of malformed input.
bad_inputs = st.sampled_from([None] * 57 + list(BAD_INPUTS))
#: Calls to a down engine: a third well-formed, the rest each kind of malformed input (a wide
#: integer spreads the kinds evenly).
bad_while_down = st.integers(0, 2**16).map(
    lambda i: None if spread(i) % 3 == 0 else BAD_INPUTS[spread(i) // 3 % len(BAD_INPUTS)])
#: cancel or release, sometimes with a malformed epoch.
close_ops = st.sampled_from(["cancel", "release"] * 6 + ["cancel!", "release!", "cancel?", "release?"])


def count_discarded(config: MachineConfig) -> None:
    """Count the run now tearing down in ``config.discarded`` if Hypothesis is throwing it away.

    Hypothesis stops a machine after ``max_examples`` runs it counts, and also starts runs that it
    abandons partway, with ``StopTest``: a run whose state leaves no rule its swarm testing enabled
    (each run turns some rules off), and one that outgrows its buffer of choices.  Their steps ran
    and were checked, but they are not examples: a campaign's row counts the runs Hypothesis kept,
    so that ``--examples N`` reads ``N``.  Called from a machine's ``teardown``, which Hypothesis
    runs in a ``finally`` clause, where the exception ending the run is the one being handled.
    """
    if isinstance(sys.exc_info()[1], StopTest):
        config.discarded += 1


class RecordingMachine(RuleBasedStateMachine):
    """A machine whose steps go through a runner: counts them, reports progress, and keeps
    the trace of a failing run in ``config.last_failure``."""

    machine_name = "recording"

    def __init__(self, config: MachineConfig) -> None:
        super().__init__()
        self.config = config
        self.runner: Any = None
        config.runs += 1

    def _run(self, step: dict[str, Any], runner: Any = None) -> None:
        """One step through ``runner`` (the machine's own by default)."""
        runner = runner if runner is not None else self.runner
        assert runner is not None
        self.config.steps += 1
        if self.config.on_step is not None:
            self.config.on_step(self.config)
        try:
            runner.run(step)
        except BaseException:
            self.config.last_failure = runner.trace
            raise

    def teardown(self) -> None:
        count_discarded(self.config)


class FinishingMachine(RecordingMachine):
    """A machine whose runner checks the world after every step itself (``runner.run`` raises
    on a break) and once more when the run ends (``runner.finish``: every session released,
    no memory held)."""

    def teardown(self) -> None:
        super().teardown()
        if self.runner is not None:
            try:
                self.runner.finish()
            except BaseException:
                self.config.last_failure = self.runner.trace
                raise


class _EngineMachine(RecordingMachine):
    """Rules shared by the single-engine machines; subclasses say how the engine starts."""

    machine_name = "engine"

    def _start(self, role: str, capacity: Optional[int], seed: int, plan: FaultPlan, wide: bool = False,
               long: bool = False) -> None:
        hidden = self.config.width(wide)
        #: The longest prompt a step sends: the factory's, and a bounded number of values a step.
        self.longest = longest_prompt(self.config.max_positions, hidden)
        # A factory that states a shorter longest prompt (its prefill grows faster than linearly:
        # the tiny real model) has no long runs: sessions of thousands of its positions, each
        # computed by the engine and again by the model's other path, would take the campaign.
        long = long and self.config.max_positions >= LONGEST
        #: How far one ``grow`` reaches, and how long a session grows: in a long run, the longest
        #: prompt and a bounded number of values a session.
        # (An eighth of the longest prompt at most, for a factory that states a short one because
        # its prefill grows faster than linearly: the tiny real model's 1,026 allow 128.)
        self.reach = self.longest if long else min(self.longest, SHORT_GROWTH, max(self.config.max_positions // 8, 1))
        #: A long run's log-uniform grows start at a sixteenth of the reach, so its sessions
        #: pass 2**16 in total within a run (the boundaries below are the other runs' part).
        self.shortest = self.reach // 16 if long else 1
        # Sessions of a factory with a shorter longest prompt stop at it: each position of theirs
        # costs more the longer the session is (attention), on the engine and on the model's path.
        self.session_bound = session_bound(self.config.max_positions, hidden) \
            if self.config.max_positions >= LONGEST else self.config.max_positions
        self.runner = EngineRunner(
            self.config.factory, machine=self.machine_name, factory_name=self.config.factory_name,
            spec=role_spec(role, hidden), seed=seed, capacity=capacity, plan=plan,
            tolerance=self.config.tolerance,
        )

    # -- helpers --------------------------------------------------------------

    def _epoch(self, sid: str, move: Any) -> int:
        view = self.runner.model.view(sid)
        current = view[0] if view is not None else 0
        if move == "same":
            return current
        if move == "up":
            return current + 1
        if move == "down":
            return max(current - 1, 0)
        return int(move)

    def _start_pos(self, sid: str, epoch: int, position: Any) -> int:
        view = self.runner.model.view(sid)
        if position == "next":
            return view[2] if view is not None and view[0] == epoch else 0
        return 0 if position == "zero" else int(position)

    def _sid(self, who: str) -> str:
        """A session id; ``live:i`` prefers live sessions, so calls get past the first checks."""
        kind, index = who.split(":")
        live = [sid for sid in SIDS if (self.runner.model.view(sid) or (0, ""))[1] == "live"]
        pool = live if kind == "live" and live else list(SIDS)
        return pool[int(index) % len(pool)]

    def _revive(self) -> None:
        """Restart a crashed engine before the next call, as a coordinator would (the
        ``call_while_down`` rule covers calls to a crashed engine)."""
        if self.runner.model.crashed:
            self._run({"op": "restart"})

    def _compute(self, op: str, who: str, move: Any, position: Any, new: Any,
                 bad: Optional[str]) -> None:
        new = capped(new, self.longest)
        sid = self._sid(who)
        epoch = self._epoch(sid, move)
        start = self._start_pos(sid, epoch, position)
        if bad == "two_positions" and op == "prefill":
            bad = "range"
        step = {"op": op, "session_id": sid, "epoch": epoch, "start": start, "tokens": new}
        if bad is not None:
            step["bad"] = bad
        self._run(step)

    # -- rules ------------------------------------------------------------------

    @rule(who=who_choices, move=epoch_moves, position=positions,
          new=prompts, bad=bad_inputs)
    def prefill(self, who: str, move: Any, position: Any, new: Any, bad: Optional[str]) -> None:
        self._revive()
        self._compute("prefill", who, move, position, new, bad)

    @rule(who=who_choices, move=epoch_moves, position=positions, token=tokens, bad=bad_inputs)
    def decode(self, who: str, move: Any, position: Any, token: int, bad: Optional[str]) -> None:
        self._revive()
        self._compute("decode", who, move, position, [token], bad)

    @rule(op=close_ops, sid=st.sampled_from(SIDS), move=epoch_moves)
    def close(self, op: str, sid: str, move: Any) -> None:
        self._revive()
        step = {"op": op.rstrip("!?"), "session_id": sid, "epoch": self._epoch(sid, move)}
        if op[-1] in "!?":  # a malformed epoch, or a malformed session id
            step["bad"] = "epoch" if op.endswith("!") else "session"
        self._run(step)

    @precondition(lambda self: self.runner is not None and self.runner.model.crashed)
    @rule(op=st.sampled_from(["prefill", "decode", "cancel", "release"]), who=who_choices, bad=bad_while_down)
    def call_while_down(self, op: str, who: str, bad: Optional[str]) -> None:
        """A down engine answers ``engine_crashed`` before it looks at the input: most calls
        carry a bad input, of every kind (a crossing of the first two checks)."""
        sid = self._sid(who)
        if op in ("cancel", "release"):
            step = {"op": op, "session_id": sid, "epoch": 0}
            if bad is not None:
                step["bad"] = "epoch" if BAD_INPUTS.index(bad) % 2 else "session"
            self._run(step)
        else:  # two positions are a decode's mistake (a prefill takes any number)
            self._compute("decode" if bad == "two_positions" else op, who, "same", "next", [1], bad)

    # The contract defines restart() for a crashed engine; that is when we call it.
    @precondition(lambda self: self.runner is not None and self.runner.model.crashed)
    @rule()
    def restart(self) -> None:
        self._run({"op": "restart"})


class SessionsMachine(_EngineMachine):
    """One engine of any role: sessions, chunked prefill, decode, close, epochs, crash, restart."""

    machine_name = "sessions"

    @initialize(role=roles, capacity=capacities, seed=st.integers(0, 2), wide=wide, long=long_runs)
    def setup(self, role: str, capacity: Optional[int], seed: int, wide: bool, long: bool) -> None:
        # A long run has no tight capacity: its sessions are there to grow.  As often as other
        # runs have one, it has a capacity past 2**16 (from the same draw), so that the room left
        # is computed over totals a narrow counter cannot hold.
        if long:
            capacity = None if capacity is None else LONG_CAPACITIES[capacity % len(LONG_CAPACITIES)]
        self._start(role, capacity, seed,
                    FaultPlan((FaultRule(Crash(), session_id=CRASH_SID, count=None),)), wide, long)

    @precondition(lambda self: self.runner is not None and not self.runner.model.crashed)
    @rule()
    def crash(self) -> None:
        self._run({"op": "prefill", "session_id": CRASH_SID, "epoch": 0, "start": 0, "tokens": [0]})

    @rule(who=who_choices, kind=st.integers(0, GROWTH_KINDS - 1), u=st.integers(0, SPAN - 1),
          seed=st.integers(0, 2**32 - 1))
    def grow(self, who: str, kind: int, u: int, seed: int) -> None:
        """A session continues where it stands by a run of tokens of any length, or of one that
        ends on the edge of the next boundary it can reach (``growth_of``): sessions get long in
        calls of every size, several at once, so a length bug at a position nobody listed meets
        a call across it, a session view past it, and totals past 2**16.  A session that is not
        live starts again at a newer epoch."""
        self._revive()
        sid = self._sid(who)
        view = self.runner.model.view(sid)
        live = view is not None and view[1] == "live"
        epoch = view[0] if live else (view[0] + 1 if view is not None else 0)
        start = view[2] if live else 0
        n = growth_of(start, kind, u, self.reach, self.shortest)
        n = max(1, min(n, self.session_bound - start))
        self._run({"op": "prefill", "session_id": sid, "epoch": epoch, "start": start,
                   "tokens": {"count": n, "seed": seed}})


_FAULTS = {
    "delay": st.builds(Delay, st.sampled_from([0.25, 0.5, 1.0])),
    "memory_pressure": st.builds(MemoryPressure, st.none() | st.integers(0, 8) | st.sampled_from(BIG_RESERVES)),
    "malformed": st.integers(0, len(MALFORMED_KINDS) - 1).map(lambda i: Malformed(MALFORMED_KINDS[i])),
    "drop_response": st.just(DropResponse()),
}
#: Malformed has eight kinds to reach, so it is drawn more often than the others.
faults = st.sampled_from(["malformed", "delay", "malformed", "memory_pressure", "malformed",
                          "drop_response"]).flatmap(_FAULTS.__getitem__)

def _rules(fault: Any, count: Any) -> Any:
    return st.builds(
        FaultRule,
        fault=fault,
        op=st.sampled_from(["any", "prefill", "decode", "cancel", "release"]),
        session_id=st.none() | st.sampled_from(SIDS),
        nth=st.integers(1, 6),
        count=count,
        probability=st.sampled_from([1.0, 1.0, 0.5, 0.25]),
    )


# A crash every call would leave nothing else to see: crashes fire a bounded number of times.
_RULES = {"other": _rules(faults, st.none() | st.integers(1, 3)),
          "crash": _rules(st.just(Crash()), st.integers(1, 2))}
fault_rules = st.sampled_from(["other", "other", "other", "crash"]).flatmap(_RULES.__getitem__)
#: The standing faults (one a run): each ``Malformed`` kind the role's output can show, memory
#: pressure that fails the allocation, a reservation past a 32-bit counter, a lost answer.
STANDING_HIDDEN: tuple[Fault, ...] = tuple(Malformed(k) for k in HIDDEN_MALFORMED_KINDS) \
    + (MemoryPressure(), MemoryPressure(2**32), DropResponse())
STANDING_SAMPLE: tuple[Fault, ...] = tuple(Malformed(k) for k in SAMPLE_MALFORMED_KINDS) \
    + (MemoryPressure(), MemoryPressure(2**32), DropResponse())
fault_plans = st.builds(FaultPlan, st.lists(fault_rules, min_size=1, max_size=4).map(tuple),
                        st.integers(0, 2**32))


def fit_malformed(plan: FaultPlan, last: bool) -> FaultPlan:
    """``plan`` for a node whose output is a sample (``last``, a tail's) or a hidden bundle:
    each ``Malformed`` kind its output cannot show (a sample's ``nan``, ``shape``, ``layer`` or
    ``checksum``, a hidden bundle's ``token_range``, each of which leaves the output as it is)
    becomes one it can, by its place in :data:`MALFORMED_KINDS` (drawn from every kind, half of
    a tail's malformed outputs were no-ops).  The machines that draw a plan for each node of a
    cluster draw it from every kind, then fit it, so the rest of their draws stay as they were."""
    kinds = SAMPLE_MALFORMED_KINDS if last else HIDDEN_MALFORMED_KINDS
    rules = tuple(
        replace(rule, fault=Malformed(kinds[MALFORMED_KINDS.index(rule.fault.kind) % len(kinds)]))
        if isinstance(rule.fault, Malformed) and rule.fault.kind not in kinds else rule
        for rule in plan.rules)
    return plan if rules == plan.rules else FaultPlan(rules, plan.seed)


class FaultsMachine(_EngineMachine):
    """The Sessions machine under a fault plan drawn by Hypothesis."""

    machine_name = "faults"

    @initialize(role=roles, capacity=st.none() | st.integers(0, 10), seed=st.integers(0, 2), plan=fault_plans,
                mix=st.integers(0, 2**32 - 1))
    def setup(self, role: str, capacity: Optional[int], seed: int, plan: FaultPlan, mix: int) -> None:
        # A wide integer spreads the standing faults evenly over runs (see ``roles``).  Every
        # run carries a standing rule that hits half the calls all run long, so faults that
        # need a successful call (MemoryPressure, each Malformed kind the role's output can
        # show) meet calls they can act on; the drawn rules come first, so they still fire
        # as drawn.
        standing = STANDING_SAMPLE if role_spec(role).role.samples else STANDING_HIDDEN
        mixed = spread(mix)
        fault = standing[mixed % len(standing)]
        op = ("any", "decode")[mixed // len(standing) % 2]  # decodes succeed less often: aim some there
        rule = FaultRule(fault, op=op, count=None, probability=0.5)
        # A node that loses answers is often slow and short of memory too: every decode of such
        # a run is delayed and every prefill finds one position reserved (probability 1 takes
        # no draw from the plan's generator, so the other rules fire as they would), so a lost
        # answer meets a delay and memory pressure on one call.
        slow = (FaultRule(Delay(0.25), op="decode", count=None),
                FaultRule(MemoryPressure(1), op="prefill", count=None)) if isinstance(fault, DropResponse) else ()
        plan = FaultPlan(plan.rules + (rule,) + slow, plan.seed)
        # The width and a capacity at a boundary's edge come from other bits of the same wide
        # integer (one run in eight each), so the fault mix keeps the draws it had.
        other = (mix * 0xD6E8FEB86659FD93) & (2**64 - 1)
        if capacity is None and other >> 61 == 0:
            capacity = EDGES[(other >> 32) % len(EDGES)]
        self._start(role, capacity, seed, plan, other >> 58 & 7 == 0)

    malformed_met = False

    @precondition(lambda self: not self.malformed_met)
    @rule(role=roles, at=st.integers(0, 2**16))
    def every_malformed_kind(self, role: str, at: int) -> None:
        """Every ``Malformed`` kind, each alone and ``checksum`` beside another kind, on a fresh
        engine of ``role``, once a run: a run meets every kind however short it is, where the
        standing rule meets one.  ``checksum`` also meets an output whose right checksum starts
        with ``0`` (the fixture's break writes ``1`` there).  Each engine is a run of its own,
        with its own trace."""
        self.malformed_met = True  # once a run: the kinds are met, the run's budget is the session rules'
        pick = spread(at)
        # One session of nine calls (a prefill, eight decodes), each with the next kind (in an
        # order turned by the draw, so each kind meets prefills and decodes over runs), the last
        # with checksum beside another kind.
        kinds = MALFORMED_KINDS[pick % len(MALFORMED_KINDS):] + MALFORMED_KINDS[:pick % len(MALFORMED_KINDS)]
        others = [kind for kind in MALFORMED_KINDS if kind != "checksum"]
        rules = tuple(FaultRule(Malformed(kind), nth=i + 1) for i, kind in enumerate(kinds))
        rules += (FaultRule(Malformed(others[pick % len(others)]), nth=len(kinds) + 1),
                  FaultRule(Malformed("checksum"), nth=len(kinds) + 1))
        self._mini_run(role, FaultPlan(rules), ["m"], decodes=len(kinds))
        # About 1 output in 16 has a right checksum starting with 0: a clean engine finds such a
        # session (at most 64 prefills), and it meets the break beside one drawn session.
        zero = self._zero_checksum_session(role)
        sids = [f"c{pick % 64}"] + ([zero] if zero is not None else [])
        self._mini_run(role, FaultPlan((FaultRule(Malformed("checksum"), op="prefill", count=None),)),
                       sids, decodes=0)

    def _zero_checksum_session(self, role: str) -> Optional[str]:
        """The first session (of ``z0`` .. ``z63``) whose clean prefill of [1, 2, 3] has a checksum
        starting with ``0``; ``None`` for a role that samples, or if none has."""
        spec = role_spec(role, self.config.hidden_size)
        if spec.role.samples:
            return None
        engine = self.config.factory(spec, seed=0)
        feeder = Feeder(self.config.factory, spec, seed=0)
        for i in range(64):
            sid = f"z{i}"
            out = engine.prefill(feeder.bundle(sid, 0, 0, [1, 2, 3], 3))
            engine.release(sid, 0)
            if isinstance(out, HiddenBundle) and out.checksum.startswith("0"):
                return sid
        return None

    def _mini_run(self, role: str, plan: FaultPlan, sids: list[str], decodes: int) -> None:
        runner = EngineRunner(
            self.config.factory, machine=self.machine_name, factory_name=self.config.factory_name,
            spec=role_spec(role, self.config.hidden_size), seed=0, plan=plan, tolerance=self.config.tolerance,
        )
        steps: list[dict[str, Any]] = []
        for sid in sids:
            steps.append({"op": "prefill", "session_id": sid, "epoch": 0, "start": 0, "tokens": [1, 2, 3]})
            steps += [{"op": "decode", "session_id": sid, "epoch": 0, "start": 3 + i, "tokens": [4 + i]}
                      for i in range(decodes)]
            steps.append({"op": "release", "session_id": sid, "epoch": 0})
        for step in steps:
            self._run(step, runner)
