"""A derandomized campaign draws the same whatever local modules the process imported."""

from __future__ import annotations

import importlib
import sys
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fakeshard import FakeShardEngine
from fakeshard.testing import _probes as probes
from fakeshard.testing import _profiles as profiles
from fakeshard.testing._coordinator_machine import CoordinatorMachine
from fakeshard.testing._draws import stable_draws
from fakeshard.testing._machines import MachineConfig
from fakeshard.testing._regress import run_machine


def _wide_integers() -> list[int]:
    """What a derandomized test of wide integers draws (the kind of draw Hypothesis may take
    from a local module's constants)."""
    seen: list[int] = []

    @settings(derandomize=True, max_examples=300, database=None)
    @given(st.integers(0, 2**16))
    def draw(x: int) -> None:
        seen.append(x)

    draw()
    return seen


def _import_constants(tmp_path, name: str, offset: int) -> None:
    """A new local module whose source holds many integers of its own (Hypothesis keeps those
    of at least 100, once per process: each module here has other values)."""
    values = range(101 + offset, 65536, 331)
    (tmp_path / f"{name}.py").write_text("VALUES = [" + ", ".join(str(i) for i in values) + "]\n")
    sys.path.insert(0, str(tmp_path))
    try:
        importlib.import_module(name)
    finally:
        sys.path.remove(str(tmp_path))


def test_stable_draws_do_not_change_when_a_module_is_imported(tmp_path):
    with stable_draws():
        first = _wide_integers()
    _import_constants(tmp_path, "fakeshard_draws_constants_a", 1)
    with stable_draws():
        assert _wide_integers() == first


def test_without_stable_draws_an_import_changes_the_draws(tmp_path):
    """The control: what the pinning guards against is real in the Hypothesis in use."""
    from hypothesis.internal.conjecture import providers

    if not hasattr(providers, "_get_local_constants"):
        pytest.skip("this Hypothesis draws no constants from local modules")
    first = _wide_integers()
    _import_constants(tmp_path, "fakeshard_draws_constants_b", 2)
    assert _wide_integers() != first


def test_stable_draws_nest_and_restore_hypothesis():
    from hypothesis.internal.conjecture import providers

    original = getattr(providers, "_get_local_constants", None)
    with stable_draws():
        with stable_draws():
            pass
        if original is not None:
            assert providers._get_local_constants is not original
    assert getattr(providers, "_get_local_constants", None) is original


def _coordinator_campaign() -> tuple[int, int, Counter]:
    config = MachineConfig.for_factory(FakeShardEngine, "fakeshard:FakeShardEngine")
    before = probes.reached.copy()
    run_machine(CoordinatorMachine, config, settings=settings(profiles.get("ci"), max_examples=60), save_dir=None)
    return config.runs, config.steps, probes.reached - before


def test_a_kit_campaign_replays_exactly_after_other_modules_are_imported(tmp_path):
    first = _coordinator_campaign()
    _import_constants(tmp_path, "fakeshard_draws_constants_c", 3)
    assert _coordinator_campaign() == first
