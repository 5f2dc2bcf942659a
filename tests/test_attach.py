"""Engine hosts in any language: attached by URL or started by a command (docs/contract.md,
"Engine hosts"). The host here is ``fakeshard serve`` with no nodes, started as a user's
program would be; every network call goes to 127.0.0.1, and every wait is bounded.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import textwrap
import time

import pytest

pytest.importorskip("aiohttp", reason="an engine host is served: the extra 'serve'")
pytest.importorskip("httpx", reason="an engine host is reached over HTTP: the extra 'serve'")

from fakeshard import (  # noqa: E402
    CacheMiss,
    Crash,
    DropResponse,
    EngineCrashed,
    FaultPlan,
    FaultRule,
    MemoryPressure,
    ResponseLost,
    ShardSpec,
    TokenBundle,
    wire,
)
from fakeshard._layer import FaultLayer  # noqa: E402
from fakeshard.remote import Host, HostError, RemoteShardEngine, attached, probe_host  # noqa: E402
from fakeshard.testing import checks  # noqa: E402

pytestmark = pytest.mark.xdist_group("attach")

SPEC = ShardSpec("attached", 4, 0, 4, hidden_size=4, vocab_size=64)


def _serve_command(tmp_path, engine: str = "fakeshard:FakeShardEngine", *extra: str) -> str:
    topology = tmp_path / "topology.json"
    topology.write_text(json.dumps({"model": {"model_id": "host", "n_layers": 1}, "engine": engine, "nodes": []}),
                        encoding="utf-8")
    return shlex.join([sys.executable, "-m", "fakeshard", "serve", str(topology), "--time-scale", "0", *extra])


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    with Host(_serve_command(tmp_path_factory.mktemp("host"))) as running:
        yield running


def test_a_host_started_by_its_command_serves_nodes_the_kit_adds(host):
    assert probe_host(host.control)["kind"] == "roster"
    engine = attached(host.control)(SPEC, seed=1, capacity_tokens=64)
    assert isinstance(engine, RemoteShardEngine) and engine.capacity_tokens == 64
    out = engine.prefill(TokenBundle("s", 0, 0, (1, 2, 3)))
    assert out.pos == 3 and engine.session("s").cached_tokens == 3
    assert engine.name in probe_host(host.control)["nodes"]


def test_a_served_factory_adds_its_nodes_to_the_server_its_variable_names(host, monkeypatch):
    # $FAKESHARD_SERVER: a served factory's nodes go to a running `fakeshard serve` (which runs its
    # own factory and plans) instead of a server thread here; their delays reach the caller's clock.
    from fakeshard import Delay, FakeShardEngine, VirtualClock
    from fakeshard.remote import served

    def mine(spec, **kwargs):  # a factory of its own: the served factories share servers by factory
        return FakeShardEngine(spec, **kwargs)

    monkeypatch.setenv("FAKESHARD_SERVER", host.control)
    clock = VirtualClock()
    engine = served(mine)(SPEC, seed=2, clock=clock, faults=FaultPlan((FaultRule(Delay(0.5), op="prefill"),)))
    assert engine.name in probe_host(host.control)["nodes"]
    bundle = TokenBundle("s", 0, 0, (1, 2, 3))
    assert engine.prefill(bundle) == FakeShardEngine(SPEC, seed=2).prefill(bundle)
    assert clock.now() == 0.5


@pytest.mark.parametrize("check", checks.ENGINE_CHECKS, ids=lambda c: c.__name__)
def test_every_engine_check_passes_on_a_correct_host(host, check):
    check(attached(host.control))


@pytest.mark.parametrize("bad,error", [
    (dict(capacity_tokens=-1), ValueError), (dict(capacity_tokens="5"), ValueError), (dict(seed="1"), TypeError),
    (dict(clock=object()), TypeError), (dict(faults=[FaultRule(DropResponse())]), TypeError),
])
def test_the_attached_factory_refuses_bad_arguments_before_sending_anything(host, bad, error):
    before = set(probe_host(host.control)["nodes"])
    with pytest.raises(error):
        attached(host.control)(SPEC, **bad)
    assert set(probe_host(host.control)["nodes"]) == before


def test_a_plan_naming_a_session_with_a_lone_surrogate_reaches_the_host(host):
    # The contract allows such an id; the plan travels as JSON text with its \\u escape.
    session = "b\udc80"
    plan = FaultPlan((FaultRule(DropResponse(), op="prefill", session_id=session),))
    engine = attached(host.control)(SPEC, faults=plan)
    with pytest.raises(ResponseLost):
        engine.prefill(TokenBundle(session, 0, 0, (1,)))
    assert engine.session(session).cached_tokens == 1  # the call was applied, its answer dropped


def _script(tmp_path, body: str) -> str:
    path = tmp_path / "host.py"
    path.write_text(textwrap.dedent(body), encoding="utf-8")
    return shlex.join([sys.executable, str(path)])


@pytest.mark.parametrize("body,needle", [
    ("import sys; sys.stderr.write('no model file\\n'); sys.exit(3)", "exited (3) before it printed its roster; "
                                                                       "its standard error ends: no model file"),
    ("print('listening on 8080', flush=True)", "printed a first line that is no roster"),
    ("print('{\"control\": \"ftp://x\"}', flush=True)", "printed a first line that is no roster"),
])
def test_a_host_that_prints_no_roster_is_a_usage_error_naming_it(tmp_path, body, needle):
    with pytest.raises(HostError, match="--engine-cmd") as caught:
        Host(_script(tmp_path, body), ready_timeout=20)
    assert needle in str(caught.value)


def test_a_host_silent_past_its_ready_timeout_is_stopped_and_named(tmp_path):
    command = _script(tmp_path, "import time; time.sleep(60)")
    with pytest.raises(HostError, match="printed no roster line within 0.5 s"):
        Host(command, ready_timeout=0.5)


def test_a_command_that_cannot_start_is_a_usage_error(tmp_path):
    with pytest.raises(HostError, match="did not start"):
        Host(str(tmp_path / "no-such-host"))
    with pytest.raises(HostError, match="is empty"):
        Host("  ")


def test_closing_a_host_stops_its_children_too(tmp_path):
    # A host whose roster names a control URL, and a child that would outlive it.
    command = _script(tmp_path, """
        import json, subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        print(json.dumps({"kind": "roster", "control": "http://127.0.0.1:9", "child": child.pid}), flush=True)
        time.sleep(120)
    """)
    host = Host(command, grace=2)
    child = host.roster["child"]
    assert _running(host.proc.pid) and _running(child)
    host.close()
    host.close()  # idempotent
    assert not _running(host.proc.pid)
    # The child was sent SIGKILL: its end is the kernel's, not a wait on the machine's speed.
    for _ in range(200):
        if not _running(child):
            break
        time.sleep(0.05)
    assert not _running(child)


def _running(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, ended and not yet reaped by its new parent, does not)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("url,needle", [
    ("127.0.0.1:8080", "is http://HOST:PORT"),
    ("http://127.0.0.1:9", "GET /v1/nodes failed"),
])
def test_a_url_that_is_no_host_is_a_usage_error(url, needle):
    with pytest.raises(HostError, match=needle.replace("/", ".")):
        probe_host(url, timeout=5)


def _check(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fakeshard", "check", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=600)


@pytest.mark.parametrize("args,needle", [
    (["--engine-url", "http://127.0.0.1:9"], "GET /v1/nodes failed"),
    (["--engine-url", "localhost"], "is http://HOST:PORT"),
    (["--engine-cmd", "no-such-host-program --port 0"], "did not start"),
    (["--engine", "fakeshard:FakeShardEngine", "--engine-url", "http://127.0.0.1:9"], "give one"),
    (["--engine-url", "http://127.0.0.1:9", "--engine-cmd", "x"], "give one"),
])
def test_check_refuses_a_host_it_cannot_use_in_one_line_exit_2(args, needle, tmp_path):
    done = _check(*args, "--out", str(tmp_path / "out"))
    assert done.returncode == 2, done.stderr
    assert needle in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "FAILED" not in done.stdout


def test_check_runs_the_machines_on_a_host_it_starts_and_stops_it(tmp_path):
    command = _serve_command(tmp_path)
    done = _check("--engine-cmd", command, "--machines", "sessions,faults", "--profile", "dev", "--seed", "1",
                  "--examples", "3", "--steps", "6", "--out", str(tmp_path / "out"), "--json", str(tmp_path / "s.json"))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"engine: host started by {command!r}" in done.stdout
    summary = json.loads((tmp_path / "s.json").read_text(encoding="utf-8"))
    assert summary["engine_cmd"] == command and summary["engine"] == "fakeshard.remote:attached_engine"
    assert [m["result"] for m in summary["machines"]] == ["passed", "passed"]
    # Nothing of the host is left running: its topology's path is in no process's command line.
    procs = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(tmp_path / "topology.json") not in procs


def test_the_plugin_runs_a_projects_engine_tests_on_a_host_it_starts(tmp_path):
    (tmp_path / "test_mine.py").write_text(textwrap.dedent("""
        from fakeshard import ShardSpec, TokenBundle
        from fakeshard.remote import RemoteShardEngine

        def test_engine(engine_factory):
            engine = engine_factory(ShardSpec("m", 2, 0, 2, hidden_size=4, vocab_size=64))
            assert isinstance(engine, RemoteShardEngine)
            assert engine.prefill(TokenBundle("s", 0, 0, (1, 2))).pos == 2
    """), encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2",
                           "--engine-cmd", _serve_command(tmp_path), "test_mine.py"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]
    assert "fakeshard.remote:attached_engine" in done.stdout
    assert "fakeshard engine host: started by" in done.stdout and "faults applied by the host's nodes" in done.stdout


def test_the_plugin_refuses_a_host_it_cannot_use(tmp_path):
    (tmp_path / "test_mine.py").write_text("def test_engine(engine_factory):\n    pass\n", encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "--engine-url", "http://127.0.0.1:9", "test_mine.py"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 4 and "GET /v1/nodes failed" in done.stderr, done.stderr[-2000:]


def test_sigterm_stops_fakeshard_serve_as_a_host_is_stopped(tmp_path):
    # The kit stops a host with SIGTERM to its group: fakeshard serve, the reference host, exits 0 on it.
    host = Host(_serve_command(tmp_path))
    os.killpg(host.proc.pid, signal.SIGTERM)
    assert host.proc.wait(timeout=30) == 0
    host.close()


def _real_host(tmp_path, engine: str = "fakeshard.real:tiny_engine") -> Host:
    pytest.importorskip("gguf", reason="the real-model engine needs the extra 'real'")
    return Host(_serve_command(tmp_path, engine))


REAL_SPEC = ShardSpec("host", 2, 0, 2, hidden_size=16, vocab_size=64)


def test_a_real_model_host_states_how_it_is_judged_and_serves_its_logits(tmp_path, host):
    from fakeshard._judge import Judge
    from fakeshard.real import tiny_engine

    with _real_host(tmp_path) as real:
        factory = attached(real.control)
        assert (factory.tolerance, factory.machine_hidden_size, factory.machine_max_positions) == \
            (tiny_engine.tolerance, tiny_engine.machine_hidden_size, tiny_engine.machine_max_positions)
        assert factory.machine_wide_hidden_size is None and factory.fixture_choices is False
        assert factory(REAL_SPEC).evidence_class == "real-model"
        history = [1, 2, 3]
        logits = factory.logits(REAL_SPEC, 0, history)
        assert logits == pytest.approx(tiny_engine.logits(REAL_SPEC, 0, history), abs=tiny_engine.tolerance)
        # The host's logits decide a near tie: the runner-up passes within its margin, not below it.
        ranked = sorted(range(len(logits)), key=lambda t: -logits[t])
        margin = logits[ranked[0]] - logits[ranked[1]]
        wide, narrow = Judge(factory, tolerance=margin + 1e-6), Judge(factory, tolerance=margin / 2)
        assert wide.token_ok(REAL_SPEC, 0, history, ranked[0], ranked[1])
        assert not narrow.token_ok(REAL_SPEC, 0, history, ranked[0], ranked[1])
        import httpx
        for body, needle in [(b"{}", "the body must be"), (b'{"spec": {}, "seed": 0, "tokens": [1]}', "spec:"),
                             (json.dumps({"spec": {"model_id": "h", "n_layers": 1, "start_layer": 0, "end_layer": 1,
                                                   "vocab_size": 64}, "seed": 0, "tokens": [64]}
                                         ).encode(), "below the spec's vocab_size 64")]:
            answer = httpx.post(real.control + "/v1/logits", content=body, timeout=30)
            assert answer.status_code == 400 and needle in answer.json()["message"], answer.text
    # The fixture states nothing (judged exactly, at the kit's sizes) and has no logits to serve.
    fixture = attached(host.control)
    assert fixture.judged_by() == "exactly, by the contract alone"
    assert not hasattr(fixture, "tolerance") and not hasattr(fixture, "logits")
    import httpx
    assert httpx.post(host.control + "/v1/logits", content=b"{}", timeout=30).status_code == 501


@pytest.mark.parametrize("engine,needle", [
    ("tests.support:untold_real_engine", "serve GET /v1/judging on the control port with its tolerance"),
    ("tests.support:tolerant_real_engine", "serves POST /v1/logits"),
])
def test_a_real_model_host_that_cannot_be_judged_is_refused_with_its_reason(tmp_path, engine, needle):
    # Judged exactly, real arithmetic fails for rounding alone (a decode against one prefill of the
    # same positions); a near tie without the logits, as a wrong token: false alarms the kit must not raise.
    with _real_host(tmp_path, engine) as real:
        with pytest.raises(HostError, match=needle.replace("/", ".")):
            attached(real.control)(REAL_SPEC)
        done = _check("--engine-url", real.control, "--machines", "sessions", "--out", str(tmp_path / "out"))
    assert done.returncode == 2 and needle in done.stderr, done.stderr[-2000:]


@pytest.mark.parametrize("answer,needle", [
    ({"kind": "judging", "tolerance": -1}, "tolerance must be a finite number >= 0"),
    ({"kind": "judging", "tolerance": True}, "tolerance must be a finite number >= 0"),
    ({"kind": "judging", "machine_hidden_size": 0}, "machine_hidden_size must be an integer >= 1"),
    ({"kind": "judging", "machine_max_positions": 1}, "machine_max_positions must be an integer >= 2"),
    ({"kind": "judging", "machine_wide_hidden_size": "x"}, "machine_wide_hidden_size must be an integer >= 1 or null"),
    ({"kind": "judging", "fixture_choices": 1}, "fixture_choices must be true or false"),
    ({"kind": "judging", "tolerances": 0.1}, "unknown field(s) ['tolerances']"),
    ({"kind": "roster"}, "no judging object"),
])
def test_a_judging_answer_outside_the_contract_is_refused_naming_the_field(answer, needle):
    from fakeshard._judge import JudgingError, read_judging

    with pytest.raises(JudgingError) as caught:
        read_judging(answer)
    assert needle in str(caught.value)


@pytest.mark.parametrize("answer,needle", [
    ({"kind": "logits", "logits": [0.0] * 3}, "logits has 3 values, the spec's vocab_size is 4"),
    ({"kind": "logits", "logits": [0.0, None, 1.0, 2.0]}, "got None at index 1"),
    ({"kind": "logits", "logits": [0.0, True, 1.0, 2.0]}, "got True at index 1"),
    ({"kind": "logits", "logits": [0.0, float("nan"), 1.0, 2.0]}, "got nan at index 1"),
    ({"kind": "judging"}, "no logits object"),
])
def test_logits_outside_the_contract_are_refused_naming_what_is_wrong(answer, needle):
    from fakeshard._judge import JudgingError, read_logits

    with pytest.raises(JudgingError) as caught:
        read_logits(answer, 4)
    assert needle in str(caught.value)


def test_check_certifies_a_real_model_host_started_by_its_command(tmp_path):
    pytest.importorskip("gguf", reason="the real-model engine needs the extra 'real'")
    command = _serve_command(tmp_path, "fakeshard.real:tiny_engine")
    done = _check("--engine-cmd", command, "--certify", "--machines", "sessions,faults", "--profile", "dev",
                  "--seed", "1", "--examples", "3", "--steps", "8", "--out", str(tmp_path / "out"),
                  "--json", str(tmp_path / "s.json"))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "(evidence class: real-model)" in done.stdout
    assert "judged: within tolerance 0.001, near ties by the host's logits, by the contract alone" in done.stdout
    summary = json.loads((tmp_path / "s.json").read_text(encoding="utf-8"))
    assert summary["evidence_class"] == "real-model" and summary["judged_by"].startswith("within tolerance 0.001")


@pytest.fixture(scope="module")
def bare_host(tmp_path_factory):
    """A host whose nodes run no fault plans (the least the contract asks of a host)."""
    with Host(_serve_command(tmp_path_factory.mktemp("bare"), "fakeshard:FakeShardEngine", "--no-fault-plans")) as h:
        yield h


def test_a_host_without_fault_plans_refuses_them_with_501_and_changes_nothing(bare_host):
    import httpx

    body = {"spec": {"model_id": "m", "n_layers": 1, "start_layer": 0, "end_layer": 1},
            "faults": json.loads(wire.dumps(FaultPlan((FaultRule(Crash()),))))}
    before = set(probe_host(bare_host.control)["nodes"])
    answer = httpx.post(bare_host.control + "/v1/nodes", json=body, timeout=10)
    assert answer.status_code == 501 and answer.json()["code"] == "not_supported"
    assert set(probe_host(bare_host.control)["nodes"]) == before
    name = httpx.post(bare_host.control + "/v1/nodes", json={"spec": body["spec"]}, timeout=10).json()["name"]
    answer = httpx.put(f"{bare_host.control}/v1/nodes/{name}/faults", content=wire.dumps(FaultPlan()), timeout=10)
    assert answer.status_code == 501


def test_the_kit_applies_the_plans_a_host_cannot_in_front_of_its_nodes(bare_host, host):
    bare, full = attached(bare_host.control), attached(host.control)
    assert "MemoryPressure" not in bare.fault_kinds and "MemoryPressure" in full.fault_kinds
    assert bare.faults_applied_by().startswith("the kit") and full.faults_applied_by() == "the host's nodes"
    plan = FaultPlan((FaultRule(Crash(), op="decode"), FaultRule(MemoryPressure(), op="prefill")))
    engine = bare(SPEC, faults=plan)
    assert isinstance(engine, FaultLayer) and isinstance(engine.engine, RemoteShardEngine)
    assert engine.fault_plan.rules == (FaultRule(Crash(), op="decode"),)  # MemoryPressure left out
    engine.prefill(TokenBundle("s", 0, 0, (1, 2)))
    with pytest.raises(EngineCrashed):
        engine.decode(TokenBundle("s", 0, 2, (3,)))
    # The crash restarted the node through the control port: its memory is gone, as a crash's is.
    assert engine.engine.session("s") is None and engine.engine.used_tokens == 0
    engine.restart()
    with pytest.raises(CacheMiss):
        engine.decode(TokenBundle("s", 0, 2, (3,)))
    assert isinstance(full(SPEC, faults=plan), RemoteShardEngine)  # the host's nodes run it themselves


def test_a_host_without_plans_is_asked_for_neither_crash_nor_its_fault_log(bare_host, monkeypatch):
    """Both are optional for a host: an engine the kit makes there, with no plan, is behind the
    kit's layer all the same, so crash() is a restart and the fault log the layer's own."""
    engine = attached(bare_host.control)(SPEC)
    assert isinstance(engine, FaultLayer) and engine.fault_log == ()
    sent = []
    monkeypatch.setattr(RemoteShardEngine, "_admin", lambda self, method, what, **kw: sent.append(what))
    engine.prefill(TokenBundle("s", 0, 0, (1, 2)))
    engine.crash()
    with pytest.raises(EngineCrashed):
        engine.decode(TokenBundle("s", 0, 2, (3,)))
    assert sent == ["restart"] and engine.fault_log == ()


def test_check_says_who_applied_the_faults(tmp_path):
    command = _serve_command(tmp_path, "fakeshard:FakeShardEngine", "--no-fault-plans")
    done = _check("--engine-cmd", command, "--machines", "faults", "--profile", "dev", "--seed", "2",
                  "--examples", "4", "--steps", "8", "--out", str(tmp_path / "out"), "--json", str(tmp_path / "s.json"))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "faults applied by: the kit, in front of the host's nodes" in done.stdout
    assert json.loads((tmp_path / "s.json").read_text(encoding="utf-8"))["faults_applied_by"].startswith("the kit")
