"""The contract's session table, row by row, on every role of the engine under test.

Runs on the engine factory named by ``--engine`` / ``$FAKESHARD_ENGINE``
(default: the fixture engine); each result is marked with its evidence class.
"""

from __future__ import annotations

import pytest

from fakeshard import (
    CacheMiss,
    Crash,
    EngineCrashed,
    FaultPlan,
    FaultRule,
    HiddenBundle,
    MalformedBundle,
    OutOfMemory,
    PositionMismatch,
    SampleBundle,
    SessionCancelled,
    SessionReleased,
    StaleEpoch,
)
from tests.support import ROLES, WORDING, Rig, raises_untouched

COMPUTE = ("prefill", "decode")
CLOSE = ("cancel", "release")
CLOSED_ERROR = {"cancel": SessionCancelled, "release": SessionReleased}
STATUS = {"cancel": "cancelled", "release": "released"}


@pytest.fixture(params=ROLES)
def rig(request, engine_factory):
    return Rig(engine_factory, request.param)


def compute(rig, op, sid, epoch, pos, n=1):
    if op == "prefill":
        return rig.prefill(sid, epoch, pos, n)
    return rig.decode(sid, epoch, pos)


# -- live at this epoch, positions match: appended ---------------------------------


def test_prefill_then_decode_appends_positions(rig):
    out = rig.prefill("s", 0, 0, 3)
    assert rig.engine.session("s").cached_tokens == 3
    rig.decode("s", 0, 3)
    rig.prefill("s", 0, 4, 2)
    view = rig.engine.session("s")
    assert (view.epoch, view.status, view.cached_tokens) == (0, "live", 6)
    assert rig.engine.used_tokens == 6
    if rig.spec.role.samples:
        assert isinstance(out, SampleBundle) and out.pos == 3
    else:
        assert isinstance(out, HiddenBundle)
        assert (out.start_pos, out.layer, len(out.hidden)) == (0, rig.spec.end_layer, 3)


def test_sessions_are_independent(rig):
    rig.prefill("a", 0, 0, 2)
    rig.prefill("b", 5, 0, 4)
    rig.engine.release("a", 0)
    assert rig.engine.session("b").cached_tokens == 4
    assert rig.engine.used_tokens == 4


# -- stale epoch -----------------------------------------------------------------


@pytest.mark.parametrize("op", COMPUTE)
def test_stale_compute_is_refused(rig, op):
    rig.prefill("s", 2, 0, 2)
    err = raises_untouched(rig, ["s"], StaleEpoch, lambda: compute(rig, op, "s", 1, 0 if op == "prefill" else 2))
    assert (err.code, err.session_id, err.epoch) == ("stale_epoch", "s", 1)


@pytest.mark.parametrize("op", CLOSE)
def test_stale_close_is_refused(rig, op):
    rig.prefill("s", 2, 0, 2)
    err = raises_untouched(rig, ["s"], StaleEpoch, lambda: getattr(rig.engine, op)("s", 1))
    assert (err.session_id, err.epoch) == ("s", 1)


@pytest.mark.parametrize("op", CLOSE)
def test_stale_against_a_tombstone(rig, op):
    getattr(rig.engine, op)("s", 3)
    raises_untouched(rig, ["s"], StaleEpoch, lambda: rig.prefill("s", 2, 0, 1))


# -- cancelled / released at this epoch ---------------------------------------------


@pytest.mark.parametrize("closer", CLOSE)
@pytest.mark.parametrize("op", COMPUTE)
def test_closed_session_refuses_compute(rig, closer, op):
    rig.prefill("s", 1, 0, 2)
    getattr(rig.engine, closer)("s", 1)
    start = 0 if op == "prefill" else 2
    err = raises_untouched(rig, ["s"], CLOSED_ERROR[closer], lambda: compute(rig, op, "s", 1, start))
    assert (err.session_id, err.epoch) == ("s", 1)


@pytest.mark.parametrize("closer", CLOSE)
@pytest.mark.parametrize("second", CLOSE)
def test_closing_a_closed_session_is_a_no_op(rig, closer, second):
    rig.prefill("s", 1, 0, 2)
    getattr(rig.engine, closer)("s", 1)
    before = rig.snapshot("s")
    assert getattr(rig.engine, second)("s", 1) is None
    assert rig.snapshot("s") == before
    assert rig.engine.session("s").status == STATUS[closer]


