"""``python3 -m tools.evidence``: run the campaign and the contract suite, write what they prove.

Writes ``<dest>/README.md`` from the run just made (commands, results,
environment, changed files, coverage, probes, limitations, dependency
handoff) with ``coverage.json`` and ``coverage.xml`` beside it.  Everything in
the text comes from the run; regenerating it changes only the times.  The
default ``dest`` is one folder per evidence class
(``evidence/DGR-032/fixture``, ``evidence/DGR-032/real-model``), so the two
kinds never share a page.
"""

from __future__ import annotations

import dataclasses
import platform
import shlex
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Optional, Sequence

from fakeshard._check import CheckOptions, CheckResult, engine_label, run_check, work_dir
from planted.engines import BUGS

__all__ = ["EVIDENCE_ROOT", "render_page", "write_evidence"]

_PACKAGES = ("fakeshard", "hypothesis", "pytest", "pytest-xdist", "coverage", "dataclasses-json")
_REAL_PACKAGES = ("numpy", "gguf")
#: Where ``tools.evidence`` writes by default: a folder per evidence class.
EVIDENCE_ROOT = Path("evidence/DGR-032")


def git(root: Path, *args: str) -> str:
    """``git ARGS`` in ``root``: its output, or ``""`` where git fails or is missing."""
    try:
        out = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def version(name: str) -> str:
    """The installed version of package ``name``, or ``not installed``."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


#: Stands for the contract suite's exit code where it did not run.
NOT_RUN = -1


def _engine_args(options: CheckOptions) -> list[str]:
    """How pytest is told the engine the campaign ran on: a factory, or the host's command or URL
    (the plugin starts or reaches the host as ``check`` did)."""
    if options.engine_cmd is not None:
        return [f"--engine-cmd={options.engine_cmd}"]
    if options.engine_url is not None:
        return [f"--engine-url={options.engine_url}"]
    return [f"--engine={options.engine}"]


def _contract_suite(root: Path, options: CheckOptions) -> tuple[list[str], int, str]:
    """The checkout's contract suite (``tests/``) on the campaign's engine; from an installed
    package, which holds no ``tests/``, it is recorded as not run."""
    if not (root / "tests" / "test_sessions.py").is_file():
        return [], NOT_RUN, "not run: the contract suite (tests/) is in the fakeshard source checkout"
    cmd = [sys.executable, "-m", "pytest", "tests", "-q", "-p", "no:cacheprovider",
           "--hypothesis-profile=ci", *_engine_args(options), "-m", "fixture or real_model"]
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    return ["python3"] + cmd[1:], proc.returncode, lines[-1] if lines else "(no output)"


def _commands(argv: list[str], ran: list[list[str]], here: str) -> list[str]:
    """A page's "Commands and results" heading: the command given, then what it ran, with
    paths relative to the repository root (``here``)."""
    given = "python3 -m tools.evidence " + " ".join(shlex.quote(a) for a in argv)
    return ["## Commands and results", "", "```sh", given,
            "```", "", "ran, from the repository root:", "", "```sh",
            *(" ".join(shlex.quote(part.replace(here, "")) for part in cmd) for cmd in ran), "```", ""]


def _environment(commit: str, dirty: bool, packages: tuple[str, ...]) -> list[str]:
    """A page's "Environment" section: interpreter, platform, commit and package versions."""
    return ["## Environment", "", _table(("what", "value"), [
        ("python", platform.python_version()),
        ("platform", platform.platform()),
        ("git commit", f"`{commit}`" + (" (with uncommitted changes)" if dirty else "")),
    ] + [(name, version(name)) for name in packages]), ""]


