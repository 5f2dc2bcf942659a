"""The stateful suite: saved traces replay before any search runs."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Replay saved regression traces first, then search, then check the probes."""
    order = {"test_regressions.py": 0, "test_machines.py": 1, "test_probes.py": 2}
    items.sort(key=lambda item: order.get(item.path.name, 1) if item.path.parent.name == "stateful" else -1)
