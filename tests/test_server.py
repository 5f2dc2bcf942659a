"""Served nodes: HTTP API v1 on loopback, the network's faults, concurrency, and bad input.

Every network test talks to 127.0.0.1 only, and every loop is bounded in
count and in time.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("aiohttp", reason="the served nodes need the extra 'serve'")
httpx = pytest.importorskip("httpx", reason="the served nodes need the extra 'serve'")

from fakeshard import (  # noqa: E402 - after the skips
    CacheMiss,
    Crash,
    Delay,
    DropResponse,
    EngineCrashed,
    FakeShardEngine,
    FaultPlan,
    FaultRule,
    HiddenBundle,
    MalformedBundle,
    Pipeline,
    PositionMismatch,
    ResponseLost,
    SessionReleased,
    ShardError,
    ShardSpec,
    StaleEpoch,
    TokenBundle,
    validate,
    wire,
)
from fakeshard._contract import hidden_checksum  # noqa: E402
from fakeshard._topology import Topology, TopologyError  # noqa: E402
from fakeshard.remote import RemoteError, RemoteShardEngine, serve  # noqa: E402
from fakeshard.server import ERROR_STATUS, HTTP_ERROR_CODES  # noqa: E402

SPEC = ShardSpec("served", 6, 0, 6, hidden_size=8, vocab_size=64)
RANGES = {"head": (0, 2), "mid": (2, 4), "tail": (4, 6)}


def topology(**nodes_extra) -> dict:
    nodes = [{"name": name, "start_layer": a, "end_layer": b, **nodes_extra.get(name, {})}
             for name, (a, b) in RANGES.items()]
    return {"model": {"model_id": SPEC.model_id, "n_layers": 6, "hidden_size": 8, "vocab_size": 64,
                      "seed": 3},
            "nodes": nodes + [{"name": "spare", "start_layer": 0, "end_layer": 6}]}


@pytest.fixture
def cluster():
    with serve(topology(), time_scale=1.0, timeout=10.0) as c:
        yield c


def fault_free(prompt, n):
    return Pipeline([FakeShardEngine(SPEC, seed=3)]).generate("ref", prompt, n)


def pipeline(cluster, **kwargs) -> Pipeline:
    return Pipeline([cluster.engine(name, **kwargs) for name in RANGES])


def test_a_served_pipeline_gives_the_fault_free_tokens(cluster):
    assert pipeline(cluster).generate("s", [1, 2, 3], 6) == fault_free([1, 2, 3], 6)
    head = cluster.engine("head")
    assert head.session("s").cached_tokens == 8 and head.used_tokens == 8
    assert head.evidence_class == "fixture" and head.spec == SPEC.with_layers(0, 2)


def test_json_and_frames_answer_alike(cluster):
    frame = cluster.engine("head")
    text = RemoteShardEngine(cluster.nodes()["head"]["url"], encoding="json")
    a = frame.prefill(TokenBundle("a", 0, 0, (4, 5)))
    b = text.prefill(TokenBundle("b", 0, 0, (4, 5)))
    assert a.rows() == b.rows() and a.layer == b.layer == 2


@pytest.mark.parametrize("hidden", ["floats", "base64"])
def test_plain_http_speaks_json(cluster, hidden):
    url = cluster.nodes()["head"]["url"]
    body = wire.dumps(TokenBundle("h", 0, 0, (1, 2)))
    r = httpx.post(f"{url}/v1/prefill?hidden={hidden}", content=body,
                   headers={"Content-Type": "application/json"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
    out = wire.loads(r.text)
    assert out.start_pos == 0 and len(out.rows()) == 2
    assert isinstance(r.json()["hidden"], list if hidden == "floats" else dict)
    assert float(r.headers["Fakeshard-Delay"]) == 0.0


@pytest.mark.parametrize("query", ["?hidden=float", "?hidden=", "?hidden=FLOATS", "?hidden=floats&hidden=base64",
                                   "?hidden=base64&hidden=base64"])
@pytest.mark.parametrize("kind", ["application/json", "application/vnd.fakeshard.frame"])
def test_a_hidden_query_the_node_does_not_know_is_refused_before_the_call(cluster, query, kind):
    url = cluster.nodes()["head"]["url"]
    bundle = TokenBundle(f"q{len(query)}{kind[-5:]}", 0, 0, (1, 2))
    body = wire.dumps(bundle).encode() if kind == "application/json" else wire.dumpb(bundle)
    before = httpx.get(url + "/v1/state").json()["used_tokens"]
    r = httpx.post(f"{url}/v1/prefill{query}", content=body, headers={"Content-Type": kind})
    assert r.status_code == 400 and r.json()["code"] == "bad_request"
    assert "hidden" in r.json()["message"]
    # Nothing was applied: no session, no positions, and the same call with a good query succeeds.
    assert httpx.get(f"{url}/v1/sessions/{bundle.session_id}").status_code == 404
    assert httpx.get(url + "/v1/state").json()["used_tokens"] == before
    r = httpx.post(f"{url}/v1/prefill?hidden=base64", content=body, headers={"Content-Type": kind})
    assert r.status_code == 200


_UNPARSABLE = {
    "bad method": b"BLAH /v1/state HTTP/1.1\r\nHost: x\r\n\r\n",
    "no request line": b"garbage\r\n\r\n",
    "long header": b"GET /v1/state HTTP/1.1\r\nHost: x\r\nX-Long: " + b"a" * 9000 + b"\r\n\r\n",
    "long target": b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
    "length no number": b"POST /v1/prefill HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                        b"Content-Length: abc\r\n\r\n{}",
    "broken chunks": b"POST /v1/prefill HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
}


@pytest.mark.parametrize("name", sorted(_UNPARSABLE))
def test_a_request_http_cannot_parse_is_400_closes_and_reaches_no_engine(name):
    """Loopback only; every read is bounded by the socket's timeout."""
    import socket
    from urllib.parse import urlsplit

    every_call_crashes = {"faults": json.loads(wire.dumps(FaultPlan([FaultRule(Crash(), count=None)])))}
    with serve(topology(head=every_call_crashes), time_scale=0.0) as c:
        url = urlsplit(c.nodes()["head"]["url"])
        with socket.create_connection((url.hostname, url.port), timeout=10) as sock:
            sock.sendall(_UNPARSABLE[name])
            answer = b""
            while chunk := sock.recv(65536):  # the server closes the connection
                answer += chunk
        assert answer.split(b" ", 2)[1] == b"400"
        assert b"text/plain" in answer.partition(b"\r\n\r\n")[0].lower()
        # Had it reached the head's engine, its plan would have crashed it on that call.
        assert httpx.get(f"{c.control}/v1/nodes/head/log").json()["fired"] == []
        assert httpx.get(c.nodes()["head"]["url"] + "/v1/state").json()["crashed"] is False
        with pytest.raises(EngineCrashed):  # the plan is live: the first call that arrives crashes
            c.engine("head").prefill(TokenBundle("s", 0, 0, (1,)))
        assert len(httpx.get(f"{c.control}/v1/nodes/head/log").json()["fired"]) == 1


