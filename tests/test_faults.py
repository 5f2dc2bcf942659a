"""Fault plans: each fault's effect, how rules are drawn, and exact replay."""

from __future__ import annotations

import pytest

from fakeshard import (
    CacheMiss,
    Crash,
    Delay,
    DropResponse,
    EngineCrashed,
    FaultPlan,
    FaultRule,
    HiddenBundle,
    Malformed,
    MalformedBundle,
    MemoryPressure,
    OutOfMemory,
    PositionMismatch,
    ResponseLost,
    SampleBundle,
    StaleEpoch,
    validate,
)
from fakeshard._faults import MALFORMED_KINDS
from fakeshard.testing._http_checks import makes_http_nodes
from tests.support import CONSTRUCTOR, ROLES, WORDING, Rig, assert_carries, raises_untouched

#: The reason given where a test reads ``fault_log`` (the contract observes faults by their effects).
FAULT_LOG = "fault_log, the record of fired faults (not in the contract or the ShardEngine protocol)"


def plan(*rules, seed=0):
    return FaultPlan(tuple(rules), seed=seed)


# -- Delay ---------------------------------------------------------------------------


@pytest.mark.parametrize("role", ROLES)
def test_delay_costs_clock_time_and_changes_nothing_else(engine_factory, role):
    slow = Rig(engine_factory, role, faults=plan(FaultRule(Delay(1.25), op="prefill", count=None)))
    fast = Rig(engine_factory, role)
    assert slow.prefill("s", 0, 0, 3) == fast.prefill("s", 0, 0, 3)
    assert slow.clock.now() == 1.25 and fast.clock.now() == 0.0
    assert slow.decode("s", 0, 3) == fast.decode("s", 0, 3)
    assert slow.clock.now() == 1.25  # decode is not targeted


def test_delay_applies_to_a_failing_call_too(engine_factory):
    rig = Rig(engine_factory, "full", faults=plan(FaultRule(Delay(0.5))))
    with pytest.raises(CacheMiss):
        rig.decode("s", 0, 0)
    assert rig.clock.now() == 0.5


def test_without_faults_calls_take_no_time(engine_factory):
    rig = Rig(engine_factory, "full")
    rig.prefill("s", 0, 0, 4)
    rig.decode("s", 0, 4)
    rig.engine.release("s", 0)
    assert rig.clock.now() == 0.0


# -- MemoryPressure --------------------------------------------------------------------


@pytest.mark.needs_faults("MemoryPressure")
@pytest.mark.parametrize("capacity", [None, 100])
def test_memory_pressure_none_fails_the_allocation(engine_factory, capacity):
    rig = Rig(engine_factory, "full", capacity_tokens=capacity,
              faults=plan(FaultRule(MemoryPressure(), op="decode")))
    rig.prefill("s", 0, 0, 2)
    err = raises_untouched(rig, ["s"], OutOfMemory, lambda: rig.decode("s", 0, 2))
    assert_carries(err, "out_of_memory", "s", 0)
    rig.decode("s", 0, 2)  # count=1: spent


@pytest.mark.needs_faults("MemoryPressure")
@pytest.mark.parametrize("order", [(3, 4), (4, 3)])
def test_two_reserves_on_one_call_add_up(engine_factory, order):
    rig = Rig(engine_factory, "full", capacity_tokens=10,
              faults=plan(*(FaultRule(MemoryPressure(n), op="prefill") for n in order)))
    err = raises_untouched(rig, ["s"], OutOfMemory, lambda: rig.prefill("s", 1, 0, 4))  # 4 > 10 - (3 + 4)
    assert_carries(err, "out_of_memory", "s", 1)
    rig.prefill("s", 1, 0, 4)  # both spent


