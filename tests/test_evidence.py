"""This repository's evidence pages (``tools.evidence``): rendered from a campaign's result, and
one small coordinator campaign written by the command."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fakeshard._check import CheckOptions, CheckResult
from tools.evidence import render, render_coordinator

ROOT = Path(__file__).resolve().parent.parent


def _result(engine: str, evidence_class: str, machines: tuple[str, ...], returncode: int = 0) -> CheckResult:
    options = CheckOptions(engine=engine, machines=machines)
    command = [sys.executable, "-m", "pytest", str(ROOT / "fakeshard" / "testing" / "suite.py"), "-q"]
    result = CheckResult(options, evidence_class, command, returncode, 12.5)
    result.machines = [{"machine": m, "runs": 7, "steps": 30, "failed": bool(returncode), "traces": [],
                        "probes": {}} for m in machines]
    result.coverage = {"branch_percent": 96.5, "covered_branches": 193, "branches": 200}
    return result


def test_an_engine_page_gives_its_commands_from_the_root_and_its_environment():
    result = _result("fakeshard:FakeShardEngine", "fixture", ("sessions", "faults"))
    suite_cmd = [sys.executable, "-m", "pytest", str(ROOT / "tests"), "-q"]
    text = render(result, root=ROOT, base=None, argv=["--profile", "ci"],
                  suite=(suite_cmd, 0, "410 passed"))
    assert "python3 -m tools.evidence --profile ci" in text
    assert f"{sys.executable} -m pytest fakeshard/testing/suite.py -q" in text  # relative to the root
    assert f"{sys.executable} -m pytest tests -q" in text and str(ROOT) + "/" not in text
    assert "| state-machine campaign (pytest exit code) | 0 (passed) |" in text
    assert "| contract suite `tests/` on the same engine | 0: `410 passed` |" in text
    assert "96.5% (193/200)" in text
    for heading in ("## Commands and results", "## Environment", "## Coverage", "## Evidence class"):
        assert text.count(heading) == 1, heading
    assert "| git commit | `" in text and "| hypothesis | " in text
    assert "**fixture evidence**" in text and "real-model certification" in text


def test_a_hosts_evidence_names_the_host_who_applied_the_faults_and_how_it_was_judged():
    import dataclasses
    import html

    from tools.evidence import _engine_args, render_page

    result = _result("fakeshard.remote:attached_engine", "real-model", ("sessions",))
    result.options = dataclasses.replace(result.options, engine_cmd="./my-host --port 0")
    result.faults_applied_by = "the kit, in front of the host's nodes"
    result.judged_by = "within tolerance 0.001, near ties by the host's logits, by the contract alone"
    text = render(result, root=ROOT, base=None, argv=["--engine-cmd", "./my-host --port 0"],
                  suite=([sys.executable, "-m", "pytest", "tests"], 0, "440 passed"))
    assert "host started by './my-host --port 0' (its nodes, through fakeshard.remote:attached_engine)" in text
    assert "**real-model evidence**" in text
    said = ("Faults applied by the kit, in front of the host's nodes. Judged within tolerance 0.001, near ties "
            "by the host's logits, by the contract alone.")
    assert said in text and said in html.unescape(render_page(result, root=ROOT, argv=[]))
    # The contract suite runs on the same host, started by the plugin as check started it.
    assert _engine_args(result.options) == ["--engine-cmd=./my-host --port 0"]
    assert "Faults applied by" not in render(_result("fakeshard:FakeShardEngine", "fixture", ("sessions",)),
                                             root=ROOT, base=None, argv=[], suite=([], 0, "ok"))


def test_a_coordinator_page_has_the_same_commands_and_environment_sections():
    result = _result("fakeshard:FakeShardEngine", "fixture", ("coordinator",), returncode=1)
    text = render_coordinator(result, root=ROOT, argv=["--machines", "coordinator"])
    assert "python3 -m tools.evidence --machines coordinator" in text
    assert f"{sys.executable} -m pytest fakeshard/testing/suite.py -q" in text
    assert "| coordinator campaign (pytest exit code) | 1 (FAILED) |" in text
    assert text.count("## Commands and results") == text.count("## Environment") == 1
    assert "| git commit | `" in text


def _evidence(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tools.evidence", *args], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ})


def test_evidence_of_a_coordinator_campaign(tmp_path):
    dest = tmp_path / "coordinator"
    result = _evidence("--machines", "coordinator", "--coordinator", "planted.coordinators:gives_up_early",
                       "--profile", "dev", "--examples", "4", "--steps", "8", "--seed", "0", "--dest", str(dest),
                       "--traces", str(tmp_path / "traces"), "--out", str(tmp_path / "out"))
    text = (dest / "README.md").read_text(encoding="utf-8")
    assert "coordinator campaign of `planted.coordinators:gives_up_early`, fixture engines" in text
    assert "**fixture evidence**" in text and "`coordinator:call:ok`" in text
    # What the page says of the run is what the run did.
    assert (result.returncode == 0) == ("| coordinator campaign (pytest exit code) | 0 (passed) |" in text)
    ok = _evidence("--machines", "coordinator", "--profile", "dev", "--examples", "4", "--steps", "8",
                   "--dest", str(dest), "--out", str(tmp_path / "out"))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "| coordinator campaign (pytest exit code) | 0 (passed) |" in (dest / "README.md").read_text()


def test_bad_options_are_a_one_line_error():
    result = _evidence("--profile", "nope")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--profile must be one of" in lines[0], result.stderr


def test_the_wheel_ships_no_repository_tooling():
    """``fakeshard`` is the product: this repository's evidence and mutation tooling is not a
    command of it, and nothing under ``fakeshard/`` names this repository's evidence folder."""
    result = subprocess.run([sys.executable, "-m", "fakeshard", "evidence"], capture_output=True, text=True)
    assert result.returncode == 2 and "invalid choice" in result.stderr
    for path in (ROOT / "fakeshard").rglob("*.py"):
        assert "DGR-032" not in path.read_text(encoding="utf-8"), path


