"""``fakeshard check``: a state-machine campaign, with progress and a summary.

The campaign runs ``pytest`` on the kit's campaign module,
``fakeshard/testing/suite.py`` (the machines, the engine checks and, for a full ``ci`` campaign,
the probe check), in a subprocess; ``--workers N`` spreads it with pytest-xdist.  With
``--coverage`` (or ``--min-branch-coverage``) it runs under coverage.py, with branch coverage
of the installed ``fakeshard`` package (the kit itself left out), which follows the workers
(``patch = subprocess``) and is combined afterwards.
Each machine run writes its progress and summary under the output folder;
this module shows a progress bar while it runs and a table when it ends.
It works from an installed package in any folder: the working folder is the
source checkout where there is one, else the current folder; ``--out`` and
``--traces`` are relative to it.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, TextIO

from fakeshard._factory import FactoryError, evidence_class_of, load_factory
from fakeshard._text import text_table
from fakeshard.testing import _catalogue as catalogue

__all__ = [
    "CheckError",
    "CheckOptions",
    "CheckResult",
    "ENGINE_MACHINES",
    "MACHINES",
    "PROFILES",
    "required_probes",
    "run_check",
    "summary_table",
    "work_dir",
]

# The kit's machines, as its catalogue lists them (the harness layer, fakeshard.testing._catalogue).
ENGINE_MACHINES, COORDINATOR_MACHINES, MACHINES = catalogue.ENGINE_MACHINES, catalogue.COORDINATOR_MACHINES, \
    catalogue.MACHINES
PROGRAM_MACHINE, ALL_MACHINES = catalogue.PROGRAM_MACHINE, catalogue.ALL_MACHINES
PROFILES = ("dev", "ci", "thorough")
_PROFILE_EXAMPLES = {"dev": 40, "ci": 500, "thorough": 2000}
#: What the machines' coverage leaves out: the kit itself and the strategies for users' own
#: tests (the tester, not what it tests), the command line and the demo.
COVERAGE_OMIT = ("*/fakeshard/testing/*", "*/fakeshard/_cli.py", "*/fakeshard/_demo.py",
                 "*/fakeshard/__main__.py", "*/fakeshard/_check.py", "*/fakeshard/_schema.py",
                 "*/fakeshard/_topology.py")
#: The network transport: measured only when the engine under test is a served node.
TRANSPORT_MODULES = ("*/fakeshard/server/*", "*/fakeshard/remote/*")
#: What an engine of each evidence class cannot run: the other computation backend, and
#: for the fixture (compared exactly) the judge's tolerance rules for real arithmetic.
CLASS_OMIT = {"fixture": ("*/fakeshard/real/*", "*/fakeshard/_judge.py"),
              "real-model": ("*/fakeshard/_backend.py",)}


#: The fault layer: measured only when the engine under test is an engine host's node (where
#: the kit applies the plans a host cannot).
LAYER_MODULES = ("*/fakeshard/_layer.py",)


def coverage_omit(evidence_class: str, engine: str = "") -> tuple[str, ...]:
    """What a campaign's branch coverage leaves out: the command line, what its class cannot
    run, the network transport unless the engine under test is served, and the fault layer
    unless it is an engine host's."""
    served = engine.startswith("fakeshard.remote:")
    return COVERAGE_OMIT + CLASS_OMIT.get(evidence_class, ()) + (() if served else TRANSPORT_MODULES) \
        + (() if engine == ATTACHED_FACTORY else LAYER_MODULES)


class CheckError(Exception):
    """A problem with the options or the environment, reported in one line."""