@pytest.mark.fixture_choice(WORDING)
def test_out_of_memory_says_where_and_how_much(engine_factory):
    rig = Rig(engine_factory, "full", capacity_tokens=5, faults=plan(
        FaultRule(MemoryPressure(), op="decode"), FaultRule(MemoryPressure(4), op="prefill", nth=2)))
    rig.prefill("s", 2, 0, 2)
    calls = [lambda: rig.decode("s", 2, 2),     # MemoryPressure(None)
             lambda: rig.prefill("t", 0, 0, 1),  # 4 reserved, 2 used: less than nothing is left
             lambda: rig.prefill("t", 0, 0, 4)]  # the reserve spent: 3 left
    messages = [str(raises_untouched(rig, ["s", "t"], OutOfMemory, call)) for call in calls]
    assert messages == [
        "decode session 's' epoch 2: allocation of 1 positions failed under memory pressure",
        "prefill session 't' epoch 0: needs 1 positions, 0 of 5 available",
        "prefill session 't' epoch 0: needs 4 positions, 3 of 5 available",
    ]


@pytest.mark.needs_faults("MemoryPressure")
def test_memory_pressure_reserve_shrinks_capacity_for_the_call(engine_factory):
    rig = Rig(engine_factory, "full", capacity_tokens=10,
              faults=plan(FaultRule(MemoryPressure(3), op="prefill", count=2)))
    rig.prefill("a", 0, 0, 4)                     # 4 <= 10 - 3 - 0
    raises_untouched(rig, ["a", "b"], OutOfMemory, lambda: rig.prefill("b", 0, 0, 4))  # 4 > 10 - 3 - 4
    rig.prefill("b", 0, 0, 6)                     # rule spent: 6 <= 10 - 4
    assert rig.engine.used_tokens == 10


@pytest.mark.needs_faults("MemoryPressure")
def test_memory_pressure_reserve_without_capacity_has_no_effect(engine_factory):
    rig = Rig(engine_factory, "full", faults=plan(FaultRule(MemoryPressure(10**6), count=None)))
    rig.prefill("s", 0, 0, 50)


@pytest.mark.needs_faults("MemoryPressure")
def test_memory_pressure_is_spent_on_a_call_that_fails_first(engine_factory):
    rig = Rig(engine_factory, "full", faults=plan(FaultRule(MemoryPressure(), op="prefill")))
    raises_untouched(rig, ["s"], CacheMiss, lambda: rig.prefill("s", 0, 3, 1))
    rig.prefill("s", 0, 0, 1)


@pytest.mark.needs_faults("MemoryPressure")
def test_memory_pressure_on_close_is_spent_without_effect(engine_factory):
    rig = Rig(engine_factory, "full", faults=plan(FaultRule(MemoryPressure(), op="cancel")))
    rig.prefill("s", 0, 0, 1)
    rig.engine.cancel("s", 0)
    assert rig.engine.session("s").status == "cancelled"


# -- Malformed ----------------------------------------------------------------------------

HIDDEN_KINDS = ("checksum", "shape", "layer", "nan", "session", "epoch", "position")
SAMPLE_KINDS = ("token_range", "session", "epoch", "position")


def _malformed_and_clean(engine_factory, role, kind):
    rig = Rig(engine_factory, role, faults=plan(FaultRule(Malformed(kind), op="decode")))
    clean = Rig(engine_factory, role)
    for r in (rig, clean):
        r.prefill("s", 0, 0, 2)
    out, good = rig.decode("s", 0, 2), clean.decode("s", 0, 2)
    assert rig.engine.session("s") == clean.engine.session("s")  # the call was applied
    applies = kind in (SAMPLE_KINDS if rig.spec.role.samples else HIDDEN_KINDS)
    return rig, out, good, applies


def _finite(bundle):
    return all(v == v and abs(v) != float("inf") for row in bundle.rows() for v in row)


