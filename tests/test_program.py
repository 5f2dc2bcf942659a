"""Coordinator programs over real sockets: the stdio protocol, the harness, the reference
program, the Node.js example, the planted programs, the call log and the command line."""

from __future__ import annotations

import asyncio
import json
import shlex
import shutil
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest

from fakeshard import (
    Delay,
    DropResponse,
    FakeShardEngine,
    FaultPlan,
    FaultRule,
    ShardSpec,
    StaleEpoch,
    TokenBundle,
    wire,
)
from fakeshard._cli import main as cli
from fakeshard._schema import schema
from fakeshard.remote import RemoteShardEngine
from fakeshard.server._thread import ServerThread
from fakeshard.testing import _profiles as profiles
from fakeshard.testing._concurrent import Client, ConcurrentFailure, Round, Scenario
from fakeshard.testing._machines import MachineConfig
from fakeshard.testing._program import CONFIRM_RUNS, ProgramSettings, run_program, run_program_scenario
from fakeshard.testing._sim import Nemesis
from tests.support import raw_post

ROOT = Path(__file__).resolve().parent.parent
PLANTED = ROOT / "tests" / "planted_programs"
REFERENCE = f"{shlex.quote(sys.executable)} -m fakeshard.testing.coordinator_program"
NODE = shutil.which("node")
EXAMPLE = f"node {shlex.quote(str(ROOT / 'examples' / 'node-coordinator' / 'coordinator.mjs'))}"
needs_node = pytest.mark.skipif(NODE is None, reason="needs node (Node.js 18 or later) on PATH")

#: Two clients over two stages of two replicas, a crash and a partition that hangs.
SMALL = Scenario(seed=3, stages=2, replicas=2, capacity=None, plans=(FaultPlan(),) * 4,
                 clients=(Client("a", 0.0, (Round([1, 2, 3], 3),)),
                          Client("b", 0.1, (Round([4], 2), Round([5, 6], 2, stop=1, stop_after=0.01)))),
                 nemesis=(Nemesis(0.2, "crash", node=2, restart_after=0.4),
                          Nemesis(0.3, "partition", node=1, mode="hang", duration=1.0)))
ONE = Scenario(seed=0, stages=1, replicas=1, capacity=None, plans=(FaultPlan(),),
               clients=(Client("a", 0.0, (Round([1], 1),)),))
QUICK = ProgramSettings(request_timeout=5.0, settle=2.0)


def python_program(tmp_path: Path, body: str) -> str:
    """A program in Python whose ``answer(request)`` is ``body``; its command line."""
    path = tmp_path / "program.py"
    path.write_text(textwrap.dedent("""\
        import json, sys
        def reply(request, kind, **fields):
            sys.stdout.write(json.dumps({"type": kind, "in_reply_to": request["msg_id"], **fields}) + "\\n")
            sys.stdout.flush()
        for line in sys.stdin:
            request = json.loads(line)
        """) + textwrap.indent(textwrap.dedent(body), "    "), encoding="utf-8")
    return f"{shlex.quote(sys.executable)} {shlex.quote(str(path))}"


# -- the protocol, judged ------------------------------------------------------------------------

def test_the_reference_program_passes_a_small_run_and_speaks_the_schemas():
    jsonschema = pytest.importorskip("jsonschema")
    transcript: list = []
    run = run_program_scenario(FakeShardEngine, SMALL, REFERENCE, transcript=transcript)
    assert run.failure is None, run.failure
    assert run.answered > 0
    kinds = {m["type"] for m in transcript}
    assert {"init", "init_ok", "start", "start_ok", "next_token", "next_token_ok", "release", "release_ok"} <= kinds
    for message in transcript:
        jsonschema.validate(message, schema("program_request" if "msg_id" in message else "program_answer"))
    # The nodes saw the calls: the run's calls are the cluster's call log, in real seconds.
    assert any(c["op"] == "prefill" and c["outcome"] == "ok" for c in run.calls)
    assert all(c["sent"] >= 0 for c in run.calls)


def test_the_reference_program_reads_its_requests_from_a_file_too(tmp_path):
    # Run by hand (< requests.jsonl): a file is no pipe the event loop can watch.
    requests = tmp_path / "requests.jsonl"
    requests.write_text(json.dumps({"type": "start", "msg_id": 1, "session_id": "a", "prompt": [1]}) + "\n")
    with open(requests, "rb") as stdin:
        done = subprocess.run(shlex.split(REFERENCE), stdin=stdin, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"type": "error", "code": "failed", "message": "ValueError: start before init",
                                       "in_reply_to": 1}


def test_a_line_that_is_not_json_fails_the_run_as_a_protocol_error(tmp_path):
    cmd = python_program(tmp_path, """\
        if request["type"] == "init":
            reply(request, "init_ok")
        else:
            print("starting session", request.get("session_id"), flush=True)
        """)
    run = run_program_scenario(FakeShardEngine, ONE, cmd, settings=QUICK)
    assert run.check == "protocol"
    assert "not JSON" in run.failure and "starting session" in run.failure
    assert "write logs to standard error" in run.failure


def test_an_answer_of_the_wrong_type_is_a_protocol_error(tmp_path):
    cmd = python_program(tmp_path, """\
        reply(request, "init_ok" if request["type"] == "init" else "ok")
        """)
    run = run_program_scenario(FakeShardEngine, ONE, cmd, settings=QUICK)
    assert run.check == "protocol" and "start_ok or error" in run.failure


