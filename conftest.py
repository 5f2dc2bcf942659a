"""The checkout's pytest wiring.

Everything a test needs (``--engine``, ``--coordinator``, the markers, the engine and
coordinator fixtures) comes from the kit's plugin, ``fakeshard.testing.plugin``, which
the installed package registers on the ``pytest11`` entry point; it is loaded here too
when the checkout is used without that install.  The checkout also loads a profile by
default: ``ci`` where ``CI`` is set, else ``dev`` (``FAKESHARD_PROFILE`` or
``--hypothesis-profile NAME`` choose another).
"""

from __future__ import annotations

from importlib import metadata

from fakeshard.testing import _profiles as profiles

if not any(ep.value == "fakeshard.testing.plugin" for ep in metadata.entry_points(group="pytest11")):
    pytest_plugins = ["fakeshard.testing.plugin"]

profiles.load_default()


def pytest_collection_modifyitems(config, items):  # type: ignore[no-untyped-def]
    """``python3 -m tools.mutate --tests machines``: keep only what is collected under ``stateful/``."""
    import os

    tests = os.environ.get("FAKESHARD_MUTATE_TESTS")
    if not tests:
        return
    import pytest

    from tools.mutate import MutateError, keeps

    try:
        kept = [keeps(tests, item.path, config.rootpath) for item in items]
    except MutateError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.hook.pytest_deselected(items=[item for item, keep in zip(items, kept) if not keep])
    items[:] = [item for item, keep in zip(items, kept) if keep]