@pytest.mark.parametrize("kind", MALFORMED_KINDS)
@pytest.mark.parametrize("role", ROLES)
def test_malformed_output_is_applied_and_broken_in_the_named_way(engine_factory, role, kind):
    """What the contract asks: the named field is wrong, and who can tell (the bundle, or the receiver)."""
    rig, out, good, applies = _malformed_and_clean(engine_factory, role, kind)
    if not applies:
        assert out == good  # no field for it: spent without effect
        return
    assert out != good
    full = rig.spec.with_layers(0, rig.spec.n_layers)
    if isinstance(out, HiddenBundle):
        resealed = HiddenBundle.sealed(out.session_id, out.epoch, out.start_pos, out.layer, out.hidden)
        changed = {
            "checksum": out.checksum != resealed.checksum and out.rows() == good.rows(),
            "shape": len(out.rows()) != len(good.rows()) or any(
                len(row) != rig.spec.hidden_size for row in out.rows()),
            "layer": out.layer != good.layer,
            "nan": not _finite(out),
            "session": out.session_id != good.session_id,
            "epoch": out.epoch != good.epoch,
            "position": out.start_pos != good.start_pos,
        }
    else:
        assert isinstance(out, SampleBundle)
        changed = {
            "token_range": not 0 <= out.token < rig.spec.vocab_size,
            "session": out.session_id != good.session_id,
            "epoch": out.epoch != good.epoch,
            "position": out.pos != good.pos,
        }
    assert changed[kind], (kind, out, good)
    if kind in ("checksum", "shape", "nan", "token_range"):
        with pytest.raises(MalformedBundle):
            validate(out, full)  # the bundle alone shows it


@pytest.mark.fixture_choice("how Malformed breaks an output exactly: the fields change by one, a session id "
                            "gains a '~', one column goes, a NaN lands at [0][0], the checksum is resealed over "
                            "the break, and a checksum break changes its first hex digit only")
@pytest.mark.parametrize("kind", MALFORMED_KINDS)
@pytest.mark.parametrize("role", ROLES)
def test_malformed_output_is_broken_the_fixture_way(engine_factory, role, kind):
    rig, out, good, applies = _malformed_and_clean(engine_factory, role, kind)
    if not applies:
        return
    if isinstance(out, HiddenBundle):
        changed = {
            "checksum": out.rows() == good.rows() and len(out.checksum) == len(good.checksum) == 16
            and out.checksum[0] != good.checksum[0] and out.checksum[1:] == good.checksum[1:]
            and set(out.checksum) <= set("0123456789abcdef"),
            "shape": len(out.rows()[0]) == len(good.rows()[0]) - 1,
            "layer": out.layer == good.layer + 1,
            "nan": out.rows()[0][0] != out.rows()[0][0],
            "session": out.session_id == good.session_id + "~",
            "epoch": out.epoch == good.epoch + 1,
            "position": out.start_pos == good.start_pos + 1,
        }
    else:
        changed = {
            "token_range": out.token == rig.spec.vocab_size,
            "session": out.session_id == good.session_id + "~",
            "epoch": out.epoch == good.epoch + 1,
            "position": out.pos == good.pos + 1,
        }
    assert changed[kind]
    if kind not in ("checksum", "shape", "nan", "token_range"):
        validate(out)  # looks fine alone: only the receiver or the Pipeline can tell


@pytest.mark.parametrize("kind", MALFORMED_KINDS)
@pytest.mark.parametrize("role", ["head", "full"])
def test_two_rules_of_one_kind_still_break_the_output(engine_factory, role, kind):
    """Found by the faults machine: applying a corruption twice must not undo it."""
    rule = FaultRule(Malformed(kind), op="prefill", count=None)
    rig = Rig(engine_factory, role, faults=plan(rule, rule))
    clean = Rig(engine_factory, role)
    applies = kind in (SAMPLE_KINDS if rig.spec.role.samples else HIDDEN_KINDS)
    # Many session ids give many checksums, so every leading hex digit occurs.
    for i in range(64):
        out, good = rig.prefill(f"s{i}", 0, 0, 2), clean.prefill(f"s{i}", 0, 0, 2)
        assert (out != good) == applies


@pytest.mark.fixture_choice("a checksum break changes the first hex digit only (to 0, or to 1 where it was 0)")
def test_a_checksum_break_stays_sixteen_hex_digits_whatever_the_checksum(engine_factory):
    rig = Rig(engine_factory, "head", faults=plan(FaultRule(Malformed("checksum"), op="prefill", count=None)))
    clean = Rig(engine_factory, "head")
    firsts = set()
    for i in range(64):  # many session ids give many checksums, so one that starts with 0 occurs
        out, good = rig.prefill(f"s{i}", 0, 0, 2), clean.prefill(f"s{i}", 0, 0, 2)
        firsts.add(good.checksum[0])
        assert out.checksum == ("1" if good.checksum[0] == "0" else "0") + good.checksum[1:], (out, good)
    assert "0" in firsts