def _table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def write_evidence(options: CheckOptions, *, dest: Optional[Path] = None, base: Optional[str] = None,
                   argv: Optional[list[str]] = None) -> int:
    """Run everything, write the evidence folder; 0 if all passed and gates held.  The campaign
    always runs under coverage: the evidence states its branch coverage."""
    options = dataclasses.replace(options, coverage=True)
    root = work_dir()
    if tuple(options.machines) == ("coordinator",):
        return _write_coordinator_evidence(options, root=root, dest=dest, argv=argv or sys.argv[1:])
    result = run_check(options)
    suite_cmd, suite_rc, suite_line = _contract_suite(root, options)
    dest = dest if dest is not None else EVIDENCE_ROOT / result.evidence_class
    dest = dest if dest.is_absolute() else root / dest
    dest.mkdir(parents=True, exist_ok=True)
    if result.coverage:
        shutil.copyfile(result.coverage["json"], dest / "coverage.json")
        shutil.copyfile(result.coverage["xml"], dest / "coverage.xml")
    text = render(result, root=root, base=base, argv=argv or sys.argv[1:],
                  suite=(suite_cmd, suite_rc, suite_line))
    (dest / "README.md").write_text(text, encoding="utf-8")
    sys.stdout.write(f"wrote {dest / 'README.md'}\n")
    (dest / "index.html").write_text(render_page(result, root=root, argv=argv or sys.argv[1:],
                                                 coverage_json=dest / "coverage.json"), encoding="utf-8")
    sys.stdout.write(f"wrote {dest / 'index.html'}\n")
    # A suite not run (no checkout) is said so in the text; it does not fail what did run.
    ok = not result.failed and result.coverage_ok and suite_rc in (0, NOT_RUN) and not result.missing_probes \
        and result.probes_ok
    return 0 if ok else 1


def _write_coordinator_evidence(options: CheckOptions, *, root: Path, dest: Optional[Path],
                                argv: list[str]) -> int:
    """A coordinator campaign (``--machines coordinator``): the coordinator machine alone."""
    result = run_check(options)
    dest = dest if dest is not None else EVIDENCE_ROOT / "coordinator"
    dest = dest if dest.is_absolute() else root / dest
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "README.md").write_text(render_coordinator(result, root=root, argv=argv), encoding="utf-8")
    sys.stdout.write(f"wrote {dest / 'README.md'}\n")
    return 0 if not result.failed and result.machines else 1


def render_page(result: CheckResult, *, root: Path, argv: list[str], coverage_json: Optional[Path] = None,
                catch_json: Optional[Path] = None) -> str:
    """The evidence folder's ``index.html``, from the run just made: its table, probes reached per
    machine, faults fired by kind, branch coverage per module, and the planted bugs' catch times
    (``evidence/DGR-032/catch.json``, written by ``benchmarks/catch.py --json``).  Jinja2 renders
    ``tools/templates/evidence.html.j2``, charts included (SVG bars, no script, no network)."""
    import json
    import statistics
    from collections import Counter

    import jinja2

    from fakeshard._check import SUMMARY_HEADER, own_probes, required_probes, summary_rows

    required = required_probes(result.longest)
    probes: list[dict[str, object]] = []
    faults: Counter[str] = Counter()
    for m in result.machines:
        reached = Counter(m["probes"])
        own = own_probes(m["machine"], required)
        got = len([k for k in reached if k in own])
        probes.append({"label": m["machine"], "value": got, "text": f"{got}/{len(own)}"})
        faults.update({k.split(":", 1)[1]: n for k, n in reached.items() if k.startswith("fault:")})
    coverage = []
    if coverage_json is not None and coverage_json.exists():
        files = json.loads(coverage_json.read_text(encoding="utf-8"))["files"]
        for name, f in sorted(files.items()):
            branches = f["summary"]["num_branches"]
            if branches:
                short = name.split("fakeshard/", 1)[-1]
                percent = 100.0 * f["summary"]["covered_branches"] / branches
                coverage.append({"label": short, "value": round(percent, 1),
                                 "text": f"{percent:.1f}", "bad": percent < 50})
    catch_json = catch_json if catch_json is not None else root / EVIDENCE_ROOT / "catch.json"
    catch = None
    if catch_json.exists():
        data = json.loads(catch_json.read_text(encoding="utf-8"))
        seconds = [b["seconds"] for b in data["bugs"]]
        catch = {**data, "median": statistics.median(seconds) if seconds else 0.0,
                 "slowest": max(seconds, default=0.0),
                 "rows": [{"label": b["bug"], "value": b["seconds"], "text": f"{b['seconds']:.2f}",
                           "bad": not b["caught"]} for b in data["bugs"]]}
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined)
    fixture = result.evidence_class == "fixture"
    return env.get_template("evidence.html.j2").render(
        evidence_class=result.evidence_class,
        claim=("Fixture evidence: what the contract's behaviour is and that the fixture keeps it, "
               "not that any real model engine does." if fixture else
               "Real-model evidence: the machines ran against an engine that runs real model weights."),
        command="python3 -m tools.evidence " + shlex.join(argv), returncode=result.returncode,
        elapsed=result.elapsed, commit=git(root, "rev-parse", "HEAD") or "unknown",
        python=platform.python_version(), machine=platform.machine(),
        table={"header": SUMMARY_HEADER, "rows": summary_rows(result)},
        required=len(required), probes=probes,
        faults=[{"label": k, "value": n} for k, n in sorted(faults.items())],
        coverage=coverage, coverage_total=f"{result.coverage.get('branch_percent', 0):.1f}% of branches",
        catch=catch, host=" ".join(_host_lines(result)).strip())


