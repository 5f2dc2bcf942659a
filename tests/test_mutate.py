"""``python3 -m tools.mutate``: the report it writes from mutmut's results (the mutmut run itself is
evidence/DGR-032/mutation, not a test: it takes most of an hour)."""

from __future__ import annotations

import json
from collections import Counter

import pytest

pytest.importorskip("tomllib", reason="tools.mutate reads pyproject.toml with tomllib (Python 3.11+)")

from tools.mutate import (  # noqa: E402
    RUN_RECORD,
    TESTS_ENV,
    MutateError,
    MutateOptions,
    MutationRun,
    class_of,
    contract_score,
    keeps,
    main,
    module_of,
    modules,
    only_words,
    reason_for,
    run_mutate,
    score,
    shown_reason,
    write_report,
)

ENGINE = "fakeshard._engine.xǁSessionEngineǁ"


def test_the_mutated_modules_are_those_that_carry_contract_logic():
    wire = [f"wire.{m}" for m in ("_encode", "_format", "_frame", "_json", "_read", "_schema")]
    assert sorted(modules()) == sorted(f"fakeshard.{m}" for m in
                                       ("_engine", "_faults", "_contract", *wire, "_pipeline", "_backend"))


def test_a_mutant_name_gives_its_module():
    assert module_of(ENGINE + "decode__mutmut_3") == "fakeshard._engine"
    assert module_of("fakeshard.wire._read.x_loads__mutmut_12") == "fakeshard.wire._read"
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
               {"mutants": "fakeshard._engine.*", "reason": "catch-all"}]
    assert reason_for(ENGINE + "__repr____mutmut_4", "", reasons) == "repr is no contract"
    assert reason_for(ENGINE + "decode__mutmut_1", "-        x = 1\n+        x = 2", reasons) == "equivalent: x unused"
    assert reason_for(ENGINE + "decode__mutmut_2", "+        y = 3", reasons) == "catch-all"
    # the text must be in what the mutant changed, not in the context it shares with its neighbours
    context = "--- fakeshard/_engine.py\n+++ fakeshard/_engine.py\n         x = 2\n-        y = 3\n+        y = 4"
    assert reason_for(ENGINE + "decode__mutmut_3", context, reasons) == "catch-all"
    assert reason_for("fakeshard.wire.x_loads__mutmut_1", "", reasons) == ""


def _diff(removed: str, added: str, before: str = "    def f():") -> str:
    return f"--- fakeshard/x.py\n+++ fakeshard/x.py\n@@ -1,3 +1,3 @@\n {before}\n" + "".join(
        f"-{line}\n" for line in removed.splitlines()) + "".join(f"+{line}\n" for line in added.splitlines())


@pytest.mark.parametrize("removed, added", [
    ('        raise _Bad(f"{path} must be a number, got {kind}")', '        raise _Bad(f"XX{path} must be a number, got {kind}XX")'),  # noqa: E501 (a line and its mutant, as mutmut writes them)
    ('        raise _fail(bundle, f"hidden[{i}] is {x}")', '        raise _fail(bundle, None)'),
    ('        raise ValueError("ShardSpec needs 0 <= start")', '        raise ValueError("SHARDSPEC NEEDS 0 <= START")'),  # noqa: E501 (a line and its mutant, as mutmut writes them)
    ('            "ShardSpec needs 0 <= start_layer, got "', '            "SHARDSPEC NEEDS 0 <= START_LAYER, GOT "'),
    ('                f"row {i} has {n} values",', '                None,'),
])
def test_a_change_to_a_messages_words_is_only_words(removed, added):
    assert only_words(_diff(removed, added, before="        raise ValueError("))


def test_a_literal_alone_on_its_line_is_a_messages_words_only_where_it_continues_an_error():
    removed, added = '            "float32",', '            "XXfloat32XX",'
    assert only_words(_diff(removed, added, before="        raise ValueError("))
    assert not only_words(_diff(removed, added, before="    DTYPES = ("))
    assert not only_words(_diff(removed, added))


