"""Checks of a node's own HTTP layer (docs/contract.md, "Errors and status codes"): what the
engine suites cannot see, since they reach a node only through a client that hides it.

Each takes an engine factory whose engines are nodes served over HTTP (an engine host's,
``--engine-url``/``--engine-cmd``, or ``fakeshard.remote:served_engine``), makes one node, and
speaks to its data plane over a raw loopback socket: keep-alive, pipelining, ``HEAD``,
``405`` with ``Allow``, ``413`` after the body is read, ``415``, a bad ``?hidden=``, and an
error answered to a frame request. It raises :class:`AssertionError` naming the rule broken.
"""

from __future__ import annotations

import http.client
import json
import socket
from typing import Any, Callable, Optional
from urllib.parse import urlsplit

from fakeshard import ShardSpec, TokenBundle, wire

#: A full node (one layer), so a prefill answers a sample.
SPEC = ShardSpec("http-check", 1, 0, 1, hidden_size=4, vocab_size=32)
#: The data plane's body limit (the contract's 257 MiB).
MAX_BODY_BYTES = 257 * 1024 * 1024
#: Seconds any one answer may take before the check says the node did not answer.
TIMEOUT = 30.0

Factory = Callable[..., Any]


def node_url(engine: Any) -> Optional[str]:
    """The data-plane URL of ``engine`` when it is a node over HTTP (behind the kit's fault
    layer or not), else ``None``."""
    while engine is not None:
        url = getattr(engine, "url", None)
        if isinstance(url, str) and url.startswith("http://"):
            return url
        engine = getattr(engine, "engine", None)
    return None


def makes_http_nodes(factory: Any) -> bool:
    """Whether ``factory`` states that its engines are nodes over HTTP (``makes_http_nodes``)."""
    return getattr(factory, "makes_http_nodes", False) is True


class _Kept:
    """A file that ``http.client`` may close when an answer ends: the connection's buffer stays open."""

    def __init__(self, file: Any) -> None:
        self._file = file

    def __getattr__(self, name: str) -> Any:
        return getattr(self._file, name)

    def close(self) -> None:
        pass