def render_coordinator(result: CheckResult, *, root: Path, argv: list[str]) -> str:
    """The evidence page of a coordinator campaign, from the run just made."""
    from fakeshard.testing import _coordinator_machine as c

    o = result.options
    coordinator = o.coordinator or "fakeshard.testing:reference"
    commit = git(root, "rev-parse", "HEAD") or "unknown"
    dirty = bool(git(root, "status", "--porcelain", "--untracked-files=no", "--", ".", ":!evidence"))
    here = f"{root}/"
    fixture = result.evidence_class == "fixture"
    outcomes = sorted(k for k in result.probes if k.startswith("coordinator:"))
    return "\n".join([
        f"# Evidence: coordinator campaign of `{coordinator}`, {result.evidence_class} engines",
        "",
        "Written by `python3 -m tools.evidence --machines coordinator` from the run it just made; "
        "regenerating it changes only the times.",
        "",
        "## Evidence class",
        "",
        _table(("what", "factory", "evidence class"),
               [("coordinator under test", f"`{coordinator}`", "-"),
                ("engines (nodes)", f"`{o.engine}`", f"`{result.evidence_class}`")]),
        "",
        ("**fixture evidence**: the coordinator was driven over fake engines "
         "(`evidence_class == \"fixture\"`); it shows the coordinator keeps its promises against "
         "the contract's behaviour, not against any real model engine." if fixture else
         "**real-model evidence**: the coordinator was driven over engines that run real weights."),
        "",
        *_commands(argv, [result.command], here),
        _table(("run", "result"), [
            ("coordinator campaign (pytest exit code)",
             f"{result.returncode} ({'passed' if not result.failed else 'FAILED'})"),
            *[(m["machine"] + " machine", f"{m['runs']} examples, {m['steps']} steps, "
               + ("FAILED: " + ", ".join(m["traces"]) if m["failed"] else "passed")) for m in result.machines],
            ("campaign time", f"{result.elapsed:.1f} s"),
        ]),
        "",
        f"Profile `{o.profile}`" + (f", seed {o.seed}" if o.seed is not None else "") + ".",
        "",
        "## What was checked after every step",
        "",
        "* each session's tokens are the fault-free stream of one FULL engine;",
        "* after `release`, no engine holds cache or live state for the session, including "
        "engines it was routed away from;",
        "* no engine sees a call for a session after its release (until the id starts again);",
        f"* the budget: with `S` = {len(c.RANGES)} stages, `N` = {len(c.RANGES) * c.PER_STAGE} engines "
        "and `F` the step's calls answered `EngineCrashed`, `ResponseLost` or `OutOfMemory` or "
        "with an output that breaks the contract: `start` and `next_token` at most `S * (1 + F)` "
        "engine calls, `release` at most `N * (1 + F)`, the coordinator's own virtual time at most "
        f"{c.BUDGET_SECONDS_PER_FAULT:g} s per failing call, `GaveUp` only when `F > {c.GIVE_UP_AFTER}`.",
        "",
        "## What the campaign put the coordinator through",
        "",
        _table(("probe", "reached"), [(f"`{k}`", str(result.probes[k])) for k in outcomes]),
        "",
        "`coordinator:call:X`: engine calls answered `X` (`malformed_output`: an answer that breaks "
        "the contract); `coordinator:crash`: an engine crashed between steps; "
        "`coordinator:faulted_step`: steps with at least one failing call.",
        "",
        *_environment(commit, dirty, _PACKAGES),
        "## Limitations",
        "",
        "* The worlds are bounded: three sessions, three stages with one spare each, histories of "
        f"at most {c.MAX_HISTORY} positions, at most {c.MAX_CRASHES} crashes between steps; a "
        "coordinator's bug that needs more may be missed.",
        "* One call at a time, in one process: a coordinator's own concurrency (several requests "
        "in flight) is not exercised here.",
        "* Time is virtual; the budget is a cost model (calls and back-off per failing call), not "
        "a latency measurement.",
        "* Planted coordinators (`planted/coordinators.py`) are caught by the same machine "
        "in the checkout's tests; this run does not include them.",
        "",
    ])


