"""Served nodes on loopback: prints figures as ratios against baselines run here; asserts nothing.

    python3 benchmarks/remote.py [--repeats 300] [--clients 16] [--seconds 5] [--sessions 10000]

The nodes run in a separate ``fakeshard serve`` process, as a coordinator
would meet them; the client is this process's ``RemoteShardEngine``.

* decode round trip (a FULL node, hidden 8) over the same server stack's
  trivial echo endpoint (the nodes' HTTP layer, ``fakeshard.server._h1``,
  answering the request's body, in another process, reached with the same
  httpx client and a body of the same size):
  goal <= 1.3;
* a 512-position prefill at hidden 4096 through a served head -> middle ->
  tail over the same pipeline in process: goal <= 3 (each ratio's two sides
  are timed call for call alternately, so the machine's noise falls on both);
* decode steps per second with ``--clients`` concurrent clients, each on its
  own session;
* the server's resident memory before and after ``--sessions`` sessions of
  16 positions each (Linux ``/proc``);
* the server process's own CPU time per decode call (``/proc/PID/stat``), and
  the kernel's share of it (its system time),
  with ``--keepalive-clients`` standard-library keep-alive clients each
  sending ``--calls`` JSON decodes to one node, over the same figure for the
  echo endpoint (goal: at most 50 us per decode), the same decodes answered
  by the least a Python handler can do on that stack (JSON in, the engine's
  ``decode``, JSON out: no checks, call log, metrics or lock), and the echo's
  figure on aiohttp's server and, where ``node`` is found, on Node.js's own
  HTTP server (no Python at all), for scale (the servers take turns, a quarter
  of the calls at a time);
* the wall time of a ``ci`` campaign of the reference coordinator program
  (``python3 -m fakeshard.testing.coordinator_program``; ``--no-campaign``
  skips it), and the CPU time spent in it by the served nodes (their
  threads, read from ``/proc``), the rest of the harness, and the programs:
  whether the nodes are the campaign's bottleneck.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from fakeshard import FakeShardEngine, Pipeline, ShardSpec, TokenBundle
from fakeshard.remote import RemoteShardEngine

#: A server on the nodes' HTTP layer answering with ``HANDLER`` (a script's tail): it prints its port.
_H1_SERVE = """
async def main():
    sock = socket.socket(); sock.bind(("127.0.0.1", 0)); sock.listen(128)
    print(sock.getsockname()[1], flush=True)
    await H1Server(HANDLER, max_body=1 << 30).listen(sock)
    await asyncio.Event().wait()
asyncio.run(main())
"""
_ECHO = """
import asyncio, socket
from fakeshard.server._h1 import H1Server, Response
async def echo(request):
    return Response(200, request.body, request.content_type)
""" + _H1_SERVE.replace("HANDLER", "echo")
#: The least a Python handler of a decode can do on the same stack: read the JSON, call the
#: engine, write the sample; no checks of the body, no call log, metrics, lock or fault
#: bookkeeping.  Its sessions are the ones the CPU figure's clients decode (``cpu{k}``).
_FLOOR = """
import asyncio, json, socket
from fakeshard import FakeShardEngine, ShardSpec, TokenBundle
from fakeshard._clock import VirtualClock
from fakeshard.server._h1 import H1Server, Response
engine = FakeShardEngine(ShardSpec("bench-small", 4, 0, 4, hidden_size=8, vocab_size=256), clock=VirtualClock())
for k in range(CLIENTS):
    engine.prefill(TokenBundle(f"cpu{k}", 0, 0, (k % 64,)))
async def decode(request):
    d = json.loads(request.body)
    out = engine.decode(TokenBundle(d["session_id"], d["epoch"], d["start_pos"], tuple(d["tokens"])))
    return Response(200, json.dumps({"kind": "sample_bundle", "contract": out.contract, "session_id": out.session_id,
                                     "epoch": out.epoch, "pos": out.pos, "token": out.token}).encode(),
                    "application/json")
""" + _H1_SERVE.replace("HANDLER", "decode")
#: The same echo on aiohttp's server (the nodes' stack until their own HTTP layer), for scale.
_AIOHTTP_ECHO = """
import socket
from aiohttp import web
async def echo(request):
    return web.Response(body=await request.read(), content_type=request.content_type)