@pytest.mark.parametrize("other", [k for k in HIDDEN_KINDS if k != "checksum"])
def test_two_kinds_on_one_call_still_break_the_output(engine_factory, other):
    """The contract: an output with any Malformed kind fired is refused by its receiver."""
    rig = Rig(engine_factory, "head", faults=plan(FaultRule(Malformed("checksum")),
                                                  FaultRule(Malformed(other))))
    out = rig.prefill("s", 0, 0, 2)
    clean = Rig(engine_factory, "head").prefill("s", 0, 0, 2)
    assert out != clean
    resealed = HiddenBundle.sealed(out.session_id, out.epoch, out.start_pos, out.layer, out.hidden)
    tail = Rig(engine_factory, "tail")
    if out.checksum == resealed.checksum and other in ("session", "epoch", "position"):
        return  # a consistent bundle with a wrong identity: only the Pipeline can tell (its own test)
    with pytest.raises(MalformedBundle):
        tail.engine.prefill(out)


@pytest.mark.fixture_choice("how Malformed kinds combine on one output: a checksum break survives the "
                            "other kinds (applied last)")
@pytest.mark.parametrize("other", [k for k in HIDDEN_KINDS if k != "checksum"])
def test_checksum_stays_broken_beside_other_kinds(engine_factory, other):
    """Found by the faults machine: a later kind recomputed the checksum, undoing the break."""
    rig = Rig(engine_factory, "head", faults=plan(FaultRule(Malformed("checksum")),
                                                  FaultRule(Malformed(other))))
    out = rig.prefill("s", 0, 0, 2)
    resealed = HiddenBundle.sealed(out.session_id, out.epoch, out.start_pos, out.layer, out.hidden)
    assert out.checksum != resealed.checksum


def test_malformed_layer_is_refused_by_the_next_engine(engine_factory):
    head = Rig(engine_factory, "head", faults=plan(FaultRule(Malformed("layer"))))
    tail = Rig(engine_factory, "tail")
    out = head.prefill("s", 0, 0, 2)
    with pytest.raises(MalformedBundle) as info:
        tail.engine.prefill(out)
    assert_carries(info.value, "malformed_bundle", "s", 0)


@pytest.mark.parametrize("op", ["cancel", "release"])
def test_malformed_on_close_is_spent_without_effect(engine_factory, op):
    rig = Rig(engine_factory, "full", faults=plan(FaultRule(Malformed("nan"))))
    assert getattr(rig.engine, op)("s", 0) is None


# -- Crash -----------------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["prefill", "decode", "cancel", "release"])
def test_crash_takes_the_engine_down_before_applying(engine_factory, op):
    nth = 2 if op == "prefill" else 1  # the setup prefill is matching call 1
    rig = Rig(engine_factory, "full", faults=plan(FaultRule(Crash(), op=op, nth=nth)))
    rig.prefill("s", 0, 0, 2)
    call = {"prefill": lambda: rig.prefill("t", 0, 0, 1), "decode": lambda: rig.decode("s", 0, 2),
            "cancel": lambda: rig.engine.cancel("s", 0), "release": lambda: rig.engine.release("s", 0)}[op]
    with pytest.raises(EngineCrashed) as info:
        call()
    assert info.value.session_id in ("s", "t") and info.value.epoch == 0
    assert rig.engine.used_tokens == 0 and rig.engine.session("s") is None
    with pytest.raises(EngineCrashed):
        rig.prefill("s", 0, 0, 1)
    rig.engine.restart()
    assert rig.engine.session("t") is None  # not applied
    rig.prefill("s", 0, 0, 1)


# -- DropResponse -------------------------------------------------------------------------------


