"""Bad input at every entry point: a typed error naming the problem, state untouched."""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import pytest

from fakeshard import (
    HiddenBundle,
    MalformedBundle,
    SampleBundle,
    ShardSpec,
    TokenBundle,
    validate,
)
from tests.support import ROLES, WORDING, Rig, assert_carries, raises_untouched


def _replace(bundle, **changes):
    """A copy with fields replaced, bypassing nothing: bundles never validate on construction."""
    return dataclasses.replace(bundle, **changes)


TOKEN_CASES = [
    ("session_id", 7, "session_id"),
    ("session_id", "", "session_id"),
    ("epoch", -1, "epoch"),
    ("epoch", True, "epoch"),
    ("epoch", 1.0, "epoch"),
    ("start_pos", -3, "start_pos"),
    ("start_pos", "0", "start_pos"),
    ("tokens", (), "tokens"),
    ("tokens", "abc", "tokens"),
    ("tokens", (1, 256), r"tokens\[1\] = 256 is outside 0..255"),
    ("tokens", (1, -1), r"tokens\[1\]"),
    ("tokens", (1.0,), r"tokens\[0\]"),
    ("tokens", (False,), r"tokens\[0\]"),
    ("tokens", np.array([1, 2]), "tokens"),
    ("tokens", (1, np.int64(2)), r"tokens\[1\]"),
    ("tokens", range(1, 3), "tokens"),
    ("contract", "2", "contract version"),
]


def _send_bad_tokens(engine_factory, role, field, value):
    rig = Rig(engine_factory, role)
    rig.prefill("s", 0, 0, 2)
    good = rig.bundle("s", 0, 2, 1)
    bad = _replace(good, **{field: value})
    op = rig.engine.decode if field != "tokens" else rig.engine.prefill
    return bad, raises_untouched(rig, ["s"], MalformedBundle, lambda: op(bad))


@pytest.mark.parametrize("field,value,match", TOKEN_CASES)
@pytest.mark.parametrize("role", ["head", "full"])
def test_bad_token_bundle_is_malformed(engine_factory, role, field, value, match):
    bad, err = _send_bad_tokens(engine_factory, role, field, value)
    assert_carries(err, "malformed_bundle", bad.session_id, bad.epoch)


@pytest.mark.fixture_choice(WORDING)
@pytest.mark.parametrize("field,value,match", TOKEN_CASES)
def test_bad_token_bundle_message_names_the_field(engine_factory, field, value, match):
    _, err = _send_bad_tokens(engine_factory, "head", field, value)
    assert re.search(match, str(err)), str(err)


def _hidden_cases(good: HiddenBundle):
    rows = good.rows()
    width = len(rows[0])
    return [
        ("checksum", dataclasses.replace(good, checksum="0" * 16), "checksum"),
        ("checksum type", dataclasses.replace(good, checksum=5), "checksum"),
        ("short row", HiddenBundle.sealed(good.session_id, good.epoch, good.start_pos, good.layer,
                                          [r[:-1] for r in rows]), "shape"),
        ("ragged", HiddenBundle.sealed(good.session_id, good.epoch, good.start_pos, good.layer,
                                       [rows[0], rows[0][:-1]]), "shape"),
        ("nan", HiddenBundle.sealed(good.session_id, good.epoch, good.start_pos, good.layer,
                                    [(math.nan,) + r[1:] for r in rows]), "not finite"),
        ("inf", HiddenBundle.sealed(good.session_id, good.epoch, good.start_pos, good.layer,
                                    [(math.inf,) + r[1:] for r in rows]), "not finite"),
        ("string value", dataclasses.replace(good, hidden=(("x",) * width,)), "must be a float"),
        ("no rows", HiddenBundle.sealed(good.session_id, good.epoch, good.start_pos, good.layer, []),
         "non-empty"),
        ("rows not rows", dataclasses.replace(good, hidden=(1.0, 2.0)), "row of floats"),
        ("wrong layer", HiddenBundle.sealed(good.session_id, good.epoch, good.start_pos, good.layer + 1,
                                            rows), "layer"),
        ("layer zero", HiddenBundle.sealed(good.session_id, good.epoch, good.start_pos, 0, rows), "layer"),
        ("layer past the model", HiddenBundle.sealed(good.session_id, good.epoch, good.start_pos, 4, rows),
         "layer"),
        ("contract", dataclasses.replace(good, contract="0"), "contract"),
        # Rows are tuples of Python numbers: numpy would read these as rows of floats, and an
        # engine behind a wire must refuse them as one in process does.
        ("rows as arrays", dataclasses.replace(good, hidden=tuple(np.array(r, dtype=np.float32) for r in rows)),
         "hidden[0]"),
        ("a float32 value", dataclasses.replace(good, hidden=((np.float32(rows[0][0]),) + rows[0][1:],) + rows[1:]),
         "hidden[0][0]"),
    ]


