"""Checks you can run on your own engine: each takes an engine factory and raises on a bug.

Each function builds the engines it needs from ``factory`` (any callable with
:class:`~fakeshard.FakeShardEngine`'s signature, ``factory(spec, *, seed=0,
capacity_tokens=None, clock=None, faults=None)``), drives them through the public
surface, and raises :class:`AssertionError` naming the first rule of the contract
(``docs/contract.md``) or of its written choices (``docs/reference/choices.md``) the
engine breaks; it returns ``None`` when the engine keeps them all.  They are fixed
cases at the edges the contract draws; the state machines generate the
interleavings.  In a test::

    from fakeshard.testing import checks

    @pytest.mark.parametrize("check", checks.ENGINE_CHECKS, ids=lambda c: c.__name__)
    def test_my_engine(check):
        check(my_package.make_engine)

``fakeshard check`` runs every one of them beside the machines.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

from fakeshard import (
    Crash,
    Delay,
    EngineCrashed,
    FakeShardEngine,
    FaultPlan,
    FaultRule,
    HiddenBundle,
    Malformed,
    MalformedBundle,
    MemoryPressure,
    OutOfMemory,
    Pipeline,
    SampleBundle,
    ShardError,
    ShardSpec,
    StaleEpoch,
    TokenBundle,
    VirtualClock,
)
from fakeshard._factory import makes_fixture_choices
from fakeshard._faults import MALFORMED_KINDS
from fakeshard._feeder import Feeder
from fakeshard._pipeline import answer_problem
from fakeshard.testing import _http_checks
from fakeshard.testing._model import well_typed
from fakeshard.testing._runner import HIDDEN_KINDS, SAMPLE_KINDS, damaged_checksum

__all__ = [
    "ENGINE_CHECKS",
    "HTTP_CHECKS",
    "LONG_SESSION_BOUNDARIES",
    "TILINGS",
    "check_bad_close",
    "check_capacity_edges",
    "check_capacity_without_faults",
    "check_defaults",
    "check_factory_arguments",
    "check_long_session",
    "check_new_engine",
    "check_pipeline",
    "check_pipeline_answers",
    "check_pipeline_evidence_class",
    "check_replace_faults",
]

Factory = Callable[..., Any]

#: The checks' model: four layers of width 4, a vocabulary of 64.
SPEC = ShardSpec("check-model", 4, 0, 4)
#: Ways to cut :data:`SPEC` into a pipeline's stages.
TILINGS = (((0, 4),), ((0, 2), (2, 4)), ((0, 1), (1, 4)), ((0, 3), (3, 4)), ((0, 1), (1, 2), (2, 4)),
           ((0, 1), (1, 3), (3, 4)))
#: Ill-typed identities for a close call, each refused (``MalformedBundle``) whatever the engine holds.
BAD_IDENTITIES = (("s", -1), ("s", True), ("s", "1"), ("s", 1.5), ("s", None), ("", 0), (7, 0), (None, 0),
                  ("", True), (7, -1))


def refused(build: Callable[[], Any], errors: tuple[type[BaseException], ...], what: str) -> BaseException:
    """The error ``build()`` raises, one of ``errors``; an ``AssertionError`` naming ``what`` if it answers."""
    try:
        value = build()
    except errors as err:
        return err
    raise AssertionError(f"{what} was not refused (by {' or '.join(e.__name__ for e in errors)}): "
                         f"it answered {value!r}")


def answered(build: Callable[[], Any], what: str) -> Any:
    """What ``build()`` answers; an ``AssertionError`` naming ``what`` if it is refused."""
    try:
        return build()
    except ShardError as err:
        raise AssertionError(f"{what} was refused: {err!r}") from None


def _names(err: ShardError, session_id: Any, epoch: Any, what: str) -> None:
    """An error names the call's well-typed session id and epoch; otherwise each is the value or None."""
    if well_typed(session_id, epoch):
        assert (err.session_id, err.epoch) == (session_id, epoch), \
            f"the refusal of {what} names session {err.session_id!r} epoch {err.epoch!r}, not {session_id!r} {epoch!r}"
    else:
        assert err.session_id in (None, session_id) and err.epoch in (None, epoch), (what, err)


