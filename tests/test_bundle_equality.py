"""Bundle equality is one relation, whatever form holds the hidden values.

The contract (Names): two hidden bundles are equal when their fields are and their values
have the same shape and the same float32 bits, whether they are held as rows of Python
numbers (tuples or lists) or as a 2-D array of a float dtype. These properties draw values
with NaN (of either sign), infinities and -0.0, hold each bundle in a drawn form, and check
the three laws of an equivalence and the definition itself.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fakeshard import HiddenBundle
from fakeshard.testing._runner import same

#: Quiet NaNs only: a signalling NaN may be quieted by the conversion float32 -> float64
#: that a rows form makes, which is another value's bits, not another form of one value.
SPECIAL = [math.nan, -math.nan, math.inf, -math.inf, 0.0, -0.0, 1.0, -1.0, 0.1, 1e-45, 3.4028234663852886e38]
values32 = st.one_of(st.sampled_from(SPECIAL), st.floats(width=32, allow_nan=False))
FORMS = ("rows", "lists", "ints", "float32", "float64", "float16-exact")


def _bits(matrix: np.ndarray) -> bytes:
    return np.ascontiguousarray(matrix, dtype="<f4").tobytes()


def held(matrix: np.ndarray, form: str) -> object:
    """``matrix`` (float32 values) held in ``form``; ``None`` where the form cannot hold it exactly."""
    if form == "rows":
        return tuple(map(tuple, matrix.tolist()))
    if form == "lists":
        return [list(row) for row in matrix.tolist()]
    if form == "ints":
        if not all(math.isfinite(v) and v == int(v) and math.copysign(1.0, v) == math.copysign(1.0, int(v))
                   for v in matrix.ravel().tolist()):  # -0.0 is no int
            return None
        return tuple(tuple(int(v) for v in row) for row in matrix.tolist())
    if form == "float32":
        return matrix.astype(np.float32)
    if form == "float64":
        return matrix.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        half = matrix.astype(np.float16)
        exact = _bits(half.astype(np.float32)) == _bits(matrix)
    return half if exact else None


@st.composite
def matrices(draw, shape=None):
    rows, cols = shape or (draw(st.integers(0, 3)), draw(st.integers(1, 3)))
    if rows == 0:
        return np.zeros((0, 0), np.float32)
    return np.array(draw(st.lists(st.lists(values32, min_size=cols, max_size=cols), min_size=rows, max_size=rows)),
                    dtype=np.float32)


@st.composite
def bundles(draw, base):
    """A bundle holding ``base`` or a variant of it (one value changed, or the epoch), in a drawn form."""
    matrix, epoch = base.copy(), 0
    change = draw(st.sampled_from(["none", "none", "value", "epoch"]))
    if change == "value" and matrix.size:
        i, j = draw(st.integers(0, matrix.shape[0] - 1)), draw(st.integers(0, matrix.shape[1] - 1))
        matrix[i, j] = draw(values32)
    elif change == "epoch":
        epoch = 1
    form = draw(st.sampled_from(FORMS))
    hidden = held(matrix, form)
    if hidden is None:
        hidden = held(matrix, "rows")
    return HiddenBundle("s", epoch, 0, 1, hidden, "0" * 16), matrix, epoch


@given(st.data())
def test_equality_is_an_equivalence_whatever_the_form(data):
    base = data.draw(matrices())
    (a, ma, ea), (b, mb, eb), (c, mc, ec) = (data.draw(bundles(base)) for _ in range(3))
    assert a == a and b == b and c == c  # reflexive, NaN included
    assert (a == b) == (b == a) and (b == c) == (c == b) and (a == c) == (c == a)  # symmetric
    if a == b and b == c:
        assert a == c  # transitive
    # The definition: the same fields and the same float32 bits, whichever form.
    for (x, mx, ex), (y, my, ey) in (((a, ma, ea), (b, mb, eb)), ((b, mb, eb), (c, mc, ec))):
        assert (x == y) == (ex == ey and mx.shape == my.shape and _bits(mx) == _bits(my))
        # The machines' own judgement agrees with the bundles' ==.
        assert same(x, y) == (x == y)


@given(matrices(), st.sampled_from(FORMS), st.sampled_from(FORMS))
def test_one_value_in_two_forms_is_one_bundle(matrix, one, other):
    a, b = held(matrix, one), held(matrix, other)
    if a is None or b is None:
        return
    sealed = HiddenBundle.sealed("s", 0, 0, 1, a)
    assert sealed == HiddenBundle("s", 0, 0, 1, b, sealed.checksum)
    assert HiddenBundle.sealed("s", 0, 0, 1, b).checksum == sealed.checksum


def test_the_issue_example():
    nan = float("nan")
    a = HiddenBundle("m", 0, 5, 3, ((nan, 1.0),), "0" * 16)
    b = HiddenBundle("m", 0, 5, 3, ((float("nan"), 1.0),), "0" * 16)
    c = HiddenBundle("m", 0, 5, 3, np.array([[nan, 1.0]], dtype=np.float32), "0" * 16)
    assert a == b and b == c and a == c and a == a


@pytest.mark.parametrize("left, right, equal", [
    (((0.0, 1.0),), ((-0.0, 1.0),), False),  # different bits: the checksum tells them apart too
    (((0.1,),), ((0.10000000000000002,),), True),  # the same float32 value
    (((1.0,),), ((True,),), False),  # a bool is no value: malformed, not 1.0
    (((1.0,),), (np.array([1.0]),), False),  # a row that is no tuple has no binary form
    (((None,),), ((None,),), True),  # malformed contents equal themselves
    (((1.0, 2.0), (3.0,)), ((1.0, 2.0), (3.0,)), True),  # ragged rows too
    (((1.0, 2.0), (3.0,)), ((1.0, 2.0), (3.0, 0.0)), False),
    ((), np.zeros((0, 0), np.float32), True),
    (np.zeros((1, 2), np.int64), ((0, 0),), True),  # the same numbers (validate refuses the int array)
    (np.zeros((1, 2), np.bool_), ((0, 0),), False),  # a bool is no number
])
def test_what_counts_as_values(left, right, equal):
    a, b = HiddenBundle("s", 0, 0, 1, left, "c"), HiddenBundle("s", 0, 0, 1, right, "c")
    assert (a == b) == equal and (b == a) == equal and same(a, b) == equal
    assert a == HiddenBundle("s", 0, 0, 1, left, "c")


def _answers_alike(values: list[float], engine: str) -> None:
    rows = (tuple(values),)
    as_rows = HiddenBundle.sealed("s", 0, 0, 1, rows)
    as_array = HiddenBundle.sealed("s", 0, 0, 1, np.array(rows, dtype=np.float32))
    assert as_rows == as_array
    if engine == "fixture":
        from fakeshard import FakeShardEngine, ShardSpec

        make = lambda: FakeShardEngine(ShardSpec("m", 3, 1, 2, hidden_size=4))  # noqa: E731
    else:
        real = pytest.importorskip("fakeshard.real", reason="the real engine needs the extra 'real'")
        spec = real.tiny_engine(__import__("fakeshard").ShardSpec("m", 3, 1, 2, hidden_size=4, vocab_size=32)).spec
        make = lambda: real.tiny_engine(spec)  # noqa: E731
    assert make().prefill(as_rows) == make().prefill(as_array)


@given(st.lists(st.floats(-1.5, 1.5), min_size=4, max_size=4), st.sampled_from(["fixture", "real"]))
def test_equal_bundles_are_one_input(values, engine):
    """An engine answers equal bundles alike: rows of float64 values and the float32 array of them
    (the same checksum, ``==``) are one input, even where float64 would round the other way."""
    _answers_alike(values, engine)


@pytest.mark.parametrize("engine", ["fixture", "real"])
def test_a_value_between_two_float32_values_is_read_as_its_float32(engine):
    # Just below a rounding boundary of the fixture's limbs in float64, on it in float32.
    below = float(np.nextafter((12345 + 0.5) / 32768 - 1, -1))
    _answers_alike([below, 0.0, 0.0, 0.0], engine)


@pytest.mark.parametrize("engine", ["fixture", "real"])
def test_the_largest_float32_values_are_an_input_like_any_other(engine):
    """At the edges of float32 (its largest finite values, which any arithmetic on them may take
    past the range) an engine answers both forms alike, and without a warning: a warning is an
    error wherever warnings are errors."""
    import warnings

    top = float(np.finfo(np.float32).max)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _answers_alike([top, -top, 0.0, 1e-3], engine)


def _junk(*rows):
    return HiddenBundle("s", 0, 0, 1, tuple(rows), "0" * 16)


@pytest.mark.parametrize("left, right, equal", [
    ((("x", None),), (("x", None),), True),
    (((("x",), None),), ((["x"], None),), False),  # a leaf held as a tuple and as a list
    ((("x", None),), (("y", None),), False),
    (((1.5, None),), ((1.5, None),), True),
    (((1.5, None),), ((2.5, None),), False),
    (((True, None),), ((1, None),), False),  # a bool is not the int it equals
    (((7, None),), ((7, None),), True),
    (((frozenset({1}), None),), (({1}, None),), False),  # equal under ==, of two types
    (((np.float32(1.0), None),), ((np.float32(2.0), None),), False),
    (((np.array([1.0, 2.0]), None),), ((np.array([[1.0], [2.0]]), None),), False),  # the same bytes, two shapes
    (((np.array([1.0, 2.0]), None),), ((np.array([1.0, 2.0]), None),), True),
])
def test_contents_in_no_form_of_values_are_equal_only_to_the_same_structure(left, right, equal):
    """Malformed contents (``None``, a str, a bool among numbers, a row that is no tuple) are equal
    only to contents of the same structure, leaf by leaf, each leaf of the same type."""
    assert (_junk(*left) == _junk(*right)) is equal
    assert (_junk(*right) == _junk(*left)) is equal