class _Connection:
    """One keep-alive connection, its answers read in order from one buffer (so pipelined
    answers are read as they came)."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.host = f"{parts.hostname}:{parts.port}"
        self.sock = socket.create_connection((parts.hostname, parts.port), timeout=TIMEOUT)
        self.file = self.sock.makefile("rb")

    def makefile(self, *args: Any, **kwargs: Any) -> Any:  # what http.client reads answers from
        return _Kept(self.file)

    def request(self, method: str, target: str, body: bytes = b"", content_type: Optional[str] = None) -> bytes:
        lines = [f"{method} {target} HTTP/1.1", f"Host: {self.host}"]
        if content_type is not None:
            lines.append(f"Content-Type: {content_type}")
        if body or method in ("POST", "PUT"):
            lines.append(f"Content-Length: {len(body)}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii") + body

    def send(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except OSError as exc:
            raise AssertionError(f"the node closed the connection while a request was sent: {exc!r}") from None

    def answer(self, method: str = "GET") -> tuple[http.client.HTTPResponse, bytes]:
        """The next answer on the connection; an ``AssertionError`` if none comes."""
        try:
            response = http.client.HTTPResponse(self, method=method)  # type: ignore[arg-type]
            response.begin()
            return response, response.read()
        except (OSError, http.client.HTTPException) as exc:
            raise AssertionError(f"no answer on a kept-alive connection: {exc!r}") from None

    def close(self) -> None:
        self.file.close()
        self.sock.close()


def _node(factory: Factory) -> tuple[Any, str]:
    engine = factory(SPEC, seed=0)
    url = node_url(engine)
    assert url is not None, f"{engine!r} is no node over HTTP (its factory states makes_http_nodes)"
    return engine, url


def _json_error(response: http.client.HTTPResponse, body: bytes, status: int, code: str, what: str) -> None:
    assert response.status == status, f"{what}: answered {response.status}, the contract's is {status} ({code})"
    kind = response.getheader("Content-Type", "")
    assert kind.split(";")[0].strip() == wire.JSON_CONTENT_TYPE, \
        f"{what}: an error's Content-Type is {wire.JSON_CONTENT_TYPE}, got {kind!r}"
    try:
        data = json.loads(body)
    except ValueError:
        raise AssertionError(f"{what}: the error body is no JSON: {body[:120]!r}") from None
    assert isinstance(data, dict) and data.get("kind") == "error" and data.get("code") == code, \
        f"{what}: the body is no wire error with code {code!r}: {body[:200]!r}"


def _prefill_json(session_id: str, start: int = 0) -> bytes:
    return wire.dumps(TokenBundle(session_id, 0, start, (1, 2))).encode("utf-8")


def _view(conn: _Connection, session_id: str) -> tuple[int, bytes]:
    conn.send(conn.request("GET", f"/v1/sessions/{session_id}"))
    response, body = conn.answer()
    return response.status, body


def check_keep_alive_and_pipelining(factory: Factory) -> None:
    """Requests sent at once on one connection are answered in order, and the connection stays
    open; answers carry Content-Type and Content-Length, a call's Fakeshard-Delay, and no Date."""
    engine, url = _node(factory)
    conn = _Connection(url)
    try:
        conn.send(conn.request("GET", "/v1/state")
                  + conn.request("POST", "/v1/prefill", _prefill_json("pipelined"), wire.JSON_CONTENT_TYPE)
                  + conn.request("GET", "/v1/sessions/pipelined"))
        answers = [conn.answer() for _ in range(3)]
        assert [r.status for r, _ in answers] == [200, 200, 200], \
            f"three pipelined requests were answered {[r.status for r, _ in answers]}, not 200 each in order"
        kinds = [json.loads(body).get("kind") for _, body in answers]
        assert kinds == ["node_state", "sample_bundle", "session_view"], \
            f"pipelined answers came as {kinds}, not in the order of the requests"
        assert json.loads(answers[2][1])["cached_tokens"] == 2, "the prefill pipelined before the view was not applied"
        for response, body in answers:
            assert response.getheader("Date") is None, "an answer carries Date (a node reads no wall clock)"
            assert response.getheader("Content-Length") == str(len(body)), "Content-Length is not the body's"
            assert response.getheader("Content-Type"), "an answer carries no Content-Type"
        assert answers[1][0].getheader("Fakeshard-Delay") is not None, "a call's answer carries no Fakeshard-Delay"
        conn.send(conn.request("GET", "/v1/state"))
        response, _ = conn.answer()
        assert response.status == 200, "the connection was not kept alive after pipelined requests"
    finally:
        conn.close()


def check_head(factory: Factory) -> None:
    """``HEAD`` answers a ``GET``'s status and headers without its body."""
    engine, url = _node(factory)
    conn = _Connection(url)
    try:
        conn.send(conn.request("GET", "/v1/state") + conn.request("HEAD", "/v1/state")
                  + conn.request("GET", "/v1/state"))
        got, body = conn.answer()
        head, empty = conn.answer("HEAD")
        after, again = conn.answer()
        assert head.status == got.status == 200, f"HEAD /v1/state answered {head.status}"
        assert empty == b"", "HEAD answered a body"
        assert head.getheader("Content-Type") == got.getheader("Content-Type"), "HEAD's Content-Type is not GET's"
        assert head.getheader("Content-Length") == str(len(body)), "HEAD's Content-Length is not GET's body's"
        assert after.status == 200 and json.loads(again)["kind"] == "node_state", \
            "a HEAD answer carried bytes that broke the next answer on its connection"
    finally:
        conn.close()


