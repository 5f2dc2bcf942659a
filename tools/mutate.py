"""``python3 -m tools.mutate``: the mutation score of the modules that carry contract logic.

`mutmut <https://github.com/boxed/mutmut>`_ (the ``mutate`` extra) does the mutating and
the running; this module drives it in the checkout and writes the report.  What mutmut
reads is in ``pyproject.toml`` under ``[tool.mutmut]``: the modules it mutates
(``only_mutate``) and the test command (the contract suite's fast modules, then the
state machines, under the ``mutate`` Hypothesis profile).  For every mutant mutmut runs
only the tests that reached the mutated function, stops at the first failure, and in
``--workers`` forked processes at once.

The report (``README.md`` and ``results.json`` under ``--dest``) gives, per module,
the mutants killed, timed out, survived and reached by no test, the score, and every
mutant not killed with its diff and a one-line reason.  Reasons are kept by hand in
``reasons.json`` beside the report: each entry names mutants by a glob on mutmut's
name (``fakeshard._engine.xǁSessionEngineǁ__repr__*``) and, optionally, a piece of text
the mutated lines must contain, since mutmut's numbering moves when the code does.  A mutant
not killed and with no reason is listed as ``(no reason given)``.

Beside the score over every mutant, the report gives the score of what a check from the
contract can see: each mutant not killed is *equivalent* (its entry says so), *contract-free*
(it changes only a message's words, which the contract leaves to each engine: found in its
diff by :func:`only_words`, never taken from a reason's text; or its entry's ``"class"`` says
so, for the fixture's own numbers or a repr) or a *gap*; the second score leaves the first two
out of the mutants tested.

A timed-out mutant counts as killed (the tests noticed it: it ran at least fifteen
times as long as the clean run); a mutant no test reaches counts as surviving.
"""

from __future__ import annotations

import fnmatch
import io
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tokenize
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, TextIO

from tools.evidence import git, version

__all__ = ["CLASSES", "GOAL_MODULE", "GOAL_OVERALL", "MutateError", "MutateOptions", "MutationRun",
           "class_of", "classes_by_module", "contract_score", "explain", "modules", "only_words", "reason_for",
           "run_mutate", "score", "shown_reason", "write_report"]

#: The issue's goal: at least this share of each module's mutants killed, and overall.
GOAL_MODULE = 90.0
GOAL_OVERALL = 95.0

KILLED = ("killed", "timeout", "segfault")
NOT_KILLED = ("survived", "no tests", "suspicious")
#: Environment that would change what the test command runs (engine, profile, traces).
_SCRUBBED = ("FAKESHARD_ENGINE", "FAKESHARD_COORDINATOR", "FAKESHARD_PROFILE", "FAKESHARD_DATABASE",
             "FAKESHARD_CAMPAIGN_DIR", "FAKESHARD_MAX_EXAMPLES", "FAKESHARD_STEPS", "FAKESHARD_SEED",
             "PYTEST_ADDOPTS", "MUTANT_UNDER_TEST")


class MutateError(Exception):
    """Bad options or a checkout that cannot be mutated; the message says which."""


#: The test commands a run can use: ``suite`` is ``[tool.mutmut]``'s (the contract suite's fast
#: modules, then the state machines); ``machines`` keeps only what it collects under ``stateful/``
#: (the state machines, the saved traces and the probe check).
TEST_SETS = ("suite", "machines")
#: What tells the checkout's ``conftest.py`` to keep only the machines (set by ``--tests machines``).
TESTS_ENV = "FAKESHARD_MUTATE_TESTS"
#: Where each test command's report goes by default (each folder keeps its own ``reasons.json``).
#: Where each test command's report goes: the suite's is this repository's evidence; the machines'
#: alone is a development aid (the fixed cases at the contract's edges are not in the machines).
DEFAULT_DEST = {"suite": Path("evidence/DGR-032/mutation"), "machines": Path(".fakeshard/mutation-machines")}


