"""A node's HTTP/1.1, byte by byte on a raw socket: keep-alive, pipelining, ``HEAD``,
``Expect: 100-continue``, ``Connection: close``, and what a handler's bug looks like.

Loopback only; every read is bounded by the socket's timeout.
"""

from __future__ import annotations

import asyncio
import json
import socket

import pytest

pytest.importorskip("httptools", reason="the served nodes need the extra 'serve'")

from fakeshard import FakeShardEngine, ShardSpec, TokenBundle, wire  # noqa: E402
from fakeshard.server._thread import ServerThread  # noqa: E402
from tests.support import raw_post  # noqa: E402

SPEC = ShardSpec("h1", 2, 0, 2, hidden_size=4, vocab_size=64)


@pytest.fixture
def node():
    server = ServerThread(FakeShardEngine, time_scale=0.0)
    try:
        served = server.add(SPEC)
        yield served.host, served.port
    finally:
        server.close()


def _read_answer(sock: socket.socket, buffer: bytearray, *, head_only: bool = False) -> tuple[int, dict, bytes]:
    """One answer off ``sock`` (bytes past it stay in ``buffer``): status, headers, body."""
    while b"\r\n\r\n" not in buffer:
        chunk = sock.recv(65536)
        assert chunk, f"closed before an answer's head; got {bytes(buffer)!r}"
        buffer += chunk
    head, _, rest = bytes(buffer).partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    length = 0 if head_only or status == 100 else int(headers["content-length"])
    while len(rest) < length:
        chunk = sock.recv(65536)
        assert chunk, "closed in the middle of an answer's body"
        rest += chunk
    buffer[:] = rest[length:]
    return status, headers, rest[:length]


def _closed(sock: socket.socket) -> bool:
    return sock.recv(1) == b""


def test_pipelined_requests_are_answered_in_the_order_they_came(node):
    prefill = wire.dumps(TokenBundle("p", 0, 0, (1, 2))).encode()
    engine = FakeShardEngine(SPEC)
    first = engine.prefill(TokenBundle("p", 0, 0, (1, 2)))
    decode = wire.dumps(TokenBundle("p", 0, 2, (first.token,))).encode()
    with socket.create_connection(node, timeout=10) as sock:
        sock.sendall(raw_post("/v1/prefill", prefill) + raw_post("/v1/decode", decode)
                     + b"GET /v1/sessions/p HTTP/1.1\r\nHost: x\r\n\r\n")
        buffer = bytearray()
        answers = [_read_answer(sock, buffer) for _ in range(3)]
    assert [status for status, _, _ in answers] == [200, 200, 200]
    assert wire.loads(answers[0][2]) == first
    assert wire.loads(answers[1][2]) == engine.decode(TokenBundle("p", 0, 2, (first.token,)))
    assert json.loads(answers[2][2])["cached_tokens"] == 3


def test_a_request_sent_a_byte_at_a_time_is_read_like_any_other(node):
    body = wire.dumps(TokenBundle("slow", 0, 0, (5,))).encode()
    with socket.create_connection(node, timeout=10) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(len(request := raw_post("/v1/prefill", body))):
            sock.sendall(request[i:i + 1])
        status, _, answer = _read_answer(sock, bytearray())
    assert status == 200 and wire.loads(answer) == FakeShardEngine(SPEC).prefill(TokenBundle("slow", 0, 0, (5,)))


def test_head_answers_the_get_s_headers_without_its_body(node):
    with socket.create_connection(node, timeout=10) as sock:
        sock.sendall(b"GET /v1/state HTTP/1.1\r\nHost: x\r\n\r\nHEAD /v1/state HTTP/1.1\r\nHost: x\r\n\r\n"
                     b"GET /v1/state HTTP/1.1\r\nHost: x\r\n\r\n")
        buffer = bytearray()
        got = _read_answer(sock, buffer)
        head = _read_answer(sock, buffer, head_only=True)
        again = _read_answer(sock, buffer)  # the HEAD sent no body: the next answer starts right after
    assert got[0] == head[0] == again[0] == 200
    assert head[1]["content-length"] == got[1]["content-length"] == str(len(got[2]))
    assert again[2] == got[2]