#: How many cases ``_hidden_cases`` makes (of any bundle), for the parametrizations below.
HIDDEN_CASES = len(_hidden_cases(HiddenBundle.sealed("s", 0, 2, 2, [(0.5, -0.25, 0.0, 1.0)])))


def _send_bad_hidden(engine_factory, role, case):
    rig = Rig(engine_factory, role)
    rig.prefill("s", 0, 0, 2)
    good = rig.bundle("s", 0, 2, 1)
    name, bad, match = _hidden_cases(good)[case]
    return name, match, raises_untouched(rig, ["s"], MalformedBundle, lambda: rig.engine.decode(bad))


@pytest.mark.parametrize("case", range(HIDDEN_CASES))
@pytest.mark.parametrize("role", ["middle", "tail"])
def test_bad_hidden_bundle_is_malformed(engine_factory, role, case):
    _, _, err = _send_bad_hidden(engine_factory, role, case)
    assert_carries(err, "malformed_bundle", "s", 0)


@pytest.mark.fixture_choice(WORDING)
@pytest.mark.parametrize("case", range(HIDDEN_CASES))
def test_bad_hidden_bundle_message_names_the_problem(engine_factory, case):
    name, match, err = _send_bad_hidden(engine_factory, "tail", case)
    assert match in str(err), (name, str(err))


def _send_wrong_types(engine_factory, role):
    rig = Rig(engine_factory, role)
    rig.prefill("s", 0, 0, 2)
    other = Rig(engine_factory, "middle" if rig.spec.role.takes_tokens else "full")
    wrong = other.bundle("s", 0, 2, 1)
    for bad in (wrong, SampleBundle("s", 0, 3, 1), None, {"session_id": "s"}, "s", 42):
        yield bad, raises_untouched(rig, ["s"], MalformedBundle, lambda: rig.engine.decode(bad))


@pytest.mark.parametrize("role", ROLES)
def test_wrong_bundle_type_for_the_role(engine_factory, role):
    for bad, err in _send_wrong_types(engine_factory, role):
        assert_carries(err, "malformed_bundle", getattr(bad, "session_id", None), getattr(bad, "epoch", None))


@pytest.mark.fixture_choice(WORDING)
@pytest.mark.parametrize("role", ROLES)
def test_wrong_bundle_type_message_names_the_type_taken(engine_factory, role):
    taken = "TokenBundle" if role in ("head", "full") else "HiddenBundle"
    for bad, err in _send_wrong_types(engine_factory, role):
        said = f"decode: a {role} engine takes {taken}, got "
        assert str(err).startswith(said), str(err)
        if isinstance(bad, (TokenBundle, HiddenBundle, SampleBundle)):  # what is no bundle cannot travel as itself
            assert str(err) == said + type(bad).__name__


def _decode_two(engine_factory, role):
    rig = Rig(engine_factory, role)
    rig.prefill("s", 0, 0, 2)
    return raises_untouched(rig, ["s"], MalformedBundle, lambda: rig.engine.decode(rig.bundle("s", 0, 2, 2)))