def test_a_well_framed_chunked_body_is_read_like_any_other(cluster):
    url = cluster.nodes()["head"]["url"]
    body = wire.dumpb(TokenBundle("chunked", 0, 0, (1, 2, 3)))
    r = httpx.post(url + "/v1/prefill", content=iter([body[:5], body[5:17], body[17:]]),
                   headers={"Content-Type": wire.FRAME_CONTENT_TYPE})
    assert r.request.headers["transfer-encoding"] == "chunked"
    assert r.status_code == 200
    assert wire.loadb(r.content) == FakeShardEngine(SPEC.with_layers(0, 2), seed=3).prefill(
        TokenBundle("chunked", 0, 0, (1, 2, 3)))


@pytest.mark.parametrize("body", [b"not json", b'{"kind": "fault_plan"}', b"\xff",
                                  b'{"kind": "fault_plan", "contract": "1", "seed": 0, '
                                  b'"rules": [{"fault": {"type": "crash"}, "nth": 0}]}',
                                  wire.dumps(TokenBundle("s", 0, 0, (1,))).encode()])
def test_a_fault_plan_the_control_port_cannot_read_is_bad_request_and_keeps_the_plan(cluster, body):
    cluster.set_faults("head", FaultPlan((FaultRule(Crash(), op="prefill"),)))
    r = httpx.put(f"{cluster.control}/v1/nodes/head/faults", content=body,
                  headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["code"] == "bad_request"
    with pytest.raises(EngineCrashed):  # the plan it had still holds
        cluster.engine("head").prefill(TokenBundle("s", 0, 0, (1,)))


def test_errors_are_typed_with_their_fields_and_status(cluster):
    head = cluster.engine("head")
    head.prefill(TokenBundle("e", 1, 0, (1, 2)))
    with pytest.raises(PositionMismatch) as pm:
        head.decode(TokenBundle("e", 1, 5, (1,)))
    assert (pm.value.expected, pm.value.got, pm.value.session_id, pm.value.epoch) == (2, 5, "e", 1)
    with pytest.raises(StaleEpoch):
        head.decode(TokenBundle("e", 0, 2, (1,)))
    with pytest.raises(CacheMiss) as miss:
        head.decode(TokenBundle("e", 2, 2, (1,)))
    assert miss.value.expected == 0
    head.release("e", 1)
    with pytest.raises(SessionReleased):
        head.decode(TokenBundle("e", 1, 2, (1,)))
    url = cluster.nodes()["head"]["url"]
    r = httpx.post(url + "/v1/decode", content=wire.dumps(TokenBundle("e", 1, 2, (1,))),
                   headers={"Content-Type": "application/json"})
    assert r.status_code == ERROR_STATUS["released"] == 409 and r.json()["code"] == "released"


def test_crash_and_restart_through_the_control_port(cluster):
    head = cluster.engine("head")
    head.prefill(TokenBundle("c", 0, 0, (1,)))
    cluster.crash("head")
    with pytest.raises(EngineCrashed):
        head.decode(TokenBundle("c", 0, 1, (1,)))
    assert head.session("c") is None and head.crashed
    head.restart()
    assert not head.crashed and head.used_tokens == 0


@pytest.mark.parametrize("encoding", ["frame", "json"])
@pytest.mark.parametrize("tokens,field", [(np.array([1, 2]), "tokens"), ((1, np.int64(2)), r"tokens\[1\]"),
                                          (range(1, 3), "tokens")])
def test_a_value_json_cannot_hold_is_refused_by_the_node_after_its_earlier_checks(
        cluster, encoding, tokens, field):
    head = RemoteShardEngine(cluster.nodes()["head"]["url"], encoding=encoding)
    head.prefill(TokenBundle("v", 0, 0, (1, 2)))
    with pytest.raises(MalformedBundle, match=field) as err:
        head.decode(TokenBundle("v", 0, 2, tokens))
    assert err.value.session_id == "v" and head.session("v").cached_tokens == 2
    cluster.crash("head")  # engine down is checked before the input, over the wire as in process
    with pytest.raises(EngineCrashed):
        head.decode(TokenBundle("v", 0, 2, tokens))


@pytest.mark.parametrize("encoding", ["frame", "json"])
@pytest.mark.parametrize("kind", ["array rows", "float32 value"])
def test_hidden_values_validate_refuses_are_refused_by_the_node_too(cluster, encoding, kind):
    good = cluster.engine("head").prefill(TokenBundle("w", 0, 0, (1, 2)))
    bad = _odd_hidden(good, kind)
    with pytest.raises(MalformedBundle):
        validate(bad)
    mid = RemoteShardEngine(cluster.nodes()["mid"]["url"], encoding=encoding)
    with pytest.raises(MalformedBundle, match=r"hidden\[0\]"):
        mid.prefill(bad)
    assert mid.session("w") is None
    assert mid.prefill(good).layer == 4


def test_a_crash_fault_answers_engine_crashed_until_restarted(cluster):
    cluster.set_faults("mid", FaultPlan((FaultRule(Crash(), op="decode"),)))
    pipe = pipeline(cluster)
    sample = pipe.prefill("f", 0, 0, [1, 2])
    with pytest.raises(EngineCrashed):
        pipe.decode("f", 0, sample.pos, sample.token)
    assert pipe.last_failed_stage == 1
    hidden = cluster.engine("head").prefill(TokenBundle("g", 0, 0, (1,)))
    with pytest.raises(EngineCrashed):  # still down, whatever the call
        cluster.engine("mid").prefill(hidden)
    cluster.restart("mid")
    assert cluster.engine("mid").prefill(hidden).layer == 4
    assert [f["fault"]["type"] for f in cluster.log("mid")] == ["crash"]


def test_a_dropped_response_was_applied(cluster):
    cluster.set_faults("head", FaultPlan((FaultRule(DropResponse(), op="prefill"),)))
    head = cluster.engine("head")
    with pytest.raises(ResponseLost):
        head.prefill(TokenBundle("d", 0, 0, (1, 2, 3)))
    assert head.session("d").cached_tokens == 3
    assert head.prefill(TokenBundle("d2", 0, 0, (1,))).start_pos == 0  # the node serves on


def test_a_delay_takes_real_time_without_holding_up_other_nodes(cluster):
    cluster.set_faults("head", FaultPlan((FaultRule(Delay(30.0), op="prefill"),)))
    slow = threading.Thread(target=lambda: _swallow(lambda: cluster.engine("head", timeout=60).prefill(
        TokenBundle("slow", 0, 0, (1,)))), daemon=True)
    slow.start()
    # The head is busy sleeping for 30 s; the other nodes answer meanwhile.
    tail = cluster.engine("spare")
    assert tail.prefill(TokenBundle("fast", 0, 0, (1,))).pos == 1
    assert cluster.engine("mid").used_tokens == 0
    assert slow.is_alive()
    cluster.restart("head")  # leaves the slow call to finish in its own time


def _swallow(fn):
    try:
        fn()
    except Exception:
        pass


def test_delays_are_reported_to_a_virtual_clock(cluster):
    from fakeshard import VirtualClock

    cluster.set_faults("tail", FaultPlan((FaultRule(Delay(0.25), count=None),)))
    clock = VirtualClock()
    with serve(topology(), time_scale=0.0) as fast:
        fast.set_faults("tail", FaultPlan((FaultRule(Delay(0.25), count=None),)))
        tail_in = [fast.engine("head"), fast.engine("mid"), fast.engine("tail", clock=clock)]
        Pipeline(tail_in).generate("v", [1, 2], 3)
    assert clock.now() == 0.75


def test_partition_refuse_is_engine_crashed_and_heals(cluster):
    head = cluster.engine("head")
    head.prefill(TokenBundle("p", 0, 0, (1,)))
    cluster.partition("head", "refuse")
    with pytest.raises(EngineCrashed):
        head.decode(TokenBundle("p", 0, 1, (1,)))
    assert cluster.nodes()["head"]["partition"] == "refuse"
    cluster.heal("head")
    assert head.decode(TokenBundle("p", 0, 1, (1,))).start_pos == 1  # the node kept its state


def test_partition_hang_is_response_lost_and_not_applied(cluster):
    head = cluster.engine("head", timeout=0.5)
    cluster.partition("head", "hang")
    with pytest.raises(ResponseLost):
        head.prefill(TokenBundle("h", 0, 0, (1, 2)))
    cluster.heal("head")
    assert cluster.engine("head").session("h") is None


def test_partition_reset_is_response_lost_and_applied(cluster):
    head = cluster.engine("head")
    cluster.partition("head", "reset")
    with pytest.raises(ResponseLost):
        head.prefill(TokenBundle("r", 0, 0, (1, 2)))
    cluster.heal("head")
    assert head.session("r").cached_tokens == 2


def test_a_coordinator_recovers_through_every_network_fault(cluster):
    """Re-route to the spare with an epoch bump and a replay: the stream is the fault-free one."""
    prompt, want = [3, 1, 4], fault_free([3, 1, 4], 8)
    cluster.partition("mid", "reset")
    pipe = pipeline(cluster)
    spare = Pipeline([cluster.engine("spare")])
    epoch, history, got = 0, list(prompt), []
    sample = None
    for attempt in range(20):
        try:
            if sample is None:
                sample = pipe.prefill("co", epoch, 0, history)
            while len(got) < 8:
                got.append(sample.token)
                history.append(sample.token)
                if len(got) < 8:
                    sample = pipe.decode("co", epoch, sample.pos, sample.token)
            break
        except (ResponseLost, EngineCrashed, MalformedBundle):
            # Re-route to the spare at a new epoch and replay everything known so far.
            epoch, pipe, sample = epoch + 1, spare, None
            history = list(prompt) + got
    assert got == want and epoch == 1


def test_concurrent_clients_lose_nothing(cluster):
    """32 clients for 10 s (at most 40 sessions each): every stream equals the fault-free one,
    and every node's used_tokens equals the sum of its session views."""
    deadline = time.monotonic() + 10.0
    results: dict[str, list[int]] = {}
    errors: list[BaseException] = []

    def prompt(i: int, k: int) -> list[int]:
        return [i % 60, k % 60, 7]

    def client(i: int) -> None:
        try:
            pipe = pipeline(cluster)
            for k in range(40):
                if time.monotonic() > deadline:
                    return
                sid = f"c{i}-{k}"
                results[sid] = pipe.generate(sid, prompt(i, k), 4)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors
    assert len(results) >= 32
    reference = {}
    for sid, got in results.items():
        i, k = (int(x) for x in sid[1:].split("-"))
        key = tuple(prompt(i, k))
        if key not in reference:
            reference[key] = fault_free(list(key), 4)
        assert got == reference[key], sid
    for name in RANGES:
        node = cluster.engine(name)
        assert node.used_tokens == sum(node.session(sid).cached_tokens for sid in results)


def test_unknown_routes_methods_and_nodes_are_typed(cluster):
    url = cluster.nodes()["head"]["url"]
    cases = [
        ("GET", url + "/v1/nope", 404), ("GET", url + "/v1/prefill", 405),
        ("DELETE", url + "/v1/state", 405), ("GET", url + "/v1/sessions/none-such", 404),
        ("POST", cluster.control + "/v1/nodes/ghost/crash", 404),
        ("GET", cluster.control + "/v1/nodes/ghost/log", 404),
    ]
    for method, target, status in cases:
        r = httpx.request(method, target)
        assert r.status_code == status and r.json()["kind"] == "error", (method, target, r.text)
    r = httpx.post(url + "/v1/prefill", content=b"{}", headers={"Content-Type": "text/plain"})
    assert r.status_code == 415 and r.json()["code"] == "unsupported_media_type"
    with pytest.raises(RemoteError):
        cluster.partition("head", "sideways")


def test_control_adds_and_removes_nodes(cluster):
    added = cluster.add(SPEC.with_layers(2, 4), name="extra", capacity_tokens=3)
    engine = RemoteShardEngine(added["url"])
    assert engine.capacity_tokens == 3 and engine.spec == SPEC.with_layers(2, 4)
    with pytest.raises(RemoteError) as taken:
        cluster.add(SPEC, name="extra")
    assert taken.value.status == 409
    cluster.remove("extra")
    with pytest.raises(EngineCrashed):
        engine.used_tokens


@pytest.mark.parametrize("latency", [[0.1], [0.2, 0.1], [-1, 1], [0, 61], ["a", 1], [True, 1], 5, "0.1", [], 0])
def test_a_latency_the_control_port_cannot_take_is_bad_request_and_adds_nothing(cluster, latency):
    r = httpx.post(cluster.control + "/v1/nodes",
                   json={"spec": asdict(SPEC.with_layers(0, 2)), "name": "lat", "latency": latency})
    assert r.status_code == 400 and r.json()["code"] == "bad_request" and "latency" in r.json()["message"]
    assert "lat" not in cluster.nodes()


def test_a_node_s_latency_holds_each_call_both_ways_and_no_read(cluster):
    added = cluster.add(SPEC.with_layers(0, 2), name="far", latency=(0.05, 0.05))
    engine = RemoteShardEngine(added["url"])
    engine.prefill(TokenBundle("s", 0, 0, (1,)))
    (entry,) = httpx.get(cluster.control + "/v1/nodes/far/calls").json()["calls"]
    assert entry["outcome"] == "ok" and entry["answered"] - entry["received"] >= 0.1  # a hop each way
    assert entry["held"] == 0.0  # latency is the network's, not a Delay fault
    assert httpx.get(f"{cluster.control}/v1/nodes/far/log").json()["fired"] == []


def _mutations(good: dict[str, bytes], rng) -> tuple[str, str, bytes, str]:
    """One request: a method, a path, a body and a content type, each possibly wrong."""
    paths = ["/v1/prefill", "/v1/decode", "/v1/cancel", "/v1/release", "/v1/state", "/v1/sessions/s",
             "/v1/sessions/%ZZ", "/v1/" + "x" * rng.randrange(1, 300), "/", "/v1/prefill/extra"]
    path = rng.choice(paths)
    method = rng.choice(["POST", "POST", "POST", "GET", "PUT", "DELETE", "PATCH"])
    body = bytearray(rng.choice(list(good.values())))
    for _ in range(rng.randrange(0, 6)):
        if body and rng.random() < 0.5:
            i = rng.randrange(len(body))
            body[i] = rng.randrange(256)
        elif body and rng.random() < 0.5:
            del body[rng.randrange(len(body)):]
        else:
            body[rng.randrange(len(body) + 1):0] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 9)))
    kind = rng.choice(["application/json", "application/vnd.fakeshard.frame", "text/plain", "",
                       "application/json; charset=latin-1"])
    return method, path, bytes(body), kind