def test_an_answer_to_no_request_in_flight_is_a_protocol_error(tmp_path):
    cmd = python_program(tmp_path, """\
        request["msg_id"] += 1000
        reply(request, request["type"] + "_ok")
        """)
    run = run_program_scenario(FakeShardEngine, ONE, cmd, settings=QUICK)
    assert run.check == "protocol" and "in_reply_to" in run.failure


def test_a_program_that_exits_fails_the_run_and_its_log_is_quoted(tmp_path):
    cmd = python_program(tmp_path, """\
        if request["type"] == "init":
            reply(request, "init_ok")
        else:
            sys.stderr.write("no route to any node\\n")
            sys.exit(3)
        """)
    run = run_program_scenario(FakeShardEngine, ONE, cmd, settings=QUICK, log=tmp_path / "program.log")
    assert run.check == "exited"
    assert "status 3" in run.failure and "no route to any node" in run.failure


def _exits_after_init(tmp_path: Path) -> str:
    return python_program(tmp_path, """\
        if request["type"] == "init":
            reply(request, "init_ok")
        else:
            sys.stderr.write("no route to any node\\n")
            sys.exit(3)
        """)


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie no longer does: its parent may never reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists() or shutil.which("sh") is None,
                    reason="reads /proc, runs sh")
def test_a_program_that_started_a_process_is_ended_with_it_and_the_run_ends(tmp_path):
    pidfile = tmp_path / "child.pid"
    child = tmp_path / "child.py"
    child.write_text(textwrap.dedent(f"""\
        import json, os, sys, time
        open({str(pidfile)!r}, "w").write(str(os.getpid()))
        request = json.loads(sys.stdin.readline())
        print(json.dumps({{"type": "init_ok", "in_reply_to": request["msg_id"]}}), flush=True)
        time.sleep(600)  # deaf from here on, to its input's end too
        """))
    # A wrapper that is no simple command, so the shell runs the program as its child; the
    # child holds the wrapper's output open after the wrapper is killed.
    inner = f"{shlex.quote(sys.executable)} {shlex.quote(str(child))}; echo wrapper done >&2"
    cmd = f"sh -c {shlex.quote(inner)}"
    script = textwrap.dedent(f"""\
        from fakeshard import FakeShardEngine
        from fakeshard.testing._program import ProgramSettings, run_program_scenario
        from tests.test_program import ONE
        run = run_program_scenario(FakeShardEngine, ONE, {cmd!r},
                                   settings=ProgramSettings(request_timeout=1.0, settle=1.0))
        print(run.check)
        """)
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-1] == "unanswered"
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not _alive(pid), "the program's child outlived the run"