@dataclass
class CheckOptions:
    profile: str = "ci"
    seed: Optional[int] = None
    examples: Optional[int] = None
    steps: Optional[int] = None
    machines: tuple[str, ...] = MACHINES
    engine: str = "fakeshard:FakeShardEngine"
    workers: int = 1
    out: Path = Path(".fakeshard/check")
    #: Where failing machines save reduced traces (default: the kit's, see ``trace.REGRESSIONS``).
    traces: Optional[Path] = None
    min_branch_coverage: Optional[float] = None
    #: Whether to measure the campaign's branch coverage of fakeshard's own code (``--coverage``;
    #: ``min_branch_coverage`` implies it): a figure for the kit's developers and its evidence,
    #: not a user's, and one that about doubles the campaign's time (coverage.py's tracer on
    #: every line of the engines and the wire).
    coverage: bool = False
    certify: bool = False
    database: Optional[str] = None
    #: The coordinator machines' coordinator factory (``None``: the kit's references).
    coordinator: Optional[str] = None
    #: The share of answered next_token requests the concurrent machine requires (``None``: none).
    availability: Optional[float] = None
    #: The coordinator program the ``program`` machine runs (a command line; ``None``: none).
    coordinator_cmd: Optional[str] = None
    #: Real seconds the ``program`` machine waits for an answer before failing ``unanswered``
    #: (``None``: its default, 30).
    request_timeout: Optional[float] = None
    #: A running engine host's control URL (``--engine-url``): the engines are its nodes.
    engine_url: Optional[str] = None
    #: A command that starts an engine host and prints its roster (``--engine-cmd``).
    engine_cmd: Optional[str] = None
    #: Where to write the campaign's JUnit XML report (``--junit-xml``; ``None``: none).
    junit_xml: Optional[Path] = None
    #: A file naming the checks expected to fail (``--known-failing``; ``None``: none).
    known_failing: Optional[Path] = None

    @property
    def measures_coverage(self) -> bool:
        """Whether the campaign runs under coverage: asked for, or needed for a coverage floor."""
        return self.coverage or self.min_branch_coverage is not None


#: The factory a campaign on an engine host runs (``--engine-url``, ``--engine-cmd``).
ATTACHED_FACTORY = "fakeshard.remote:attached_engine"


@dataclass
class CheckResult:
    options: CheckOptions
    evidence_class: str
    command: list[str]
    returncode: int
    elapsed: float
    machines: list[dict[str, Any]] = field(default_factory=list)
    coverage: dict[str, Any] = field(default_factory=dict)
    probes: Counter = field(default_factory=Counter)
    missing_probes: list[str] = field(default_factory=list)
    pytest_tail: str = ""

    impossible_probes: list[str] = field(default_factory=list)
    #: The longest prompt the machines sent the engine (its factory's ``machine_max_positions``).
    longest: Optional[int] = None
    #: Whether the probe requirement applies (a whole ``ci`` campaign, :func:`full_ci`).
    probes_required: bool = False
    #: On an engine host: who applied the fault plans, in words (``None``: an engine in process).
    faults_applied_by: Optional[str] = None
    #: How an attached host's nodes are judged, in words (its ``GET /v1/judging``).
    judged_by: Optional[str] = None

    #: The checks ``--known-failing`` lists: their failures are expected, their passes fail the run.
    known: frozenset[str] = frozenset()
    #: pytest's line for each listed check that passed (each fails the run).
    known_passed: list[str] = field(default_factory=list)
    #: The tests pytest's summary lists as failed (a listed check that passed among them).
    failed_tests: int = 0

    @property
    def failed(self) -> bool:
        """pytest failed (a listed check that passed among it), or a machine not listed failed."""
        return self.returncode != 0 or any(m.get("failed") and m["machine"] not in self.known for m in self.machines)

    @property
    def probes_ok(self) -> bool:
        """Every required probe reached and no unreachable one, where the requirement applies."""
        return not self.probes_required or not (self.missing_probes or self.impossible_probes)

    @property
    def coverage_ok(self) -> bool:
        floor = self.options.min_branch_coverage
        return floor is None or self.coverage.get("branch_percent", 0.0) >= floor