def _host_lines(result: CheckResult) -> list[str]:
    """For an engine host: who applied the fault plans (its nodes, or the kit in front of them)
    and how its nodes were judged (what it states in ``GET /v1/judging``); else nothing."""
    if result.faults_applied_by is None and result.judged_by is None:
        return []
    return [f"Faults applied by {result.faults_applied_by}. Judged {result.judged_by}. Faults the kit applies "
            "judge the engine's answers to their effects, not the engine's own fault code.", ""]


def render(result: CheckResult, *, root: Path, base: Optional[str], argv: list[str],
           suite: tuple[list[str], int, str]) -> str:
    from fakeshard._check import required_probes

    required = required_probes(result.longest)
    o = result.options
    fixture = result.evidence_class == "fixture"
    commit = git(root, "rev-parse", "HEAD") or "unknown"
    # The evidence folder itself is being rewritten: it does not make the run's code dirty.
    dirty = bool(git(root, "status", "--porcelain", "--untracked-files=no", "--", ".", ":!evidence"))
    if base is None:
        roots = git(root, "rev-list", "--max-parents=0", "HEAD").splitlines()
        base = roots[-1] if roots else None
    changed = git(root, "diff", "--name-status", f"{base}..HEAD") if base else ""
    suite_cmd, suite_rc, suite_line = suite
    here = f"{root}/"

    cov = result.coverage
    kind = ("**fixture evidence** (engine `evidence_class == \"fixture\"`): it shows what the "
            "contract's behaviour is and that the fixture keeps it, not that any real model "
            "engine does. It is not real-model certification."
            if fixture else
            "**real-model evidence** (engine `evidence_class == \"real-model\"`): the contract "
            "suite and the machines ran against an engine that runs real model weights.")
    out = [
        f"# Evidence: DGR-032 state-machine campaign, {result.evidence_class}",
        "",
        "Written by `python3 -m tools.evidence` from the run it just made; regenerating it changes "
        "only the times. The same run is drawn in `index.html` beside this file (its table, probes "
        "per machine, faults fired by kind, coverage per module, and the planted bugs' catch times "
        "from `../catch.json`).",
        "",
        "## Evidence class",
        "",
        _table(("engine factory", "evidence class", "what it is"),
               [(f"`{o.engine}`" if o.engine_cmd is None and o.engine_url is None else engine_label(o),
                 f"`{result.evidence_class}`",
                 "fixture: deterministic fake" if fixture else "real model weights")]),
        "",
        kind,
        "",
        *_host_lines(result),
        *_commands(argv, [result.command] + ([suite_cmd] if suite_cmd else []), here),
        _table(("run", "result"), [
            ("state-machine campaign (pytest exit code)", f"{result.returncode} "
             f"({'passed' if not result.failed else 'FAILED'})"),
            ("contract suite `tests/` on the same engine",
             suite_line if suite_rc == NOT_RUN else f"{suite_rc}: `{suite_line}`"),
            ("probes reached", f"{len(set(result.probes) & required)}/{len(required)}"
             + (f" (unreached: {', '.join(result.missing_probes)})" if result.missing_probes else "")),
            ("branch coverage of `fakeshard/` from the campaign (machines and engine checks)",
             f"{cov.get('branch_percent', 0):.1f}% ({cov.get('covered_branches', 0)}/{cov.get('branches', 0)})"
             + (f", gate {o.min_branch_coverage}%: {'held' if result.coverage_ok else 'FAILED'}"
                if o.min_branch_coverage is not None else "")),
            ("campaign time", f"{result.elapsed:.1f} s"),
        ]),
        "",
        f"Profile `{o.profile}`"
        + (f", seed {o.seed}" if o.seed is not None else "")
        + (f", {o.examples} examples" if o.examples else "")
        + (f", {o.steps} steps" if o.steps else "")
        + f", {o.workers} worker(s).",
        "",
        _table(("machine", "examples", "steps", "result", "saved traces"), [
            (m["machine"], str(m["runs"]), str(m["steps"]), "FAILED" if m["failed"] else "passed",
             ", ".join(f"`{t}`" for t in m["traces"]) or "-")
            for m in result.machines]),
        "",
        *_environment(commit, dirty, _PACKAGES + (() if fixture else _REAL_PACKAGES)),
        f"## Changed files since `{(base or 'unknown')[:12]}`",
        "",
        "```",
        changed or "(none)",
        "```",
        "",
        "## Coverage",
        "",
        "Branch coverage from the campaign (`fakeshard/testing/suite.py`: the state machines and the "
        "kit's engine checks, `fakeshard.testing.checks`), combined across processes; `coverage.json` "
        "and `coverage.xml` are beside this file. It is not the suite's coverage: the fixed cases at "
        "the contract's edges that the library's own values must meet are tests "
        "(`tests/test_wire_edges.py`, `tests/test_value_edges.py`), not campaign steps. "
        "Not counted: the kit itself (`fakeshard/testing/`), the command line "
        "(`_cli.py`, `_check.py`, `_demo.py`, `__main__.py`, `_schema.py`, `_topology.py`), which the "
        "campaign does not drive, for an engine in process the network transport (`server/`, `remote/`) "
        "and the fault layer that stands in front of an engine host's nodes (`_layer.py`), and what "
        "this engine cannot run: "
        + ("the real-model backend (`fakeshard/real/`) and the judge's tolerance rules for real "
           "arithmetic (`_judge.py`; the fixture is compared exactly)." if fixture else
           "the fixture's hash backend (`_backend.py`)."),
        "",
        _table(("file", "statements", "missing", "branches", "partial", "branch %", "combined %"), [
            (name, str(f["statements"]), str(f["missing"]), str(f["branches"]), str(f["partial"]),
             f"{f['branch_percent']:.1f}", f"{f['percent']:.1f}")
            for name, f in cov.get("files", {}).items()]),
        "",
        "The session machines build valid worlds and break the calls made in them; the "
        "`surface` machine builds values from drawn arguments, good and bad, and sends them "
        "through the wire with a drawn damage; the engine checks meet the contract's edges on "
        "the engine. What is left unreached is listed per line in `coverage.json`.",
        "",
        "## Probes",
        "",
        "Every contract row, error code and fault kind the campaign must reach, with how often "
        "it was reached.",
        "",
        _table(("probe", "reached"), [(f"`{p}`", str(result.probes.get(p, 0))) for p in sorted(required)]),
        "",
        "## Limitations",
        "",
        *(_FIXTURE_LIMITS if fixture else _REAL_LIMITS),
        "* Coverage says which lines and branches ran, not that every behaviour on them was "
        "checked; the checks are the model comparisons and invariants.",
        "* Time is virtual: no timeout and no network partition is exercised. Every machine but "
        "`parallel` makes one call at a time; `parallel` runs calls on threads of one process "
        "(CPython), so a pass means no race showed in the interleavings it hit, not a proof of "
        "atomicity.",
        "* The machines draw bounded worlds (3 sessions, small epochs and capacities, at most "
        f"{o.steps or 'the profile’s'} steps a run): bugs that need long histories may be missed.",
        "* Probability faults draw from the generator the contract writes down "
        "(`random.Random(plan.seed)`, MT19937); an engine must draw the same way to pass the "
        "faults machine.",
        "",
        "## Dependency handoff",
        "",
        "Taken from the contract (`docs/contract.md` v1): the names, the bundles and their "
        "wire form, the session table and its order of checks, the error codes and fields, the "
        "fault plan's semantics, the determinism rules, the evidence classes"
        + ("." if fixture else ", the real-model engine's names."),
        "",
        "What a coordinator-integration story can now rely on:",
        "",
        *(_FIXTURE_HANDOFF if fixture else _REAL_HANDOFF),
        "",
    ]
    return "\n".join(out)