def test_expect_100_continue_is_answered_before_the_body_is_sent(node):
    body = wire.dumps(TokenBundle("e", 0, 0, (3,))).encode()
    with socket.create_connection(node, timeout=10) as sock:
        sock.sendall(raw_post("/v1/prefill", b"", b"Expect: 100-continue\r\n").replace(
            b"Content-Length: 0", f"Content-Length: {len(body)}".encode()))
        buffer = bytearray()
        interim = _read_answer(sock, buffer)
        sock.sendall(body)
        final = _read_answer(sock, buffer)
    assert interim[0] == 100 and final[0] == 200


@pytest.mark.parametrize("request_bytes", [
    b"GET /v1/state HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    b"GET /v1/state HTTP/1.0\r\n\r\n",
], ids=["connection-close", "http-1.0"])
def test_a_request_that_asks_to_close_is_answered_then_closed(node, request_bytes):
    with socket.create_connection(node, timeout=10) as sock:
        sock.sendall(request_bytes)
        status, headers, body = _read_answer(sock, bytearray())
        assert status == 200 and json.loads(body)["kind"] == "node_state"
        assert headers["connection"].lower() == "close"
        assert _closed(sock)


def test_a_wrong_method_is_405_naming_the_allowed_ones(node):
    with socket.create_connection(node, timeout=10) as sock:
        sock.sendall(b"PUT /v1/decode HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
                     b"POST /v1/state HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
        buffer = bytearray()
        decode, state = _read_answer(sock, buffer), _read_answer(sock, buffer)
    assert (decode[0], decode[1]["allow"], json.loads(decode[2])["code"]) == (405, "POST", "method_not_allowed")
    assert (state[0], state[1]["allow"]) == (405, "GET, HEAD")


def test_a_bug_in_a_handler_is_a_500_the_connection_closes_and_the_node_goes_on():
    class Broken(FakeShardEngine):
        def decode(self, bundle):
            raise RuntimeError("a planted bug")
    server = ServerThread(Broken, time_scale=0.0)
    try:
        served = server.add(SPEC)
        with socket.create_connection((served.host, served.port), timeout=10) as sock:
            sock.sendall(raw_post("/v1/decode", wire.dumps(TokenBundle("b", 0, 0, (1,))).encode()))
            status, headers, _ = _read_answer(sock, bytearray())
            assert status == 500 and headers["content-type"].startswith("text/plain")
            assert _closed(sock)
        with socket.create_connection((served.host, served.port), timeout=10) as sock:
            sock.sendall(raw_post("/v1/prefill", wire.dumps(TokenBundle("b", 0, 0, (1,))).encode()))
            assert _read_answer(sock, bytearray())[0] == 200
    finally:
        server.close()


def test_requests_pipelined_after_a_dropped_answer_are_never_read():
    from fakeshard import DropResponse, FaultPlan, FaultRule

    server = ServerThread(FakeShardEngine, time_scale=0.0)
    try:
        served = server.add(SPEC, faults=FaultPlan((FaultRule(DropResponse(), nth=1),)))
        with socket.create_connection((served.host, served.port), timeout=10) as sock:
            sock.sendall(raw_post("/v1/prefill", wire.dumps(TokenBundle("a", 0, 0, (1,))).encode())
                         + raw_post("/v1/prefill", wire.dumps(TokenBundle("b", 0, 0, (2,))).encode()))
            assert _closed(sock)  # the first answer dropped, the connection with it
        with socket.create_connection((served.host, served.port), timeout=10) as sock:
            sock.sendall(b"GET /v1/sessions/a HTTP/1.1\r\nHost: x\r\n\r\n"
                         b"GET /v1/sessions/b HTTP/1.1\r\nHost: x\r\n\r\n")
            buffer = bytearray()
            applied, never_read = _read_answer(sock, buffer), _read_answer(sock, buffer)
        assert applied[0] == 200 and json.loads(applied[2])["cached_tokens"] == 1
        assert never_read[0] == 404
    finally:
        server.close()


# -- a caller that hangs up: what the server tells its ``on_hangup`` --------------------------------

class _Transport:
    """Just enough of an asyncio transport to drive one connection by hand."""

    def __init__(self, socket_error: int = 0) -> None:
        self.written, self.closing, self.socket_error = b"", False, socket_error
        self.sock = self

    def write(self, data: bytes) -> None:
        self.written += data

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_extra_info(self, name: str, default=None):
        return self.sock if name == "socket" else default

    def getsockopt(self, level: int, option: int) -> int:
        assert (level, option) == (socket.SOL_SOCKET, socket.SO_ERROR)
        return self.socket_error


_CALL = b"POST /x HTTP/1.1\r\nHost: n\r\nContent-Length: 0\r\n\r\n"


def _connection(handler, transport: _Transport) -> tuple[object, list]:
    from fakeshard.server._h1 import H1Server, _Connection

    hung_up: list = []
    server = H1Server(handler, max_body=1024, on_hangup=hung_up.append)
    server.accepting = True
    connection = _Connection(server)
    connection.connection_made(transport)
    return connection, hung_up


def test_a_call_that_ends_after_its_caller_closed_the_connection_was_hung_up_on():
    """The caller's close was read while the handler waited (the transport is closing), and
    the handler ended before asyncio reported the connection lost: the answer never left."""
    from fakeshard.server._h1 import Response

    async def main() -> None:
        gate = asyncio.Event()

        async def handler(request):
            await gate.wait()
            return Response(200, b"late", "text/plain")
        transport = _Transport()
        connection, hung_up = _connection(handler, transport)
        connection.data_received(_CALL)
        transport.close()  # the caller's end of file, read: asyncio closes the transport
        gate.set()
        for _ in range(5):
            await asyncio.sleep(0)
        assert transport.written == b"" and [r.path for r in hung_up] == ["/x"]
        connection.connection_lost(None)
        assert len(hung_up) == 1  # said once
    asyncio.run(main())


@pytest.mark.parametrize("socket_error, hung_up_on", [(0, False), (32, True)])
def test_an_end_of_file_after_an_answer_is_a_hang_up_only_when_the_answer_met_a_reset(socket_error, hung_up_on):
    """A close read after the answer left: a caller done with its connection (no error on the
    socket), or one that had closed before the answer came, whose kernel reset the
    connection when the answer reached it (``EPIPE``, 32, pending on the socket)."""
    from fakeshard.server._h1 import Response

    async def main() -> None:
        async def handler(request):
            return Response(200, b"ok", "text/plain")
        transport = _Transport(socket_error)
        connection, hung_up = _connection(handler, transport)
        connection.data_received(_CALL)
        assert transport.written.startswith(b"HTTP/1.1 200 OK\r\n")
        connection.eof_received()
        assert [r.path for r in hung_up] == (["/x"] if hung_up_on else [])
    asyncio.run(main())


def test_a_caller_that_closes_right_after_sending_hung_up_on_every_call():
    """Send, then close at once, never reading: whichever comes first at the node (the
    answer, or the close), each call's caller hung up before reading its answer."""
    import time

    import httpx

    server = ServerThread(FakeShardEngine, time_scale=0.0)
    try:
        served = server.add(SPEC)
        for i in range(20):
            with socket.create_connection((served.host, served.port), timeout=10) as sock:
                sock.sendall(raw_post("/v1/prefill", wire.dumps(TokenBundle(f"s{i}", 0, 0, (1, 2))).encode()))
        deadline = time.monotonic() + 10
        while True:
            calls = httpx.get(f"{server.cluster.control_url}/v1/calls").json()["calls"]
            if (len(calls) == 20 and all(c["abandoned"] is not None for c in calls)) or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        assert [(c["session_id"], c["outcome"], c["abandoned"] is not None) for c in calls] == [
            (f"s{i}", "ok", True) for i in range(20)]
    finally:
        server.close()