def test_a_run_without_a_log_path_leaves_no_file_behind(tmp_path, monkeypatch):
    import tempfile

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    cmd = _exits_after_init(tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    run = run_program_scenario(FakeShardEngine, ONE, cmd, settings=QUICK)
    assert run.check == "exited" and "no route to any node" in run.failure
    assert list(scratch.iterdir()) == []


def test_a_campaign_failure_names_the_saved_log_and_no_file_it_removed(tmp_path):
    config = MachineConfig.for_factory(FakeShardEngine, "fakeshard:FakeShardEngine")
    with pytest.raises(ConcurrentFailure) as caught:
        run_program(config, _exits_after_init(tmp_path), settings=profiles.get("ci"), save_dir=tmp_path / "traces",
                    reduce_failure=False)
    (saved,) = (tmp_path / "traces").glob("program-*.json")
    log = saved.with_suffix(".log")
    assert "no route to any node" in log.read_text()
    message = str(caught.value)
    assert f"the program's log of that run to {log}" in message
    # The failure quotes the end of the log, and names no path of the campaign's scratch folder.
    assert "its log ends:\n    no route to any node" in message
    assert "fakeshard-program-" not in message and "fakeshard-program-" not in caught.value.trace.failure


def test_a_replay_says_where_the_program_log_of_its_run_is(tmp_path, capsys):
    config = MachineConfig.for_factory(FakeShardEngine, "fakeshard:FakeShardEngine")
    with pytest.raises(ConcurrentFailure):
        run_program(config, _exits_after_init(tmp_path), settings=profiles.get("ci"), save_dir=tmp_path,
                    reduce_failure=False)
    (saved,) = tmp_path.glob("program-*.json")
    assert cli(["replay", str(saved)]) == 1
    out = capsys.readouterr().out
    log = Path(out.split("the program's log of this run: ", 1)[1].splitlines()[0])
    try:
        assert "no route to any node" in log.read_text()
    finally:
        log.unlink()


def test_the_re_runs_of_a_failure_found_are_counted_as_they_happen(tmp_path):
    from fakeshard._check import _bar

    cmd = python_program(tmp_path, """\
        if request["type"] == "init":
            reply(request, "init_ok")
        else:
            sys.exit(3)
        """)
    seen = []
    config = MachineConfig.for_factory(FakeShardEngine, "fakeshard:FakeShardEngine",
                                       on_step=lambda c: seen.append((c.reruns, len(c.failures))))
    with pytest.raises(ConcurrentFailure) as caught:
        run_program(config, cmd, settings=profiles.get("ci"), save_dir=tmp_path, reduce_failure=True)
    reduced = int(caught.value.trace.note.split("re-ran ")[1].split()[0])
    assert config.reruns == reduced + CONFIRM_RUNS
    # Each re-run is seen by the progress display as it ends, before the failure is reported.
    assert [n for n, failures in seen if n and not failures] == list(range(1, config.reruns + 1))
    progress = {"runs": 1, "target": 20, "steps": 0, "failures": 0, "reruns": config.reruns, "elapsed": 3.0}
    assert f"{config.reruns} re-runs of a failure found" in _bar(progress)
    assert "re-runs" not in _bar({**progress, "reruns": 0})


def test_a_program_that_cannot_start_is_reported(tmp_path):
    run = run_program_scenario(FakeShardEngine, ONE, str(tmp_path / "no-such-program"), settings=QUICK)
    assert run.check == "exited" and "could not start" in run.failure


def test_a_request_left_unanswered_fails_the_run_after_the_stated_timeout(tmp_path):
    cmd = python_program(tmp_path, """\
        if request["type"] in ("init", "start"):
            reply(request, request["type"] + "_ok")
        """)
    run = run_program_scenario(FakeShardEngine, ONE, cmd, settings=ProgramSettings(request_timeout=1.0))
    assert run.check == "unanswered" and "unanswered for 1 s" in run.failure
    assert "written nothing" not in run.failure  # it answered init and start


def test_a_program_whose_answers_sit_in_a_buffer_is_told_to_flush(tmp_path):
    # Answers written into a full-sized buffer never flushed (what C's stdio does on a pipe).
    path = tmp_path / "buffered.py"
    path.write_text(textwrap.dedent("""\
        import json, os, sys
        out = os.fdopen(1, "w", buffering=65536)
        for line in sys.stdin:
            request = json.loads(line)
            out.write(json.dumps({"type": request["type"] + "_ok", "in_reply_to": request["msg_id"]}) + "\\n")
        """))
    cmd = f"{shlex.quote(sys.executable)} {shlex.quote(str(path))}"
    run = run_program_scenario(FakeShardEngine, ONE, cmd, settings=ProgramSettings(request_timeout=1.0))
    assert run.check == "unanswered", run.failure
    assert run.failure.split(";")[0].endswith("init was left unanswered for 1 s")
    assert "written nothing on its standard output" in run.failure and "flush after each line" in run.failure


def test_gave_up_is_judged_by_the_budget(tmp_path):
    cmd = python_program(tmp_path, """\
        if request["type"] == "next_token":
            reply(request, "error", code="gave_up", message="no node answers")
        else:
            reply(request, request["type"] + "_ok")
        """)
    run = run_program_scenario(FakeShardEngine, ONE, cmd, settings=QUICK)
    assert run.check == "gave_up" and "0 failures" in run.failure


def test_a_token_off_the_stream_fails_the_stream_check(tmp_path):
    cmd = python_program(tmp_path, """\
        if request["type"] == "next_token":
            reply(request, "next_token_ok", token=63)
        else:
            reply(request, request["type"] + "_ok")
        """)
    run = run_program_scenario(FakeShardEngine, ONE, cmd, settings=QUICK)
    expected = FakeShardEngine(ShardSpec("concurrent-model", 2, 0, 2, hidden_size=4, vocab_size=64))
    if expected.prefill(TokenBundle("a", 0, 0, (1,))).token == 63:
        pytest.skip("the fixture's greedy token happens to be 63")
    assert run.check == "stream"


def test_a_call_the_program_timed_out_on_a_late_answer_counts_as_a_failure_in_the_budget():
    # A decode held 0.75 s real (Delay 3 scenario seconds, scaled 0.25) by a program that waits
    # 0.2 s: it gives up on that node, routes to the spare and replays.  What the nodes saw is
    # two passes over the route with no failing call; the caller's hang-up is the failure.
    late = Scenario(seed=0, stages=1, replicas=2, capacity=None,
                    plans=(FaultPlan((FaultRule(Delay(3.0), op="decode", nth=1),)), FaultPlan()),
                    clients=(Client("a", 0.0, (Round([1, 2], 3),)),))
    run = run_program_scenario(FakeShardEngine, late, f"{REFERENCE} --call-timeout 0.2", settings=QUICK)
    assert run.failure is None, run.failure
    (abandoned,) = [c for c in run.calls if c["abandoned"]]
    assert (abandoned["node"], abandoned["op"], abandoned["epoch"]) == (0, "decode", 0)
    assert run.reached["program:call_abandoned"] == 1 and run.reached["sim:replay_new_epoch"] == 1


#: One node whose every prefill is held 0.5 s real (Delay 2 scenario seconds, scaled 0.25).
SLOW_PREFILLS = Scenario(seed=0, stages=1, replicas=1, capacity=None,
                         plans=(FaultPlan((FaultRule(Delay(2.0), op="prefill", count=None),)),),
                         clients=(Client("a", 0.0, (Round([1, 2], 2),)),))


def _waited_out(run) -> None:
    """Two prefills the program timed out on (0.15 s, then 0.3 s), the third answered (0.6 s)."""
    assert run.failure is None, run.failure
    assert run.availability == 1.0 and run.reached["sim:gave_up"] == 0
    assert [(c["epoch"], c["abandoned"]) for c in run.calls if c["op"] == "prefill"] == \
        [(0, True), (1, True), (2, False)]


def test_the_reference_program_waits_out_a_node_slower_than_its_call_timeout():
    _waited_out(run_program_scenario(FakeShardEngine, SLOW_PREFILLS, f"{REFERENCE} --call-timeout 0.15",
                                     settings=QUICK))


@needs_node
def test_the_node_example_waits_out_a_node_slower_than_its_call_timeout(monkeypatch):
    monkeypatch.setenv("FAKESHARD_CALL_TIMEOUT_MS", "150")
    _waited_out(run_program_scenario(FakeShardEngine, SLOW_PREFILLS, EXAMPLE, settings=QUICK))


def test_a_late_answer_the_program_never_read_counts_as_a_failure_in_the_budget(tmp_path):
    # Session a's program times out after the answer came but before it read it (what a loaded
    # machine does to any coordinator): it closes the connection with the answer unread and
    # prefills again at a new epoch.  The node logs the hang-up after the call ended, and after
    # session b's requests made the harness read that call.
    cmd = python_program(tmp_path, """\
        import socket, threading, time, urllib.request
        def post(url, op, body, read=True):
            data = json.dumps(body).encode()
            if read:
                req = urllib.request.Request(url + "/v1/" + op, data, {"Content-Type": "application/json"})
                return json.loads(urllib.request.urlopen(req, timeout=5).read())
            host, port = url.removeprefix("http://").rsplit(":", 1)
            sock = socket.create_connection((host, int(port)))
            sock.sendall(b"POST /v1/%s HTTP/1.1\\r\\nHost: x\\r\\nContent-Type: application/json\\r\\n"
                         b"Content-Length: %d\\r\\n\\r\\n%s" % (op.encode(), len(data), data))
            time.sleep(0.2)  # the answer arrives meanwhile, and is never read (shorter than a silence)
            sock.close()
        def answer(request, url):
            kind, sid = request["type"], request.get("session_id")
            epoch = 1 if sid == "a" else 0
            if kind == "next_token":
                bundle = {"kind": "token_bundle", "contract": "1", "session_id": sid, "start_pos": 0, "tokens": [1]}
                if sid == "a":
                    post(url, "prefill", dict(bundle, epoch=0), read=False)
                token = post(url, "prefill", dict(bundle, epoch=epoch))["token"]
                with lock:
                    reply(request, "next_token_ok", token=token)
            else:
                if kind == "release":
                    post(url, "release", {"session_id": sid, "epoch": epoch})
                with lock:
                    reply(request, kind + "_ok")
        if request["type"] == "init":
            lock, url = threading.Lock(), request["stages"][0][0]["url"]
        threading.Thread(target=answer, args=(request, url)).start()
        """)
    scenario = Scenario(seed=0, stages=1, replicas=1, capacity=None, plans=(FaultPlan(),),
                        clients=(Client("a", 0.0, (Round([1], 1),)), Client("b", 0.4, (Round([1], 1),))))
    run = run_program_scenario(FakeShardEngine, scenario, cmd, settings=QUICK)
    assert run.failure is None, run.failure
    calls = [(c["session_id"], c["op"], c["epoch"], c["abandoned"]) for c in run.calls]
    assert calls.index(("b", "release", 0, False)) < calls.index(("a", "prefill", 1, False))
    assert ("a", "prefill", 0, True) in calls


def _replaying_program(tmp_path: Path, pause: float) -> str:
    """A program whose next_token prefills the history, waits ``pause`` seconds, and prefills it
    again at the next epoch: a replay no failure any node saw explains, after a silence."""
    return python_program(tmp_path, f"""\
        import time, urllib.request
        def post(url, op, body):
            req = urllib.request.Request(url + "/v1/" + op, json.dumps(body).encode(),
                                         {{"Content-Type": "application/json"}})
            return json.loads(urllib.request.urlopen(req, timeout=5).read())
        def prefill(url, epoch):
            return post(url, "prefill", {{"kind": "token_bundle", "contract": "1", "session_id": "a",
                                          "epoch": epoch, "start_pos": 0, "tokens": [1]}})
        kind = request["type"]
        if kind == "init":
            url = request["stages"][0][0]["url"]
        if kind == "next_token":
            prefill(url, 0)
            time.sleep({pause})
            reply(request, "next_token_ok", token=prefill(url, 1)["token"])
        else:
            if kind == "release":
                post(url, "release", {{"session_id": "a", "epoch": 1}})
            reply(request, kind + "_ok")
        """)


def test_a_replay_after_a_silence_no_node_saw_a_call_in_counts_a_failure_inside_the_program(tmp_path):
    # A call that failed inside the program before it left (its timeout on a starved event loop)
    # reaches no node; the replay that follows is what the silence it leaves explains.
    run = run_program_scenario(FakeShardEngine, ONE, _replaying_program(tmp_path, 0.6), settings=QUICK)
    assert run.failure is None, run.failure
    assert run.reached["program:silent_failure"] >= 2  # 0.6 s after a call that ended ok: two silences


def test_a_replay_with_no_silence_and_no_failure_breaks_the_budget(tmp_path):
    run = run_program_scenario(FakeShardEngine, ONE, _replaying_program(tmp_path, 0.0), settings=QUICK)
    assert run.check == "budget" and "made 2 compute calls with 0 failures" in run.failure, run.failure


def test_a_release_whose_call_never_left_the_program_is_judged_at_the_end(tmp_path):
    # The program's first release call fails before it leaves (its own timeout, on a loaded
    # machine: no node sees it); it answers release_ok and its sweeper releases the node 0.3 s
    # later.  The node holds the session when release returns, and nothing at the end.
    cmd = python_program(tmp_path, """\
        import threading, time, urllib.request
        def post(url, op, body):
            req = urllib.request.Request(url + "/v1/" + op, json.dumps(body).encode(),
                                         {"Content-Type": "application/json"})
            return json.loads(urllib.request.urlopen(req, timeout=5).read())
        def sweep(url):
            time.sleep(0.3)
            post(url, "release", {"session_id": "a", "epoch": 0})
        kind = request["type"]
        if kind == "init":
            url = request["stages"][0][0]["url"]
        if kind == "next_token":
            bundle = {"kind": "token_bundle", "contract": "1", "session_id": "a", "epoch": 0, "start_pos": 0,
                      "tokens": [1]}
            reply(request, "next_token_ok", token=post(url, "prefill", bundle)["token"])
        else:
            if kind == "release":
                threading.Thread(target=sweep, args=(url,)).start()
            reply(request, kind + "_ok")
        """)
    run = run_program_scenario(FakeShardEngine, ONE, cmd, settings=QUICK)
    assert run.failure is None, run.failure
    assert run.reached["program:release_judged_at_end"] == 1
    assert [c["op"] for c in run.calls] == ["prefill", "release"]


def test_an_unanswered_request_says_which_answers_the_program_hung_up_on():
    # Every prefill held 0.25 s real (Delay 1 scenario second) by a program that waits 0.02 s,
    # and at most 0.16 s once its timeouts stretch (8 times): it retries and never gets a token.
    slow = Scenario(seed=0, stages=1, replicas=1, capacity=None,
                    plans=(FaultPlan((FaultRule(Delay(1.0), op="prefill", nth=1, count=1000),)),),
                    clients=(Client("a", 0.0, (Round([1, 2], 1),)),))
    run = run_program_scenario(FakeShardEngine, slow, f"{REFERENCE} --call-timeout 0.02",
                               settings=ProgramSettings(request_timeout=2.0, settle=1.0))
    assert run.check == "unanswered"
    assert "the program hung up on" in run.failure and "its call timeout may be shorter" in run.failure
    assert all(c["abandoned"] for c in run.calls if c["op"] == "prefill" and c["outcome"] == "ok")


# -- campaigns -----------------------------------------------------------------------------------

def _campaign(command: str, tmp_path: Path, **kwargs):
    config = MachineConfig.for_factory(FakeShardEngine, "fakeshard:FakeShardEngine")
    return config, run_program(config, command, settings=profiles.get("ci"), save_dir=tmp_path, **kwargs)


#: Situations the targeted scenarios put any program in, whatever its timing.
TARGETED_SITUATIONS = ("sim:call:hung", "sim:nemesis:partition", "sim:fault:Delay:prefill",
                       "sim:fault:MemoryPressure:prefill", "sim:fault:Malformed:prefill")


def test_the_reference_program_passes_a_ci_campaign(tmp_path):
    config, total = _campaign(REFERENCE, tmp_path)
    assert config.runs == 23 and total.next_requests > 0 and not config.failures
    assert all(total.reached[s] for s in TARGETED_SITUATIONS), sorted(total.reached)


@needs_node
def test_the_node_example_passes_a_ci_campaign(tmp_path):
    config, total = _campaign(EXAMPLE, tmp_path)
    assert config.runs == 23 and total.next_requests > 0 and not config.failures


def test_a_lazy_program_that_releases_on_nodes_that_left_passes_a_ci_campaign(tmp_path):
    """No false alarm: one route table, sessions that learn of a moved route from a cache miss,
    and releases on every node a session went to, nodes that left included."""
    program = f"{shlex.quote(sys.executable)} {shlex.quote(str(ROOT / 'tests' / 'sound_coordinators.py'))} " \
              "LazyAndReleasesWhereverItWent"
    config, total = _campaign(program, tmp_path)
    assert config.runs == 23 and total.next_requests > 0 and not config.failures
    assert total.reached["code:cache_miss"] and total.reached["sim:churn_mid_session"]


def _planted(name: str) -> str:
    path = shlex.quote(str(PLANTED / name))
    return f"node {path}" if name.endswith(".mjs") else f"{shlex.quote(sys.executable)} {path}"


#: Each planted program and the check its bug breaks.
PLANTED_PROGRAMS = {
    "replay_same_epoch.mjs": ("gave_up", "budget"),
    "release_only_tail.mjs": ("leak",),
    "no_retry_on_reset.mjs": ("gave_up",),
    "no_call_timeout.mjs": ("unanswered",),
    "node_left_kept.mjs": ("gone_node",),
    "crossed_answers.py": ("stream",),
    "token_fed_twice.py": ("stream",),
    "release_first_epoch.py": ("release", "leak"),
    # A malformed answer passed on: the tail's token outside the vocabulary (stream), or the
    # middle's answer for another session cached on the tail (leak).
    "unchecked_answers.mjs": ("stream", "leak"),
    # A stale answer gives a wrong token (stream), or its session's id to the next stage's call:
    # a call for a released session (after_release), or one more pass than failures allow; it
    # checks no answer's session, so a middle's answer for another session is cached (leak).
    "stale_answer.mjs": ("stream", "after_release", "budget", "leak"),
}


def test_every_planted_program_is_listed():
    assert sorted(PLANTED_PROGRAMS) == sorted(p.name for p in PLANTED.iterdir() if p.suffix in (".py", ".mjs"))
    assert sum(name.endswith(".mjs") for name in PLANTED_PROGRAMS) * 2 >= len(PLANTED_PROGRAMS) >= 8


@pytest.mark.parametrize("name", sorted(PLANTED_PROGRAMS))
def test_a_planted_program_is_caught_under_ci(name, tmp_path):
    if name.endswith(".mjs") and NODE is None:
        pytest.skip("needs node (Node.js 18 or later) on PATH")
    # A request the program never answers waits out the request timeout in the search and in
    # each confirming re-run: 10 s (not the default 30) keeps that test short, and catches the same.
    program = ProgramSettings(request_timeout=10.0) if PLANTED_PROGRAMS[name] == ("unanswered",) else ProgramSettings()
    with pytest.raises(ConcurrentFailure) as caught:
        _campaign(_planted(name), tmp_path, reduce_failure=False, program=program)
    trace = caught.value.trace
    assert trace is not None and trace.machine == "program"
    assert trace.config["check"] in PLANTED_PROGRAMS[name], str(caught.value)
    assert "re-runs" in trace.note
    saved = sorted(tmp_path.glob("program-*.json"))
    assert saved and saved[0].with_suffix(".html").exists() and saved[0].with_suffix(".log").exists()


@needs_node
def test_a_saved_program_trace_runs_again_and_the_reference_passes_it(tmp_path, capsys):
    # A bug every run of a multi-stage scenario shows, so the replay fails again whatever the
    # interleaving (a real-time replay is the same scenario, not the same interleaving).
    # Saved as found: a reduction in real time re-runs the program dozens of times, 25 s of this
    # test for nothing it checks (test_the_re_runs_of_a_failure_found_are_counted_as_they_happen
    # reduces one).
    with pytest.raises(ConcurrentFailure):
        _campaign(_planted("release_only_tail.mjs"), tmp_path, reduce_failure=False)
    (saved,) = tmp_path.glob("program-*.json")
    assert cli(["replay", str(saved)]) == 1
    out = capsys.readouterr().out
    assert "program machine" in out and "FAILS on" in out and "the same check as the saved run" in out
    assert cli(["replay", str(saved), "--coordinator-cmd", REFERENCE]) == 0
    assert "passes on" in capsys.readouterr().out


# -- the call log --------------------------------------------------------------------------------

def test_the_call_log_keeps_every_call_a_node_was_sent_and_how_it_ended():
    jsonschema = pytest.importorskip("jsonschema")
    server = ServerThread(FakeShardEngine)
    try:
        spec = ShardSpec("m", 2, 0, 2, hidden_size=4, vocab_size=64)
        node = server.add(spec)
        control = server.cluster.control_url
        engine = RemoteShardEngine(node.url, timeout=0.5)
        engine.prefill(TokenBundle("a", 0, 0, (1, 2, 3)))
        engine.release("a", 0)
        with pytest.raises(Exception):
            engine.decode(TokenBundle("a", 0, 3, (4,)))
        httpx.post(f"{control}/v1/nodes/{node.name}/partition", json={"mode": "hang"})
        with pytest.raises(Exception):
            engine.decode(TokenBundle("a", 0, 3, (4,)))
        httpx.delete(f"{control}/v1/nodes/{node.name}/partition")
        log = httpx.get(f"{control}/v1/calls").json()
        jsonschema.validate(log, schema("call_log"))
        calls = log["calls"]
        assert [(c["op"], c["session_id"], c["epoch"], c["outcome"]) for c in calls] == [
            ("prefill", "a", 0, "ok"), ("release", "a", 0, "ok"), ("decode", "a", 0, "released"),
            ("decode", "a", 0, "hung")]
        assert calls[0]["start_pos"] == 0 and calls[0]["positions"] == 3
        assert calls[3]["answered"] is None and calls[0]["answered"] >= calls[0]["received"]
        later = httpx.get(f"{control}/v1/nodes/{node.name}/calls", params={"since": 2}).json()
        assert [c["seq"] for c in later["calls"]] == [2, 3] and later["next"] == 4 and later["node"] == node.name
        bad = httpx.get(f"{control}/v1/calls", params={"since": "-1"})
        assert bad.status_code == 400 and bad.json()["code"] == "bad_request" and "since" in bad.json()["message"]
        assert httpx.get(f"{control}/v1/nodes/nobody/calls").status_code == 404
    finally:
        server.close()


def _entries(control: str, until=lambda calls: True, seconds: float = 5.0) -> list[dict]:
    """The cluster's log, read again (every 20 ms, at most ``seconds``) until ``until`` holds."""
    deadline = time.monotonic() + seconds
    while True:
        calls = httpx.get(f"{control}/v1/calls").json()["calls"]
        if until(calls) or time.monotonic() > deadline:
            return calls
        time.sleep(0.02)


def _raw_prefill(url: str, session_id: str) -> socket.socket:
    """A prefill sent on a raw socket, its answer not read."""
    body = wire.dumps(TokenBundle(session_id, 0, 0, (1, 2))).encode()
    host, port = url.removeprefix("http://").rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=10)
    sock.sendall(raw_post("/v1/prefill", body))
    return sock