PACKAGE = Path(__file__).resolve().parent
#: The campaign as pytest tests; it ships with the package.
SUITE = PACKAGE / "testing" / "suite.py"


def work_dir() -> Path:
    """The source checkout this package runs from, else the current folder."""
    from fakeshard.testing._trace import checkout_root

    return checkout_root() or Path.cwd()


def _need_kit() -> None:
    """The campaign needs Hypothesis and pytest (the extra ``test``)."""
    missing = [name for name in ("hypothesis", "pytest", "coverage")
               if importlib.util.find_spec(name) is None]
    if missing:
        raise CheckError(f"the campaign needs {', '.join(missing)}: pip install 'fakeshard[test]'")


#: The modules of the ``serve`` extra: the nodes on real sockets, their HTTP clients and metrics.
SERVE_MODULES = ("aiohttp", "httptools", "httpx", "prometheus_client")


def _need_serve(why: str) -> None:
    """``why`` serves nodes on real sockets, which needs the extra ``serve``: refused before
    anything runs, never reported as a failure the campaign found."""
    missing = [name for name in SERVE_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        raise CheckError(f"{why} needs the serve extra ({', '.join(missing)} missing): "
                         "python3 -m pip install 'fakeshard[serve]' (in a checkout: pip install -e '.[serve]')")


def _refuse(problem: Optional[str]) -> None:
    """A usage error for what the kit's catalogue found wrong with an option (``None``: nothing)."""
    if problem is not None:
        raise CheckError(problem)


def _validate(options: CheckOptions) -> tuple[str, Any]:
    _need_kit()
    if options.coordinator_cmd is not None or PROGRAM_MACHINE in options.machines:
        _need_serve("the program machine (--coordinator-cmd) serves its nodes on loopback and")
    if options.profile not in PROFILES:
        raise CheckError(f"--profile must be one of {', '.join(PROFILES)}, got {options.profile!r}")
    if options.known_failing is not None:
        _refuse(catalogue.known_failing_problem(options.known_failing))
    unknown = [m for m in options.machines if m not in ALL_MACHINES]
    if unknown or not options.machines:
        raise CheckError(f"--machines takes a comma-separated subset of {', '.join(ALL_MACHINES)}, "
                         f"got {','.join(options.machines) or 'nothing'}")
    if PROGRAM_MACHINE in options.machines and options.coordinator_cmd is None:
        raise CheckError("the program machine runs a coordinator program: give it with --coordinator-cmd")
    _refuse(catalogue.program_problem(options.coordinator_cmd, options.request_timeout))
    for name in ("examples", "steps"):
        value = getattr(options, name)
        if value is not None and value < 1:
            raise CheckError(f"--{name} must be >= 1, got {value}")
    if options.workers < 1:
        raise CheckError(f"--workers must be >= 1, got {options.workers}")
    floor = options.min_branch_coverage
    if floor is not None and not 0 <= floor <= 100:  # a percent; NaN is refused too
        raise CheckError(f"--min-branch-coverage is a percent from 0 to 100, got {floor}")
    share = options.availability
    if share is not None and not 0.0 <= share <= 1.0:
        raise CheckError(f"--availability is a share from 0 to 1, got {share}")
    if options.database:
        _refuse(catalogue.database_problem(options.database, options.profile))
    try:
        factory = load_factory(options.engine)
    except FactoryError as exc:
        raise CheckError(str(exc)) from None
    if options.coordinator is not None:
        _refuse(catalogue.coordinator_problem(options.coordinator, options.machines))
    try:
        # A factory that builds no engine (a host refusing the kit's first node) is a usage error.
        evidence_class = evidence_class_of(factory)
    except FactoryError as exc:
        raise CheckError(str(exc)) from None
    if options.certify and evidence_class != "real-model":
        raise CheckError(
            f"--certify refused: engine factory {options.engine!r} has evidence_class "
            f"{evidence_class!r}; fixture results are not real-model certification"
        )
    return evidence_class, factory


def _coverage_rc(out: Path, evidence_class: str, engine: str = "") -> Path:
    rc = out / "coveragerc"
    omit = "\n    ".join(coverage_omit(evidence_class, engine))
    rc.write_text(
        "[run]\nbranch = True\nparallel = True\npatch = subprocess\n"
        f"source = {PACKAGE}\ndata_file = {out / '.coverage'}\n"
        f"omit =\n    {omit}\n",
        encoding="utf-8",
    )
    return rc


def full_ci(options: CheckOptions) -> bool:
    """Whether this is a whole ``ci`` campaign of the engine machines: the one the probe
    requirement (every probe in ``probes.REQUIRED`` reached, none of ``probes.UNREACHABLE``)
    is made of."""
    return options.profile == "ci" and set(ENGINE_MACHINES) <= set(options.machines) \
        and options.examples is None and options.steps is None


def _pytest_command(options: CheckOptions, rc: Optional[Path]) -> list[str]:
    """The campaign's pytest command, under coverage when ``rc`` (its configuration) is given."""
    cmd = [sys.executable] + (["-m", "coverage", "run", f"--rcfile={rc}"] if rc is not None else []) \
        + ["-m", "pytest", str(SUITE)]
    # Only the machines: the probe requirement is judged here, from every machine's summary
    # (whichever xdist worker ran it), not by the suite's probe test, which would run again
    # the machines that ran on the other workers.
    # The engine checks run with any engine machine.
    engine_checks = ("engine_passes_check",) if set(options.machines) & set(ENGINE_MACHINES) else ()
    selected = " or ".join(options.machines + engine_checks)
    cmd += ["-q", "-p", "no:cacheprovider", f"--hypothesis-profile=fakeshard-{options.profile}",
            f"--engine={options.engine}", "-k", selected]
    if options.coordinator is not None:
        cmd.append(f"--coordinator={options.coordinator}")
    if options.availability is not None:
        cmd.append(f"--availability={options.availability}")
    if options.coordinator_cmd is not None:
        cmd.append(f"--coordinator-cmd={options.coordinator_cmd}")
    if options.request_timeout is not None:
        cmd.append(f"--request-timeout={options.request_timeout!r}")
    if options.known_failing is not None:
        cmd.append(f"--known-failing={options.known_failing.resolve()}")
    if options.junit_xml is not None:
        # pytest's own report: a case per machine and per engine check, a failure with its message.
        cmd += [f"--junitxml={options.junit_xml.resolve()}", "-o", "junit_suite_name=fakeshard-check",
                "-o", "junit_family=xunit2"]
    if options.workers > 1:
        # One test at a time to each worker: the machines are a few long tests among many short
        # ones, and a worker handed two machines at once runs them in turn while the other idles
        # (the sessions and faults machines took 163 s so on two workers, 91 s one each).
        cmd += ["-n", str(options.workers), "--dist", "load", "--maxschedchunk", "1"]
    return cmd


def _progress(out: Path, options: CheckOptions, started: float) -> dict[str, Any]:
    """What the campaign has done so far: its machines' examples, steps, failures and re-runs,
    and ``done``, the share of it finished.  A machine's share is its examples over what it was
    asked for, below 100% until it has finished (written its summary: Hypothesis runs some
    examples beyond ``max_examples``, which it discards as invalid), and 100% once it has: the bar
    is full when, and only when, every machine is done."""
    totals: dict[str, float] = {"runs": 0, "steps": 0, "failures": 0, "reruns": 0}
    shares: dict[str, float] = {}
    for path in (out / "campaign").glob("*.progress.json"):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # being written
        for key in totals:
            totals[key] += int(data.get(key, 0))
        machine = data.get("machine", "")
        finished = path.with_name(path.name.replace(".progress.json", ".summary.json")).exists()
        share = 1.0 if finished else min(int(data.get("runs", 0)) / max(_examples_of(machine, options), 1), 0.99)
        shares[machine] = max(shares.get(machine, 0.0), share)
    targets = {machine: _examples_of(machine, options) for machine in options.machines}
    totals["target"] = sum(targets.values())
    totals["done"] = sum(shares.get(m, 0.0) * n for m, n in targets.items()) / max(totals["target"], 1)
    totals["elapsed"] = time.monotonic() - started
    return totals


def _examples_of(machine: str, options: CheckOptions) -> int:
    """The examples ``machine`` runs in the campaign ``options`` asks for (a campaign of many
    sessions runs fewer, each a whole scenario; the parallel machine half, each program run
    several times): the progress bar's share of it."""
    return catalogue.examples_of(machine, options.examples or _PROFILE_EXAMPLES[options.profile])


def _bar(p: dict[str, Any], width: int = 24) -> str:
    done = p.get("done", min(p["runs"] / max(p["target"], 1), 1.0))
    filled = int(done * width)
    # A failure found in real time is re-run (reduced, then confirmed) before it is reported.
    reruns = f", {p['reruns']} re-runs of a failure found" if p.get("reruns") else ""
    return (f"[{'#' * filled}{'-' * (width - filled)}] {p['runs']} examples, {p['steps']} steps, "
            f"{p['failures']} failures{reruns}, {p['elapsed']:.0f}s")


def run_check(options: CheckOptions, *, stream: Optional[TextIO] = None) -> CheckResult:
    """Run the campaign, its progress written to ``stream`` (``sys.stderr`` as it is at the call);
    raise :class:`CheckError` for bad options."""
    if stream is None:
        stream = sys.stderr
    if options.engine_url is None and options.engine_cmd is None:
        return _run_check(options, stream)
    _need_serve("an engine host (--engine-url, --engine-cmd) is reached over HTTP and")
    from fakeshard.remote import ENGINE_URL_ENV_VAR, Host, HostError, attached, probe_host

    host = None
    saved = os.environ.get(ENGINE_URL_ENV_VAR)
    try:
        try:
            if options.engine_cmd is not None:
                host = Host(options.engine_cmd)
                control = host.control
            else:
                control = str(options.engine_url)
            probe_host(control)
            # Whether its nodes run fault plans, asked before anything runs: an answer outside the
            # contract is a usage error here, not a failure of the campaign's first plan.
            faults_by = attached(control).faults_applied_by()
            judged_by = attached(control).judged_by()
        except HostError as exc:
            raise CheckError(str(exc)) from None
        # The campaign's processes find the host here (the attached factory reads it at each call).
        os.environ[ENGINE_URL_ENV_VAR] = control
        result = _run_check(dataclasses.replace(options, engine=ATTACHED_FACTORY), stream)
        result.faults_applied_by, result.judged_by = faults_by, judged_by
        return result
    finally:
        if host is not None:
            host.close()
        if saved is None:
            os.environ.pop(ENGINE_URL_ENV_VAR, None)
        else:
            os.environ[ENGINE_URL_ENV_VAR] = saved


def _run_check(options: CheckOptions, stream: TextIO) -> CheckResult:
    evidence_class, factory = _validate(options)
    root = work_dir()
    out = options.out if options.out.is_absolute() else root / options.out
    out.mkdir(parents=True, exist_ok=True)
    # What an earlier run left: its coverage (data and reports) and its machines' summaries.
    for stale in list(out.glob(".coverage*")) + list((out / "campaign").glob("*.json")) \
            + [path for path in (out / "coverage.json", out / "coverage.xml") if path.exists()]:
        stale.unlink()
    shutil.rmtree(out / "htmlcov", ignore_errors=True)
    rc = _coverage_rc(out, evidence_class, options.engine) if options.measures_coverage else None
    cmd = _pytest_command(options, rc)
    # A fresh cache of real-model files: each campaign writes the tiny models it uses, so
    # its coverage does not depend on what an earlier run left behind.
    shutil.rmtree(out / "models", ignore_errors=True)
    env = {**os.environ, "FAKESHARD_CAMPAIGN_DIR": str(out / "campaign"),
           "FAKESHARD_MODEL_CACHE": str(out / "models")}
    traces = None if options.traces is None else options.traces if options.traces.is_absolute() \
        else root / options.traces
    for var, value in (("FAKESHARD_MAX_EXAMPLES", options.examples), ("FAKESHARD_STEPS", options.steps),
                       ("FAKESHARD_SEED", options.seed), ("FAKESHARD_DATABASE", options.database),
                       ("FAKESHARD_TRACES_DIR", traces)):
        if value is None:
            env.pop(var, None)
        else:
            env[var] = str(value)
    env.pop("FAKESHARD_PROFILE", None)
    log = out / "pytest.log"
    started = time.monotonic()
    tty = stream.isatty()
    last_line = 0.0
    with open(log, "w", encoding="utf-8") as log_file:
        proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=log_file, stderr=subprocess.STDOUT)
        while proc.poll() is None:
            time.sleep(0.5)
            p = _progress(out, options, started)
            if tty:
                stream.write("\r" + _bar(p))
                stream.flush()
            elif p["elapsed"] - last_line >= 10:
                stream.write(_bar(p) + "\n")
                last_line = p["elapsed"]
        p = _progress(out, options, started)
        stream.write(("\r" if tty else "") + _bar(p) + "\n")
    result = CheckResult(options, evidence_class, [Path(cmd[0]).name] + cmd[1:], proc.returncode,
                         time.monotonic() - started)
    logged = log.read_text(encoding="utf-8").splitlines()
    result.pytest_tail = "\n".join(logged[-30:])
    #: pytest's report of each check listed as known failing that passed (a strict xfail's pass).
    result.known_passed = [line for line in logged if line.startswith("[XPASS(strict)]")]
    result.failed_tests = sum(line.startswith("FAILED ") for line in logged)
    if options.known_failing is not None:
        from fakeshard.testing._known import read_known_failing

        result.known = read_known_failing(options.known_failing)
    for path in sorted((out / "campaign").glob("*.summary.json")):
        result.machines.append(json.loads(path.read_text(encoding="utf-8")))
    result.machines.sort(key=lambda m: ALL_MACHINES.index(m["machine"]))
    for m in result.machines:
        result.probes.update(m["probes"])
    result.longest, result.missing_probes, result.impossible_probes = catalogue.probe_gaps(result.probes, factory)
    result.probes_required = full_ci(options)
    result.coverage = _coverage_reports(out, rc) if rc is not None else {}
    return result