@pytest.mark.parametrize("role", ROLES)
def test_dropped_response_is_applied(engine_factory, role):
    rig = Rig(engine_factory, role, faults=plan(FaultRule(DropResponse(), op="decode")))
    rig.prefill("s", 0, 0, 2)
    with pytest.raises(ResponseLost) as info:
        rig.decode("s", 0, 2)
    assert (info.value.code, info.value.session_id, info.value.epoch) == ("response_lost", "s", 0)
    assert rig.engine.session("s").cached_tokens == 3
    # A blind retry now sees the position moved on: the ambiguity is real.
    with pytest.raises(PositionMismatch) as mismatch:
        rig.decode("s", 0, 2)
    assert (mismatch.value.expected, mismatch.value.got) == (3, 2)


@pytest.mark.parametrize("op", ["cancel", "release"])
def test_dropped_close_is_applied(engine_factory, op):
    rig = Rig(engine_factory, "full", faults=plan(FaultRule(DropResponse(), op=op)))
    rig.prefill("s", 0, 0, 2)
    with pytest.raises(ResponseLost):
        getattr(rig.engine, op)("s", 0)
    assert rig.engine.session("s").cached_tokens == 0
    assert rig.engine.session("s").status in ("cancelled", "released")


def test_drop_is_spent_on_a_call_that_fails_first(engine_factory):
    rig = Rig(engine_factory, "full", faults=plan(FaultRule(DropResponse())))
    raises_untouched(rig, ["s"], CacheMiss, lambda: rig.decode("s", 0, 0))
    rig.prefill("s", 0, 0, 1)  # no ResponseLost: the drop was spent on the failed call


@pytest.mark.fixture_choice(FAULT_LOG)
def test_fault_log_records_a_spent_fault(engine_factory):
    rig = Rig(engine_factory, "full", faults=plan(FaultRule(DropResponse())))
    with pytest.raises(CacheMiss):
        rig.decode("s", 0, 0)
    assert [(f.call, f.op, f.session_id, f.fault) for f in rig.engine.fault_log] == [
        (1, "decode", "s", DropResponse())]


# -- how rules are drawn ---------------------------------------------------------------------------


def _delayed_calls(rig, calls):
    """Which of ``calls`` (1-based) took time on the engine's clock: where a Delay rule fired."""
    fired = []
    for number, call in enumerate(calls, 1):
        before = rig.clock.now()
        call()
        if rig.clock.now() != before:
            fired.append(number)
    return fired


def _prefill_then_decodes(rig, n_decodes):
    return [lambda: rig.prefill("s", 0, 0, 1)] + [
        (lambda pos=pos: rig.decode("s", 0, pos)) for pos in range(1, n_decodes + 1)]


def test_nth_and_count_select_a_window_of_matching_calls(engine_factory):
    rig = Rig(engine_factory, "full", faults=plan(FaultRule(Delay(1.0), op="decode", nth=2, count=3)))
    # Calls: 1 prefill, then decodes 2..7; matching decodes 2, 3, 4 (calls 3, 4, 5).
    assert _delayed_calls(rig, _prefill_then_decodes(rig, 6)) == [3, 4, 5]
    assert rig.clock.now() == 3.0


def test_count_none_fires_on_every_call_from_nth(engine_factory):
    rig = Rig(engine_factory, "full", faults=plan(FaultRule(Delay(1.0), nth=3, count=None)))
    assert _delayed_calls(rig, _prefill_then_decodes(rig, 5)) == [3, 4, 5, 6]


def test_failing_calls_count_as_matching(engine_factory):
    rig = Rig(engine_factory, "full", faults=plan(FaultRule(DropResponse(), op="decode", nth=2)))
    with pytest.raises(CacheMiss):
        rig.decode("s", 0, 0)  # matching call 1, fails
    rig.prefill("s", 0, 0, 1)
    with pytest.raises(ResponseLost):
        rig.decode("s", 0, 1)  # matching call 2


def test_session_targeting(engine_factory):
    rig = Rig(engine_factory, "full", faults=plan(FaultRule(Crash(), session_id="victim")))
    rig.prefill("bystander", 0, 0, 2)
    rig.engine.release("bystander", 0)
    with pytest.raises(EngineCrashed):
        rig.prefill("victim", 0, 0, 1)


