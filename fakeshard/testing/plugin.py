"""The fakeshard pytest plugin (registered on the ``pytest11`` entry point as ``fakeshard``).

Installed with the package, so a project's own tests get, with no conftest:

* ``--engine module:callable`` (repeatable; else ``$FAKESHARD_ENGINE``, comma-separated;
  else ``fakeshard:FakeShardEngine``): every test that takes ``engine_factory`` runs once
  per factory, marked ``fixture`` or ``real_model`` by the engines' evidence class;
  ``--engine-url CONTROL_URL`` or ``--engine-cmd 'CMD ARGS'`` in its place: the engines are
  the nodes of an engine host in any language (``fakeshard.remote.attached_engine``);
* ``--coordinator module:callable`` (else ``$FAKESHARD_COORDINATOR``; else the kit's
  reference coordinator): the ``coordinator_factory`` fixture;
* the markers ``fixture``, ``real_model`` and ``fixture_choice(reason)``, and a report
  header naming the engines and how they are judged;
* fixtures ``engine_factory``, ``engine_factory_name``, ``virtual_clock``,
  ``fake_pipeline`` (head -> middle -> tail), ``cluster`` (stages with spares, as a
  coordinator factory takes them) and ``coordinator_factory``.

It imports neither Hypothesis nor the machines: a project's own Hypothesis tests
keep their settings unless ``FAKESHARD_PROFILE`` names one of the kit's profiles.
Turn it off with ``-p no:fakeshard``.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import pytest

from fakeshard._clock import VirtualClock
from fakeshard._contract import ShardSpec
from fakeshard._factory import (
    DEFAULT_FACTORY,
    ENV_VAR,
    FactoryError,
    evidence_class_of,
    load_factory,
    makes_fixture_choices,
    option_or_env,
)
from fakeshard._layer import fault_kinds_of
from fakeshard._pipeline import Pipeline
from fakeshard._topology import stage_ranges
from fakeshard.testing._http_checks import makes_http_nodes
from fakeshard.testing._known import KnownFailingError, case_name, read_known_failing

#: The environment variable that names a coordinator factory.
COORDINATOR_ENV_VAR = "FAKESHARD_COORDINATOR"
#: The environment variable that names a coordinator program's command line.
PROGRAM_ENV_VAR = "FAKESHARD_COORDINATOR_CMD"
#: The coordinator used when none is named.
DEFAULT_COORDINATOR = "fakeshard.testing:reference"
#: The model of the ``fake_pipeline`` and ``cluster`` fixtures: six layers over three stages.
PIPELINE_SPEC = ShardSpec("plugin-model", n_layers=6, start_layer=0, end_layer=6, hidden_size=8, vocab_size=64)
STAGE_RANGES = stage_ranges(3)

MARKERS = (
    "fixture: a result on an engine whose evidence_class is 'fixture' (not certification)",
    "real_model: a result on an engine whose evidence_class is 'real-model'",
    "fixture_choice(reason): checks a choice the fixture makes where the contract is silent; "
    "skipped (with the reason) on engines whose factory does not state fixture_choices",
    "needs_faults(*kinds): needs engines that apply these fault kinds (such as 'MemoryPressure'); "
    "skipped (with the reason) on a factory whose engines do not (faults applied in front of a node)",
    "needs_http_nodes: needs engines that are nodes over HTTP (a host's or served ones); skipped "
    "(with the reason) on a factory whose engines run in process",
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fakeshard")
    group.addoption(
        "--engine", action="append", default=None,
        help=f"engine factory as module:callable, repeatable (default: ${ENV_VAR}, "
        f"comma-separated, else {DEFAULT_FACTORY})",
    )
    group.addoption(
        "--engine-url", default=None, metavar="CONTROL_URL",
        help="run the engine tests on the nodes of an engine host already running (any language, HTTP API v1), "
        "given by its control port's URL (docs/contract.md, Engine hosts)",
    )
    group.addoption(
        "--engine-cmd", default=None, metavar="'CMD ARGS'",
        help="start an engine host with this command (it prints its roster line), run the engine tests on its "
        "nodes, and stop it at the end",
    )
    group.addoption(
        "--known-failing", default=None, metavar="FILE",
        help="a file naming checks expected to fail, one a line (a machine, an engine check, a test function): "
        "each is a strict xfail, so a listed check that passes fails the run",
    )
    group.addoption(
        "--coordinator", default=None,
        help=f"coordinator factory as module:callable (default: ${COORDINATOR_ENV_VAR}, "
        f"else {DEFAULT_COORDINATOR}); an async one is tested by the concurrent machine",
    )
    group.addoption(
        "--coordinator-cmd", default=None,
        help=f"a coordinator program speaking the stdio protocol, as one shell-quoted command line "
        f"(default: ${PROGRAM_ENV_VAR}); the program machine runs it over served nodes on loopback",
    )
    group.addoption(
        "--request-timeout", type=float, default=None,
        help="the program machine fails a run when a request stays unanswered this many real seconds "
        "(default: 30)",
    )
    group.addoption(
        "--availability", type=float, default=None,
        help="the concurrent machine fails a campaign whose share of next_token requests answered "
        "with a token is below this (0..1; default: reported, not required)",
    )


@dataclass
class KitRun:
    """The plugin's state for one pytest run, kept in ``config.stash[RUN]``."""

    #: The engine factories under test, by ``module:callable`` name, and their evidence classes.
    factories: dict[str, Callable[..., Any]]
    classes: dict[str, str]
    #: The coordinator factory's name (``--coordinator``).
    coordinator_name: str
    #: The coordinator program's command line (``--coordinator-cmd``; ``None``: none).
    coordinator_cmd: Optional[str] = None
    #: What the campaign's machines reached, by factory name, and which machines ran.
    probes: dict[str, Counter[str]] = field(default_factory=dict)
    machines_ran: set[tuple[str, str]] = field(default_factory=set)
    #: With ``--engine-url`` or ``--engine-cmd``: the host, and who applies its fault plans.
    host_line: Optional[str] = None