@dataclass
class MutateOptions:
    workers: int = 2
    dest: Path = DEFAULT_DEST["suite"]
    #: Which test command (:data:`TEST_SETS`).
    tests: str = "suite"
    #: Keep mutmut's results from an earlier run (``mutants/``) and test only what is new.
    resume: bool = False
    #: Run nothing: write the report again from the last run's results (after editing reasons.json).
    report_only: bool = False


@dataclass
class MutationRun:
    """What one run gave: every mutant's status, with the diffs of those not killed."""

    statuses: dict[str, str]
    diffs: dict[str, str] = field(default_factory=dict)
    elapsed: float = 0.0
    returncode: int = 0
    log_tail: str = ""
    #: The commit, the workers and the test command of the run (as recorded by it), where known.
    commit: str = ""
    workers: int = 0
    tests: str = ""


def _root() -> Path:
    from fakeshard._check import work_dir

    return work_dir()


def _mutmut_config(root: Path) -> dict[str, Any]:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        raise MutateError("tools.mutate needs Python 3.11 or later (tomllib)") from None
    path = root / "pyproject.toml"
    if not (path.is_file() and (root / "stateful").is_dir() and (root / "tests").is_dir()):
        raise MutateError(f"tools.mutate runs in the fakeshard source checkout (no pyproject.toml, "
                          f"tests/ and stateful/ under {root})")
    config = tomllib.loads(path.read_text(encoding="utf-8")).get("tool", {}).get("mutmut")
    if not config or not config.get("only_mutate"):
        raise MutateError(f"{path} has no [tool.mutmut] only_mutate")
    return config


def modules(root: Optional[Path] = None) -> list[str]:
    """The dotted names of the modules mutmut mutates (``only_mutate``, paths and globs)."""
    root = root or _root()
    config = _mutmut_config(root)
    found = [path.relative_to(root).with_suffix("") for pattern in config["only_mutate"]
             for path in sorted(root.glob(pattern))]
    # A package's __init__ holds its imports only: nothing to mutate.
    return [".".join(p.parts) for p in found if p.name != "__init__"]


def module_of(name: str) -> str:
    """``fakeshard._engine`` of ``fakeshard._engine.xǁSessionEngineǁdecode__mutmut_3``."""
    match = re.match(r"^(.*?)\.x[_ǁ]", name)
    if match is None:
        raise MutateError(f"not a mutmut mutant name: {name!r}")
    return match.group(1)


def score(counts: Counter) -> float:
    """Killed (timeouts among them) as a percentage of the mutants tested."""
    killed = sum(counts[s] for s in KILLED)
    tested = killed + sum(counts[s] for s in NOT_KILLED)
    return 100.0 * killed / tested if tested else 0.0


def mutated_lines(diff: str) -> str:
    """The lines a mutant's unified diff adds (the mutated code), without their ``+``."""
    return "\n".join(line[1:] for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++"))


def _entry(name: str, diff: str, reasons: list[dict[str, str]]) -> Optional[dict[str, str]]:
    """The first entry whose ``mutants`` glob matches ``name`` and whose ``diff`` text (if any)
    is in the mutated lines (not in the diff's context, which other mutants share)."""
    added = mutated_lines(diff)
    return next((e for e in reasons if fnmatch.fnmatchcase(name, e["mutants"]) and e.get("diff", "") in added),
                None)


def reason_for(name: str, diff: str, reasons: list[dict[str, str]]) -> str:
    """The reason of :func:`_entry`'s entry for the mutant, or ``""``."""
    entry = _entry(name, diff, reasons)
    return entry["reason"] if entry else ""


#: What a mutant not killed is, for the second score (the mutants a contract check can see):
#: ``equivalent`` (the program behaves the same), ``contract-free`` (it changes only what the
#: contract leaves to each engine: a refusal's words, the fixture's own numbers, a repr), or
#: ``gap`` (a check from the contract could notice it and none did).
CLASSES = ("equivalent", "contract-free", "gap")
#: A line that builds an error or a refusal (its string literals are a message's words).
_MESSAGE_LINE = re.compile(r"\braise\b|\b_Bad\(|\b_fail\(|[A-Za-z]Error\(|\bMalformedBundle\(")


def _tokens(lines: list[str]) -> list[tuple[str, str]]:
    """``lines``' tokens as (kind, text), a string literal (f-strings whole) as ("S", its text);
    a fragment that ends inside a bracket keeps the tokens read before the end."""
    out: list[tuple[str, str]] = []
    depth = 0  # inside an f-string (Python 3.12 splits them into parts)
    start = getattr(tokenize, "FSTRING_START", None)
    end = getattr(tokenize, "FSTRING_END", None)
    text = "\n".join(line.strip() for line in lines) + "\n"
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if start is not None and tok.type == start:
                depth += 1
                out.append(("S", tok.string))
            elif depth:
                out[-1] = ("S", out[-1][1] + tok.string)
                depth -= tok.type == end
            elif tok.type == tokenize.STRING:
                out.append(("S", tok.string))
            elif tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
                                  tokenize.COMMENT, tokenize.ENDMARKER):
                out.append(("T", tok.string))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass
    return out