@pytest.mark.parametrize("role", ROLES)
def test_decode_takes_exactly_one_position(engine_factory, role):
    assert_carries(_decode_two(engine_factory, role), "malformed_bundle", "s", 0)


@pytest.mark.fixture_choice(WORDING)
def test_decode_of_two_positions_message_says_exactly_one(engine_factory):
    assert "exactly one" in str(_decode_two(engine_factory, "full"))


CLOSE_CASES = [
    (None, 0, "session_id"), ("", 0, "session_id"), (3, 0, "session_id"),
    ("s", -1, "epoch"), ("s", "1", "epoch"), ("s", True, "epoch"), ("s", None, "epoch"),
]


def _close_badly(engine_factory, op, sid, epoch):
    rig = Rig(engine_factory, "full")
    rig.prefill("s", 0, 0, 2)
    return raises_untouched(rig, ["s"], MalformedBundle, lambda: getattr(rig.engine, op)(sid, epoch))


@pytest.mark.parametrize("op", ["cancel", "release"])
@pytest.mark.parametrize("sid,epoch,match", CLOSE_CASES)
def test_bad_close_arguments_are_malformed(engine_factory, op, sid, epoch, match):
    assert_carries(_close_badly(engine_factory, op, sid, epoch), "malformed_bundle", sid, epoch)


@pytest.mark.fixture_choice(WORDING)
@pytest.mark.parametrize("sid,epoch,match", CLOSE_CASES)
def test_bad_close_arguments_message_names_the_argument(engine_factory, sid, epoch, match):
    assert match in str(_close_badly(engine_factory, "release", sid, epoch))


def test_sealed_refuses_values_it_cannot_checksum():
    with pytest.raises(MalformedBundle, match="rows of floats"):
        HiddenBundle.sealed("s", 0, 0, 1, [("x", 1.0)])


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64, np.int64])
def test_sealed_rows_given_as_arrays_hold_python_numbers_and_validate(dtype):
    values = np.array([[0.5, -0.25, 0.0, 1.0], [2.0, 3.0, -4.0, 0.125]], dtype=dtype)
    sealed = HiddenBundle.sealed("s", 0, 0, 1, list(values))
    assert validate(sealed, ShardSpec("m", 2, 0, 2, hidden_size=4)) is sealed
    assert all(type(v) in (float, int) for row in sealed.hidden for v in row)
    assert sealed == HiddenBundle.sealed("s", 0, 0, 1, values)  # the same values and checksum as the array


def test_validate_refuses_what_is_not_a_bundle():
    for thing in (None, 3, "bundle", {"kind": "token_bundle"}, ShardSpec("m", 2, 0, 2)):
        with pytest.raises(MalformedBundle, match="expected a TokenBundle"):
            validate(thing)


def test_validate_sample_bundle():
    spec = ShardSpec("m", 2, 0, 2, vocab_size=10)
    validate(SampleBundle("s", 0, 1, 9), spec)
    for bad, match in ((SampleBundle("s", 0, 0, 1), "pos"), (SampleBundle("s", 0, 1, 10), "outside"),
                       (SampleBundle("s", 0, 1, -1), "token"), (SampleBundle("s", "0", 1, 1), "epoch")):
        with pytest.raises(MalformedBundle, match=match):
            validate(bad, spec)


def test_validate_without_spec_checks_what_the_bundle_alone_shows():
    validate(TokenBundle("s", 0, 0, (10**6,)))  # no vocab to compare with
    with pytest.raises(MalformedBundle, match="shape"):
        validate(HiddenBundle.sealed("s", 0, 0, 1, [(0.0, 1.0), (0.0,)]))