def check_new_engine(factory: Factory) -> None:
    """A new engine of each role holds nothing, shows its spec, and answers a prefill as the
    contract's Feeder builds it; the Feeder refuses a history too short and rows for a head."""
    for start, end in ((0, 4), (0, 2), (1, 3), (2, 4)):
        spec = SPEC.with_layers(start, end)
        engine = factory(spec, seed=1)
        assert engine.spec == spec, f"an engine built for {spec!r} shows {engine.spec!r}"
        assert engine.session("x") is None and engine.used_tokens == 0, "a new engine holds something"
        assert isinstance(repr(engine), str)
        feeder = Feeder(factory, spec, seed=1)
        history = [1, 0, 1]
        out = engine.prefill(feeder.bundle("s", 0, 0, history, 3))
        assert out.session_id == "s" and out.epoch == 0 and engine.used_tokens == 3
        refused(lambda: feeder.bundle("s", 0, 2, history, 2), (ValueError, TypeError), "a history too short")
        if start == 0:
            refused(lambda: feeder.rows(history), (ValueError, TypeError), "rows for a head")


def check_defaults(factory: Factory) -> None:
    """The factory's defaults, as the contract writes its signature: ``seed=0``, and without a
    clock a ``Delay`` passes on the engine's own clock (the call answers as without it)."""
    bundle = TokenBundle("s", 0, 0, (1, 2))
    plain = factory(SPEC).prefill(bundle)
    assert plain == factory(SPEC, seed=0).prefill(bundle), "the default seed is not 0"
    delayed = factory(SPEC, faults=FaultPlan((FaultRule(Delay(1.0), op="prefill"),)))
    assert delayed.prefill(bundle) == plain, "a Delay without a clock changed the answer"


def check_capacity_edges(factory: Factory) -> None:
    """``capacity_tokens`` at its edges, with a reserve: a ``MemoryPressure(2)`` leaves 2 of 4
    positions for the call, so 3 do not fit and 2 exactly do; a prefill at a newer epoch counts
    the older cache it replaces as free, so 2 fit again; a failed allocation holds nothing."""
    engine = factory(SPEC, capacity_tokens=4,
                     faults=FaultPlan((FaultRule(MemoryPressure(2), op="prefill", count=None),)))
    refused(lambda: engine.prefill(TokenBundle("a", 0, 0, (1, 2, 3))), (OutOfMemory,),
            "3 positions under a reserve of 2 of 4")
    assert engine.used_tokens == 0 and engine.session("a") is None, "a failed allocation holds something"
    assert engine.prefill(TokenBundle("a", 0, 0, (1, 2))).pos == 2 and engine.used_tokens == 2
    assert engine.prefill(TokenBundle("a", 1, 0, (2, 1))).pos == 2 and engine.used_tokens == 2, \
        "a prefill at a newer epoch did not count the older cache it replaces as free"
    refused(lambda: engine.prefill(TokenBundle("b", 0, 0, (1,))), (OutOfMemory,), "1 position over the reserve")
    assert engine.used_tokens == 2 and engine.session("b") is None, "a failed allocation holds something"
    assert engine.decode(TokenBundle("a", 1, 2, (1,))).pos == 3 and engine.used_tokens == 3, \
        "a decode met a reserve made for prefills only"


#: The fault kinds a check's plans use beyond the rest: a factory whose engines apply none of
#: them (a layer in front of an engine applies no MemoryPressure) skips the check, saying why.
check_capacity_edges.fault_kinds_needed = frozenset({"MemoryPressure"})  # type: ignore[attr-defined]