# -- nothing held at this epoch -------------------------------------------------------


def test_prefill_at_zero_creates_the_session(rig):
    assert rig.engine.session("new") is None
    rig.prefill("new", 4, 0, 2)
    view = rig.engine.session("new")
    assert (view.session_id, view.epoch, view.status, view.cached_tokens) == ("new", 4, "live", 2)


@pytest.mark.parametrize("op,pos", [("prefill", 3), ("decode", 0), ("decode", 5)])
def test_nothing_held_is_a_cache_miss(rig, op, pos):
    err = raises_untouched(rig, ["s"], CacheMiss, lambda: compute(rig, op, "s", 0, pos))
    assert (err.code, err.session_id, err.epoch, err.expected, err.got) == ("cache_miss", "s", 0, 0, pos)
    assert rig.engine.session("s") is None


@pytest.mark.parametrize("op,pos", [("prefill", 2), ("decode", 2)])
def test_newer_epoch_without_replay_from_zero_is_a_cache_miss(rig, op, pos):
    rig.prefill("s", 0, 0, 2)
    err = raises_untouched(rig, ["s"], CacheMiss, lambda: compute(rig, op, "s", 1, pos))
    assert (err.expected, err.got, err.epoch) == (0, pos, 1)
    # The fence did not move: the old epoch still works.
    rig.decode("s", 0, 2)
    assert rig.engine.session("s").cached_tokens == 3


def test_prefill_at_a_newer_epoch_drops_the_older_cache(rig):
    rig.prefill("s", 0, 0, 5)
    rig.prefill("s", 1, 0, 2)
    view = rig.engine.session("s")
    assert (view.epoch, view.cached_tokens) == (1, 2)
    assert rig.engine.used_tokens == 2
    raises_untouched(rig, ["s"], StaleEpoch, lambda: rig.decode("s", 0, 5))


@pytest.mark.parametrize("op", CLOSE)
def test_close_before_prefill_leaves_a_tombstone(rig, op):
    getattr(rig.engine, op)("late", 2)
    view = rig.engine.session("late")
    assert (view.epoch, view.status, view.cached_tokens) == (2, STATUS[op], 0)
    raises_untouched(rig, ["late"], CLOSED_ERROR[op], lambda: rig.prefill("late", 2, 0, 3))
    # A newer epoch is a new life.
    rig.prefill("late", 3, 0, 3)
    assert rig.engine.session("late").status == "live"


@pytest.mark.parametrize("op", CLOSE)
def test_close_at_a_newer_epoch_drops_the_older_cache(rig, op):
    rig.prefill("s", 0, 0, 4)
    getattr(rig.engine, op)("s", 1)
    view = rig.engine.session("s")
    assert (view.epoch, view.status, view.cached_tokens) == (1, STATUS[op], 0)
    assert rig.engine.used_tokens == 0
    raises_untouched(rig, ["s"], StaleEpoch, lambda: rig.decode("s", 0, 4))


# -- live at this epoch, wrong position ------------------------------------------------


@pytest.mark.parametrize("op,pos", [("prefill", 0), ("prefill", 2), ("prefill", 4), ("decode", 2), ("decode", 9)])
def test_wrong_position_is_a_mismatch(rig, op, pos):
    rig.prefill("s", 0, 0, 3)
    err = raises_untouched(rig, ["s"], PositionMismatch, lambda: compute(rig, op, "s", 0, pos))
    assert (err.code, err.session_id, err.epoch, err.expected, err.got) == ("position_mismatch", "s", 0, 3, pos)


@pytest.mark.parametrize("op", CLOSE)
def test_close_frees_a_live_session(rig, op):
    rig.prefill("s", 0, 0, 3)
    rig.prefill("t", 0, 0, 2)
    assert getattr(rig.engine, op)("s", 0) is None
    view = rig.engine.session("s")
    assert (view.epoch, view.status, view.cached_tokens) == (0, STATUS[op], 0)
    assert rig.engine.used_tokens == 2


# -- order of checks ------------------------------------------------------------------


def _crashing(engine_factory, role):
    """A rig whose engine crashes on a release of session ``crash-now`` (a contract fault)."""
    return Rig(engine_factory, role, faults=FaultPlan((FaultRule(Crash(), op="release", session_id="crash-now"),)))


def _crash(rig):
    with pytest.raises(EngineCrashed):
        rig.engine.release("crash-now", 0)


