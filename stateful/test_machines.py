"""Run every machine against the engine factory under test (the tests live in the kit)."""

from __future__ import annotations

from fakeshard.testing.suite import test_machine, test_machine_coordinator, test_machine_parallel

__all__ = ["test_machine", "test_machine_coordinator", "test_machine_parallel"]