def test_the_call_log_says_which_callers_hung_up_before_reading_their_answer():
    server = ServerThread(FakeShardEngine, time_scale=1.0)
    try:
        spec = ShardSpec("m", 2, 0, 2, hidden_size=4, vocab_size=64)
        slow = server.add(spec, faults=FaultPlan((FaultRule(Delay(0.5), op="prefill", nth=1),)))
        fast = server.add(spec)
        control = server.cluster.control_url
        # Closed while the call waits on the node (its answer held 0.5 s): abandoned then.
        _raw_prefill(slow.url, "gone").close()
        # Closed after the answer came, with the answer unread: the kernel resets the connection.
        unread = _raw_prefill(fast.url, "unread")
        _entries(control, lambda calls: any(c["session_id"] == "unread" and c["answered"] for c in calls))
        unread.close()
        # Read, then closed: what a caller done with a connection does; nothing abandoned.
        read = _raw_prefill(fast.url, "read")
        assert read.recv(65536).startswith(b"HTTP/1.1 200")
        read.close()
        calls = _entries(control, lambda calls: sum(c["abandoned"] is not None for c in calls) >= 2
                         and all(c["outcome"] != "pending" for c in calls))
        by_session = {c["session_id"]: c for c in calls}
        gone, unread_entry = by_session["gone"], by_session["unread"]
        assert gone["outcome"] == "ok" and gone["received"] < gone["abandoned"] < gone["answered"]
        assert unread_entry["answered"] <= unread_entry["abandoned"]
        # One more call on a new connection, answered: the earlier close has been read by then.
        engine = RemoteShardEngine(fast.url, timeout=5)
        engine.prefill(TokenBundle("after", 0, 0, (1,)))
        assert _entries(control)[2]["session_id"] == "read" and _entries(control)[2]["abandoned"] is None
    finally:
        server.close()