def _coverage_reports(out: Path, rc: Path) -> dict[str, Any]:
    def cov(*args: str) -> None:
        subprocess.run([sys.executable, "-m", "coverage", *args, f"--rcfile={rc}"], cwd=out,
                       check=True, capture_output=True, text=True)

    if not list(out.glob(".coverage.*")):
        return {}
    cov("combine", "-q")
    cov("json", "-q", "-o", str(out / "coverage.json"))
    cov("xml", "-q", "-o", str(out / "coverage.xml"))
    cov("html", "-q", "-d", str(out / "htmlcov"))
    data = json.loads((out / "coverage.json").read_text(encoding="utf-8"))
    totals = data["totals"]
    branches = totals.get("num_branches", 0)
    files = {}
    for name, f in sorted(data["files"].items()):
        s = f["summary"]
        files[Path(name).name] = {
            "statements": s["num_statements"], "missing": s["missing_lines"],
            "branches": s.get("num_branches", 0), "partial": s.get("num_partial_branches", 0),
            "branch_percent": 100.0 * s.get("covered_branches", 0) / max(s.get("num_branches", 0), 1),
            "percent": s["percent_covered"],
        }
    return {
        "percent": totals["percent_covered"],
        "branch_percent": 100.0 * totals.get("covered_branches", 0) / branches if branches else 100.0,
        "statements": totals["num_statements"], "missing": totals["missing_lines"],
        "branches": branches, "covered_branches": totals.get("covered_branches", 0),
        "files": files, "json": str(out / "coverage.json"), "xml": str(out / "coverage.xml"),
        "html": str(out / "htmlcov" / "index.html"),
    }