def test_a_message_argument_on_its_own_line_finds_the_call_that_opens_it():
    message, words = '                f"layer {n} is past the model",', '                None,'
    spread = "            raise _fail(\n                bundle,"
    assert only_words(_diff(message, words, before=spread))
    # an argument line of its own that closes the call above leaves no bracket open
    assert not only_words(_diff(message, words, before="            check(bundle)\n                x,"))
    # the ids argument on its own line is no message's words
    assert not only_words(_diff("                bundle,", "                None,", before="            raise _fail("))
    # a literal in a call that does not build an error, below one that did and closed
    closed = "        raise _fail(bundle, f\"bad\")\n        values = ("
    assert not only_words(_diff('            "float32",', '            "XXfloat32XX",', before=closed))


@pytest.mark.parametrize("removed, added", [
    ('            "seed": obj.seed,', '            "SEED": obj.seed,'),  # a key of the wire form
    ('    return {"type": fault.type_name}', '    return {"TYPE": fault.type_name}'),
    ('        raise _fail(bundle, f"bad {x}")', '        raise _fail(None, f"bad {x}")'),  # the ids it keeps
    ('        raise _fail(bundle, f"bad {x}")', '        raise _fail(f"bad {x}")'),
    ('        raise StaleEpoch(f"epoch {e}", session_id="s")', '        raise StaleEpoch(f"epoch {e}", session_id="XXsXX")'),  # noqa: E501 (a line and its mutant, as mutmut writes them)
    ('        if len(text) > limit: raise _Bad(f"over {limit}")', '        if len(text) >= limit: raise _Bad(f"over {limit}")'),  # noqa: E501 (a line and its mutant, as mutmut writes them)
    ('    head = json.dumps(header, separators=(",", ":"))', '    head = json.dumps(header, separators=None)'),
    ('    x = "fixture"', '    x = "XXfixtureXX"'),
    ('    x = 1', '    x = 1'),
])
def test_a_change_beyond_a_messages_words_is_not(removed, added):
    assert not only_words(_diff(removed, added))


def test_a_mutant_not_killed_is_equivalent_contract_free_or_a_gap():
    reasons = [{"mutants": ENGINE + "decode*", "diff": "x = 2", "reason": "equivalent: x unused"},
               {"mutants": ENGINE + "__repr__*", "reason": "a repr is no part of the contract",
                "class": "contract-free"},
               {"mutants": "fakeshard._engine.*", "reason": "free text"}]
    words = _diff('        raise _Bad(f"bad {x}")', '        raise _Bad(None)')
    assert class_of(ENGINE + "decode__mutmut_1", _diff("x = 1", "x = 2"), reasons) == "equivalent"
    assert class_of(ENGINE + "__repr____mutmut_1", _diff("return 'a'", "return 'b'"), reasons) == "contract-free"
    # a catch-all reason that says "free text" does not make a change beyond the words contract-free
    assert class_of(ENGINE + "close__mutmut_1", _diff("if a > b:", "if a >= b:"), reasons) == "gap"
    assert class_of(ENGINE + "close__mutmut_2", words, reasons) == "contract-free"
    assert class_of("fakeshard.wire.x_f__mutmut_1", _diff("if a > b:", "if a >= b:"), []) == "gap"


def test_the_score_of_what_the_contract_sees_leaves_out_equivalent_and_contract_free_survivors():
    counts = Counter(killed=90, survived=10)
    assert contract_score(counts, Counter(equivalent=3, gap=5, **{"contract-free": 2})) == 100.0 * 90 / 95
    assert contract_score(counts, Counter(gap=10)) == score(counts) == 90.0
    assert contract_score(Counter(), Counter()) == 0.0


def test_reasons_with_an_unknown_class_are_refused(tmp_path):
    (tmp_path / "reasons.json").write_text(json.dumps([{"mutants": "x*", "reason": "r", "class": "harmless"}]),
                                           encoding="utf-8")
    with pytest.raises(MutateError, match="one of equivalent, contract-free, gap"):
        write_report(_run({}), MutateOptions(dest=tmp_path), argv=[])


