"""Shared pytest wiring: which engine factory the contract suite and machines run on."""

from __future__ import annotations

import pytest

from fakeshard.factory import FactoryError, evidence_class_of, load_factory, resolve_factory_name
from stateful import profiles

# The default profile; `--hypothesis-profile NAME` (Hypothesis's own option) overrides it.
profiles.load_default()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--engine",
        default=None,
        help="engine factory as module:callable (default: $FAKESHARD_ENGINE, "
        "else fakeshard:FakeShardEngine)",
    )


def pytest_configure(config: pytest.Config) -> None:
    name = resolve_factory_name(config.getoption("--engine"))
    try:
        factory = load_factory(name)
    except FactoryError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.fakeshard_factory_name = name  # type: ignore[attr-defined]
    config.fakeshard_factory = factory  # type: ignore[attr-defined]
    config.fakeshard_evidence_class = evidence_class_of(factory)  # type: ignore[attr-defined]


def pytest_report_header(config: pytest.Config) -> str:
    return (f"fakeshard engine factory: {config.fakeshard_factory_name} "  # type: ignore[attr-defined]
            f"(evidence class: {config.fakeshard_evidence_class})")  # type: ignore[attr-defined]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Label every test that runs on the factory's engines with its evidence class."""
    marker = "real_model" if config.fakeshard_evidence_class == "real-model" else "fixture"  # type: ignore[attr-defined]
    for item in items:
        if "engine_factory" in getattr(item, "fixturenames", ()):
            item.add_marker(getattr(pytest.mark, marker))


@pytest.fixture(scope="session")
def engine_factory(request: pytest.FixtureRequest):
    """The engine factory under test (``--engine`` / ``$FAKESHARD_ENGINE``); a stateless callable."""
    return request.config.fakeshard_factory