_FIXTURE_LIMITS = [
    "* A fixture cannot prove that any real engine keeps the contract: these results say the "
    "contract is consistent, executable and kept by `FakeShardEngine`, and that the machines "
    f"catch the {len(BUGS)} planted bugs in `planted/engines.py` (`tests/test_planted.py`).",
    "* The fixture computes with integer hashes, not floats: numerical drift, kernel "
    "nondeterminism and real memory use are out of its reach.",
]
_REAL_LIMITS = [
    "* The engine is `fakeshard.real.GGUFShardEngine`, the project's own numpy llama engine, "
    "over tiny random-weight models the project writes itself (`tiny_engine`: F32 weights; the "
    "session, fault and failover machines' models have 4 and 6 layers of width 64 and 64 "
    "tokens, the engine checks' and the contract suite's 1 to 8 layers of width 4 to 64 "
    "and 2 to 256 tokens). It "
    "certifies that an engine running real weights, a real K/V cache and float arithmetic "
    "keeps the contract under these machines; it does not certify another runtime (point "
    "`--engine` at that runtime's own factory for that) or a production-size model.",
    "* Chunking, splitting and replay are compared within the factory's stated tolerance "
    "(1e-3 on hidden values and logits); a greedy token may differ from the reference only "
    "where the reference's top-2 margin is within that tolerance (`fakeshard/_judge.py`; its "
    "branch row above shows whether any such near tie occurred in this run).",
    "* F16, Q8_0 and Q4_0 weights are checked by `tests/test_real.py` and by the opt-in "
    "comparison with llama.cpp (`tests/test_llama_cpp.py`), which this run does not include.",
    "* Outputs are deterministic on one machine (same numpy, same BLAS); across machines they "
    "agree within floating-point tolerance, not bit for bit.",
]
_FIXTURE_HANDOFF = [
    "* `fakeshard.FakeShardEngine` and `Pipeline` keep every row above (`tests/`, the machines).",
    "* The machines (`fakeshard.testing`) can be pointed at another engine with `--engine module:callable` "
    "(or `FAKESHARD_ENGINE`); results are labelled with that engine's evidence class.",
    "* `fakeshard/testing/_reference_coordinator.py` is a reference re-route-and-replay policy that never loses "
    "or duplicates a token under the drawn faults (the failover machine's invariant).",
    "* Saved counterexamples in `stateful/regressions/` replay with `fakeshard replay`.",
]
_REAL_HANDOFF = [
    "* The same contract suite and machines that define the fixture's behaviour pass on an "
    "engine running real llama weights: the session rules are one implementation "
    "(`SessionEngine`) under both, and only the computation backend differs.",
    "* `fakeshard.real:tiny_engine` (with `tolerance` and `logits`) is the pattern for a "
    "runtime's own factory: state a tolerance, offer reference logits, and the suite judges "
    "real arithmetic by the top-2 margin rule.",
    "* `fakeshard/testing/_reference_coordinator.py`'s re-route-and-replay policy keeps every token stream a "
    "greedy continuation under real arithmetic too (the failover machine's invariant).",
]


def main(argv: Optional[list[str]] = None) -> int:
    """``python3 -m tools.evidence [campaign options] [--dest DIR] [--base REV]``."""
    import argparse

    from fakeshard._check import CheckError
    from fakeshard._cli import add_campaign_options, campaign_options

    parser = argparse.ArgumentParser(prog="python3 -m tools.evidence",
                                     description="run a campaign and write this repository's evidence folder")
    add_campaign_options(parser)
    parser.add_argument("--dest", type=Path, default=None,
                        help=f"evidence folder (default {EVIDENCE_ROOT}/<evidence class>)")
    parser.add_argument("--base", default=None,
                        help="git revision the changed-files list starts from (default: the first commit)")
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    try:
        return write_evidence(campaign_options(args), dest=args.dest, base=args.base, argv=list(argv))
    except CheckError as exc:
        sys.stderr.write(f"tools.evidence: error: {exc}\n")
        return 2


if __name__ == "__main__":
    sys.exit(main())