def test_a_connection_the_node_closes_abandons_no_call():
    server = ServerThread(FakeShardEngine, time_scale=1.0)
    try:
        spec = ShardSpec("m", 2, 0, 2, hidden_size=4, vocab_size=64)
        node = server.add(spec, faults=FaultPlan((FaultRule(Delay(0.5), op="prefill", nth=1),
                                                  FaultRule(DropResponse(), op="prefill", nth=2))))
        control = server.cluster.control_url
        held = _raw_prefill(node.url, "held")
        _entries(control, lambda calls: len(calls) == 1)
        # A refusing partition closes every connection, the held call's too: the node's doing.
        assert httpx.post(f"{control}/v1/nodes/{node.name}/partition", json={"mode": "refuse"}).status_code == 200
        assert held.recv(65536) == b""
        httpx.delete(f"{control}/v1/nodes/{node.name}/partition")
        dropped = _raw_prefill(node.url, "dropped")  # DropResponse: closed unanswered by the node
        assert dropped.recv(65536) == b""
        held.close()
        dropped.close()
        calls = _entries(control, lambda calls: all(c["outcome"] != "pending" for c in calls))
        assert [(c["session_id"], c["outcome"], c["abandoned"]) for c in calls] == [
            ("held", "ok", None), ("dropped", "response_lost", None)]
    finally:
        server.close()