def test_malformed_error_names_session_and_epoch_when_well_typed():
    with pytest.raises(MalformedBundle) as info:
        validate(TokenBundle("s", 3, 0, ()))
    assert (info.value.session_id, info.value.epoch) == ("s", 3)
    with pytest.raises(MalformedBundle) as info:
        validate(TokenBundle(5, "x", 0, (1,)))
    assert (info.value.session_id, info.value.epoch) == (None, None)


# validate's own refusals, whole: the library's wording, and the ids it keeps: each the bundle's
# own where it is a str (an id) or an int that is not a bool (an epoch), else None.
_H = HiddenBundle.sealed("s", 4, 0, 1, [(0.5, 0.25, 0.0, 1.0)])
VALIDATE_EXACT = [
    (TokenBundle("s", 4, "0", (1,)), "TokenBundle: start_pos must be an int, got str '0'", ("s", 4)),
    (TokenBundle("s", 4, -2, (1,)), "TokenBundle: start_pos must be >= 0, got -2", ("s", 4)),
    (TokenBundle("s", 4, 0, ()), "TokenBundle: tokens must be a non-empty sequence of ints", ("s", 4)),
    (TokenBundle("s", 4, 0, [1, 2.0]), "TokenBundle: tokens[1] must be an int, got float 2.0", ("s", 4)),
    (TokenBundle("s", 4, 0, (300,)), "TokenBundle: tokens[0] = 300 is outside 0..255 (vocab_size 256)", ("s", 4)),
    (TokenBundle("s", True, 0, (1,)), "TokenBundle: epoch must be an int, got bool True", ("s", None)),
    (TokenBundle("s", -1, 0, (1,)), "TokenBundle: epoch must be >= 0, got -1", ("s", -1)),
    (TokenBundle("", 4, 0, (1,)), "TokenBundle: session_id must be a non-empty str, got ''", ("", 4)),
    (TokenBundle(b"s", 4, 0, (1,)), "TokenBundle: session_id must be a non-empty str, got b's'", (None, 4)),
    (dataclasses.replace(_H, start_pos=-1), "HiddenBundle: start_pos must be >= 0, got -1", ("s", 4)),
    (dataclasses.replace(_H, start_pos=1.0), "HiddenBundle: start_pos must be an int, got float 1.0", ("s", 4)),
    (dataclasses.replace(_H, layer="1"), "HiddenBundle: layer must be an int, got str '1'", ("s", 4)),
    (dataclasses.replace(_H, layer=0), "HiddenBundle: layer must be >= 1, got 0", ("s", 4)),
    (dataclasses.replace(_H, layer=2), "HiddenBundle: layer 2 is not a boundary inside a model of 2 layers",
     ("s", 4)),
    (dataclasses.replace(_H, checksum=None), "HiddenBundle: checksum must be a str, got NoneType", ("s", 4)),
    (dataclasses.replace(_H, checksum=b"0" * 16), "HiddenBundle: checksum must be a str, got bytes", ("s", 4)),
    (SampleBundle("s", 4, 0, 1), "SampleBundle: pos must be >= 1, got 0", ("s", 4)),
    (SampleBundle("s", 4, None, 1), "SampleBundle: pos must be an int, got NoneType None", ("s", 4)),
    (SampleBundle("s", 4, 1, 256), "SampleBundle: token = 256 is outside 0..255 (vocab_size 256)", ("s", 4)),
    (SampleBundle("s", 4, 1, "7"), "SampleBundle: token must be an int, got str '7'", ("s", 4)),
    (SampleBundle("s", 4, 1, 1, contract="2"), "SampleBundle: contract version '2' is not '1'", ("s", 4)),
    ({"session_id": "s"}, "expected a TokenBundle, HiddenBundle or SampleBundle, got dict", (None, None)),
    (None, "expected a TokenBundle, HiddenBundle or SampleBundle, got NoneType", (None, None)),
]


