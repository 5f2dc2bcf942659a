"""Cache accounting against ``capacity_tokens``: all-or-nothing, replacement frees."""

from __future__ import annotations

import pytest

from fakeshard import OutOfMemory
from tests.support import CONSTRUCTOR, ROLES, Rig, raises_untouched


@pytest.fixture(params=ROLES)
def role(request):
    return request.param


def test_allocation_that_does_not_fit_allocates_nothing(engine_factory, role):
    rig = Rig(engine_factory, role, capacity_tokens=10)
    rig.prefill("a", 0, 0, 6)
    err = raises_untouched(rig, ["a", "b"], OutOfMemory, lambda: rig.prefill("b", 0, 0, 5))
    assert (err.code, err.session_id, err.epoch) == ("out_of_memory", "b", 0)
    assert rig.engine.session("b") is None
    rig.prefill("b", 0, 0, 4)
    assert rig.engine.used_tokens == rig.engine.capacity_tokens == 10
    raises_untouched(rig, ["a", "b"], OutOfMemory, lambda: rig.decode("a", 0, 6))


def test_release_and_cancel_free_capacity(engine_factory, role):
    rig = Rig(engine_factory, role, capacity_tokens=6)
    rig.prefill("a", 0, 0, 3)
    rig.prefill("b", 0, 0, 3)
    rig.engine.release("a", 0)
    rig.engine.cancel("b", 0)
    assert rig.engine.used_tokens == 0
    rig.prefill("c", 0, 0, 6)


def test_newer_epoch_counts_the_replaced_cache_as_free(engine_factory, role):
    rig = Rig(engine_factory, role, capacity_tokens=10)
    rig.prefill("s", 0, 0, 8)
    rig.prefill("t", 0, 0, 2)
    # 9 positions do not fit beside 10 used, but "s"'s 8 are replaced by the call.
    rig.prefill("s", 1, 0, 8)
    assert rig.engine.used_tokens == 10
    raises_untouched(rig, ["s", "t"], OutOfMemory, lambda: rig.prefill("s", 2, 0, 9))


def test_zero_capacity_refuses_every_allocation(engine_factory):
    rig = Rig(engine_factory, "full", capacity_tokens=0)
    raises_untouched(rig, ["s"], OutOfMemory, lambda: rig.prefill("s", 0, 0, 1))
    rig.engine.cancel("s", 0)  # closing needs no memory


def test_no_capacity_means_no_bound(engine_factory):
    rig = Rig(engine_factory, "full")
    assert rig.engine.capacity_tokens is None
    rig.prefill("s", 0, 0, 200)
    assert rig.engine.used_tokens == 200


@pytest.mark.fixture_choice(CONSTRUCTOR)
@pytest.mark.parametrize("bad", [-1, 1.5, "10", True])
def test_bad_capacity_is_refused(engine_factory, bad):
    with pytest.raises(ValueError, match="capacity_tokens"):
        Rig(engine_factory, "full", capacity_tokens=bad)