@pytest.mark.parametrize("role", ROLES)
def test_crashed_comes_before_malformed(engine_factory, role):
    rig = _crashing(engine_factory, role)
    _crash(rig)
    with pytest.raises(EngineCrashed):
        rig.engine.prefill("not a bundle")
    with pytest.raises(EngineCrashed):
        rig.engine.cancel("", -1)


def test_malformed_comes_before_stale(rig):
    rig.prefill("s", 3, 0, 1)
    bad = rig.bundle("s", 1, 0, 2)
    bad = bad.__class__(**{**_fields(bad), "contract": "0"})
    raises_untouched(rig, ["s"], MalformedBundle, lambda: rig.engine.prefill(bad))


def test_stale_comes_before_closed_and_position(rig):
    rig.prefill("s", 1, 0, 2)
    rig.engine.cancel("s", 1)
    raises_untouched(rig, ["s"], StaleEpoch, lambda: rig.prefill("s", 0, 5, 1))


def test_closed_comes_before_position(rig):
    rig.prefill("s", 1, 0, 2)
    rig.engine.release("s", 1)
    raises_untouched(rig, ["s"], SessionReleased, lambda: rig.prefill("s", 1, 7, 1))


def test_position_and_cache_miss_come_before_memory(engine_factory):
    rig = Rig(engine_factory, "full", capacity_tokens=2)
    rig.prefill("s", 0, 0, 2)
    raises_untouched(rig, ["s"], PositionMismatch, lambda: rig.prefill("s", 0, 1, 5))
    raises_untouched(rig, ["s"], CacheMiss, lambda: rig.prefill("s", 1, 1, 5))
    raises_untouched(rig, ["s"], OutOfMemory, lambda: rig.prefill("s", 0, 2, 1))


# -- crash and restart -------------------------------------------------------------------


@pytest.mark.parametrize("role", ROLES)
def test_crash_wipes_sessions_and_tombstones_until_restart(engine_factory, role):
    rig = _crashing(engine_factory, role)
    rig.prefill("s", 0, 0, 3)
    rig.engine.cancel("t", 4)
    _crash(rig)
    for call in (lambda: rig.prefill("s", 0, 3, 1), lambda: rig.engine.cancel("s", 0),
                 lambda: rig.engine.release("x", 0), lambda: rig.decode("s", 0, 3)):
        with pytest.raises(EngineCrashed) as info:
            call()
        assert info.value.code == "engine_crashed"
    assert rig.engine.used_tokens == 0 and rig.engine.session("s") is None
    rig.engine.restart()
    assert rig.engine.session("t") is None  # the tombstone is gone too
    rig.prefill("t", 0, 0, 1)
    with pytest.raises(CacheMiss):
        rig.decode("s", 0, 3)


@pytest.mark.fixture_choice(WORDING)
def test_a_down_engine_says_which_layers_and_how_to_bring_them_back(engine_factory):
    rig = _crashing(engine_factory, "middle")
    _crash(rig)
    for op, call in (("prefill", lambda: rig.prefill("s", 0, 0, 1)), ("cancel", lambda: rig.engine.cancel("s", 0))):
        with pytest.raises(EngineCrashed) as info:
            call()
        assert str(info.value) == f"{op}: engine for layers 1..3 is down; restart() brings it back empty"


def test_restart_of_a_running_engine_empties_it(rig):
    rig.prefill("s", 0, 0, 3)
    rig.engine.restart()
    assert rig.engine.session("s") is None and rig.engine.used_tokens == 0


# -- a failed call changes nothing: the next output is the untouched one's ----------------


def test_failed_calls_do_not_change_later_outputs(rig, engine_factory):
    twin = Rig(engine_factory, rig.spec.role.value)
    for r in (rig, twin):
        r.prefill("s", 0, 0, 3)
    for fail in (lambda: rig.prefill("s", 0, 1, 2), lambda: rig.prefill("s", 1, 2, 1),
                 lambda: rig.decode("s", 1, 3), lambda: rig.engine.cancel("s", -1)):
        with pytest.raises((PositionMismatch, CacheMiss, MalformedBundle)):
            fail()
    assert rig.decode("s", 0, 3) == twin.decode("s", 0, 3)


def _fields(bundle):
    return {name: getattr(bundle, name) for name in bundle.__dataclass_fields__}
