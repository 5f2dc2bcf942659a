"""``fakeshard mutate``: the report it writes from mutmut's results (the mutmut run itself is
evidence/DGR-032/mutation, not a test: it takes most of an hour)."""

from __future__ import annotations

import json
from collections import Counter

import pytest

pytest.importorskip("tomllib", reason="fakeshard mutate reads pyproject.toml with tomllib (Python 3.11+)")

from fakeshard.cli import main  # noqa: E402
from fakeshard.mutate import (MutateError, MutateOptions, MutationRun, module_of, modules,  # noqa: E402
                              reason_for, score, write_report)

ENGINE = "fakeshard.engine.xǁSessionEngineǁ"


def test_the_mutated_modules_are_those_that_carry_contract_logic():
    assert sorted(modules()) == sorted(f"fakeshard.{m}" for m in
                                       ("engine", "faults", "contract", "wire", "pipeline", "backend"))


def test_a_mutant_name_gives_its_module():
    assert module_of(ENGINE + "decode__mutmut_3") == "fakeshard.engine"
    assert module_of("fakeshard.wire.x_loads__mutmut_12") == "fakeshard.wire"
    with pytest.raises(MutateError, match="not a mutmut mutant name"):
        module_of("fakeshard.wire.loads")


def test_timeouts_count_as_killed_and_untested_mutants_as_surviving():
    assert score(Counter(killed=8, timeout=1, survived=1)) == 90.0
    assert score(Counter(killed=9, **{"no tests": 1})) == 90.0
    assert score(Counter(killed=1, skipped=5, **{"not checked": 3})) == 100.0  # what did not run is no score
    assert score(Counter()) == 0.0


def test_a_reason_matches_by_name_and_by_a_piece_of_the_diff():
    reasons = [{"mutants": ENGINE + "__repr__*", "reason": "repr is no contract"},
               {"mutants": ENGINE + "decode*", "diff": "x = 2", "reason": "equivalent: x unused"},
               {"mutants": "fakeshard.engine.*", "reason": "catch-all"}]
    assert reason_for(ENGINE + "__repr____mutmut_4", "", reasons) == "repr is no contract"
    assert reason_for(ENGINE + "decode__mutmut_1", "-        x = 1\n+        x = 2", reasons) == "equivalent: x unused"
    assert reason_for(ENGINE + "decode__mutmut_2", "+        y = 3", reasons) == "catch-all"
    # the text must be in what the mutant changed, not in the context it shares with its neighbours
    context = "--- fakeshard/engine.py\n+++ fakeshard/engine.py\n         x = 2\n-        y = 3\n+        y = 4"
    assert reason_for(ENGINE + "decode__mutmut_3", context, reasons) == "catch-all"
    assert reason_for("fakeshard.wire.x_loads__mutmut_1", "", reasons) == ""


def _run(statuses: dict[str, str]) -> MutationRun:
    diffs = {n: f"--- a\n+++ b\n-old {n}\n+new {n}" for n, s in statuses.items() if s in ("survived", "no tests")}
    return MutationRun(statuses=statuses, diffs=diffs, elapsed=1234.0)


def test_the_report_counts_each_module_and_gives_every_survivor_its_reason(tmp_path):
    statuses = {f"fakeshard.{m}.x_f__mutmut_{i}": "killed"
                for m in ("engine", "faults", "contract", "wire", "pipeline", "backend") for i in range(40)}
    statuses[ENGINE + "__repr____mutmut_1"] = "survived"
    statuses["fakeshard.wire.x_g__mutmut_1"] = "no tests"
    statuses["fakeshard.wire.x_g__mutmut_2"] = "timeout"
    (tmp_path / "reasons.json").write_text(json.dumps(
        [{"mutants": ENGINE + "__repr__*", "reason": "a repr is no part of the contract"}]), encoding="utf-8")
    options = MutateOptions(workers=2, dest=tmp_path)
    assert write_report(_run(statuses), options, argv=["mutate"]) is True
    text = (tmp_path / "README.md").read_text(encoding="utf-8")
    assert "**Met**" in text and "20.6 minutes with 2 workers" in text
    assert "| `fakeshard.wire` | 42 | 40 | 1 | 0 | 1 | 0 | 0 | 97.6% |" in text
    assert "| `fakeshard.engine` | 41 | 40 | 0 | 1 | 0 | 0 | 0 | 97.6% |" in text
    assert "a repr is no part of the contract" in text and "(no reason given)" in text
    assert "+new fakeshard.wire.x_g__mutmut_1" in text
    data = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    assert data["goal_met"] is True and data["modules"]["fakeshard.wire"] == {"killed": 40, "no tests": 1,
                                                                            "timeout": 1}
    assert data["not_killed"][ENGINE + "__repr____mutmut_1"]["reason"] == "a repr is no part of the contract"


def test_one_module_under_the_goal_fails_the_goal(tmp_path):
    statuses = {f"fakeshard.{m}.x_f__mutmut_{i}": "killed"
                for m in ("engine", "faults", "contract", "wire", "pipeline", "backend") for i in range(100)}
    statuses.update({f"fakeshard.backend.x_h__mutmut_{i}": "survived" for i in range(12)})  # 89.3%
    assert score(Counter(killed=100, survived=12)) < 90  # and 98% overall
    assert write_report(_run(statuses), MutateOptions(dest=tmp_path), argv=["mutate"]) is False
    assert "**Not met**" in (tmp_path / "README.md").read_text(encoding="utf-8")


def test_a_run_stopped_before_every_mutant_was_tested_does_not_meet_the_goal(tmp_path):
    statuses = {f"fakeshard.{m}.x_f__mutmut_{i}": "killed"
                for m in ("engine", "faults", "contract", "wire", "pipeline", "backend") for i in range(10)}
    statuses["fakeshard.engine.x_g__mutmut_1"] = "not checked"
    assert write_report(_run(statuses), MutateOptions(dest=tmp_path), argv=["mutate"]) is False


def test_reasons_that_are_not_a_list_of_entries_are_refused(tmp_path):
    (tmp_path / "reasons.json").write_text('{"mutants": "x"}', encoding="utf-8")
    with pytest.raises(MutateError, match="expected a list"):
        write_report(_run({}), MutateOptions(dest=tmp_path), argv=["mutate"])


def test_bad_workers_is_a_one_line_error(capsys):
    assert main(["mutate", "--workers", "0"]) == 2
    assert capsys.readouterr().err == "fakeshard: error: --workers must be >= 1, got 0\n"


def test_the_mutate_profile_stops_at_the_first_failure_and_keeps_it_as_found():
    from hypothesis import Phase, settings

    from fakeshard.testing import profiles

    mutate = profiles.get("mutate")
    assert mutate.derandomize and mutate.database is None and Phase.shrink not in mutate.phases
    before = settings.get_current_profile_name()
    try:
        profiles.load("mutate")
        assert not profiles.reduces_failures()
        profiles.load("ci")
        assert profiles.reduces_failures()
    finally:
        settings.load_profile(before)