@pytest.mark.parametrize("bundle,message,ids", VALIDATE_EXACT, ids=[c[1] for c in VALIDATE_EXACT])
def test_validate_names_the_problem_whole_and_keeps_the_ids_it_can(bundle, message, ids):
    with pytest.raises(MalformedBundle) as info:
        validate(bundle, ShardSpec("m", 2, 0, 2, hidden_size=4))
    assert str(info.value) == message
    assert (info.value.session_id, info.value.epoch) == ids


@pytest.mark.parametrize("kw,match", [
    (dict(model_id=""), "model_id"), (dict(model_id=3), "model_id"),
    (dict(n_layers=0), "n_layers"), (dict(n_layers=2.0), "n_layers"),
    (dict(start_layer=2, end_layer=2), "start_layer < end_layer"),
    (dict(start_layer=-1), "start_layer"), (dict(end_layer=5), "end_layer <= n_layers"),
    (dict(start_layer="0"), "start_layer"), (dict(hidden_size=3), "hidden_size"),
    (dict(vocab_size=1), "vocab_size"), (dict(vocab_size=True), "vocab_size"),
])
def test_impossible_spec_raises_value_error(kw, match):
    args = dict(model_id="m", n_layers=4, start_layer=0, end_layer=4) | kw
    with pytest.raises(ValueError, match=match):
        ShardSpec(**args)


def test_the_smallest_spec_and_the_whole_wording_of_a_bad_range():
    smallest = ShardSpec("m", 1, 0, 1, hidden_size=4, vocab_size=2)
    assert smallest.role.name == "FULL"
    validate(SampleBundle("s", 0, 1, 1), smallest)
    with pytest.raises(ValueError) as info:
        ShardSpec("m", 4, 3, 2)
    assert str(info.value) == ("ShardSpec needs 0 <= start_layer < end_layer <= n_layers, got start_layer=3, "
                               "end_layer=2, n_layers=4")


@pytest.mark.parametrize("start,end,role", [(0, 4, "FULL"), (0, 1, "HEAD"), (1, 3, "MIDDLE"), (3, 4, "TAIL")])
def test_spec_role(start, end, role):
    assert ShardSpec("m", 4, start, end).role.name == role


def test_engine_needs_a_spec():
    from fakeshard import FakeShardEngine

    spec = ShardSpec("m", 2, 0, 2)
    for kw, error, message in (
        (dict(spec={"model_id": "m"}), TypeError, "spec must be a ShardSpec, got dict"),
        (dict(spec=spec, seed="1"), ValueError, "seed must be an int, got '1'"),
        (dict(spec=spec, clock=object()), TypeError, "clock must have now() and sleep(seconds), got object"),
        (dict(spec=spec, faults=[]), TypeError, "faults must be a FaultPlan or None, got list"),
        (dict(spec=spec, capacity_tokens=-1), ValueError, "capacity_tokens must be None or an int >= 0, got -1"),
    ):
        with pytest.raises(error) as info:
            FakeShardEngine(**kw)
        assert str(info.value) == message, kw


def test_any_str_is_a_model_id_lone_surrogates_included():
    # A str from JSON may hold a lone surrogate ("\\udc80"); the fixture's outputs are defined for it.
    from fakeshard import FakeShardEngine

    prompt = TokenBundle("s", 0, 0, (1, 2, 3))
    odd = [FakeShardEngine(ShardSpec("m\udc80", 4, 0, 2)).prefill(prompt) for _ in range(2)]
    assert odd[0] == odd[1] and validate(odd[0]) is odd[0]
    assert odd[0] != FakeShardEngine(ShardSpec("m", 4, 0, 2)).prefill(prompt)


