"""Run every machine against the engine factory under test (the tests live in the kit)."""

from __future__ import annotations

import pytest

from fakeshard.testing.suite import (
    test_machine,
    test_machine_concurrent,
    test_machine_coordinator,
    test_machine_parallel,
    test_machine_program,
)

__all__ = ["test_machine", "test_machine_concurrent", "test_machine_coordinator", "test_machine_parallel",
           "test_machine_program"]

# Under ``pytest -n N`` the machines and the probe check run on one worker, in order, so the
# probe check adds up what the machines reached there instead of running them again.
pytestmark = pytest.mark.xdist_group("campaign")