def check_method_not_allowed(factory: Factory) -> None:
    """A route asked with a method it does not take is ``405 method_not_allowed``, naming the
    allowed methods in ``Allow``; an unknown route is ``404 not_found``."""
    engine, url = _node(factory)
    conn = _Connection(url)
    try:
        for method, target, allowed in (("GET", "/v1/prefill", "POST"), ("DELETE", "/v1/state", "GET")):
            conn.send(conn.request(method, target))
            response, body = conn.answer()
            _json_error(response, body, 405, "method_not_allowed", f"{method} {target}")
            allow = {m.strip() for m in (response.getheader("Allow") or "").split(",")}
            assert allowed in allow, f"{method} {target}: Allow is {response.getheader('Allow')!r}, without {allowed}"
        conn.send(conn.request("GET", "/v1/no-such-route"))
        response, body = conn.answer()
        _json_error(response, body, 404, "not_found", "GET /v1/no-such-route")
    finally:
        conn.close()


def check_media_type_and_hidden_query(factory: Factory) -> None:
    """A call of another Content-Type is ``415``, and an unknown or repeated ``?hidden=`` is
    ``400 bad_request``: each refused before the engine, so nothing is applied."""
    engine, url = _node(factory)
    conn = _Connection(url)
    try:
        cases = (("/v1/prefill", "text/plain", 415, "unsupported_media_type"),
                 ("/v1/prefill?hidden=float", wire.JSON_CONTENT_TYPE, 400, "bad_request"),
                 ("/v1/prefill?hidden=floats&hidden=base64", wire.JSON_CONTENT_TYPE, 400, "bad_request"))
        for target, kind, status, code in cases:
            conn.send(conn.request("POST", target, _prefill_json("refused"), kind))
            response, body = conn.answer()
            _json_error(response, body, status, code, f"POST {target} ({kind})")
            status_of_view, _ = _view(conn, "refused")
            assert status_of_view == 404, f"POST {target} ({kind}) was refused, yet it was applied"
        conn.send(conn.request("POST", "/v1/prefill?hidden=floats&other=1", _prefill_json("kept"),
                               wire.JSON_CONTENT_TYPE))
        response, body = conn.answer()
        assert response.status == 200, f"?hidden=floats with another parameter answered {response.status}"
    finally:
        conn.close()


def check_frame_errors_are_json(factory: Factory) -> None:
    """An error answered to a binary-frame request is the wire's error JSON
    (``application/json``), its fields the contract's."""
    engine, url = _node(factory)
    conn = _Connection(url)
    try:
        frame = wire.dumpb(TokenBundle("framed", 0, 3, (1,)))
        conn.send(conn.request("POST", "/v1/prefill", frame, wire.FRAME_CONTENT_TYPE))
        response, body = conn.answer()
        _json_error(response, body, 409, "cache_miss", "a frame prefill at position 3 of a new session")
        data = json.loads(body)
        assert (data.get("expected"), data.get("got"), data.get("session_id")) == (0, 3, "framed"), \
            f"the cache miss carries {body[:200]!r}"
    finally:
        conn.close()


def check_payload_too_large(factory: Factory) -> None:
    """A body over 257 MiB is read to its end and refused ``413 payload_too_large``, and the
    connection stays usable."""
    engine, url = _node(factory)
    conn = _Connection(url)
    try:
        size = MAX_BODY_BYTES + 1
        conn.send(f"POST /v1/prefill HTTP/1.1\r\nHost: {conn.host}\r\nContent-Type: {wire.JSON_CONTENT_TYPE}\r\n"
                  f"Content-Length: {size}\r\n\r\n".encode("ascii"))
        chunk = b" " * (1 << 20)
        sent = 0
        while sent < size:
            part = chunk[:min(len(chunk), size - sent)]
            conn.send(part)
            sent += len(part)
        response, body = conn.answer()
        _json_error(response, body, 413, "payload_too_large", f"a body of {size} bytes")
        conn.send(conn.request("GET", "/v1/state"))
        after, _ = conn.answer()
        assert after.status == 200, "the connection was not usable after a 413"
    finally:
        conn.close()


#: Every check of a node's HTTP layer, in the order ``fakeshard check`` runs them.
HTTP_CHECKS: tuple[Callable[[Factory], None], ...] = (
    check_keep_alive_and_pipelining, check_head, check_method_not_allowed, check_media_type_and_hidden_query,
    check_frame_errors_are_json, check_payload_too_large,
)