#: The columns of the campaign's table (:func:`summary_rows`), one meaning each: probes are an
#: engine machine's (of ``probes.REQUIRED``), situations a coordinator machine's (of its own list);
#: faults are the plan's five kinds, codes the contract's error codes.
SUMMARY_HEADER = ("machine", "examples", "steps", "probes", "situations", "fault kinds", "error codes", "result")
#: The machines that count situations rather than probes, and those that count neither.
_SITUATION_MACHINES = ("coordinator", "concurrent", PROGRAM_MACHINE)
_UNCOUNTED = ("surface",)


own_probes = catalogue.own_probes
required_probes = catalogue.required_probes


def _fired(probes: Counter[str] | dict[str, int], prefix: str) -> list[str]:
    return sorted(k.split(":", 1)[1] for k in probes if k.startswith(prefix) and k != "code:ok")


def summary_rows(result: CheckResult) -> list[tuple[str, ...]]:
    """The campaign's results, a row per machine (:data:`SUMMARY_HEADER`)."""
    from fakeshard._errors import ERROR_CODES

    kinds = catalogue.fault_kinds()
    required = required_probes(result.longest)
    rows: list[tuple[str, ...]] = []
    for m in result.machines:
        probes = Counter(m["probes"])
        own = own_probes(m["machine"], required)
        counted = f"{len([k for k in probes if k in own])}/{len(own)}"
        probe_cell, situation_cell = ("-", counted) if m["machine"] in _SITUATION_MACHINES else \
            ("-", "-") if m["machine"] in _UNCOUNTED else (counted, "-")
        traces = f"{len(m['traces'])} trace{'s' if len(m['traces']) != 1 else ''}"
        known = m["machine"] in result.known
        outcome = (f"known failing ({traces})" if known else f"FAILED ({traces})") if m["failed"] else \
            "PASSED, listed as known failing" if known else "passed"
        rows.append((m["machine"], str(m["runs"]), str(m["steps"]), probe_cell, situation_cell,
                     f"{len(_fired(probes, 'fault:'))}/{len(kinds)}",
                     f"{len(_fired(probes, 'code:'))}/{len(ERROR_CODES)}", outcome))
    return rows