#: Where the plugin keeps its :class:`KitRun` on the pytest config.
RUN = pytest.StashKey[KitRun]()


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    for marker in MARKERS:
        config.addinivalue_line("markers", marker)
    host_line = _attach_host(config)
    names = (["fakeshard.remote:attached_engine"] if host_line else []) or config.getoption("--engine") or \
        [n.strip() for n in os.environ.get(ENV_VAR, "").split(",") if n.strip()] or [DEFAULT_FACTORY]
    factories = {}
    for name in names:
        try:
            factories[name] = load_factory(name)
        except FactoryError as exc:
            raise pytest.UsageError(str(exc)) from None
    try:
        classes = {n: evidence_class_of(f) for n, f in factories.items()}
    except FactoryError as exc:  # a factory that builds no engine (a host refusing the kit's first node)
        raise pytest.UsageError(str(exc)) from None
    coordinator = option_or_env(config.getoption("--coordinator"), COORDINATOR_ENV_VAR, DEFAULT_COORDINATOR)
    program = option_or_env(config.getoption("--coordinator-cmd"), PROGRAM_ENV_VAR)
    timeout = config.getoption("--request-timeout")
    if timeout is not None or program is not None:
        from fakeshard.testing._program import command_problem, request_timeout_problem

        problem = request_timeout_problem(timeout) or (command_problem(program) if program is not None else None)
        if problem is not None:
            raise pytest.UsageError(problem)
    config.stash[RUN] = KitRun(factories, classes, coordinator, program, host_line=host_line)
    _profiles(config)


def _attach_host(config: pytest.Config) -> Optional[str]:
    """With ``--engine-url`` or ``--engine-cmd``: the host reached (started first by the command,
    in the controlling process only; xdist's workers find its URL in the environment they
    inherit, and it is stopped when pytest ends), in words for the report's header."""
    url, command = config.getoption("--engine-url"), config.getoption("--engine-cmd")
    if url is None and command is None:
        return None
    if (url is not None and command is not None) or config.getoption("--engine"):
        raise pytest.UsageError("--engine, --engine-url and --engine-cmd each name the engine under test: give one")
    try:
        from fakeshard.remote import ENGINE_URL_ENV_VAR, Host, HostError, attached, probe_host
    except ImportError as exc:
        raise pytest.UsageError(f"an engine host is reached over HTTP, which needs the serve extra ({exc.name} "
                                "missing): python3 -m pip install 'fakeshard[serve]'") from None
    try:
        if command is not None and hasattr(config, "workerinput"):
            url = os.environ[ENGINE_URL_ENV_VAR]  # the controlling process started the host
        elif command is not None:
            host = Host(command)
            config.add_cleanup(host.close)
            url = host.control
        probe_host(str(url))
        faults_by = attached(str(url)).faults_applied_by()
        judged_by = attached(str(url)).judged_by()
    except HostError as exc:
        raise pytest.UsageError(str(exc)) from None
    os.environ[ENGINE_URL_ENV_VAR] = str(url)
    how = f"started by {command!r}" if command is not None and not hasattr(config, "workerinput") else "at"
    return f"fakeshard engine host: {how} {url}; faults applied by {faults_by}; judged {judged_by}"


def _profiles(config: pytest.Config) -> None:
    """Register the kit's profiles where one is asked for (before Hypothesis's plugin loads
    ``--hypothesis-profile``), and load ``$FAKESHARD_PROFILE``."""
    named = os.environ.get("FAKESHARD_PROFILE")
    asked = str(config.getoption("hypothesis_profile", None) or "")
    if not named and not asked.startswith("fakeshard-"):
        return
    try:
        from fakeshard.testing import _profiles as profiles
    except ImportError:  # no Hypothesis: no profile to load
        return
    if named:
        try:
            profiles.load(named)
        except ValueError as exc:
            raise pytest.UsageError(f"FAKESHARD_PROFILE: {exc}") from None