def check_capacity_without_faults(factory: Factory) -> None:
    """``capacity_tokens`` at its edges with no fault (so on any engine, a host's behind the kit's
    layer too): 4 positions of 4 fit and 5 do not; a session's next allocation counts what the
    others hold; a prefill at a newer epoch counts the older cache it replaces as free; and a
    refused allocation changes nothing: not the accounting, not the older epoch's cache."""
    engine = factory(SPEC, capacity_tokens=4)
    refused(lambda: engine.prefill(TokenBundle("a", 0, 0, (1, 2, 3, 4, 5))), (OutOfMemory,), "5 positions of 4")
    assert engine.used_tokens == 0 and engine.session("a") is None, "a failed allocation holds something"
    answered(lambda: engine.prefill(TokenBundle("a", 0, 0, (1, 2, 3))), "3 positions of 4")
    refused(lambda: engine.prefill(TokenBundle("b", 0, 0, (1, 2))), (OutOfMemory,), "2 positions with 1 free")
    assert engine.used_tokens == 3 and engine.session("b") is None, "a failed allocation holds something"
    answered(lambda: engine.decode(TokenBundle("a", 0, 3, (1,))), "the last free position (a check off by one)")
    assert engine.used_tokens == 4, f"4 positions held, used_tokens says {engine.used_tokens}"
    answered(lambda: engine.prefill(TokenBundle("a", 1, 0, (2, 1, 3, 4))),
             "4 positions at a newer epoch, in place of the older epoch's 4 (counted as free)")
    assert engine.used_tokens == 4, f"4 positions held after a replace, used_tokens says {engine.used_tokens}"
    refused(lambda: engine.prefill(TokenBundle("a", 2, 0, (1, 2, 3, 4, 5))), (OutOfMemory,),
            "5 positions at a newer epoch, in place of 4 of 4")
    view = engine.session("a")
    assert engine.used_tokens == 4 and view is not None and (view.epoch, view.status, view.cached_tokens) == \
        (1, "live", 4), f"a refused prefill at a newer epoch changed the session ({view}) or the accounting"
    refused(lambda: engine.decode(TokenBundle("a", 1, 4, (1,))), (OutOfMemory,), "a 5th position of 4")


def check_replace_faults(factory: Factory) -> None:
    """An engine that can swap its plan (as a served node's control port does: "replace the
    plan (fresh counters, generator and log)"): the new plan runs from its first call, ``None``
    runs none, and anything else is a ``TypeError`` that keeps the plan in force.  An engine
    without ``replace_faults`` passes: the method is beyond the contract."""
    engine = factory(SPEC, faults=FaultPlan((FaultRule(Crash(), op="prefill", nth=1, count=1),)))
    if not callable(getattr(engine, "replace_faults", None)):
        return
    first, then = TokenBundle("s", 0, 0, (1, 2)), TokenBundle("s", 0, 2, (1,))
    refused(lambda: engine.prefill(first), (EngineCrashed,), "the plan's first prefill")
    engine.restart()
    # Where the engine shows whether it is down (beyond the contract), it is a bool.
    assert getattr(engine, "crashed", False) is False, "an engine shows itself down after a restart"
    engine.replace_faults(FaultPlan((FaultRule(Crash(), op="prefill", nth=1, count=1),)))
    refused(lambda: engine.prefill(first), (EngineCrashed,), "the new plan's first prefill (fresh counters)")
    engine.restart()
    assert engine.prefill(first).pos == 2  # the window of the new plan has passed
    engine.replace_faults(FaultPlan((FaultRule(Crash(), op="decode"),)))
    for junk in (3, "crash", FaultRule(Crash()), [FaultRule(Crash())]):
        refused(lambda: engine.replace_faults(junk), (TypeError,), f"replace_faults({junk!r})")
    refused(lambda: engine.decode(then), (EngineCrashed,), "a decode under the plan kept after a bad replace")
    engine.restart()
    engine.replace_faults(None)
    assert engine.prefill(first).pos == 2 and engine.decode(then).pos == 3, "replace_faults(None) left a plan"


def check_factory_arguments(factory: Factory, *, fixture_choices: Optional[bool] = None) -> None:
    """An engine reports the ``capacity_tokens`` it was built with.  Where the factory makes the
    fixture's choices (``fixture_choices``; read from the factory when ``None``), its
    constructor refuses what the choices refuse: a capacity that is no int >= 0, a clock that
    is no clock, faults that are no plan, a spec that is no ``ShardSpec``, a seed that is no
    int; and its inspection beyond the contract starts empty."""
    spec = SPEC.with_layers(0, 2)
    for capacity in (None, 0, 1, 5):
        for clock in (None, VirtualClock()):
            engine = factory(spec, capacity_tokens=capacity, clock=clock, faults=FaultPlan())
            assert engine.capacity_tokens == capacity, \
                f"an engine built with capacity_tokens={capacity!r} reports {engine.capacity_tokens!r}"
    if not (makes_fixture_choices(factory) if fixture_choices is None else fixture_choices):
        return  # how a factory refuses bad arguments is its own choice
    engine = factory(spec, faults=FaultPlan((FaultRule(Crash(), op="decode"),)))
    if hasattr(engine, "session_ids"):
        assert engine.session_ids() == () and engine.crashed is False
        assert engine.fault_plan == FaultPlan((FaultRule(Crash(), op="decode"),)) and engine.fault_log == ()
    bad: list[tuple[str, Callable[[], Any]]] = [
        *((f"capacity_tokens={c!r}", lambda c=c: factory(spec, capacity_tokens=c)) for c in (-1, "5", True, 2.0)),
        ("a clock that is no clock", lambda: factory(spec, clock=object())),
        ("faults that are a list", lambda: factory(spec, faults=[FaultRule(Crash())])),
        ("a spec that is a dict", lambda: factory({"model_id": "m"})),
        ("seed='1'", lambda: factory(spec, seed="1")),
    ]
    for what, build in bad:
        refused(build, (ValueError, TypeError), f"a factory given {what}")


