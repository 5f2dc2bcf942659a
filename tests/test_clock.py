"""Clocks: the virtual one never sleeps and never goes backwards."""

from __future__ import annotations

import math

import pytest

from fakeshard import RealClock, VirtualClock


def test_virtual_clock_moves_only_when_slept_on():
    clock = VirtualClock(start=10.0)
    assert clock.now() == 10.0
    clock.sleep(0.5)
    clock.advance(2)
    assert clock.now() == 12.5


@pytest.mark.parametrize("bad", [-0.001, math.nan, math.inf])
def test_virtual_clock_refuses_to_go_backwards_or_nowhere(bad):
    clock = VirtualClock()
    with pytest.raises(ValueError, match="seconds"):
        clock.sleep(bad)
    assert clock.now() == 0.0


def test_clock_refuses_non_numbers():
    with pytest.raises(TypeError, match="number"):
        VirtualClock().sleep("1")


def test_real_clock_is_monotonic():
    clock = RealClock()
    first = clock.now()
    clock.sleep(0)
    assert clock.now() >= first