def test_ten_thousand_mutated_requests_get_only_documented_answers():
    """Bounded: 10,000 requests or 240 s, whichever comes first; loopback only."""
    import random

    rng = random.Random(20261130)
    documented = set(ERROR_STATUS.values()) | set(HTTP_ERROR_CODES.values()) | {200}
    good = {
        "token": wire.dumps(TokenBundle("s", 0, 0, (1, 2))).encode(),
        "decode": wire.dumps(TokenBundle("s", 0, 2, (1,))).encode(),
        "frame": wire.dumpb(TokenBundle("s", 0, 0, (3,))),
        "close": b'{"session_id": "s", "epoch": 0}',
        "hidden": wire.dumpb(FakeShardEngine(SPEC.with_layers(0, 2)).prefill(TokenBundle("s", 0, 0, (1, 2)))),
    }
    with serve(topology(), time_scale=0.0) as c:
        url = c.nodes()["head"]["url"]
        outside, sent, deadline = [], 0, time.monotonic() + 240
        with httpx.Client(timeout=10.0) as client:
            while sent < 10_000 and time.monotonic() < deadline:
                method, path, body, kind = _mutations(good, rng)
                headers = {"Content-Type": kind} if kind else {}
                r = client.request(method, url + path, content=body, headers=headers)
                sent += 1
                ok_body = r.status_code == 200 or (r.json().get("kind") == "error" and "code" in r.json())
                if r.status_code not in documented or not ok_body:
                    outside.append((method, path, body[:80], r.status_code, r.text[:200]))
        assert sent == 10_000, f"only {sent} requests within the time bound"
        assert outside == []
        head = c.engine("head")  # still serving correct answers
        head.restart()
        assert Pipeline([head, c.engine("mid"), c.engine("tail")]).generate("after", [1, 2, 3], 4) \
            == fault_free([1, 2, 3], 4)