def only_words(diff: str) -> bool:
    """Whether a mutant changes nothing but the words of a message: the lines it removes and
    adds read the same except string literals (each changed, or made ``None``), every line it
    changes builds an error or is a message's continuation (string literals only), and no
    changed literal is a keyword argument's value."""
    removed = [line[1:] for line in diff.splitlines() if line.startswith("-") and not line.startswith("---")]
    added = mutated_lines(diff).splitlines()
    changed = [line for line in removed if line not in added] + [line for line in added if line not in removed]
    if not changed:
        return False
    before, after = _tokens(removed), _tokens(added)
    if len(before) != len(after):
        return False
    for i, (b, a) in enumerate(zip(before, after)):
        if b == a:
            continue
        if b[0] != "S" or a not in (("T", "None"),) and a[0] != "S":
            return False  # only a literal may change, into another literal or None
        if i and before[i - 1] == ("T", "="):
            return False
    # Every changed line builds an error, or continues (literals only) a line that does.
    lines = [line[1:] for line in diff.splitlines()
             if line[:1] in (" ", "-") and not line.startswith("---")]  # the code before the mutant
    for line in changed:
        if _MESSAGE_LINE.search(line):
            continue
        if not _only_literals(line):
            return False
        at = next((i for i, old in enumerate(lines) if old == line), None)
        if at is None:  # an added line: it stands where the removed one stood
            at = next((i for i, old in enumerate(lines) if old in removed), None)
        if not _MESSAGE_LINE.search(_opener(lines[:at]) if at is not None else ""):
            return False
    return True


def _opener(before: list[str]) -> str:
    """The line that opens the bracket the next line stands in: walking back from it, the first
    line whose brackets leave one open (so a message argument on its own line, after other
    arguments on theirs, finds the ``raise _fail(`` above them)."""
    depth = 0
    for line in reversed(before):
        for kind, text in _tokens([line]):
            if kind == "T" and text in ("(", "[", "{"):
                depth += 1
            elif kind == "T" and text in (")", "]", "}"):
                depth -= 1
        if depth > 0:
            return line
    return ""


def _only_literals(line: str) -> bool:
    """Whether ``line`` holds only string literals (or ``None``), commas, ``+`` and brackets."""
    rest = [(k, t) for k, t in _tokens([line]) if not (k == "T" and t in ("(", ")", ",", "+"))]
    return bool(rest) and all(k == "S" or t == "None" for k, t in rest)