def unreached_situations(result: CheckResult) -> list[str]:
    """A warning per coordinator machine that left situations it counts unreached: the places the
    campaign did not test the coordinator."""
    lines = []
    for m in result.machines:
        if m["machine"] in _SITUATION_MACHINES:
            missed = sorted(own_probes(m["machine"], frozenset()) - set(m["probes"]))
            if missed:
                lines.append(f"warning: {m['machine']}: {len(missed)} situations not reached, so not tested there: "
                             f"{', '.join(missed)}")
    return lines


def summary_table(result: CheckResult) -> str:
    """The campaign's results as a plain-text table, then its traces, warnings and information."""
    import textwrap

    notes = unreached_situations(result)
    notes += [f"info: {m['machine']}: {note}" for m in result.machines for note in m.get("notes", [])]
    lines = [text_table(SUMMARY_HEADER, summary_rows(result))]
    for m in result.machines:
        for path in m["traces"]:
            lines.append(f"{m['machine']}: trace {path}")
            failure = _failure_of(path)
            if failure:
                lines.append(textwrap.fill(failure, width=120, initial_indent="    ", subsequent_indent="    ",
                                           break_on_hyphens=False, max_lines=6, placeholder=" [...]"))
    lines += [textwrap.fill(note, width=120, subsequent_indent="    ", break_on_hyphens=False) for note in notes]
    return "\n".join(lines)