def test_the_fixtures_defaults_are_seed_0_and_a_virtual_clock_of_its_own():
    from fakeshard import Delay, FakeShardEngine, FaultPlan, FaultRule, VirtualClock

    head = ShardSpec("m", 4, 0, 2)
    prompt = TokenBundle("s", 0, 0, (1, 2, 3))
    plain = FakeShardEngine(head)
    assert plain.seed == 0 and FakeShardEngine(head, seed=5).seed == 5
    assert plain.prefill(prompt) == FakeShardEngine(head, seed=0).prefill(prompt)
    assert FakeShardEngine(head).prefill(prompt) != FakeShardEngine(head, seed=1).prefill(prompt)
    slow = FakeShardEngine(head, faults=FaultPlan((FaultRule(Delay(2.5)),)))
    assert isinstance(slow.clock, VirtualClock) and slow.clock is not plain.clock
    slow.prefill(prompt)
    assert slow.clock.now() == 2.5 and plain.clock.now() == 0.0


def test_a_valid_hidden_bundle_is_checked_once_per_shape_and_broken_ones_always():
    spec = ShardSpec("m", 4, 1, 3, hidden_size=4)
    good = HiddenBundle.sealed("s", 0, 0, 1, [(0.5, -0.5, 1.0, 2.0)])
    assert validate(good, spec) is good and validate(good, spec) is good
    # The same bundle against another model shape is checked again, and refused.
    with pytest.raises(MalformedBundle, match="shape mismatch"):
        validate(good, ShardSpec("m", 4, 1, 3, hidden_size=8))
    with pytest.raises(MalformedBundle, match="layer 1 is not a boundary"):
        validate(good, ShardSpec("m", 1, 0, 1, hidden_size=4))
    # A copy with a broken field is another object: checked, refused, even right after.
    validate(good, spec)
    with pytest.raises(MalformedBundle, match="checksum"):
        validate(_replace(good, hidden=((0.5, -0.5, 1.0, 3.0),)), spec)
    # Float subclasses (numpy's float64, say) miss the fast path and pass the full check.
    class Odd(float):
        pass

    odd = HiddenBundle.sealed("s", 0, 0, 1, [(Odd(0.5), -0.5, 1.0, 2.0)])
    assert validate(odd, spec) is odd


@pytest.mark.parametrize("row,match", [
    ((10**400, 0.0, 0.0, 0.0), r"hidden\[0\]\[0\] is an int of 1329 bits, too large for a float64"),
    ((1e308, 1e308, 0.0, math.inf), r"hidden\[0\]\[3\] = inf is not finite"),
    ((1.0, 2, math.nan, 0.0), r"hidden\[0\]\[2\] = nan is not finite"),
])
def test_hidden_values_are_named_when_they_are_not_finite_floats(row, match):
    bundle = HiddenBundle("s", 0, 0, 1, (row,), "0" * 16)
    with pytest.raises(MalformedBundle, match=match):
        validate(bundle)


def test_finite_values_whose_sum_overflows_are_valid():
    bundle = HiddenBundle.sealed("s", 0, 0, 1, [(1e308, 1e308, -1e308, 5)])
    assert validate(bundle, ShardSpec("m", 2, 1, 2, hidden_size=4)) is bundle


@pytest.mark.fixture_choice("which ids the error of a bad close keeps, and its wording: with a bad session id, the "
                            "id where it is a str and the epoch where it is an int (not a bool); with a bad epoch, "
                            "the session id alone")
@pytest.mark.parametrize("op", ["cancel", "release"])
@pytest.mark.parametrize("sid,epoch,ids,message", [
    (None, 0, (None, 0), "session_id must be a non-empty str, got None"),
    ("", 2, ("", 2), "session_id must be a non-empty str, got ''"),
    (3, True, (None, None), "session_id must be a non-empty str, got 3"),
    (3, -1, (None, -1), "session_id must be a non-empty str, got 3"),
    ("s", -1, ("s", None), "epoch must be an int >= 0, got -1"),
    ("s", True, ("s", None), "epoch must be an int >= 0, got True"),
])
def test_a_bad_close_keeps_the_ids_it_can(engine_factory, op, sid, epoch, ids, message):
    err = _close_badly(engine_factory, op, sid, epoch)
    assert (err.session_id, err.epoch) == ids and str(err) == f"{op}: {message}"