def check_bad_close(factory: Factory) -> None:
    """Cancel and release with an ill-typed identity, on a fresh engine: ``MalformedBundle``
    (the check after engine up), naming the call as the Errors table says, and nothing
    recorded: no tombstone, nothing held, so a prefill at epoch 0 after them is served."""
    for session_id, epoch in BAD_IDENTITIES:
        engine = factory(SPEC)
        for op in ("cancel", "release"):
            what = f"{op}({session_id!r}, {epoch!r})"
            err = refused(lambda: getattr(engine, op)(session_id, epoch), (MalformedBundle,), what)
            assert isinstance(err, MalformedBundle)
            _names(err, session_id, epoch, what)
        assert engine.used_tokens == 0, f"a refused close of {session_id!r} holds positions"
        if isinstance(session_id, str) and session_id:
            assert engine.session(session_id) is None, f"a refused call left {engine.session(session_id)!r}"
            assert engine.prefill(TokenBundle(session_id, 0, 0, (1, 2))).pos == 2


def check_pipeline(factory: Factory) -> None:
    """A pipeline over each of :data:`TILINGS` meets each rule of the contract's Pipeline row:
    the whole model's spec; ``generate`` at epoch 0, leaving the session open with the prompt
    and every new token but the last cached; ``last_failed_stage`` naming the stage of a failed
    call and ``None`` after a right one; what does not tile refused with ``ValueError``."""
    for cuts in TILINGS:
        pipe = Pipeline([factory(SPEC.with_layers(a, b)) for a, b in cuts])
        assert pipe.spec == SPEC and pipe.last_failed_stage is None, (cuts, pipe.spec, pipe.last_failed_stage)
        assert isinstance(repr(pipe), str) and pipe.used_tokens == 0
        refused(lambda: pipe.generate("s", [1], 0), (ValueError, TypeError), "generate of 0 tokens")
        tokens = pipe.generate("s", [1, 0], 2)
        assert len(tokens) == 2 and pipe.used_tokens == 3 * len(cuts), (cuts, tokens, pipe.used_tokens)
        assert pipe.decode("s", 0, 3, tokens[-1]).pos == 4 and pipe.used_tokens == 4 * len(cuts), \
            "generate did not leave the prompt and every new token but the last cached, at epoch 0"
        pipe.cancel("s", 0)
        assert pipe.used_tokens == 0 and pipe.last_failed_stage is None
        refused(lambda: pipe.release("s", -1), (MalformedBundle,), "release at epoch -1")
        assert pipe.last_failed_stage == 0, f"last_failed_stage is {pipe.last_failed_stage!r} after stage 0 failed"
        pipe.release("s", 0)
        assert pipe.last_failed_stage is None, "last_failed_stage kept after a right call"
    refused(lambda: Pipeline([]), (ValueError,), "a pipeline of no stages")
    no_engine: Any = object()
    refused(lambda: Pipeline([no_engine]), (ValueError,), "a pipeline of a stage without a spec")
    other = ShardSpec("other-model", 4, 2, 4)
    refused(lambda: Pipeline([factory(SPEC.with_layers(0, 2)), factory(other)]), (ValueError,),
            "a pipeline of two models' stages")
    pipe = Pipeline([factory(SPEC.with_layers(a, b)) for a, b in TILINGS[-1]])
    assert len(pipe.generate("g", [1, 2], 3)) == 3 and len(pipe.generate("h", [1], 1)) == 1
    wrong_counts: tuple[Any, ...] = (0, -1, True, 1.0, "2")
    for bad in wrong_counts:
        refused(lambda: pipe.generate("i", [1], bad), (ValueError, TypeError), f"generate of {bad!r} tokens")