def test_stale_call_spends_a_drop(engine_factory):
    rig = Rig(engine_factory, "full", faults=plan(FaultRule(DropResponse(), op="prefill", nth=2)))
    rig.prefill("s", 3, 0, 1)
    raises_untouched(rig, ["s"], StaleEpoch, lambda: rig.prefill("s", 1, 0, 1))
    rig.prefill("s", 4, 0, 1)  # the drop was spent on the stale call


def _four_rules_on_one_prefill(engine_factory):
    rig = Rig(engine_factory, "full", faults=plan(
        FaultRule(Delay(0.5)), FaultRule(Delay(0.25)), FaultRule(Malformed("position")),
        FaultRule(DropResponse())))
    with pytest.raises(ResponseLost):
        rig.prefill("s", 0, 0, 2)
    return rig


def test_rules_combine_on_one_call(engine_factory):
    rig = _four_rules_on_one_prefill(engine_factory)
    # Both delays, on the engine's clock. A node over HTTP reports its delays in its answer
    # (Fakeshard-Delay), and a dropped answer reports none: the caller's clock has them where
    # the node shares it (a node served in this process), and none where it does not.
    assert rig.clock.now() in ((0.0, 0.75) if makes_http_nodes(engine_factory) else (0.75,))
    assert rig.engine.session("s").cached_tokens == 2


@pytest.mark.fixture_choice(FAULT_LOG)
def test_fault_log_numbers_each_firing_by_the_engines_call_count(engine_factory):
    rig = Rig(engine_factory, "full", faults=plan(FaultRule(Delay(0.5), op="decode", nth=2, count=2)))
    rig.prefill("s", 0, 0, 1)  # call 1
    for pos in (1, 2, 3, 4):  # calls 2..5: the second and third decodes fire
        rig.decode("s", 0, pos)
    assert [(f.call, f.rule, f.op, f.session_id) for f in rig.engine.fault_log] == [
        (3, 0, "decode", "s"), (4, 0, "decode", "s")]


@pytest.mark.fixture_choice(FAULT_LOG)
def test_fault_log_records_every_rule_that_fired_in_rule_order(engine_factory):
    rig = _four_rules_on_one_prefill(engine_factory)
    assert [(f.rule, type(f.fault).__name__) for f in rig.engine.fault_log] == [
        (0, "Delay"), (1, "Delay"), (2, "Malformed"), (3, "DropResponse")]


def test_crash_pre_empts_other_faults(engine_factory):
    rig = Rig(engine_factory, "full", faults=plan(FaultRule(DropResponse()), FaultRule(Crash())))
    with pytest.raises(EngineCrashed):
        rig.prefill("s", 0, 0, 2)


def test_probability_replays_exactly_from_the_plan_seed(engine_factory):
    def fired(seed):
        rig = Rig(engine_factory, "full", faults=plan(
            FaultRule(Delay(1.0), count=None, probability=0.5), seed=seed))
        return _delayed_calls(rig, _prefill_then_decodes(rig, 39))

    first = fired(7)
    assert first == fired(7)
    assert 5 < len(first) < 35
    assert first != fired(8)


@pytest.mark.parametrize("p,expected", [(0.0, 0), (1.0, 10)])
def test_probability_bounds(engine_factory, p, expected):
    rig = Rig(engine_factory, "full", faults=plan(FaultRule(Delay(1.0), count=None, probability=p)))
    assert len(_delayed_calls(rig, _prefill_then_decodes(rig, 9))) == expected


def test_fault_counters_survive_restart(engine_factory):
    rig = Rig(engine_factory, "full", faults=plan(FaultRule(Crash(), op="prefill", nth=2)))
    rig.prefill("s", 0, 0, 1)
    with pytest.raises(EngineCrashed):
        rig.prefill("t", 0, 0, 1)
    rig.engine.restart()
    rig.prefill("t", 0, 0, 1)  # the rule fired once (count=1) and is spent