def _run(statuses: dict[str, str]) -> MutationRun:
    diffs = {n: f"--- a\n+++ b\n-old {n}\n+new {n}" for n, s in statuses.items() if s in ("survived", "no tests")}
    return MutationRun(statuses=statuses, diffs=diffs, elapsed=1234.0)


def test_the_report_counts_each_module_and_gives_every_survivor_its_reason(tmp_path):
    statuses = {f"{m}.x_f__mutmut_{i}": "killed" for m in modules() for i in range(40)}
    statuses[ENGINE + "__repr____mutmut_1"] = "survived"
    statuses["fakeshard.wire._read.x_g__mutmut_1"] = "no tests"
    statuses["fakeshard.wire._read.x_g__mutmut_2"] = "timeout"
    (tmp_path / "reasons.json").write_text(json.dumps(
        [{"mutants": ENGINE + "__repr__*", "reason": "a repr is no part of the contract"}]), encoding="utf-8")
    options = MutateOptions(workers=2, dest=tmp_path)
    assert write_report(_run(statuses), options, argv=[]) is True
    text = (tmp_path / "README.md").read_text(encoding="utf-8")
    assert "**Met**" in text and "20.6 minutes with 2 workers" in text
    assert "| `fakeshard.wire._read` | 42 | 40 | 1 | 0 | 1 | 0 | 0 | 97.6% |" in text
    assert "| `fakeshard._engine` | 41 | 40 | 0 | 1 | 0 | 0 | 0 | 97.6% |" in text
    assert "a repr is no part of the contract" in text and "(no reason given)" in text
    assert "+new fakeshard.wire._read.x_g__mutmut_1" in text
    data = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    assert data["goal_met"] is True and data["modules"]["fakeshard.wire._read"] == {"killed": 40, "no tests": 1,
                                                                            "timeout": 1}
    assert data["not_killed"][ENGINE + "__repr____mutmut_1"]["reason"] == "a repr is no part of the contract"


def test_the_report_gives_the_score_of_what_the_contract_sees(tmp_path):
    statuses = {f"{m}.x_f__mutmut_{i}": "killed" for m in modules() for i in range(20)}
    statuses.update({f"fakeshard.wire._read.x_g__mutmut_{i}": "survived" for i in range(4)})  # 83.3%: under the goal
    run = _run(statuses)
    run.diffs["fakeshard.wire._read.x_g__mutmut_0"] = _diff('    raise _Bad(f"bad {x}")', '    raise _Bad(None)')
    run.diffs["fakeshard.wire._read.x_g__mutmut_1"] = _diff('    raise _Bad("bad")', '    raise _Bad("XXbadXX")')
    run.diffs["fakeshard.wire._read.x_g__mutmut_2"] = _diff("    y = 1", "    y = 2")
    (tmp_path / "reasons.json").write_text(json.dumps(
        [{"mutants": "fakeshard.wire._read.x_g__mutmut_2", "reason": "equivalent: y is never read"}]), encoding="utf-8")
    assert write_report(run, MutateOptions(dest=tmp_path), argv=[]) is False
    text = (tmp_path / "README.md").read_text(encoding="utf-8")
    assert "| `fakeshard.wire._read` | 24 | 1 | 2 | 1 | 95.2% |" in text  # 20 of 21
    assert "By it the goal is **met**" in text
    assert "### `fakeshard.wire._read.x_g__mutmut_0` (survived, contract-free)\n\nthe words of a message" in text
    assert "### `fakeshard.wire._read.x_g__mutmut_3` (survived, gap)\n\n(no reason given)" in text
    data = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    assert data["goal_met"] is False and data["goal_met_by_what_the_contract_sees"] is True
    assert data["score_of_what_the_contract_sees"]["fakeshard.wire._read"] == 95.24
    assert data["not_killed"]["fakeshard.wire._read.x_g__mutmut_2"]["class"] == "equivalent"