def check_pipeline_answers(factory: Factory) -> None:
    """A pipeline judges each stage's answer against its request (the Faults section's
    ``Malformed`` row): a stage whose output breaks in any of ``Malformed``'s ways is refused
    with ``MalformedBundle`` naming the call, before anything is passed on, and
    ``last_failed_stage`` names it.  A cancel reaches every stage and raises the first stage's
    error; a refused cancel changes nothing."""
    ranges = ((0, 1), (1, 3), (3, 4))
    for kind in MALFORMED_KINDS:
        for broken in _breakable(kind, len(ranges)):
            plans = [FaultPlan((FaultRule(Malformed(kind), op="prefill", count=1),)) if i == broken else None
                     for i in range(len(ranges))]
            pipe = Pipeline([factory(SPEC.with_layers(a, b), faults=plans[i]) for i, (a, b) in enumerate(ranges)])
            err = refused(lambda: pipe.prefill("s", 2, 0, [1, 2]), (MalformedBundle,),
                          f"a prefill whose stage {broken} answered broken by Malformed({kind!r})")
            assert isinstance(err, MalformedBundle) and (err.session_id, err.epoch) == ("s", 2), err
            assert pipe.last_failed_stage == broken, \
                f"stage {broken}'s output broken by Malformed({kind!r}) was passed on: the call failed at stage " \
                f"{pipe.last_failed_stage}"
            for later in pipe.stages[broken + 1:]:
                assert later.used_tokens == 0, f"stage {broken}'s broken output reached a later stage"
    pipe = Pipeline([factory(SPEC.with_layers(a, b)) for a, b in ranges])
    sample = pipe.prefill("s", 2, 0, [1, 2])
    assert pipe.last_failed_stage is None and sample.pos == 2 and pipe.used_tokens == 6
    err = refused(lambda: pipe.cancel("s", 1), (StaleEpoch,), "a cancel older than every stage's epoch")
    assert isinstance(err, StaleEpoch) and (err.session_id, err.epoch) == ("s", 1) and pipe.last_failed_stage == 0, \
        f"a stale cancel raised {err!r} with last_failed_stage {pipe.last_failed_stage}, not stage 0's"
    assert pipe.used_tokens == 6, "a refused cancel changed what the stages hold"


def _breakable(kind: str, stages: int) -> list[int]:
    """The stages of a head -> middle -> tail pipeline whose output ``Malformed(kind)`` can break:
    every stage but the last answers hidden states, the last a sample."""
    return [i for i in range(stages) if kind in (SAMPLE_KINDS if i == stages - 1 else HIDDEN_KINDS)]


def check_pipeline_evidence_class(factory: Factory) -> None:
    """A pipeline is real-model only if every stage is (the choices' "a pipeline's
    evidence_class"); and ``answer_problem``, the pipeline's judgement for any caller, finds
    each way an answer can differ from its request and nothing in a right one."""
    ranges = ((0, 1), (1, 3), (3, 4))
    stages = [factory(SPEC.with_layers(a, b)) for a, b in ranges]
    classes = {getattr(stage, "evidence_class", None) for stage in stages}
    assert Pipeline(stages).evidence_class == ("real-model" if classes == {"real-model"} else "fixture")
    claims = [FakeShardEngine(stage.spec) for stage in stages]
    for claim in claims:
        claim.evidence_class = "real-model"  # a claim, for this check only
    assert Pipeline(claims).evidence_class == "real-model"
    if classes != {"real-model"}:
        assert Pipeline([stages[0]] + claims[1:]).evidence_class == "fixture"
        assert Pipeline(claims[:2] + [stages[2]]).evidence_class == "fixture"
    request = TokenBundle("s", 2, 3, (1, 2))
    rows = [(0.5, 0.0, -0.5, 1.0, 0.25, 0.0, 0.0, 2.0)] * 2
    right = HiddenBundle.sealed("s", 2, 3, 1, rows)
    head, tail = SPEC.with_layers(0, 1), SPEC.with_layers(3, 4)
    assert answer_problem(head, request, 2, right, last=False, model=SPEC) is None
    assert answer_problem(tail, request, 2, SampleBundle("s", 2, 5, 7), last=True) is None
    damaged = dataclasses.replace(right, checksum=damaged_checksum(right.checksum))
    hidden = [HiddenBundle.sealed("t", 2, 3, 1, rows), HiddenBundle.sealed("s", 1, 3, 1, rows),
              HiddenBundle.sealed("s", 2, 2, 1, rows), HiddenBundle.sealed("s", 2, 3, 1, rows[:1]),
              HiddenBundle.sealed("s", 2, 3, 2, rows), damaged,
              HiddenBundle.sealed("s", 2, 3, 1, [r[:4] for r in rows])]
    wrong = [*((head, out, False) for out in hidden), (head, SampleBundle("s", 2, 5, 7), False), (head, right, True),
             (tail, SampleBundle("s", 2, 4, 7), True), (tail, SampleBundle("s", 2, 5, SPEC.vocab_size), True),
             (tail, SampleBundle("t", 2, 5, 7), True)]
    for stage, out, last in wrong:
        problem = answer_problem(stage, request, 2, out, last=last, model=SPEC)
        assert isinstance(problem, str) and problem, f"answer_problem found nothing wrong in {out!r} (last={last})"