def _answered_then_hung(op: str, bodies: list[bytes]) -> tuple[list[dict], list[dict]]:
    """The call log's entries for each of ``bodies`` sent to ``op`` once answered, then once more
    into a partition that hangs."""
    server = ServerThread(FakeShardEngine)
    try:
        node = server.add(ShardSpec("m", 2, 0, 2, hidden_size=4, vocab_size=64))
        control = server.cluster.control_url
        for body in bodies:
            httpx.post(f"{node.url}/v1/{op}", content=body, headers={"Content-Type": "application/json"})
        httpx.post(f"{control}/v1/nodes/{node.name}/partition", json={"mode": "hang"})
        for body in bodies:
            with pytest.raises(httpx.TimeoutException):
                httpx.post(f"{node.url}/v1/{op}", content=body, headers={"Content-Type": "application/json"},
                           timeout=0.2)
        calls = _entries(control)
        return calls[:len(bodies)], calls[len(bodies):]
    finally:
        server.close()


def test_a_hung_cleanup_call_is_logged_with_the_ids_an_answered_one_would_be():
    # Answered: the last two are refused as malformed.
    answered, hung = _answered_then_hung("release", [
        b'{"session_id": "a", "epoch": 0}', b'{"session_id": "a", "epoch": 0, "more": 1}',
        b'{"session_id": "a", "session_id": "b", "epoch": 0}'])
    assert [c["outcome"] for c in answered] == ["ok", "malformed_bundle", "malformed_bundle"]
    assert [c["outcome"] for c in hung] == ["hung"] * 3
    assert [(c["session_id"], c["epoch"]) for c in hung] == [(c["session_id"], c["epoch"]) for c in answered] \
        == [("a", 0), (None, None), (None, None)]