def test_one_module_under_the_goal_fails_the_goal(tmp_path):
    statuses = {f"{m}.x_f__mutmut_{i}": "killed" for m in modules() for i in range(100)}
    statuses.update({f"fakeshard._backend.x_h__mutmut_{i}": "survived" for i in range(12)})  # 89.3%
    assert score(Counter(killed=100, survived=12)) < 90  # and 98% overall
    assert write_report(_run(statuses), MutateOptions(dest=tmp_path), argv=[]) is False
    assert "**Not met**" in (tmp_path / "README.md").read_text(encoding="utf-8")


def test_a_module_with_nothing_to_mutate_does_not_fail_the_goal(tmp_path):
    statuses = {f"{m}.x_f__mutmut_{i}": "killed" for m in modules() if m != "fakeshard.wire._format"
                for i in range(10)}
    assert write_report(_run(statuses), MutateOptions(dest=tmp_path), argv=[]) is True
    statuses["fakeshard.wire._format.x_f__mutmut_1"] = "survived"  # one it has, and misses
    assert write_report(_run(statuses), MutateOptions(dest=tmp_path), argv=[]) is False


def test_a_run_stopped_before_every_mutant_was_tested_does_not_meet_the_goal(tmp_path):
    statuses = {f"{m}.x_f__mutmut_{i}": "killed" for m in modules() for i in range(10)}
    statuses["fakeshard._engine.x_g__mutmut_1"] = "not checked"
    assert write_report(_run(statuses), MutateOptions(dest=tmp_path), argv=[]) is False


def test_reasons_that_are_not_a_list_of_entries_are_refused(tmp_path):
    (tmp_path / "reasons.json").write_text('{"mutants": "x"}', encoding="utf-8")
    with pytest.raises(MutateError, match="expected a list"):
        write_report(_run({}), MutateOptions(dest=tmp_path), argv=[])


def test_the_machines_command_keeps_only_what_is_under_stateful(tmp_path):
    root = tmp_path
    assert keeps("machines", root / "stateful" / "test_machines.py", root)
    assert not keeps("machines", root / "tests" / "test_wire.py", root)
    assert not keeps("machines", root / "stateful.py", root)
    assert keeps("suite", root / "tests" / "test_wire.py", root)
    with pytest.raises(MutateError, match="FAKESHARD_MUTATE_TESTS='all' is not one of"):
        keeps("all", root / "stateful" / "test_machines.py", root)


def test_the_checkout_collects_only_the_machines_for_the_machines_command():
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]

    def collected(tests):
        env = {k: v for k, v in os.environ.items() if k != TESTS_ENV}
        if tests:
            env[TESTS_ENV] = tests
        proc = subprocess.run([sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider",
                               "tests/test_clock.py", "stateful/test_regressions.py"], cwd=root, env=env,
                              capture_output=True, text=True)
        return proc.returncode, [line for line in proc.stdout.splitlines() if "::" in line], proc.stdout + proc.stderr

    code, items, _ = collected("machines")
    assert code == 0 and items and all(item.startswith("stateful/") for item in items)
    code, everything, _ = collected(None)
    assert code == 0 and any(item.startswith("tests/test_clock.py") for item in everything)
    assert set(items) == {item for item in everything if item.startswith("stateful/")}
    code, _, out = collected("bogus")
    assert code != 0 and "FAKESHARD_MUTATE_TESTS='bogus' is not one of" in out


def test_the_machines_report_names_its_command(tmp_path):
    statuses = {f"{m}.x_f__mutmut_{i}": "killed" for m in modules() for i in range(10)}
    run = _run(statuses)
    run.tests = "machines"
    write_report(run, MutateOptions(dest=tmp_path, tests="machines"), argv=["--tests", "machines"])
    text = (tmp_path / "README.md").read_text(encoding="utf-8")
    assert "the state machines alone (`--tests machines`)" in text
    assert "python3 -m tools.mutate --workers 2 --tests machines" in text
    assert json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))["tests"] == "machines"
    write_report(_run(statuses), MutateOptions(dest=tmp_path), argv=[])
    text = (tmp_path / "README.md").read_text(encoding="utf-8")
    assert "--tests" not in text and "the contract suite and the state machines notice" in text