# -- bad rules ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("make,match", [
    (lambda: FaultRule(Delay(1), op="generate"), "op"),
    (lambda: FaultRule(Delay(1), nth=0), "nth"),
    (lambda: FaultRule(Delay(1), count=0), "count"),
    (lambda: FaultRule(Delay(1), probability=1.5), "probability"),
    (lambda: FaultRule(Delay(1), session_id=3), "session_id"),
    (lambda: FaultRule("crash"), "fault"),
    (lambda: Delay(-1), "seconds"),
    (lambda: Delay(float("inf")), "seconds"),
    (lambda: MemoryPressure(-2), "reserve_tokens"),
    (lambda: Malformed("bitflip"), "kind"),
    (lambda: FaultPlan(("not a rule",)), "rules"),
    (lambda: FaultPlan((), seed="x"), "seed"),
])
def test_bad_fault_records_name_the_field(make, match):
    with pytest.raises((TypeError, ValueError), match=match):
        make()


@pytest.mark.parametrize("make,error,message", [
    (lambda: FaultRule(Crash(), probability=True), ValueError, "FaultRule.probability must be in [0, 1], got True"),
    (lambda: FaultRule(Crash(), probability="0.5"), ValueError, "FaultRule.probability must be in [0, 1], got '0.5'"),
    (lambda: FaultRule(Crash(), probability=None), ValueError, "FaultRule.probability must be in [0, 1], got None"),
    (lambda: FaultRule("crash"), TypeError, "FaultRule.fault must be a fault record, got str"),
    (lambda: FaultRule(Crash), TypeError, "FaultRule.fault must be a fault record, got the class Crash"),
    (lambda: FaultPlan(("not a rule",)), TypeError, "FaultPlan.rules must be a sequence of FaultRule"),
    (lambda: FaultPlan(FaultRule(Crash())), TypeError, "FaultPlan.rules must be a sequence of FaultRule"),
])
def test_bad_fault_records_are_refused_whole(make, error, message):
    with pytest.raises(error) as info:
        make()
    assert type(info.value) is error and str(info.value) == message


@pytest.mark.fixture_choice(CONSTRUCTOR)
def test_engine_refuses_a_plan_that_is_not_a_plan(engine_factory):
    with pytest.raises(TypeError, match="faults"):
        Rig(engine_factory, "full", faults=[FaultRule(Crash())])


# -- the generator, as the contract writes it down ---------------------------------------------


def _mt19937_draws(seed: int, n: int) -> list[float]:
    """The contract's generator, written from its text (not from Python's ``random``)."""
    mt, index = [0] * 624, 625

    def init_genrand(s: int) -> None:
        nonlocal index
        mt[0] = s
        for i in range(1, 624):
            mt[i] = (1812433253 * (mt[i - 1] ^ (mt[i - 1] >> 30)) + i) & 0xFFFFFFFF
        index = 624

    key, value = [], abs(seed)
    while True:
        key.append(value & 0xFFFFFFFF)
        value >>= 32
        if not value:
            break
    init_genrand(19650218)
    i, j = 1, 0
    for _ in range(max(624, len(key))):
        mt[i] = ((mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1664525)) + key[j] + j) & 0xFFFFFFFF
        i, j = i + 1, (j + 1) % len(key)
        if i >= 624:
            mt[0], i = mt[623], 1
    for _ in range(623):
        mt[i] = ((mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1566083941)) - i) & 0xFFFFFFFF
        i += 1
        if i >= 624:
            mt[0], i = mt[623], 1
    mt[0] = 0x80000000

    def next32() -> int:
        nonlocal index
        if index >= 624:
            for k in range(624):
                y = (mt[k] & 0x80000000) | (mt[(k + 1) % 624] & 0x7FFFFFFF)
                mt[k] = mt[(k + 397) % 624] ^ (y >> 1) ^ (0x9908B0DF if y & 1 else 0)
            index = 0
        y = mt[index]
        index += 1
        y ^= y >> 11
        y ^= (y << 7) & 0x9D2C5680
        y ^= (y << 15) & 0xEFC60000
        return y ^ (y >> 18)

    out = []
    for _ in range(n):
        a, b = next32() >> 5, next32() >> 6
        out.append((a * 67108864 + b) / 2**53)
    return out