app = web.Application()
app.router.add_post("/echo", echo)
sock = socket.socket(); sock.bind(("127.0.0.1", 0)); sock.listen(128)
print(sock.getsockname()[1], flush=True)
web.run_app(app, sock=sock, print=None, access_log=None, handle_signals=True)
"""
#: The same echo on Node.js's own HTTP server (no Python at all), for scale, where ``node`` is found.
_NODE_ECHO = """
const http = require("node:http");
const server = http.createServer((req, res) => {
  const chunks = [];
  req.on("data", (chunk) => chunks.push(chunk));
  req.on("end", () => {
    const body = Buffer.concat(chunks);
    res.writeHead(200, {"content-type": req.headers["content-type"], "content-length": body.length});
    res.end(body);
  });
});
server.listen(0, "127.0.0.1", () => console.log(server.address().port));
"""


def _start(script: str, path: str, procs: list, run: tuple[str, str] = (sys.executable, "-c")) \
        -> tuple[subprocess.Popen, str]:
    """Run ``script`` (which prints the loopback port it listens on) as ``run + (script,)`` (by
    default Python's ``-c``) in a new process, kept in ``procs``; the process and the URL of
    ``path`` on it."""
    proc = subprocess.Popen([*run, script], stdout=subprocess.PIPE, text=True)
    procs.append(proc)
    return proc, f"http://127.0.0.1:{int(proc.stdout.readline())}{path}"


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return -1


def _cpu_split(pid: int | str) -> tuple[float, float]:
    """The process's own CPU time, user and system (the kernel's, on its behalf), from
    ``/proc/PID/stat`` (a thread's, with ``pid`` ``"self/task/TID"``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def _cpu_seconds(pid: int | str) -> float:
    """The process's own CPU time, user + system."""
    return sum(_cpu_split(pid))


class _ServedNodesCpu:
    """The CPU time of this process's served clusters: the threads of ``ServerThread`` (named
    ``fakeshard-server``) and of its nodes' workers (``fakeshard-NODE_0``), each read from
    ``/proc/self/task/TID/stat`` every ``period`` seconds while the block runs.  A thread's
    last reading stands for its total, so up to ``period`` of each thread's CPU before it
    ended is missed (``threads`` says how many there were)."""

    def __init__(self, period: float = 0.05) -> None:
        self.period = period
        self._seen: dict[threading.Thread, float] = {}  # by thread: a thread id may be used again
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "_ServedNodesCpu":
        self._sampler.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._sampler.join()

    @property
    def seconds(self) -> float:
        return sum(self._seen.values())

    @property
    def threads(self) -> int:
        return len(self._seen)

    def _run(self) -> None:
        while True:
            for thread in threading.enumerate():
                if thread.name.startswith("fakeshard-") and thread.native_id is not None:
                    try:
                        self._seen[thread] = _cpu_seconds(f"self/task/{thread.native_id}")
                    except OSError:  # ended since it was listed
                        pass
            if self._stop.wait(self.period):
                return


def _server_cpu(pid: int, url: str, clients: int, calls: range, body_of) -> tuple[float, float]:
    """Seconds of the server's CPU, user and system, while ``clients`` keep-alive clients (each
    its own thread and connection) each POST ``body_of(client, i)`` to ``url`` for ``i`` in
    ``calls`` (bodies are built before the clock starts)."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    failures = []
    bodies = [[body_of(k, i) for i in calls] for k in range(clients)]

    def client(mine: list[bytes]) -> None:
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
        try:
            for body in mine:
                conn.request("POST", parts.path, body=body, headers={"Content-Type": "application/json"})
                response = conn.getresponse()
                response.read()
                if response.status != 200:
                    failures.append(response.status)
        finally:
            conn.close()
    threads = [threading.Thread(target=client, args=(b,)) for b in bodies]
    user, system = _cpu_split(pid)
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    user_after, system_after = _cpu_split(pid)
    assert not failures, f"{len(failures)} calls answered {sorted(set(failures))}"
    return user_after - user, system_after - system


def _servers_cpu_per_call(servers: list[tuple[int, str]], clients: int, calls: int, body_of,
                          rounds: int = 4) -> list[tuple[float, float]]:
    """For each ``(pid, url)`` of ``servers``: microseconds of its CPU per call, and of that the
    kernel's (system time), over ``clients`` x ``calls`` calls (:func:`_server_cpu`).  The
    servers take turns, ``rounds`` times, so that the machine's noise falls on each."""
    used = [[0.0, 0.0] for _ in servers]
    step = -(-calls // rounds)
    for first in range(0, calls, step):
        for (pid, url), total in zip(servers, used):
            user, system = _server_cpu(pid, url, clients, range(first, min(first + step, calls)), body_of)
            total[0] += user
            total[1] += system
    per_call = 1e6 / (clients * calls)
    return [((user + system) * per_call, system * per_call) for user, system in used]


def _paired_median_us(fn_a, fn_b, repeats: int) -> tuple[float, float]:
    """The median microseconds of ``fn_a`` and of ``fn_b``, their calls alternated, so that a
    burst of the machine's noise falls on both rather than on whichever ran during it."""
    a, b = [], []
    for _ in range(repeats):
        for fn, samples in ((fn_a, a), (fn_b, b)):
            t0 = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(a), statistics.median(b)


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=300)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--keepalive-clients", type=int, default=64)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--no-campaign", action="store_true")
    args = parser.parse_args(argv)
    wide = ShardSpec("bench-remote", 6, 0, 6, hidden_size=4096, vocab_size=32000)
    topology = {"model": {"model_id": wide.model_id, "n_layers": 6, "hidden_size": 4096, "vocab_size": 32000},
                "nodes": [{"name": "head", "start_layer": 0, "end_layer": 2},
                          {"name": "mid", "start_layer": 2, "end_layer": 4},
                          {"name": "tail", "start_layer": 4, "end_layer": 6}]}
    small = {"model": {"model_id": "bench-small", "n_layers": 4, "hidden_size": 8, "vocab_size": 256},
             "nodes": [{"name": "full", "start_layer": 0, "end_layer": 4}]}
    procs = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            rosters = []
            for i, topo in enumerate((topology, small)):
                path = Path(tmp) / f"t{i}.json"
                path.write_text(json.dumps(topo))
                proc = subprocess.Popen([sys.executable, "-m", "fakeshard", "serve", str(path)],
                                        stdout=subprocess.PIPE, text=True)
                procs.append(proc)
                rosters.append(json.loads(proc.stdout.readline()))
            echo, echo_url = _start(_ECHO, "/echo", procs)
            floor, floor_url = _start(_FLOOR.replace("CLIENTS", str(args.keepalive_clients)), "/v1/decode", procs)
            aio, aio_url = _start(_AIOHTTP_ECHO, "/echo", procs)
            node = shutil.which("node")
            node_echo = _start(_NODE_ECHO, "/echo", procs, (node, "-e")) if node else None

            # 1. decode round trip against an echo of the same size.
            full = RemoteShardEngine(rosters[1]["nodes"]["full"]["url"])
            first = full.prefill(TokenBundle("rt", 0, 0, (1,)))
            pos = [first.pos]

            def decode() -> None:
                full.decode(TokenBundle("rt", 0, pos[0], (7,)))
                pos[0] += 1
            from fakeshard import wire
            body = wire.dumpb(TokenBundle("rt", 0, 1, (7,)))
            client = httpx.Client()

            def echo_call() -> None:
                client.post(echo_url, content=body, headers={"Content-Type": wire.FRAME_CONTENT_TYPE}).content
            _paired_median_us(echo_call, decode, 20)  # warm both paths
            echo_us, decode_us = _paired_median_us(echo_call, decode, args.repeats)

            # 2. a wide prefill: served 3-node pipeline vs the same pipeline in process.
            prompt = [(i * 7919) % 32000 for i in range(512)]
            served = Pipeline([RemoteShardEngine(rosters[0]["nodes"][n]["url"]) for n in ("head", "mid", "tail")])
            local = Pipeline([FakeShardEngine(wide.with_layers(a, b)) for a, b in ((0, 2), (2, 4), (4, 6))])
            runs = max(5, args.repeats // 30)
            for i in range(2):  # warm both paths (connections, allocations)
                local.prefill(f"wl{i}", 0, 0, prompt)
                served.prefill(f"ws{i}", 0, 0, prompt)
            count = iter(range(2 * runs))
            local_us, served_us = _paired_median_us(lambda: local.prefill(f"l{next(count)}", 0, 0, prompt),
                                                    lambda: served.prefill(f"s{next(count)}", 0, 0, prompt), runs)
            local_ms, served_ms = local_us / 1e3, served_us / 1e3
            assert served.prefill("check", 0, 0, prompt) == local.prefill("check", 0, 0, prompt)

            # 3. decode throughput with concurrent clients (bounded in time).
            counts = [0] * args.clients
            deadline = time.monotonic() + args.seconds

            def worker(k: int) -> None:
                engine = RemoteShardEngine(rosters[1]["nodes"]["full"]["url"])
                sample = engine.prefill(TokenBundle(f"t{k}", 0, 0, (k % 256,)))
                while time.monotonic() < deadline:
                    sample = engine.decode(TokenBundle(f"t{k}", 0, sample.pos, (sample.token,)))
                    counts[k] += 1
                engine.close()
            threads = [threading.Thread(target=worker, args=(k,)) for k in range(args.clients)]
            t0 = time.monotonic()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            steps_per_s = sum(counts) / (time.monotonic() - t0)

            # 4. the server's memory holding many sessions (bounded in count).
            server_pid = procs[1].pid
            before = _rss_kib(server_pid)
            for i in range(args.sessions):
                full.prefill(TokenBundle(f"m{i}", 0, 0, tuple(range(16))))
            after = _rss_kib(server_pid)
            held = full.used_tokens

            # 5. the server's own CPU per JSON decode call, with many keep-alive clients (bounded
            # in count): each client decodes its own session, one position a call; the echo
            # endpoint answering the same bodies is the baseline.
            clients, calls = args.keepalive_clients, args.calls
            for k in range(clients):
                full.prefill(TokenBundle(f"cpu{k}", 0, 0, (k % 64,)))

            def decode_body(k: int, i: int) -> bytes:
                return wire.dumps(TokenBundle(f"cpu{k}", 0, 1 + i, ((k + i) % 64,))).encode()
            servers = [(server_pid, rosters[1]["nodes"]["full"]["url"] + "/v1/decode"), (echo.pid, echo_url),
                       (floor.pid, floor_url), (aio.pid, aio_url)]
            if node_echo is not None:
                servers.append((node_echo[0].pid, node_echo[1]))
            (decode_cpu_us, decode_kernel_us), (echo_cpu_us, echo_kernel_us), (floor_cpu_us, _), \
                (aiohttp_cpu_us, _), *node_cpu = _servers_cpu_per_call(servers, clients, calls, decode_body)
            node_cpu_us, node_kernel_us = node_cpu[0] if node_cpu else (None, None)
            for k in range(clients):
                full.release(f"cpu{k}", 0)
    finally:
        for proc in procs:
            proc.terminate()
            proc.communicate(timeout=10)

    # 6. a ci campaign of the reference coordinator program, wall time.
    campaign_s = None
    if not args.no_campaign:
        from fakeshard.testing import _profiles as profiles
        from fakeshard.testing._machines import MachineConfig
        from fakeshard.testing._program import run_program

        config = MachineConfig.for_factory(FakeShardEngine, "fakeshard:FakeShardEngine")
        times_before = os.times()
        t0 = time.monotonic()
        with _ServedNodesCpu() as nodes_cpu:
            run_program(config, f"{sys.executable} -m fakeshard.testing.coordinator_program",
                        settings=profiles.get("ci"))
        campaign_s = time.monotonic() - t0
        times_after = os.times()
        harness_cpu_s = (times_after.user + times_after.system - times_before.user - times_before.system
                         - nodes_cpu.seconds)
        program_cpu_s = (times_after.children_user + times_after.children_system
                         - times_before.children_user - times_before.children_system)

    figures = {
        "echo_round_trip_us": round(echo_us, 1),
        "decode_round_trip_us": round(decode_us, 1),
        "decode_over_echo": round(decode_us / echo_us, 2),
        "prefill_512x4096_in_process_ms": round(local_ms, 1),
        "prefill_512x4096_served_ms": round(served_ms, 1),
        "served_over_in_process": round(served_ms / local_ms, 2),
        "decode_steps_per_s": round(steps_per_s),
        "clients": args.clients,
        "server_rss_before_mib": round(before / 1024, 1),
        "server_rss_after_mib": round(after / 1024, 1),
        "sessions": args.sessions,
        "positions_held": held,
        "server_cpu_per_decode_us": round(decode_cpu_us, 1),
        "server_kernel_per_decode_us": round(decode_kernel_us, 1),
        "server_cpu_per_echo_us": round(echo_cpu_us, 1),
        "server_kernel_per_echo_us": round(echo_kernel_us, 1),
        "decode_cpu_over_echo": round(decode_cpu_us / echo_cpu_us, 2),
        "floor_cpu_per_decode_us": round(floor_cpu_us, 1),
        "decode_cpu_over_floor": round(decode_cpu_us / floor_cpu_us, 2),
        "aiohttp_cpu_per_echo_us": round(aiohttp_cpu_us, 1),
        "node_js_cpu_per_echo_us": None if node_cpu_us is None else round(node_cpu_us, 1),
        "node_js_kernel_per_echo_us": None if node_kernel_us is None else round(node_kernel_us, 1),
        "keepalive_clients": args.keepalive_clients,
        "program_ci_campaign_s": None if campaign_s is None else round(campaign_s, 1),
    }
    if campaign_s is not None:
        figures |= {"campaign_nodes_cpu_s": round(nodes_cpu.seconds, 2),
                    "campaign_nodes_cpu_share": round(nodes_cpu.seconds / campaign_s, 3),
                    "campaign_harness_cpu_s": round(harness_cpu_s, 2),
                    "campaign_programs_cpu_s": round(program_cpu_s, 2)}
    print(f"loopback, nodes in a separate `fakeshard serve`; python {platform.python_version()} on "
          f"{platform.machine()}, {os.cpu_count()} cores")
    print(f"  echo round trip (same stack)            {echo_us:9.1f} us")
    print(f"  decode round trip (RemoteShardEngine)   {decode_us:9.1f} us   "
          f"{decode_us / echo_us:5.2f}x echo (goal <= 1.3)")
    print(f"  prefill 512 x 4096, 3 stages in process {local_ms:9.1f} ms")
    print(f"  prefill 512 x 4096, 3 served nodes      {served_ms:9.1f} ms   {served_ms / local_ms:5.2f}x (goal <= 3)")
    print(f"  decode steps/s, {args.clients} concurrent clients   {steps_per_s:9.0f}")
    print(f"  server RSS: {before / 1024:.1f} MiB, then {after / 1024:.1f} MiB holding {args.sessions} sessions "
          f"({held} positions)")
    print(f"  server CPU per JSON decode, {args.keepalive_clients} keep-alive clients "
          f"{decode_cpu_us:7.1f} us   {decode_cpu_us / echo_cpu_us:5.2f}x echo's {echo_cpu_us:.1f} us (goal <= 50 us)")
    print(f"    of which the kernel's (system time): decode {decode_kernel_us:.1f} us, echo {echo_kernel_us:.1f} us "
          f"(a receive and a send a call; no handler's code lowers it)")
    print(f"  server CPU per decode, least a Python handler does (floor)   {floor_cpu_us:7.1f} us   "
          f"{decode_cpu_us / floor_cpu_us:5.2f}x: the node over the floor")
    print(f"  server CPU per echo on aiohttp's server (for scale)          {aiohttp_cpu_us:7.1f} us   "
          f"{aiohttp_cpu_us / echo_cpu_us:5.2f}x the nodes' stack")
    if node_cpu_us is not None:
        print(f"  server CPU per echo on Node.js's http server (no Python)      {node_cpu_us:7.1f} us   "
              f"{node_cpu_us / echo_cpu_us:5.2f}x the nodes' stack (kernel {node_kernel_us:.1f} us)")
    if campaign_s is not None:
        print(f"  ci campaign of the reference coordinator program   {campaign_s:7.1f} s wall, of which CPU:")
        print(f"    served nodes ({nodes_cpu.threads} threads of clusters and workers) {nodes_cpu.seconds:7.2f} s   "
              f"{nodes_cpu.seconds / campaign_s:6.1%} of the wall time")
        print(f"    the harness's other threads                 {harness_cpu_s:7.2f} s")
        print(f"    the coordinator programs                    {program_cpu_s:7.2f} s")
    print(json.dumps(figures))
    return figures


if __name__ == "__main__":
    main(sys.argv[1:])