def test_a_report_only_of_the_other_command_is_refused(tmp_path, monkeypatch):
    pytest.importorskip("mutmut", reason="run_mutate needs mutmut (the mutate extra)")
    import tools.mutate as mutate

    (tmp_path / "mutants").mkdir()
    (tmp_path / "mutants" / RUN_RECORD).write_text(json.dumps(
        {"elapsed_s": 1.0, "returncode": 0, "workers": 2, "tests": "suite"}), encoding="utf-8")
    monkeypatch.setattr(mutate, "_root", lambda: tmp_path)
    monkeypatch.setattr(mutate, "_mutmut_config", lambda root: {"only_mutate": ["fakeshard/_engine.py"]})
    monkeypatch.setattr(mutate, "_results", lambda root, env: {"fakeshard._engine.x_f__mutmut_1": "killed"})
    with pytest.raises(MutateError, match="the last run used --tests suite, not --tests machines"):
        run_mutate(MutateOptions(tests="machines", report_only=True))
    assert run_mutate(MutateOptions(report_only=True)).statuses == {"fakeshard._engine.x_f__mutmut_1": "killed"}


def test_diffs_come_from_one_process_or_else_one_show_each(tmp_path, monkeypatch):
    import subprocess

    import tools.mutate as mutate

    names = ["fakeshard._engine.x_f__mutmut_1", "fakeshard._engine.x_f__mutmut_2"]
    answers = {"batch": subprocess.CompletedProcess([], 0, json.dumps({n: f"+{n}" for n in names}), "")}
    monkeypatch.setattr(mutate.subprocess, "run", lambda *a, **k: answers["batch"])
    monkeypatch.setattr(mutate, "_diff", lambda root, env, name: f"shown {name}")
    assert mutate._diffs(tmp_path, {}, names) == {n: f"+{n}" for n in names}
    for broken in (subprocess.CompletedProcess([], 1, "", "ImportError"),  # mutmut's functions moved
                   subprocess.CompletedProcess([], 0, "not json", ""),
                   subprocess.CompletedProcess([], 0, json.dumps({names[0]: "+x"}), "")):  # one missing
        answers["batch"] = broken
        assert mutate._diffs(tmp_path, {}, names) == {n: f"shown {n}" for n in names}
    assert mutate._diffs(tmp_path, {}, []) == {}


def test_bad_tests_is_a_one_line_error(capsys):
    with pytest.raises(SystemExit):
        main(["--tests", "all"])
    assert "invalid choice: 'all'" in capsys.readouterr().err


def test_bad_workers_is_a_one_line_error(capsys):
    assert main(["--workers", "0"]) == 2
    assert capsys.readouterr().err == "tools.mutate: error: --workers must be >= 1, got 0\n"


def test_the_mutate_profile_stops_at_the_first_failure_and_keeps_it_as_found():
    from hypothesis import Phase, settings

    from fakeshard.testing import _profiles as profiles

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


def test_a_mutant_of_a_message_s_words_is_not_explained_by_a_catch_all_about_a_gap():
    reasons = [{"mutants": ENGINE + "decode*", "reason": "gap: the decode rule ran rarely"},
               {"mutants": ENGINE + "prefill*", "class": "contract-free", "reason": "the prefill refusal's words"}]
    words = _diff('        raise ValueError("bad")', '        raise ValueError("XXbadXX")')
    code = _diff("        x = 1", "        x = 2")
    assert class_of(ENGINE + "decode__mutmut_1", words, reasons) == "contract-free"
    assert shown_reason(ENGINE + "decode__mutmut_1", words, reasons) == "the words of a message"
    assert shown_reason(ENGINE + "decode__mutmut_2", code, reasons) == "gap: the decode rule ran rarely"
    assert shown_reason(ENGINE + "prefill__mutmut_1", words, reasons) == "the prefill refusal's words"
    assert shown_reason("fakeshard.wire.x_loads__mutmut_1", code, reasons) == ""
