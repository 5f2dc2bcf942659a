"""The `fakeshard` command."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from fakeshard._cli import main
from fakeshard.testing._probes import REQUIRED


def test_demo_shows_faults_failover_and_equal_streams(capsys):
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    for needle in ("engine_crashed", "response_lost", "reroute", "-> same", "left after release: 0"):
        assert needle in out
    assert "DIFFERENT" not in out
    header = out.splitlines()[0].split()
    assert header[:4] == ["step", "t", "(s)", "op"]


def test_demo_is_deterministic(capsys):
    main(["demo"])
    first = capsys.readouterr().out
    main(["demo"])
    assert capsys.readouterr().out == first


def test_demo_with_another_seed_still_recovers(capsys):
    assert main(["demo", "--seed", "7"]) == 0


def test_unknown_command_is_a_one_line_error():
    result = subprocess.run([sys.executable, "-m", "fakeshard", "dance"], capture_output=True, text=True)
    assert result.returncode == 2
    assert "invalid choice" in result.stderr and "Traceback" not in result.stderr


def test_no_command_is_an_error(capsys):
    with pytest.raises(SystemExit) as info:
        main([])
    assert info.value.code == 2


def _run(*args, env=None):
    import os

    return subprocess.run([sys.executable, "-m", "fakeshard", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})})


@pytest.mark.parametrize("args,needle", [
    (["check", "--profile", "fast"], "--profile must be one of"),
    (["check", "--machines", "sessions,chaos"], "--machines takes"),
    (["check", "--workers", "0"], "--workers must be >= 1"),
    (["check", "--examples", "0"], "--examples must be >= 1"),
    (["check", "--min-branch-coverage", "120"], "--min-branch-coverage is a percent from 0 to 100, got 120"),
    (["check", "--min-branch-coverage", "-1"], "--min-branch-coverage is a percent"),
    (["check", "--min-branch-coverage", "nan"], "--min-branch-coverage is a percent"),
    (["check", "--engine", "nowhere_module:make"], "cannot import 'nowhere_module'"),
    (["check", "--engine", "fakeshard:NoSuchThing"], "has no 'NoSuchThing'"),
    (["check", "--engine", "fakeshard"], "not of the form module:callable"),
    (["check", "--engine", "http://127.0.0.1:8080"], "engine factory 'http://127.0.0.1:8080' looks like a URL; it "
                                                      "takes a Python callable as module:callable"),
    (["check", "--engine", "build/engine.py"], "looks like a path; it takes a Python callable as module:callable"),
    (["check", "--coordinator", "./coordinator.mjs"], "coordinator factory './coordinator.mjs' looks like a path"),
    (["check", "--engine", "fakeshard:ShardSpec"], "failed to build an engine"),
    (["check", "--engine", "fakeshard:VirtualClock"], "failed to build an engine"),
    (["check", "--certify"], "fixture results are not real-model certification"),
    (["check", "--frobnicate"], "unrecognized arguments"),
    (["replay", "does/not/exist.json"], "no trace file"),
    (["check", "--coordinator", "fakeshard"], "coordinator factory 'fakeshard' is not of the form module:callable"),
    (["check", "--coordinator", ""], "coordinator factory '' is not of the form module:callable"),
    (["check", "--coordinator", "nowhere_module:make"], "coordinator factory 'nowhere_module:make': cannot import"),
    (["check", "--coordinator", "fakeshard:__version__"], "is not callable"),
    (["check", "--coordinator", "fakeshard:FakeShardEngine"], "failed to build a coordinator"),
    (["check", "--coordinator", "fakeshard:VirtualClock"], "failed to build a coordinator"),
    (["check", "--coordinator", "fakeshard.testing._coordinator_machine:ReferenceStreams"], "failed to build"),
    (["replay", "does/not/exist.json", "--coordinator", "fakeshard:Pipeline"], "failed to build a coordinator"),
    # Given, even empty, an option counts; one that no machine of the campaign reads is refused.
    (["check", "--coordinator-cmd", ""], "--coordinator-cmd is empty"),
    (["check", "--coordinator-cmd", sys.executable, "--machines", "sessions"],
     "--coordinator-cmd is for the program machine, which this campaign does not run (its machines: sessions)"),
    (["check", "--request-timeout", "5"], "--request-timeout is for the program machine, which this campaign"),
    (["check", "--coordinator", "fakeshard.testing:reference", "--machines", "sessions,faults"],
     "--coordinator is for the coordinator and concurrent machines, which this campaign does not run"),
    (["check", "--coordinator", "fakeshard.testing:reference", "--machines", "concurrent,sessions"],
     "'fakeshard.testing:reference' builds a synchronous coordinator, which the coordinator machine tests; "
     "this campaign does not run it"),
    (["check", "--coordinator", "fakeshard.testing:reference_async", "--machines", "coordinator"],
     "builds an async coordinator, which the concurrent machine tests; this campaign does not run it"),
    (["check", "--availability", "0.5", "--machines", "failover"],
     "--availability is for the concurrent and program machines, which this campaign does not run"),
])
def test_bad_input_is_a_one_line_error(args, needle):
    result = _run(*args)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], result.stderr
    assert "Traceback" not in result.stderr


def test_a_missing_extra_is_named_before_anything_runs_never_reported_as_a_failure_found():
    # aiohttp hidden, as after the README's first command alone ('.[test]'): the program machine
    # serves its nodes with it.
    script = ("import sys; sys.modules['aiohttp'] = None\n"
              "from fakeshard._cli import main\n"
              f"sys.exit(main(['check', '--coordinator-cmd', {sys.executable!r}]))")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert "needs the serve extra (aiohttp missing)" in line and "pip install 'fakeshard[serve]'" in line
    assert "FAILED" not in result.stdout and "found a failure" not in result.stdout


def test_the_plugin_refuses_an_empty_coordinator_rather_than_test_the_reference(tmp_path):
    done = subprocess.run([sys.executable, "-m", "pytest", "--coordinator", "", "--pyargs", "fakeshard.testing.suite",
                           "-k", "machine_coordinator", "-q", "-p", "no:cacheprovider"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "coordinator factory '' is not of the form module:callable" in done.stdout + done.stderr


def test_an_empty_program_variable_counts_as_not_set():
    result = _run("check", "--machines", "program", env={"FAKESHARD_COORDINATOR_CMD": ""})
    assert result.returncode == 2 and "give it with --coordinator-cmd" in result.stderr, result.stderr


def test_replay_refuses_a_corrupt_trace(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    result = _run("replay", str(bad))
    assert result.returncode == 2 and "not a readable fakeshard trace" in result.stderr
    other = tmp_path / "other.json"
    other.write_text('{"format": 99}')
    assert "not a readable fakeshard trace" in _run("replay", str(other)).stderr


def test_replay_shows_a_saved_trace_passing(tmp_path):
    from fakeshard.testing._trace import REGRESSIONS

    trace = sorted(REGRESSIONS.glob("*.json"))[0]
    result = _run("replay", str(trace))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "passes: every step matches" in result.stdout
    assert "step  op" in result.stdout.replace("    ", "  ")


def test_replay_marks_the_first_divergence_on_a_buggy_engine():
    from fakeshard.testing._trace import REGRESSIONS, Trace

    for path in sorted(REGRESSIONS.glob("*.json")):
        if "leaky_release" in Trace.load(path).note:
            break
    else:
        pytest.skip("no leaky_release trace saved")
    result = _run("replay", str(path), "--engine", "planted.factories:leaky_release")
    assert result.returncode == 1
    assert ">>" in result.stdout and "FAILS at step" in result.stdout


def test_check_runs_a_small_campaign(tmp_path):
    result = _run("check", "--profile", "dev", "--examples", "3", "--steps", "5", "--machines", "sessions",
                  "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "sessions" in result.stdout and "passed" in result.stdout
    assert "fixture evidence, not real-model certification" in result.stdout
    assert "examples" in result.stderr  # the progress bar
    assert not (tmp_path / "out" / "coverage.json").exists()  # the kit's own coverage, only when asked for
    assert "coverage of fakeshard/" not in result.stdout


def test_check_measures_the_kits_coverage_when_asked_and_leaves_no_stale_report(tmp_path):
    args = ("check", "--profile", "dev", "--examples", "3", "--steps", "5", "--machines", "sessions",
            "--out", str(tmp_path / "out"))
    measured = _run(*args, "--coverage")
    assert measured.returncode == 0, measured.stdout + measured.stderr
    report = json.loads((tmp_path / "out" / "coverage.json").read_text())
    assert report["totals"]["covered_branches"] > 0
    assert "coverage of fakeshard/ from the campaign:" in measured.stdout
    again = _run(*args)  # the same folder, no coverage asked for: the earlier report is gone
    assert again.returncode == 0, again.stdout + again.stderr
    assert not (tmp_path / "out" / "coverage.json").exists() and not (tmp_path / "out" / "htmlcov").exists()


def test_a_ci_campaign_made_smaller_is_not_held_to_what_a_whole_one_reaches(tmp_path):
    """One example of the coordinator machine cannot draw every kind of failing call; a whole ci
    campaign must, and a campaign cut short on purpose passes on what it ran."""
    result = _run("check", "--profile", "ci", "--examples", "1", "--machines", "coordinator",
                  "--out", str(tmp_path / "out"), "--traces", str(tmp_path / "traces"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "not a whole ci campaign of the engine machines: not held to every probe" in result.stdout
    assert "unreached:" not in result.stdout


def test_a_whole_ci_campaign_fails_check_on_a_missing_or_impossible_probe(monkeypatch, capsys):
    from fakeshard import _check as check
    from fakeshard.testing import _probes as probes
    from fakeshard.testing._probes import REQUIRED, UNREACHABLE

    assert check.full_ci(check.CheckOptions(profile="ci"))
    for partial in (dict(profile="dev"), dict(profile="ci", examples=5), dict(profile="ci", steps=9),
                    dict(profile="ci", machines=("sessions", "faults"))):
        assert not check.full_ci(check.CheckOptions(**partial)), partial
    every = sorted(REQUIRED)
    outcomes = {"missing": (every[1:], "unreached: " + every[0]),
                "impossible": (every + [sorted(UNREACHABLE)[0]], "impossible"), "whole": (every, None)}
    for name, (reached, message) in outcomes.items():
        def fake_run(options, reached=reached):
            result = check.CheckResult(options, "fixture", ["pytest"], 0, 1.0)
            result.probes.update(reached)
            result.missing_probes = probes.missing(result.probes)
            result.impossible_probes = probes.impossible(result.probes)
            result.probes_required = check.full_ci(options)
            return result

        monkeypatch.setattr(check, "run_check", fake_run)
        status = main(["check"])
        out = capsys.readouterr().out
        assert status == (0 if message is None else 1), (name, out)
        assert (message is None) == ("FAILED" not in out), (name, out)
        if message is not None:
            assert message in out, (name, out)
        # the same campaign cut short is not held to the probes
        assert main(["check", "--examples", "3"]) == 0, name
        capsys.readouterr()


@pytest.mark.parametrize("machines, runs", [(("program",), 23), (("concurrent",), 103), (("parallel",), 250),
                                           (("sessions", "program"), (500, 23))])
def test_the_progress_bar_is_full_when_and_only_when_every_machine_has_finished(tmp_path, machines, runs):
    # A ci campaign asks 500 examples of an engine machine, 250 programs of the parallel machine,
    # 100 drawn scenarios of the concurrent machine and 20 of the program machine, each after the
    # 3 targeted ones (docs/contract.md).  A machine's count reaches its target before its last
    # run has ended (and its checks at the end of the campaign): the bar stays short of full until
    # a machine has written its summary.
    import time

    from fakeshard._check import CheckOptions, _bar, _progress

    counts = runs if isinstance(runs, tuple) else (runs,)
    campaign = tmp_path / "campaign"
    campaign.mkdir()

    def bar(extra: int, finished: bool) -> str:
        for machine, n in zip(machines, counts):
            (campaign / f"{machine}-1.progress.json").write_text(json.dumps(
                {"machine": machine, "runs": n + extra, "steps": 0, "failures": 0}))
            if finished:
                (campaign / f"{machine}-1.summary.json").write_text("{}")
        return _bar(_progress(tmp_path, CheckOptions(machines=machines), time.monotonic()))

    full = "[" + "#" * 24 + "]"
    assert not bar(-1, finished=False).startswith(full)
    assert not bar(+40, finished=False).startswith(full)  # past what was asked, still running
    assert bar(+40, finished=True).startswith(full)


def _summary_of_every_machine():
    from fakeshard._check import ALL_MACHINES, CheckOptions, CheckResult

    result = CheckResult(CheckOptions(machines=ALL_MACHINES, coordinator_cmd="node router.mjs"), "fixture", [], 1, 9.0)
    result.machines = [{"machine": m, "runs": 523, "steps": 123456, "failed": m == "program",
                        "traces": [".fakeshard/traces/program-0123456789ab.json"] if m == "program" else [],
                        "probes": {"fault:Crash": 3, "code:engine_crashed": 3, "code:ok": 9, "sim:reroute": 1,
                                   "position:7": 1},
                        "notes": ["availability 0.994 (..)"] if m == "concurrent" else []} for m in ALL_MACHINES]
    return result


def test_the_summary_table_fits_120_columns_and_marks_its_notes():
    from fakeshard._check import summary_table, what_was_tested

    result = _summary_of_every_machine()
    text = summary_table(result)
    assert max(len(line) for line in text.splitlines() if "trace" not in line) <= 120, text
    header = text.splitlines()[0].split()
    assert header[:4] == ["machine", "examples", "steps", "probes"] and "situations" in header
    rows = {line.split()[0]: line.split() for line in text.splitlines()[2:len(result.machines) + 2]}
    # An engine machine counts probes, a coordinator machine situations, each in its own column.
    assert rows["sessions"][3].endswith(f"/{len(REQUIRED)}") and rows["sessions"][4] == "-"
    assert rows["program"][3] == "-" and rows["program"][4] == "1/29" and rows["program"][-2:] == ["(1", "trace)"]
    assert rows["surface"][3] == rows["surface"][4] == "-"
    assert "program: trace .fakeshard/traces/program-0123456789ab.json" in text
    assert "info: concurrent: availability 0.994 (..)" in text
    assert "warning: program: 28 situations not reached, so not tested there:" in text
    closing = what_was_tested(result)
    assert closing.startswith("tested: engine fakeshard:FakeShardEngine (the kit's own), coordinator program "
                              "'node router.mjs'; evidence class fixture") and "next: replay a trace" in closing


def test_the_json_summary_says_what_each_machine_reached_and_missed(tmp_path):
    from fakeshard._check import summary_json
    from fakeshard.testing._probes import PROGRAM_SITUATIONS

    data = summary_json(_summary_of_every_machine())
    assert data["format"] == 1 and data["result"] == "failed" and data["evidence_class"] == "fixture"
    program = next(m for m in data["machines"] if m["machine"] == "program")
    assert program["counts"] == "situations" and program["reached"] == ["sim:reroute"]
    assert sorted(program["reached"] + program["missed"]) == sorted(PROGRAM_SITUATIONS)
    assert program["faults_fired"] == ["Crash"] and program["error_codes"] == ["engine_crashed"]
    assert program["result"] == "failed" and program["traces"] == [".fakeshard/traces/program-0123456789ab.json"]
    sessions = next(m for m in data["machines"] if m["machine"] == "sessions")
    assert sessions["counts"] == "probes"
    assert sessions["reached"] == ["code:engine_crashed", "fault:Crash", "position:7"]
    assert sorted(sessions["reached"] + sessions["missed"]) == sorted(REQUIRED)


def test_check_writes_its_summary_as_json_and_says_what_it_tested(tmp_path):
    result = _run("check", "--profile", "dev", "--examples", "3", "--steps", "5", "--machines", "sessions",
                  "--out", str(tmp_path / "out"), "--json", str(tmp_path / "summary.json"))
    assert result.returncode == 0, result.stdout + result.stderr
    data = json.loads((tmp_path / "summary.json").read_text())
    assert data["result"] == "passed" and [m["machine"] for m in data["machines"]] == ["sessions"]
    assert "tested: engine fakeshard:FakeShardEngine (the kit's own)" in result.stdout
    assert "a self-test" in result.stdout and "next: point --engine at your engine" in result.stdout
    assert "coverage of fakeshard/" not in result.stdout  # the kit's own coverage, only when asked for


def test_check_writes_a_junit_report_a_ci_shows(tmp_path):
    """--junit-xml: pytest's own JUnit report of the campaign, a case per machine and per engine
    check, the failure of a planted engine with its message."""
    import xml.etree.ElementTree as ET

    from fakeshard.testing import checks

    report = tmp_path / "reports" / "check.xml"
    # The ci profile is derandomized: the same draws whichever worker runs this (the planted
    # bug is met on the sessions machine's 8th run).
    result = _run("check", "--engine", "planted.factories:drift_from_12", "--machines", "sessions,faults",
                  "--profile", "ci", "--examples", "30",
                  "--out", str(tmp_path / "out"), "--traces", str(tmp_path / "traces"), "--junit-xml", str(report))
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
    cases = {c.get("name"): c for c in ET.parse(report).getroot().iter("testcase")}
    assert "test_machine[factory-sessions]" in cases and "test_machine[factory-faults]" in cases
    engine_checks = len(checks.ENGINE_CHECKS + checks.HTTP_CHECKS)
    assert sum(name.startswith("test_engine_passes_check[") for name in cases) == engine_checks
    failure = cases["test_machine[factory-sessions]"].find("failure")
    assert failure is not None and "Divergence" in failure.get("message", "")
    assert cases["test_machine[factory-faults]"].find("failure") is None


def test_check_gates_a_partial_implementation_by_its_known_failures(tmp_path):
    """--known-failing: a listed machine that fails is reported as known (the run passes for it);
    a listed check that passes fails the run, naming the file, so the list only shrinks."""
    known = tmp_path / "known-failing.txt"
    known.write_text("# checks this engine fails today\nsessions  # a drift from position 12\n\n"
                     "check_long_session  # the same drift, met by a long session\n", encoding="utf-8")
    common = ("check", "--engine", "planted.factories:drift_from_12", "--machines", "sessions", "--profile", "ci",
              "--examples", "30", "--traces", str(tmp_path / "traces"), "--known-failing", str(known))
    result = _run(*common, "--out", str(tmp_path / "a"))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "known failing (1 trace)" in result.stdout
    known.write_text("sessions\ncheck_long_session\ncheck_defaults\n", encoding="utf-8")
    result = _run(*common, "--out", str(tmp_path / "b"))
    assert result.returncode == 1
    assert f"1 check listed in --known-failing {known} now pass" in result.stdout
    assert "the campaign found a failure" not in result.stdout


@pytest.mark.parametrize("text, needle", [
    ("check_no_such_thing\n", "names what check does not run: check_no_such_thing"),
    ("sessions faults\n", "line 1"),
])
def test_check_refuses_a_known_failing_file_naming_no_check(tmp_path, text, needle):
    known = tmp_path / "known.txt"
    known.write_text(text, encoding="utf-8")
    result = _run("check", "--known-failing", str(known), "--out", str(tmp_path / "out"))
    assert result.returncode == 2 and needle in result.stderr, result.stderr