def _failure_of(path: str) -> str:
    """What a saved trace says failed, in words (``""`` when the file cannot be read)."""
    try:
        return str(json.loads(Path(path).read_text(encoding="utf-8")).get("failure") or "")
    except (OSError, ValueError, AttributeError):
        return ""


def engine_label(options: CheckOptions) -> str:
    """The engine under test in words: a factory, or a host and how it was reached."""
    if options.engine_cmd is not None:
        return f"host started by {options.engine_cmd!r} (its nodes, through {ATTACHED_FACTORY})"
    if options.engine_url is not None:
        return f"host at {options.engine_url} (its nodes, through {ATTACHED_FACTORY})"
    return options.engine


def what_was_tested(result: CheckResult) -> str:
    """The closing lines: what the campaign tested, and what to do next."""
    o = result.options
    kit_engine = o.engine in ("fakeshard:FakeShardEngine", "fakeshard.real:tiny_engine",
                              "fakeshard.remote:served_engine")
    coordinators = set(o.machines) & set(_SITUATION_MACHINES)
    theirs = [f"engine {engine_label(o)}" + (" (the kit's own)" if kit_engine else "")]
    if coordinators:
        theirs.append(f"coordinator program {o.coordinator_cmd!r}" if o.coordinator_cmd else
                      f"coordinator {o.coordinator}" if o.coordinator else "the kit's reference coordinators")
    tested = f"tested: {', '.join(theirs)}; evidence class {result.evidence_class}"
    if kit_engine and not o.coordinator and not o.coordinator_cmd:
        tested += (" -- the kit judging its own fixture and references, a self-test\n"
                   "next: point --engine at your engine (module:callable), or --coordinator / "
                   "--coordinator-cmd at your coordinator")
    elif result.failed:
        tested += "\nnext: replay a trace (fakeshard replay TRACE --html OUT.html draws its timeline)"
    else:
        tested += "\nnext: a longer campaign, --profile thorough (or dev with --seed, for new draws)"
    return tested