def test_an_oversized_body_is_payload_too_large(cluster):
    from fakeshard import server

    url = cluster.nodes()["head"]["url"]
    r = httpx.post(url + "/v1/prefill", content=b" " * (server.MAX_BODY_BYTES + 1),
                   headers={"Content-Type": "application/json"}, timeout=60)
    assert r.status_code == 413 and r.json()["code"] == "payload_too_large"


def test_the_schemas_accept_every_message_the_server_sends(cluster):
    jsonschema = pytest.importorskip("jsonschema")
    from fakeshard._schema import schema

    def check(name, doc):
        jsonschema.validate(doc, schema(name))

    head = cluster.engine("head")
    url = cluster.nodes()["head"]["url"]
    token = TokenBundle("j", 0, 0, (1, 2))
    check("token_bundle", json.loads(wire.dumps(token)))
    for form in ("floats", "base64"):
        r = httpx.post(f"{url}/v1/prefill?hidden={form}", content=wire.dumps(TokenBundle(f"j{form}", 0, 0, (1,))),
                       headers={"Content-Type": "application/json"})
        check("hidden_bundle", r.json())
    check("session_view", httpx.get(url + "/v1/sessions/jfloats").json())
    check("node_state", httpx.get(url + "/v1/state").json())
    check("roster", httpx.get(cluster.control + "/v1/nodes").json())
    check("error", httpx.post(url + "/v1/decode", content=wire.dumps(TokenBundle("j", 0, 9, (1,))),
                              headers={"Content-Type": "application/json"}).json())
    check("error", httpx.get(url + "/v1/nope").json())
    plan = FaultPlan((FaultRule(Delay(0.5), op="decode", session_id="x", nth=2, count=None, probability=0.5),
                      FaultRule(DropResponse())), seed=4)
    check("fault_plan", json.loads(wire.dumps(plan)))
    check("fault_rule", json.loads(wire.dumps(plan.rules[0])))
    check("sample_bundle", json.loads(wire.dumps(Pipeline([FakeShardEngine(SPEC)]).prefill("q", 0, 0, [1]))))
    check("ok", httpx.post(url + "/v1/release", json={"session_id": "j", "epoch": 0}).json())
    cluster.set_faults("head", FaultPlan((FaultRule(Delay(0.0), count=None),)))
    head.prefill(TokenBundle("k", 0, 0, (1,)))
    log = httpx.get(cluster.control + "/v1/nodes/head/log").json()
    assert len(log["fired"]) == 1
    check("fault_log", log)
    with pytest.raises(jsonschema.ValidationError):
        check("token_bundle", {**json.loads(wire.dumps(token)), "epoch": "0"})
    assert head.spec.role.value == "head"