@pytest.mark.parametrize("folder", ["fixture", "real-model"])
def test_a_committed_evidence_page_matches_the_code(folder):
    """An evidence page is today's: its probe count and contract version are the code's, and
    the commit it ran on is in this history (regenerate it with tools.evidence otherwise)."""
    from fakeshard import CONTRACT_VERSION
    from fakeshard.real import tiny_engine
    from fakeshard.testing import _probes as probes
    from fakeshard.testing._lengths import LONGEST, longest_of

    # The real model's prompts stop at its factory's longest: positions past it are not required.
    want = len(probes.required(longest_of(tiny_engine) if folder == "real-model" else LONGEST))
    text = (ROOT / "evidence" / "DGR-032" / folder / "README.md").read_text(encoding="utf-8")
    reached, required = map(int, re.search(r"^\| probes reached \| (\d+)/(\d+) \|$", text, flags=re.M).groups())
    assert required == want and reached == required, (reached, required, want)
    assert re.search(r"`docs/contract\.md` v(\S+?)\)", text).group(1) == CONTRACT_VERSION
    commit = re.search(r"^\| git commit \| `([0-9a-f]{40})` \|$", text, flags=re.M).group(1)
    known = subprocess.run(["git", "merge-base", "--is-ancestor", commit, "HEAD"], cwd=ROOT, capture_output=True)
    if known.returncode not in (0, 1):
        pytest.skip(f"no git history to look the commit up in: {known.stderr.decode()[:200]}")
    assert known.returncode == 0, f"{folder}'s evidence ran on {commit}, which is not in this history"


def _page_result() -> CheckResult:
    result = _result("fakeshard:FakeShardEngine", "fixture", ("sessions", "faults", "concurrent"))
    result.machines[0]["probes"] = {"code:cache_miss": 3, "position:7": 1}
    result.machines[1]["probes"] = {"fault:Crash": 4, "fault:Delay": 2, "code:engine_crashed": 4}
    result.machines[2]["probes"] = {"sim:reroute": 2, "fault:Crash": 1}
    return result


def test_the_evidence_page_plots_the_run_from_its_figures(tmp_path):
    import json
    from xml.etree import ElementTree

    from tools.evidence import render_page

    coverage = tmp_path / "coverage.json"
    coverage.write_text(json.dumps({"files": {
        "/x/fakeshard/_engine.py": {"summary": {"num_branches": 40, "covered_branches": 30}},
        "/x/fakeshard/_clock.py": {"summary": {"num_branches": 0, "covered_branches": 0}}}}))
    catch = tmp_path / "catch.json"
    catch.write_text(json.dumps({"command": "python3 benchmarks/catch.py --json c.json", "python": "3.11",
                                 "machine": "x86_64", "what": "seconds to the first failure",
                                 "bugs": [{"bug": "leaky", "machine": "sessions", "runs": 3, "seconds": 1.5,
                                           "caught": True},
                                          {"bug": "late", "machine": "faults", "runs": 9, "seconds": 4.0,
                                           "caught": False}]}))
    page = render_page(_page_result(), root=ROOT, argv=["--profile", "ci"], coverage_json=coverage, catch_json=catch)
    charts = {m.group(1): m.group(0) for m in re.finditer(r'<svg [^>]*id="([a-z-]+)".*?</svg>', page, re.S)}
    assert set(charts) == {"probes-chart", "faults-chart", "coverage-chart", "catch-chart"}
    bars = {k: [g.find("{http://www.w3.org/2000/svg}title").text for g in ElementTree.fromstring(v).iter("{http://www.w3.org/2000/svg}g")]
            for k, v in charts.items()}
    assert bars["faults-chart"] == ["Crash: 5", "Delay: 2"]  # summed over machines
    assert bars["coverage-chart"] == ["_engine.py: 75.0%"]  # a module without branches is not plotted
    assert bars["catch-chart"] == ["leaky: 1.50 s", "late: 4.00 s"]
    assert 'class="bar bad"' in charts["catch-chart"]  # the missed bug stands out
    assert "python3 -m tools.evidence --profile ci" in page and "<script" not in page
    assert page.count("<tr>") == 1 + 3  # the header and a row per machine