def summary_json(result: CheckResult) -> dict[str, Any]:
    """The campaign's summary for a program to read (``check --json FILE``; documented in
    ``docs/how-to/campaigns.md``)."""
    required = required_probes(result.longest)
    machines = []
    for m in result.machines:
        own = own_probes(m["machine"], required)
        reached = set(m["probes"])
        counts = "none" if m["machine"] in _UNCOUNTED else \
            "situations" if m["machine"] in _SITUATION_MACHINES else "probes"
        machines.append({
            "machine": m["machine"], "examples": m["runs"], "discarded": int(m.get("discarded", 0)),
            "steps": m["steps"],
            "result": "failed" if m["failed"] else "passed", "traces": list(m["traces"]),
            "counts": counts,
            "reached": sorted(reached & own) if counts != "none" else [],
            "missed": sorted(own - reached) if counts != "none" else [],
            "faults_fired": _fired(m["probes"], "fault:"), "error_codes": _fired(m["probes"], "code:"),
            "notes": list(m.get("notes", [])),
        })
    return {
        "format": 1, "result": "failed" if result.failed or not result.probes_ok or not result.coverage_ok
        else "passed",
        "engine": result.options.engine, "engine_url": result.options.engine_url,
        "engine_cmd": result.options.engine_cmd, "faults_applied_by": result.faults_applied_by,
        "judged_by": result.judged_by,
        "evidence_class": result.evidence_class,
        "coordinator": result.options.coordinator, "coordinator_cmd": result.options.coordinator_cmd,
        "profile": result.options.profile, "seed": result.options.seed, "elapsed": round(result.elapsed, 3),
        "probes_required": result.probes_required, "missing_probes": list(result.missing_probes),
        "machines": machines,
    }