def explain(name: str, diff: str, reasons: list[dict[str, str]]) -> tuple[str, str]:
    """The class (:data:`CLASSES`) of a mutant not killed and the reason the report gives it.

    The class is its reason entry's ``class``, else ``equivalent`` for a reason that says so (or
    ``unreachable``); a mutant that changes only a message's words (:func:`only_words`) is
    ``contract-free`` unless its entry says equivalent, and is shown with its entry's reason only
    where that entry is a contract-free one (a catch-all entry about a gap must not explain it).
    """
    entry = _entry(name, diff, reasons)
    given = entry.get("class") if entry else None
    reason = entry["reason"] if entry else ""
    if given is None and entry is not None and reason.startswith(("equivalent", "unreachable")):
        given = "equivalent"
    if given == "equivalent":
        return given, reason
    if only_words(diff):
        return "contract-free", reason if given == "contract-free" else "the words of a message"
    return given or "gap", reason


def class_of(name: str, diff: str, reasons: list[dict[str, str]]) -> str:
    """The class of a mutant not killed (:func:`explain`)."""
    return explain(name, diff, reasons)[0]


def shown_reason(name: str, diff: str, reasons: list[dict[str, str]]) -> str:
    """The reason the report gives a mutant not killed (:func:`explain`)."""
    return explain(name, diff, reasons)[1]


def classes_by_module(classes: dict[str, str]) -> dict[str, Counter]:
    """How many mutants of each class (``classes``: a class per mutant name) each module has."""
    out: dict[str, Counter] = {}
    for name, kind in classes.items():
        out.setdefault(module_of(name), Counter())[kind] += 1
    return out


def contract_score(counts: Counter, classes: Counter) -> float:
    """Killed as a percentage of the mutants tested, less those not killed that are
    equivalent or contract-free (``classes``: their count by class)."""
    killed = sum(counts[s] for s in KILLED)
    seen = killed + sum(counts[s] for s in NOT_KILLED) - classes["equivalent"] - classes["contract-free"]
    return 100.0 * killed / seen if seen else 0.0


def load_reasons(path: Path) -> list[dict[str, str]]:
    """The entries of a ``reasons.json``, checked."""
    if not path.is_file():
        return []
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise MutateError(f"{path}: not JSON: {exc}") from None
    if not isinstance(data, list) or not all(
            isinstance(e, dict) and isinstance(e.get("mutants"), str) and isinstance(e.get("reason"), str)
            and e.get("class", "gap") in CLASSES for e in data):
        raise MutateError(f"{path}: expected a list of {{\"mutants\": glob, \"reason\": text, \"diff\"?: text, "
                          f"\"class\"?: one of {', '.join(CLASSES)}}}")
    return data


def _env(traces: Path, tests: str = "suite") -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED + (TESTS_ENV,)}
    env["FAKESHARD_TRACES_DIR"] = str(traces)  # a mutant's failures are not regressions to keep
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if tests != "suite":
        env[TESTS_ENV] = tests
    return env


def keeps(tests: str, path: Path, root: Path) -> bool:
    """Whether the test command ``tests`` runs the test file ``path`` of the checkout ``root``."""
    if tests not in TEST_SETS:
        raise MutateError(f"{TESTS_ENV}={tests!r} is not one of {TEST_SETS}")
    return tests == "suite" or (root / "stateful") in path.parents


_STATUS_LINE = re.compile(r"^\s+(\S+): (.+)$")


def _results(root: Path, env: dict[str, str]) -> dict[str, str]:
    proc = subprocess.run([sys.executable, "-m", "mutmut", "results", "--all", "true"], cwd=root, env=env,
                          capture_output=True, text=True, encoding="utf-8")
    if proc.returncode != 0:
        raise MutateError(f"mutmut results failed: {proc.stderr.strip()[-2000:]}")
    return {m.group(1): m.group(2).strip() for m in map(_STATUS_LINE.match, proc.stdout.splitlines()) if m}


def _diff(root: Path, env: dict[str, str], name: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "mutmut", "show", name], cwd=root, env=env,
                          capture_output=True, text=True, encoding="utf-8")
    lines = proc.stdout.splitlines()
    return "\n".join(line for line in lines if not line.startswith("# ")) if proc.returncode == 0 \
        else f"(mutmut show failed: {proc.stderr.strip()[-300:]})"