def test_bad_topologies_name_the_field(tmp_path):
    good = topology()
    for broken, field in [
        ({**good, "nodes": [{"name": "x y", "start_layer": 0, "end_layer": 2}]}, "name"),
        ({**good, "nodes": [{"name": "a", "start_layer": 4, "end_layer": 2}]}, "start_layer"),
        ({**good, "model": {**good["model"], "n_layers": 0}}, "n_layers"),
        ({**good, "nodes": good["nodes"] + good["nodes"][:1]}, "unique"),
        ({**good, "extra": 1}, "unknown"),
        ({**good, "nodes": [{"name": "a", "start_layer": 0, "end_layer": 6, "faults": {"kind": "x"}}]}, "faults"),
    ]:
        with pytest.raises(TopologyError, match=field):
            Topology.from_dict(broken)
    with pytest.raises(TopologyError, match="cannot read"):
        Topology.load(tmp_path / "missing.json")


def test_a_topology_file_naming_a_key_twice_or_nested_too_deep_is_a_topology_error(tmp_path):
    path = tmp_path / "t.json"
    text = json.dumps(topology())
    path.write_text(text.replace('"nodes":', '"model": {}, "nodes":', 1))
    with pytest.raises(TopologyError, match="names the key 'model' twice"):
        Topology.load(path)
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(TopologyError, match="not JSON"):
        Topology.load(path)
    path.write_text(text)
    assert Topology.load(path) == Topology.from_dict(topology())