def test_a_hung_compute_call_is_logged_with_the_ids_an_answered_one_would_be():
    # A bundle, and an error object (it names a session and an epoch, and is no bundle).
    answered, hung = _answered_then_hung("prefill", [
        wire.dumps(TokenBundle("a", 0, 0, (1,))).encode(),
        wire.dumps(StaleEpoch("stale", session_id="a", epoch=0)).encode()])
    assert [c["outcome"] for c in answered] == ["ok", "malformed_bundle"]
    assert [c["outcome"] for c in hung] == ["hung"] * 2
    assert [(c["session_id"], c["epoch"]) for c in hung] == [(c["session_id"], c["epoch"]) for c in answered] \
        == [("a", 0), (None, None)]


# -- the command line ----------------------------------------------------------------------------

def test_check_refuses_the_program_machine_without_a_program(capsys):
    assert cli(["check", "--machines", "program"]) == 2
    assert "--coordinator-cmd" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["", "  "])
def test_check_refuses_an_empty_program(command, capsys):
    assert cli(["check", "--coordinator-cmd", command]) == 2
    assert "--coordinator-cmd is empty" in capsys.readouterr().err


def test_check_and_replay_refuse_a_program_that_cannot_be_run(tmp_path, capsys):
    script = tmp_path / "coordinator.mjs"
    script.write_text("// not executable\n")
    missing = f"{tmp_path.name}-no-such-program --flag"
    assert cli(["check", "--coordinator-cmd", missing]) == 2
    assert f"the program '{tmp_path.name}-no-such-program' is not found on PATH" in capsys.readouterr().err
    assert cli(["check", "--coordinator-cmd", f"{script} --flag"]) == 2
    assert f"the program '{script}' is not an executable file" in capsys.readouterr().err
    trace = tmp_path / "trace.json"
    trace.write_text("{}")  # the command is refused before any trace is read
    assert cli(["replay", str(trace), "--coordinator-cmd", missing]) == 2
    assert "is not found on PATH" in capsys.readouterr().err
    assert not list(tmp_path.glob("program-*"))