#: Every diff in one process (``mutmut show`` takes about a second per mutant, most of it
#: start-up): mutmut's own functions behind ``show``, which are not a documented API, so a
#: failure falls back to one ``mutmut show`` per mutant.
_BATCH_DIFFS = """
import json, sys
from mutmut.__main__ import find_mutant, get_diff_for_mutant
names = json.load(sys.stdin)
json.dump({name: get_diff_for_mutant(name, path=find_mutant(name).path) for name in names}, sys.stdout)
"""


def _diffs(root: Path, env: dict[str, str], names: list[str]) -> dict[str, str]:
    """The diff of each mutant in ``names``: in one process, or else one ``mutmut show`` each."""
    if not names:
        return {}
    proc = subprocess.run([sys.executable, "-c", _BATCH_DIFFS], cwd=root, env=env, input=json.dumps(names),
                          capture_output=True, text=True, encoding="utf-8")
    if proc.returncode == 0:
        try:
            diffs = json.loads(proc.stdout)
        except ValueError:
            diffs = None
        if isinstance(diffs, dict) and set(diffs) == set(names) and all(isinstance(v, str) for v in diffs.values()):
            return diffs
    return {name: _diff(root, env, name) for name in names}


#: What a run records of itself beside mutmut's results, for ``--report-only``.
RUN_RECORD = "fakeshard-run.json"


def run_mutate(options: MutateOptions, *, stream: TextIO = sys.stderr) -> MutationRun:
    """Run mutmut over the configured modules in the checkout; every mutant's status.

    With ``report_only``, run nothing: the statuses and the run's record from ``mutants/``.
    """
    if options.workers < 1:
        raise MutateError(f"--workers must be >= 1, got {options.workers}")
    if options.tests not in TEST_SETS:
        raise MutateError(f"--tests must be one of {', '.join(TEST_SETS)}, got {options.tests!r}")
    try:
        import mutmut  # noqa: F401
    except ImportError:
        raise MutateError("tools.mutate needs mutmut: python3 -m pip install -e '.[mutate]'") from None
    root = _root()
    _mutmut_config(root)
    if options.report_only:
        run = _last_run(root)
        if run.tests != options.tests:
            raise MutateError(f"the last run used --tests {run.tests}, not --tests {options.tests}: "
                              f"its results cannot be reported as the other command's")
        return run
    if not options.resume:
        shutil.rmtree(root / "mutants", ignore_errors=True)
    traces = Path(tempfile.mkdtemp(prefix="fakeshard-mutate-traces-"))
    env = _env(traces, options.tests)
    log = root / "mutants.log"
    started = time.monotonic()
    last = ""
    with open(log, "w", encoding="utf-8") as log_file:
        proc = subprocess.Popen([sys.executable, "-m", "mutmut", "run", "--max-children", str(options.workers)],
                                cwd=root, env=env, stdout=log_file, stderr=subprocess.STDOUT)
        next_line = 0.0
        while proc.poll() is None:
            time.sleep(1)
            if time.monotonic() - started >= next_line:
                next_line += 30
                line = _last_status(log)
                if line and line != last:
                    stream.write(f"[{time.monotonic() - started:5.0f}s] {line}\n")
                    stream.flush()
                    last = line
    elapsed = time.monotonic() - started
    shutil.rmtree(traces, ignore_errors=True)
    (root / "mutants").mkdir(exist_ok=True)
    (root / "mutants" / RUN_RECORD).write_text(json.dumps({
        "elapsed_s": elapsed, "returncode": proc.returncode, "workers": options.workers,
        "commit": git(root, "rev-parse", "HEAD"), "tests": options.tests, "log_tail": "\n".join(_log_lines(log)[-12:]),
    }), encoding="utf-8")
    return _last_run(root)