def test_a_body_naming_a_key_twice_changes_nothing(cluster):
    url = cluster.nodes()["head"]["url"]
    head = cluster.engine("head")
    head.prefill(TokenBundle("twice", 0, 0, (1, 2)))
    r = httpx.post(url + "/v1/release", content=b'{"session_id": "other", "session_id": "twice", "epoch": 0}',
                   headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["code"] == "malformed_bundle"
    assert head.session("twice").status == "live" and head.session("other") is None
    body = wire.dumps(TokenBundle("twice", 0, 2, (3,))).replace('"epoch": 0', '"epoch": 1, "epoch": 0')
    r = httpx.post(url + "/v1/decode", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and "names the key 'epoch' twice" in r.json()["message"]
    assert head.session("twice").cached_tokens == 2
    node = json.dumps({"spec": asdict(SPEC.with_layers(0, 2)), "name": "first"})
    node = node.replace('"name": "first"', '"name": "first", "name": "second"')
    r = httpx.post(cluster.control + "/v1/nodes", content=node, headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["code"] == "bad_request" and "twice" in r.json()["message"]
    assert not {"first", "second"} & set(cluster.nodes())


def test_a_topology_runs_in_a_separate_process():
    with serve(topology(), subprocess=True) as c:
        assert pipeline(c).generate("sp", [9, 8], 3) == fault_free([9, 8], 3)
        c.partition("tail", "refuse")
        with pytest.raises(EngineCrashed):
            c.engine("mid")  # the engine itself is fine; only the tail is unreachable
            c.engine("tail")
        c.heal("tail")
        assert c.engine("tail").used_tokens == 4  # the prompt and the first two new tokens


def test_serve_writes_the_roster_and_stops_on_sigterm(tmp_path):
    import signal
    import subprocess
    import sys

    path = tmp_path / "topology.json"
    path.write_text(json.dumps(topology()))
    roster = tmp_path / "roster.json"
    with subprocess.Popen([sys.executable, "-m", "fakeshard", "serve", str(path), "--roster", str(roster)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        try:
            line = proc.stdout.readline()
            assert json.loads(line) == json.loads(roster.read_text())
            assert set(json.loads(line)["nodes"]) == {"head", "mid", "tail", "spare"}
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=20)
        assert proc.returncode == 0, err


def test_serve_refuses_a_bad_topology_in_one_line(tmp_path):
    import subprocess
    import sys

    path = tmp_path / "topology.json"
    path.write_text('{"model": {}, "nodes": []}')
    result = subprocess.run([sys.executable, "-m", "fakeshard", "serve", str(path)], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "model_id" in result.stderr
    assert not Path(str(path) + ".tmp").exists()


def test_a_real_model_topology_serves_the_same_tokens(tmp_path, monkeypatch):
    pytest.importorskip("gguf")
    from fakeshard.real import tiny_engine

    monkeypatch.setenv("FAKESHARD_MODEL_CACHE", str(tmp_path))
    topo = {"model": {"model_id": "served-real", "n_layers": 4, "hidden_size": 64, "vocab_size": 128, "seed": 2},
            "engine": "fakeshard.real:tiny_engine",
            "nodes": [{"name": "head", "start_layer": 0, "end_layer": 1},
                      {"name": "mid", "start_layer": 1, "end_layer": 3},
                      {"name": "tail", "start_layer": 3, "end_layer": 4}]}
    spec = ShardSpec("served-real", 4, 0, 4, hidden_size=64, vocab_size=128)
    with serve(topo) as c:
        served = Pipeline([c.engine(n) for n in ("head", "mid", "tail")])
        assert served.evidence_class == "real-model"
        local = Pipeline([tiny_engine(spec.with_layers(a, b), seed=2) for a, b in ((0, 1), (1, 3), (3, 4))])
        assert served.generate("r", [5, 6, 7], 5) == local.generate("r", [5, 6, 7], 5)


def test_the_schema_command_prints_every_schema_and_refuses_unknown_names():
    import subprocess
    import sys

    everything = subprocess.run([sys.executable, "-m", "fakeshard", "schema"], capture_output=True, text=True,
                                timeout=60)
    assert everything.returncode == 0
    defs = json.loads(everything.stdout)["$defs"]
    assert {"token_bundle", "hidden_bundle", "sample_bundle", "error", "fault_plan", "roster"} <= set(defs)
    one = subprocess.run([sys.executable, "-m", "fakeshard", "schema", "hidden_bundle"], capture_output=True,
                         text=True, timeout=60)
    assert json.loads(one.stdout)["properties"]["kind"] == {"const": "hidden_bundle"}
    bad = subprocess.run([sys.executable, "-m", "fakeshard", "schema", "tensor"], capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 2 and "no schema 'tensor'" in bad.stderr and bad.stderr.count("\n") == 1


def test_served_engines_in_another_process_are_removed_once_gone(monkeypatch):
    import gc

    from fakeshard.remote import SERVER_ENV_VAR, served

    with serve({"model": {"model_id": "pool", "n_layers": 2}, "nodes": []}, subprocess=True) as c:
        monkeypatch.setenv(SERVER_ENV_VAR, c.control)
        factory = served(FakeShardEngine)
        engines = [factory(ShardSpec("pool", 2, 0, 2), seed=i) for i in range(3)]
        assert len(c.nodes()) == 3
        del engines
        gc.collect()
        # A finalizer only marks the nodes; the next engine made removes them (no I/O inside GC).
        kept = factory(ShardSpec("pool", 2, 0, 1))
        assert list(c.nodes()) == [kept.name]


# -- the served node judges odd values as an engine in process does ------------------------------

_ODD_TOKENS = [np.array([1, 2]), (1, np.int64(2)), range(1, 3), (True,), (1.0,), "ab", b"ab", None, {"t": 1},
               (1, None), ((1,),), (1, 64), (63,), [1, 2]]
_ODD_ROWS = ["float32 value", "array rows", "range rows", "list rows", "float64 value", "bool value", "None value",
             "2-D array", "float16 array", "3-D array", "1-D array", "int rows", "str value", "nested rows"]


def _odd_hidden(good: HiddenBundle, kind: str) -> HiddenBundle:
    rows = good.rows()
    first = rows[0]
    held = {
        "float32 value": lambda: ((np.float32(first[0]),) + first[1:],) + rows[1:],
        "array rows": lambda: tuple(np.array(r, dtype=np.float32) for r in rows),
        "range rows": lambda: (range(len(first)),) + rows[1:],
        "list rows": lambda: [list(r) for r in rows],
        "float64 value": lambda: ((np.float64(first[0]),) + first[1:],) + rows[1:],
        "bool value": lambda: ((True,) + first[1:],) + rows[1:],
        "None value": lambda: ((None,) + first[1:],) + rows[1:],
        "2-D array": lambda: np.array(rows, dtype=np.float32),
        "float16 array": lambda: np.array(rows, dtype=np.float16),
        "3-D array": lambda: np.array(rows, dtype=np.float32)[None],
        "1-D array": lambda: np.array(first, dtype=np.float32),
        "int rows": lambda: tuple(tuple(int(v) for v in r) for r in rows),
        "str value": lambda: (("0.5",) + first[1:],) + rows[1:],
        "nested rows": lambda: ((first,),) + rows[1:],
    }[kind]()
    # Held as given (not through sealed, which converts), under the checksum of its values where
    # they have one, so the checksum is not what decides.
    try:
        checksum = hidden_checksum(good.session_id, good.epoch, good.start_pos, good.layer, held)
    except (TypeError, ValueError):
        checksum = good.checksum
    return HiddenBundle(good.session_id, good.epoch, good.start_pos, good.layer, held, checksum)


def _outcome(call):
    try:
        out = call()
    except ShardError as err:
        return err.code, None
    return "ok", out


@pytest.mark.parametrize("encoding", ["frame", "json"])
def test_a_served_node_takes_and_refuses_odd_values_as_an_engine_in_process(cluster, encoding):
    # Every odd value a caller may hold, sent to a served node and to the same engine in process:
    # the same answer, a refusal by the same code, and nothing held on the node after a refusal.
    urls = cluster.nodes()
    head = RemoteShardEngine(urls["head"]["url"], encoding=encoding)
    mid = RemoteShardEngine(urls["mid"]["url"], encoding=encoding)
    local_head = FakeShardEngine(SPEC.with_layers(0, 2), seed=3)
    local_mid = FakeShardEngine(SPEC.with_layers(2, 4), seed=3)
    for i, tokens in enumerate(_ODD_TOKENS):
        sid = f"t{encoding}{i}"
        remote = _outcome(lambda: head.prefill(TokenBundle(sid, 0, 0, tokens)))
        local = _outcome(lambda: local_head.prefill(TokenBundle(sid, 0, 0, tokens)))
        assert remote[0] == local[0] and remote[1] == local[1], (tokens, remote, local)
        assert (head.session(sid) is None) == (local_head.session(sid) is None), tokens
    for i, kind in enumerate(_ODD_ROWS):
        sid = f"h{encoding}{i}"
        good = local_head.prefill(TokenBundle(sid, 0, 0, (1, 2)))
        bad = _odd_hidden(good, kind)
        remote = _outcome(lambda: mid.prefill(bad))
        local = _outcome(lambda: local_mid.prefill(bad))
        assert remote[0] == local[0] and remote[1] == local[1], (kind, remote, local)
        assert (mid.session(sid) is None) == (local_mid.session(sid) is None), kind


# Session ids a URL path mangles unless every byte but the unreserved ones is escaped: dot
# segments, a newline (which `.` in a route pattern does not match), a lone surrogate (no UTF-8),
# and the characters that end or split a path.
_PATH_IDS = ["..", ".", "a.b", "a\nb", "\r\n", "\ud800", "\udc80x", "/", "a/b", "%", "%2F", "?x=1", "#f",
             " sp ", "é", "\x00", "\\", "~-_", "+", "x" * 4000]


@pytest.mark.parametrize("encoding", ["frame", "json"])
def test_a_served_node_s_session_view_answers_for_every_session_id_as_in_process(cluster, encoding):
    head = RemoteShardEngine(cluster.nodes()["head"]["url"], encoding=encoding)
    local = FakeShardEngine(SPEC.with_layers(0, 2), seed=3)
    for i, sid in enumerate(_PATH_IDS):
        assert head.session(sid) is None and local.session(sid) is None, sid
        for engine in (head, local):
            engine.prefill(TokenBundle(sid, i, 0, (1,) * (i + 1)))
        assert head.session(sid) == local.session(sid), sid
        assert head.session(sid).session_id == sid and head.session(sid).cached_tokens == i + 1
    assert head.used_tokens == local.used_tokens


def test_a_session_path_that_is_no_utf_8_names_no_session(cluster):
    url = cluster.nodes()["head"]["url"]
    r = httpx.get(url + "/v1/sessions/%ff")
    assert r.status_code == 404 and r.json()["code"] == "not_found"


_ODD_IDS = [(np.str_("n"), 0), (b"n", 0), (5, 0), ("", 0), ("n", np.int64(0)), ("n", True), ("n", 0.0), ("n", -1),
            ("n", 2**63), (None, 0)]


@pytest.mark.parametrize("encoding", ["frame", "json"])
def test_a_served_node_takes_and_refuses_odd_ids_as_an_engine_in_process(cluster, encoding):
    head = RemoteShardEngine(cluster.nodes()["head"]["url"], encoding=encoding)
    local = FakeShardEngine(SPEC.with_layers(0, 2), seed=3)
    for i, (sid, epoch) in enumerate(_ODD_IDS):
        for engine in (head, local):
            engine.prefill(TokenBundle(f"known{encoding}{i}", 0, 0, (1,)))
        for op in ("prefill", "cancel", "release"):
            def call(engine):
                if op == "prefill":
                    return engine.prefill(TokenBundle(sid, epoch, 0, (1, 2)))
                return getattr(engine, op)(sid, epoch)
            remote, here = _outcome(lambda: call(head)), _outcome(lambda: call(local))
            if epoch == 2**63 and op == "prefill":  # docs/contract.md, The Python client
                assert remote[0] == "malformed_bundle" and here[0] == "ok", (op, remote, here)
                continue
            assert remote[0] == here[0] and remote[1] == here[1], (op, sid, epoch, remote, here)
        assert head.used_tokens == local.used_tokens, (sid, epoch)