def test_the_documented_generator_gives_the_contract_test_vector():
    assert [round(u, 6) for u in _mt19937_draws(7, 6)] == [
        0.323833, 0.150849, 0.650934, 0.072436, 0.535882, 0.365689]


@pytest.mark.parametrize("seed", [0, 7, 2**40 + 5])
def test_probability_rules_fire_as_the_documented_generator_says(engine_factory, seed):
    """Two rules with p < 1 take alternate draws on each call; a certain rule takes none."""
    rig = Rig(engine_factory, "full", faults=plan(
        FaultRule(Delay(1.0), op="decode", count=None, probability=0.5),
        FaultRule(Delay(0.0), op="decode", count=None),
        FaultRule(Delay(2.0), op="decode", count=None, probability=0.3), seed=seed))
    draws = _mt19937_draws(seed, 40)
    rig.prefill("s", 0, 0, 1)
    for pos in range(1, 21):
        before = rig.clock.now()
        rig.decode("s", 0, pos)
        u1, u2 = draws[2 * (pos - 1)], draws[2 * (pos - 1) + 1]
        assert rig.clock.now() - before == (1.0 if u1 < 0.5 else 0.0) + (2.0 if u2 < 0.3 else 0.0)


# -- Swapping a plan on a running engine (the fixture's, for a served node's control port) ----


def test_replace_faults_runs_the_new_plan_from_now_on_and_keeps_the_sessions():
    from fakeshard import FakeShardEngine

    rig = Rig(FakeShardEngine, "full", capacity_tokens=64, faults=plan(FaultRule(Crash(), op="release")))
    rig.prefill("s", 0, 0, 4)
    rig.engine.replace_faults(plan(FaultRule(MemoryPressure(), op="decode")))
    assert rig.engine.fault_log == ()  # a fresh log
    with pytest.raises(OutOfMemory):
        rig.decode("s", 0, 4)
    rig.engine.replace_faults(None)
    assert rig.engine.session("s").cached_tokens == 4 and rig.engine.used_tokens == 4
    rig.decode("s", 0, 4)
    rig.engine.release("s", 0)  # the first plan's crash is gone with it
    for junk in ([FaultRule(Crash())], "plan"):
        with pytest.raises(TypeError) as info:
            rig.engine.replace_faults(junk)
        assert str(info.value) == f"faults must be a FaultPlan or None, got {type(junk).__name__}"
    assert rig.engine.fault_log == ()  # the refused plans did not replace the running one


def test_the_fixtures_repr_names_its_spec_state_and_accounting():
    from fakeshard import FakeShardEngine

    rig = Rig(FakeShardEngine, "head", capacity_tokens=50)
    rig.prefill("s", 0, 0, 3)
    s = rig.spec
    assert repr(rig.engine) == (f"FakeShardEngine({s.model_id!r} layers {s.start_layer}..{s.end_layer} of "
                                f"{s.n_layers}, head, 1 sessions, used 3/50)")
    rig.engine.crash()
    assert repr(rig.engine).endswith(", head, crashed, used 0/50)")


def test_crashed_is_a_bool_that_restart_clears():
    from fakeshard import FakeShardEngine

    engine = Rig(FakeShardEngine, "full").engine
    assert engine.crashed is False
    engine.crash()
    assert engine.crashed is True
    engine.restart()
    assert engine.crashed is False


def test_the_fixture_takes_hidden_values_near_the_float_limit_without_a_warning():
    # Valid input (finite) at the edge of float64: the fixture's arithmetic must not warn
    # (pytest makes a warning an error here) and must stay deterministic.
    from fakeshard import FakeShardEngine, HiddenBundle

    tail = Rig(FakeShardEngine, "tail")
    width = tail.spec.hidden_size
    huge = HiddenBundle.sealed("s", 0, 0, tail.spec.start_layer, [[1e308, -1e308] + [0.5] * (width - 2)])
    first = tail.engine.prefill(huge)
    again = Rig(FakeShardEngine, "tail").engine.prefill(huge)
    assert first == again and 0 <= first.token < tail.spec.vocab_size