def _last_run(root: Path) -> MutationRun:
    record_path = root / "mutants" / RUN_RECORD
    if not record_path.is_file():
        raise MutateError(f"no run to report: {record_path} is missing (run python3 -m tools.mutate first)")
    record = json.loads(record_path.read_text(encoding="utf-8"))
    env = _env(Path(tempfile.gettempdir()))
    run = MutationRun(statuses=_results(root, env), elapsed=float(record["elapsed_s"]),
                      returncode=int(record["returncode"]), log_tail=record.get("log_tail", ""))
    run.commit = record.get("commit", "")
    run.workers = int(record.get("workers", 0))
    run.tests = record.get("tests", "suite")
    run.diffs = _diffs(root, env, [name for name, status in run.statuses.items() if status in NOT_KILLED])
    return run


def _log_lines(log: Path) -> list[str]:
    text = log.read_text(encoding="utf-8", errors="replace")
    return [line.strip() for line in re.split(r"[\r\n]+", text) if line.strip()]


def _last_status(log: Path) -> str:
    lines = [line for line in _log_lines(log) if re.search(r"\d+/\d+", line)]
    return lines[-1].lstrip("⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏ ") if lines else ""


def write_report(run: MutationRun, options: MutateOptions, *, argv: list[str]) -> bool:
    """Write ``README.md`` and ``results.json`` under ``options.dest``; whether the goal was met."""
    root = _root()
    dest = options.dest if options.dest.is_absolute() else root / options.dest
    dest.mkdir(parents=True, exist_ok=True)
    reasons = load_reasons(dest / "reasons.json")
    names = modules(root)
    by_module: dict[str, Counter] = {m: Counter() for m in names}
    for name, status in run.statuses.items():
        by_module.setdefault(module_of(name), Counter())[status] += 1
    overall = sum(by_module.values(), Counter())
    # A mutant left untested ("not checked": the run was stopped) leaves the goal unmet.
    # A module with nothing to mutate (constants only) has no score to hold to the goal.
    met = run.returncode == 0 and not overall["not checked"] and score(overall) >= GOAL_OVERALL and all(
        score(c) >= GOAL_MODULE for c in by_module.values() if sum(c.values()))
    head = git(root, "rev-parse", "HEAD") or "unknown"
    commit = run.commit or head
    workers = run.workers or options.workers
    dirty = bool(git(root, "status", "--porcelain", "--untracked-files=no", "--", "fakeshard", "tests",
                      "stateful", "pyproject.toml"))
    tests = run.tests or options.tests
    survivors = sorted(run.diffs)
    explained = {n: explain(n, run.diffs[n], reasons) for n in survivors}
    classes = {n: kind for n, (kind, _) in explained.items()}
    by_class = {m: Counter() for m in by_module} | classes_by_module(classes)
    all_classes: Counter[str] = sum(by_class.values(), Counter())
    seen_met = run.returncode == 0 and not overall["not checked"] \
        and contract_score(overall, all_classes) >= GOAL_OVERALL \
        and all(contract_score(c, by_class[m]) >= GOAL_MODULE for m, c in by_module.items() if sum(c.values()))

    def row(label: str, c: Counter) -> str:
        cells = [str(sum(c.values())), str(c["killed"] + c["segfault"]), str(c["timeout"]), str(c["survived"]),
                 str(c["no tests"]), str(c["suspicious"]), str(sum(c[s] for s in c if s not in KILLED + NOT_KILLED)),
                 f"{score(c):.1f}%"]
        return f"| {label} | " + " | ".join(cells) + " |"

    def seen_row(label: str, c: Counter, k: Counter) -> str:
        cells = [str(sum(c[s] for s in KILLED + NOT_KILLED)), str(k["equivalent"]), str(k["contract-free"]),
                 str(k["gap"]), f"{contract_score(c, k):.1f}%"]
        return f"| {label} | " + " | ".join(cells) + " |"

    lines = [
        "# Mutation score of the contract logic (mutmut)",
        "",
        f"Written by `python3 -m tools.mutate {' '.join(argv)}`; the mutmut run was on commit `{commit}`"
        + (f" (the report written on `{head}`)" if commit != head else "")
        + (" (with uncommitted changes to the code or tests)" if dirty else "") + ".",
        "This is fixture evidence about the test suite: how many deliberate small changes to",
        "`FakeShardEngine`'s contract logic "
        + ("the state machines alone (`--tests machines`)" if tests == "machines"
           else "the contract suite and the state machines") + " notice. It says",
        "nothing of a real model engine, and a mutant killed by one test is not a bug that test would",
        "catch in another engine.",
        "",
        "## Result",
        "",
        f"Goal: at least {GOAL_MODULE:.0f}% of each module's mutants killed and {GOAL_OVERALL:.0f}% overall, "
        f"the run under 60 minutes on 2 cores. **{'Met' if met else 'Not met'}**: {score(overall):.1f}% overall, "
        f"{run.elapsed / 60:.1f} minutes with {workers} workers"
        + ("" if run.returncode == 0 else f"; mutmut exited with {run.returncode}") + ".",
        "",
        "| module | mutants | killed | timed out | survived | no tests | suspicious | not run | score |",
        "|---|---|---|---|---|---|---|---|---|",
        *[row(f"`{m}`", by_module[m]) for m in sorted(by_module)],
        row("**all**", overall),
        "",
        "Killed: a test failed. Timed out: counted as killed (the run took 15 times its clean time).",
        "No tests: no test of the test command reached the mutated function; counted as surviving.",
        "",
        "### What a check from the contract can see",
        "",
        "The same run, with the mutants not killed sorted by what they change: *equivalent* (the",
        "program behaves the same; `reasons.json` says why), *contract-free* (only what the contract",
        "leaves to each engine: the words of a message, found in each mutant's diff by",
        "`tools.mutate.only_words`, or what its `reasons.json` entry names: the fixture's own",
        "numbers, a repr), and *gap* (everything else: a check from the contract could notice it).",
        "The score here is the killed among the mutants tested less the equivalent and contract-free",
        f"ones. By it the goal is **{'met' if seen_met else 'not met'}**: "
        f"{contract_score(overall, all_classes):.1f}% overall.",
        "",
        "| module | tested | equivalent | contract-free | gap | score of what the contract sees |",
        "|---|---|---|---|---|---|",
        *[seen_row(f"`{m}`", by_module[m], by_class[m]) for m in sorted(by_module)],
        seen_row("**all**", overall, all_classes),
        "",
        "## Command and environment",
        "",
        "```sh",
        "python3 -m pip install -e '.[test,mutate]'",
        f"python3 -m tools.mutate --workers {workers}" + (f" --tests {tests}" if tests != "suite" else ""),
        "```",
        "",
        "| | |",
        "|---|---|",
        f"| commit | `{commit}` |",
        f"| python | {platform.python_version()} |",
        f"| platform | {platform.platform()} |",
        f"| CPUs | {os.cpu_count()} |",
        f"| mutmut | {version('mutmut')} |",
        f"| hypothesis | {version('hypothesis')} |",
        f"| pytest | {version('pytest')} |",
        f"| workers | {workers} |",
        f"| elapsed | {run.elapsed:.0f} s |",
        "",
        "The test command and the mutated modules are `[tool.mutmut]` in `pyproject.toml`"
        + (" (the test command cut to what it collects under `stateful/`: the machines, the saved "
           "traces and the probe check)" if tests == "machines" else "") + "; the",
        "profile is `fakeshard-mutate` (`fakeshard/testing/_profiles.py`).",
        "",
        f"## Mutants not killed ({len(survivors)})",
        "",
        "Each with its class and the reason kept in `reasons.json` (equivalent mutant, or the gap it",
        "shows); a message's words need no reason.",
        "",
    ]
    for name in survivors:
        why = explained[name][1] or "(no reason given)"
        lines += [f"### `{name}` ({run.statuses[name]}, {classes[name]})", "", why, "",
                  "```diff", run.diffs[name].strip(), "```", ""]
    gaps = dest / "gaps.md"
    if gaps.is_file():  # kept by hand: what earlier runs showed, and the tests that now close it
        lines += ["## Gaps earlier runs showed", "", gaps.read_text(encoding="utf-8").strip(), ""]
    lines += [
        "## What this does not show",
        "",
        "* Only the modules listed above are mutated; the transports, the real-model engine and the",
        "  kit are not.",
        "* mutmut does not mutate decorated functions other than static and class methods, nor code",
        "  outside functions (module constants, class bodies).",
        "* The state machines run under the short `mutate` profile here (other draws than `ci`'s): a",
        "  mutant that survives it may be killed by a `ci` campaign, and one killed here may survive one.",
        "",
    ]
    (dest / "README.md").write_text("\n".join(lines), encoding="utf-8")
    (dest / "results.json").write_text(json.dumps({
        "commit": commit, "dirty": dirty, "elapsed_s": round(run.elapsed, 1), "workers": workers, "tests": tests,
        "mutmut": version("mutmut"), "returncode": run.returncode, "goal_met": met,
        "modules": {m: dict(sorted(c.items())) for m, c in sorted(by_module.items())},
        "score": {m: round(score(c), 2) for m, c in sorted(by_module.items())} | {"all": round(score(overall), 2)},
        "goal_met_by_what_the_contract_sees": seen_met,
        "score_of_what_the_contract_sees": {m: round(contract_score(c, by_class[m]), 2)
                                            for m, c in sorted(by_module.items())}
        | {"all": round(contract_score(overall, all_classes), 2)},
        "not_killed": {n: {"status": run.statuses[n], "reason": explained[n][1], "class": classes[n]}
                       for n in survivors},
    }, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
    sys.stdout.write(f"wrote {dest / 'README.md'}\n")
    return met


def main(argv: Optional[list[str]] = None) -> int:
    """``python3 -m tools.mutate [--workers N] [--tests suite|machines] [--dest DIR] [--resume]
    [--report-only]``: run mutmut in the checkout and write the report."""
    import argparse

    parser = argparse.ArgumentParser(prog="python3 -m tools.mutate",
                                     description="mutation score of the contract logic (mutmut; the checkout's "
                                                 "[tool.mutmut]) written to the evidence folder")
    parser.add_argument("--workers", type=int, default=2, help="mutants tested at once (default 2)")
    parser.add_argument("--tests", choices=("suite", "machines"), default="suite",
                        help="the test command: [tool.mutmut]'s (suite, the default) or only the state "
                             "machines and what else is under stateful/ (machines)")
    parser.add_argument("--dest", type=Path, default=None,
                        help="report folder, which holds reasons.json (default evidence/DGR-032/mutation, "
                             "and its machines/ folder for --tests machines)")
    parser.add_argument("--resume", action="store_true",
                        help="keep the results of an earlier run (mutants/) and test only what has none")
    parser.add_argument("--report-only", action="store_true",
                        help="run nothing: write the report again from the last run (after editing reasons.json)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    dest = args.dest if args.dest is not None else DEFAULT_DEST[args.tests]
    options = MutateOptions(workers=args.workers, dest=dest, tests=args.tests, resume=args.resume,
                            report_only=args.report_only)
    shown = ["--workers", str(args.workers)] + (["--tests", args.tests] if args.tests != "suite" else []) \
        + (["--dest", str(dest)] if dest != DEFAULT_DEST[args.tests] else [])
    try:
        run = run_mutate(options)
        met = write_report(run, options, argv=shown)
    except MutateError as exc:
        sys.stderr.write(f"tools.mutate: error: {exc}\n")
        return 2
    if run.returncode != 0:
        sys.stderr.write(f"tools.mutate: mutmut exited with {run.returncode}; its last lines:\n{run.log_tail}\n")
        return 1
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