@pytest.mark.parametrize("command,needle", [
    ("no-such-program-xyz", "the program 'no-such-program-xyz' is not found on PATH"),
    ("", "--coordinator-cmd is empty"),  # given, even empty, the option counts
])
def test_the_plugin_refuses_a_program_that_cannot_be_run(command, needle, tmp_path):
    done = subprocess.run([sys.executable, "-m", "pytest", "--coordinator-cmd", command, "--co", "-q",
                           "-p", "no:cacheprovider"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert needle in done.stderr + done.stdout


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf"])
def test_check_refuses_a_request_timeout_that_is_no_number_of_seconds(value, capsys):
    assert cli(["check", "--coordinator-cmd", REFERENCE, "--request-timeout", value]) == 2
    assert f"--request-timeout is a number of seconds above 0, got {float(value)}" in capsys.readouterr().err


def test_the_plugin_refuses_a_request_timeout_that_is_no_number_of_seconds(tmp_path):
    done = subprocess.run([sys.executable, "-m", "pytest", "--request-timeout", "nan", "--co", "-q",
                           "-p", "no:cacheprovider"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "--request-timeout is a number of seconds above 0, got nan" in done.stderr + done.stdout


#: The reference program, answering every next_token 3 seconds late (well within the default limit).
SLOW_TOKENS = """
import asyncio, sys
from fakeshard.testing import AsyncCoordinator
from fakeshard.testing.coordinator_program import main

class Slow(AsyncCoordinator):
    async def next_token(self, session_id):
        await asyncio.sleep(3)
        return await super().next_token(session_id)

sys.exit(main(coordinator=Slow))
"""


def test_check_holds_a_program_to_the_request_timeout_it_is_given(tmp_path, capsys):
    program = tmp_path / "slow_tokens.py"
    program.write_text(SLOW_TOKENS)
    command = f"{shlex.quote(sys.executable)} {shlex.quote(str(program))}"
    assert cli(["check", "--coordinator-cmd", command, "--request-timeout", "1", "--examples", "4",
                "--out", str(tmp_path / "out"), "--traces", str(tmp_path / "traces")]) == 1
    out = capsys.readouterr().out
    assert "was left unanswered for 1 s" in out, out
    (saved,) = (tmp_path / "traces").glob("program-*.json")
    assert json.loads(saved.read_text())["config"]["settings"]["request_timeout"] == 1.0


def test_the_schema_command_prints_the_protocol(capsys):
    assert cli(["schema", "program_next_token_ok"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["properties"]["type"] == {"const": "next_token_ok"} and "token" in doc["required"]


# -- the harness's own tasks -----------------------------------------------------------------------

def test_a_call_log_reader_cancelled_before_it_ran_leaves_no_later_read_waiting():
    # Stopping a run cancels every task, a reader of the call log that never ran too: a read
    # asked for after that (by a task that went on) must still be made, not waited for ever.
    from fakeshard.testing._program import _ServedWorld

    loop = asyncio.new_event_loop()
    world = object.__new__(_ServedWorld)
    world.loop, world.in_flight = loop, set()
    world._next_read = world._read_for = world._reader = None
    reads = []

    async def read_once():
        reads.append(loop.time())

    world._read_log_once = read_once

    async def main():
        first = loop.create_task(world.sync())
        await asyncio.sleep(0)  # the caller waits; its reader is made, not yet run
        world._reader.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        await asyncio.wait_for(world.sync(), 5)  # a reader that never ran did not leave one "running"
        await asyncio.wait_for(asyncio.gather(world.sync(), world.sync()), 5)  # and reads go on being shared

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    assert len(reads) in (2, 3)