def pytest_report_header(config: pytest.Config) -> list[str]:
    line = config.stash[RUN].host_line
    host = [line] if line is not None else []
    return host + [f"fakeshard engine factory: {name} (evidence class: {cls}; judged by "
            + ("the contract and the fixture's choices)" if makes_fixture_choices(factory)
               else "the contract alone)")
            for (name, cls), factory in zip(config.stash[RUN].classes.items(),
                                            config.stash[RUN].factories.values())]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Checks of a fixture choice skip, naming the choice, on engines judged by the contract alone;
    tests of fault kinds a factory's engines do not apply skip, naming the kinds."""
    _mark_known_failing(config, items)
    names = {id(f): n for n, f in config.stash[RUN].factories.items()}
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is None or "engine_factory" not in callspec.params:
            continue
        factory = callspec.params["engine_factory"]
        marker = item.get_closest_marker("fixture_choice")
        if marker is not None and not makes_fixture_choices(factory):
            item.add_marker(pytest.mark.skip(
                reason=f"fixture choice, not the contract: {marker.args[0]} "
                       f"({names.get(id(factory), factory)} is judged by the contract alone)"))
        if item.get_closest_marker("needs_http_nodes") is not None and not makes_http_nodes(factory):
            item.add_marker(pytest.mark.skip(
                reason=f"a check of a node's HTTP layer: the engines of {names.get(id(factory), factory)} run in "
                       "process (give --engine-url, --engine-cmd or a served factory)"))
        needs = item.get_closest_marker("needs_faults")
        lacking = sorted(set(needs.args) - fault_kinds_of(factory)) if needs is not None else []
        if lacking:
            item.add_marker(pytest.mark.skip(
                reason=f"needs {', '.join(lacking)} faults, which the engines of {names.get(id(factory), factory)} "
                       "do not apply (the kit applies faults in front of a node: every kind but MemoryPressure)"))


def _mark_known_failing(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``--known-failing FILE``: every test of a listed check is a strict xfail (a pass fails the run)."""
    path = config.getoption("--known-failing")
    if path is None:
        return
    try:
        known = read_known_failing(Path(path))
    except KnownFailingError as exc:
        raise pytest.UsageError(str(exc)) from None
    for item in items:
        if case_name(item) in known:
            item.add_marker(pytest.mark.xfail(strict=True, reason=f"known to fail (listed in {path})"))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run every test that takes ``engine_factory`` once per named factory, marked by class."""
    if "engine_factory" not in metafunc.fixturenames:
        return
    config = metafunc.config
    params = []
    run = config.stash[RUN]
    for name, factory in run.factories.items():
        marker = "real_model" if run.classes[name] == "real-model" else "fixture"
        params.append(pytest.param(factory, id=name if len(run.factories) > 1 else None,
                                   marks=getattr(pytest.mark, marker)))
    metafunc.parametrize("engine_factory", params, scope="session")


@pytest.fixture(scope="session")
def engine_factory_name(request: pytest.FixtureRequest, engine_factory: Callable[..., Any]) -> str:
    """The ``module:callable`` name of the factory under test."""
    for name, factory in request.config.stash[RUN].factories.items():
        if factory is engine_factory:
            return name
    raise LookupError("engine_factory is not one of the named factories")  # pragma: no cover


@pytest.fixture
def virtual_clock() -> VirtualClock:
    """A fresh virtual clock at 0 s (engines sleep on it; nothing waits)."""
    return VirtualClock()


@pytest.fixture
def fake_pipeline(engine_factory: Callable[..., Any], virtual_clock: VirtualClock) -> Pipeline:
    """Head -> middle -> tail over ``PIPELINE_SPEC``, each stage built by the factory under test."""
    return Pipeline([engine_factory(PIPELINE_SPEC.with_layers(a, b), seed=0, clock=virtual_clock)
                     for a, b in STAGE_RANGES])


@dataclass
class Cluster:
    """Engines for a coordinator: ``stages[i]`` serve stage ``i``'s layers, head to tail;
    ``stages[i][0]`` is the initial route, the rest are spares.  All share ``clock``."""

    spec: ShardSpec
    stages: list[list[Any]]
    clock: VirtualClock = field(default_factory=VirtualClock)

    @property
    def nodes(self) -> list[Any]:
        return [node for stage in self.stages for node in stage]


@pytest.fixture
def cluster(engine_factory: Callable[..., Any], virtual_clock: VirtualClock) -> Cluster:
    """Three stages over ``PIPELINE_SPEC``, each with one spare, built by the factory under test."""
    stages = [[engine_factory(PIPELINE_SPEC.with_layers(a, b), seed=0, clock=virtual_clock) for _ in range(2)]
              for a, b in STAGE_RANGES]
    return Cluster(PIPELINE_SPEC, stages, virtual_clock)


@pytest.fixture(scope="session")
def coordinator_factory(request: pytest.FixtureRequest) -> Callable[..., Any]:
    """The coordinator factory under test (``--coordinator``), checked to build a coordinator."""
    from fakeshard.testing._coordinator_machine import CoordinatorError, load_coordinator

    try:
        return load_coordinator(request.config.stash[RUN].coordinator_name)
    except CoordinatorError as exc:
        raise pytest.UsageError(str(exc)) from None