#: The powers of two a session grows past in :func:`check_long_session`: 8 to 2**16, the widths a
#: position or a count may be kept in (a byte, 15 and 16 bits) and every one between.
LONG_SESSION_BOUNDARIES = tuple(2**k for k in range(3, 17))


def check_long_session(factory: Factory) -> None:
    """A session that grows past every power of two of :data:`LONG_SESSION_BOUNDARIES` counts every
    position: a prefill ends just below each, then two decodes cross it, and after each call the
    answer's ``pos``, the session's ``cached_tokens`` and the engine's ``used_tokens`` are the
    positions fed; the last token is the one a fresh engine of the same seed answers to the whole
    history in one prefill (within the factory's tolerance, near ties by its logits). So a position
    or a count kept in too narrow an integer, wrapping or saturating at 2**15 or 2**16, is caught at
    once, not only when a long campaign's draws reach it. An engine whose cost bounds its lengths
    (a factory's ``machine_max_positions``) grows only that far."""
    from fakeshard._judge import Judge

    longest = min(2**16 + 2, int(getattr(factory, "machine_max_positions", 2**16 + 2)))
    history = [(7 * i + 1) % SPEC.vocab_size for i in range(longest)]
    engine = factory(SPEC, seed=3)
    fed, last = 0, None

    def grown(call: str, start: int, end: int) -> None:
        nonlocal fed, last
        bundle = TokenBundle("long", 0, start, tuple(history[start:end]))
        out = answered(lambda: getattr(engine, call)(bundle), f"a {call} of positions {start} to {end - 1}")
        view = engine.session("long")
        seen = (out.pos, None if view is None else view.cached_tokens, engine.used_tokens)
        assert seen == (end, end, end), (
            f"after a {call} of positions {start} to {end - 1}, the answer's pos, the session's cached_tokens "
            f"and the engine's used_tokens are {seen}, not {end} each (a position or count kept in too narrow "
            "an integer?)")
        fed, last = end, out.token

    for boundary in LONG_SESSION_BOUNDARIES:
        if boundary + 1 > longest:
            break
        if boundary - 1 > fed:
            grown("prefill", fed, boundary - 1)
        grown("decode", boundary - 1, boundary)
        grown("decode", boundary, boundary + 1)
    whole = answered(lambda: factory(SPEC, seed=3).prefill(TokenBundle("whole", 0, 0, tuple(history[:fed]))),
                     f"one prefill of {fed} positions")
    assert Judge(factory).token_ok(SPEC, 3, history[:fed], whole.token, last), (
        f"after {fed} positions fed in pieces the session's token is {last}; one prefill of the same history "
        f"answers {whole.token}")


#: Every check of this module, in the order ``fakeshard check`` runs them.
ENGINE_CHECKS: tuple[Callable[[Factory], None], ...] = (
    check_new_engine, check_defaults, check_capacity_edges, check_capacity_without_faults, check_replace_faults,
    check_factory_arguments,
    check_bad_close, check_pipeline, check_pipeline_answers, check_pipeline_evidence_class, check_long_session,
)

#: The checks of a node's own HTTP layer (keep-alive and pipelining, ``HEAD``, ``405`` with
#: ``Allow``, ``404``, ``415``, a bad ``?hidden=``, an error to a frame request, ``413``), for a
#: factory whose engines are nodes over HTTP (an engine host's, or served ones): ``fakeshard
#: check`` runs them beside :data:`ENGINE_CHECKS` there, and skips them, saying so, elsewhere.
HTTP_CHECKS: tuple[Callable[[Factory], None], ...] = _http_checks.HTTP_CHECKS
