"""Evidence pages, rendered from a campaign's result (the campaigns themselves run in test_cli)."""

from __future__ import annotations

import sys
from pathlib import Path

from fakeshard.check import CheckOptions, CheckResult
from fakeshard.evidence import render, render_coordinator

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
    text = render(result, root=ROOT, base=None, argv=["evidence", "--profile", "ci"],
                  suite=(suite_cmd, 0, "410 passed"))
    assert "python3 -m fakeshard evidence --profile ci" in text
    assert f"{sys.executable} -m pytest fakeshard/testing/suite.py -q" in text  # relative to the root
    assert f"{sys.executable} -m pytest tests -q" in text and str(ROOT) + "/" not in text
    assert "| state-machine campaign (pytest exit code) | 0 (passed) |" in text
    assert "| contract suite `tests/` on the same engine | 0: `410 passed` |" in text
    assert "96.5% (193/200)" in text
    for heading in ("## Commands and results", "## Environment", "## Coverage", "## Evidence class"):
        assert text.count(heading) == 1, heading
    assert "| git commit | `" in text and "| hypothesis | " in text
    assert "**fixture evidence**" in text and "real-model certification" in text


def test_a_coordinator_page_has_the_same_commands_and_environment_sections():
    result = _result("fakeshard:FakeShardEngine", "fixture", ("coordinator",), returncode=1)
    text = render_coordinator(result, root=ROOT, argv=["evidence", "--machines", "coordinator"])
    assert "python3 -m fakeshard evidence --machines coordinator" in text
    assert f"{sys.executable} -m pytest fakeshard/testing/suite.py -q" in text
    assert "| coordinator campaign (pytest exit code) | 1 (FAILED) |" in text
    assert text.count("## Commands and results") == text.count("## Environment") == 1
    assert "| git commit | `" in text
