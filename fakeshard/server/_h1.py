"""HTTP/1.1 for a node's data plane: asyncio's transports and httptools' parser (llhttp, in C).

A node answers one small call after another for every coordinator under
test, so its HTTP layer is the cost of a campaign: aiohttp spends about 65 us
of CPU on a call a bare asyncio protocol over httptools answers in about 25.
This module is that protocol and nothing more: parsing is httptools', and
what it adds is what a server must (keep-alive, pipelined requests answered
in order, ``Expect: 100-continue``, ``HEAD``, a body limit, a 400 for what
cannot be parsed), plus the two ways a node's faults end a connection: closed
unanswered, and reset halfway through an answer.  The control port stays on
aiohttp (docs/contract.md, "HTTP API v1").
"""

from __future__ import annotations

import asyncio
import collections
import http
import logging
import socket
import struct
from typing import Any, Awaitable, Callable, Optional, cast

import httptools

__all__ = ["DROP", "Request", "Response", "H1Server", "MAX_LINE"]

#: Longest request target, or header line, a node reads (longer is ``400``), as aiohttp's server.
MAX_LINE = 8190
_log = logging.getLogger("fakeshard.server")
_REASONS = {status.value: status.phrase for status in http.HTTPStatus}
#: The headers a request is read for (the others are parsed, and not kept).
_READ_HEADERS = {name.encode(): name for name in ("content-type", "content-length", "connection", "expect")}


class Request:
    """One parsed request: what a node's handler reads."""

    __slots__ = ("method", "path", "query_string", "headers", "body", "transport", "too_large", "tag")

    def __init__(self, method: str, target: bytes, headers: dict[str, str], body: bytes,
                 transport: asyncio.Transport, too_large: bool) -> None:
        if target[:1] != b"/" and b"://" in target:  # absolute form (through a proxy): its path
            target = b"/" + target.split(b"://", 1)[1].partition(b"/")[2]
        raw, _, query = target.partition(b"?")
        self.method = method
        #: The raw path, not yet percent-decoded (latin-1 text of the request's bytes).
        self.path = raw.decode("latin-1")
        self.query_string = query.partition(b"#")[0].decode("latin-1")
        #: ``Content-Type``, ``Content-Length``, ``Connection`` and ``Expect``, the headers a node
        #: reads (names in lower case; a header given twice keeps the last value).
        self.headers = headers
        self.body = body
        self.transport = transport
        #: The body was over the server's limit and was not kept (``body`` is empty).
        self.too_large = too_large
        #: What the handler attaches to the request, handed to the server's ``on_hangup``.
        self.tag: Any = None

    @property
    def content_type(self) -> str:
        """The media type without its parameters, lower case; ``application/octet-stream`` if none."""
        value = self.headers.get("content-type")
        if value is None:
            return "application/octet-stream"
        return value.partition(";")[0].strip().lower()


class Response:
    """An answer: status, body and its media type, and extra headers.

    ``cut``: send the head and half of the body, then reset the connection
    (a node's ``reset`` partition).
    """

    __slots__ = ("status", "body", "content_type", "headers", "cut")

    def __init__(self, status: int, body: bytes, content_type: str, headers: Optional[dict[str, str]] = None,
                 *, cut: bool = False) -> None:
        self.status, self.body, self.content_type = status, body, content_type
        self.headers, self.cut = headers, cut


#: What a handler returns to close the connection unanswered.
DROP = Response(0, b"", "")
_FAILED = Response(500, b"Internal Server Error", "text/plain; charset=utf-8")

Handler = Callable[[Request], Awaitable[Response]]


def _head(status: int, content_type: str, length: int, headers: Optional[dict[str, str]], close: bool) -> bytes:
    lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Unknown')}\r\n"
             f"Content-Type: {content_type}\r\nContent-Length: {length}\r\n"]
    if headers:
        lines.extend(f"{name}: {value}\r\n" for name, value in headers.items())
    if close:
        lines.append("Connection: close\r\n")
    lines.append("\r\n")
    return "".join(lines).encode("latin-1")


class _Connection(asyncio.Protocol):
    """One client's connection: parses its requests and answers them in the order they came."""

    def __init__(self, server: "H1Server") -> None:
        self._server = server
        self._transport: Optional[asyncio.Transport] = None
        self._parser = httptools.HttpRequestParser(self)
        self._queue: "collections.deque[Optional[Request]]" = collections.deque()  # None: a 400
        self._busy = False  # answering: what arrives meanwhile waits in the queue
        self._writable = asyncio.Event()
        self._writable.set()
        self._broken = False  # stop reading: a request could not be parsed
        self._answering: Optional[Request] = None  # in the handler: its answer is not written yet
        self._answered: Optional[Request] = None  # the last request answered, while no other came after it
        self._ended_here = False  # closed by the server
        self._begin()

    def _begin(self) -> None:
        self._target = b""
        self._headers: dict[str, str] = {}
        self._body: list[bytes] = []
        self._size = 0
        self._too_large = False

    # -- asyncio.Protocol ----------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is no subclass, yet one
        if not self._server.accepting:  # accepted just before the listener closed: refused too
            transport.close()
            return
        self._server._connections.add(self)

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self._server._connections.discard(self)
        if self._ended_here:
            pass  # closed by the server (a drop, a partition, a stop): nobody hung up
        elif self._answering is not None:  # closed (an end of file closes) or reset by the caller mid-call
            self._hangup(self._answering)
        elif isinstance(exc, ConnectionResetError) and self._answered is not None:
            # Reset after the answer: the caller closed its socket with the answer unread
            # (a kernel resets a connection closed with data it received and never read).
            self._hangup(self._answered)
        self._queue.clear()
        self._writable.set()

    def eof_received(self) -> None:
        """The caller closed its side; asyncio then closes the connection.  After an answer,
        and before another request, that is a caller done with the connection, unless the
        connection was reset by then: the caller had closed its socket before the answer
        came (its timeout crossing the answer), and its kernel reset the connection when
        the answer reached it, unread."""
        if self._answered is not None and _reset_by_peer(self._transport):
            self._hangup(self._answered)

    def _hangup(self, request: Request) -> None:
        self._answering = self._answered = None
        if self._server.on_hangup is not None:
            self._server.on_hangup(request)

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    def data_received(self, data: bytes) -> None:
        if self._broken:
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:  # answered as plain HTTP; nothing after it is read
            self._stop_reading()
        except (httptools.HttpParserError, _LineTooLong):
            self._stop_reading()
            self._queue.append(None)
            self._serve_soon()

    def _stop_reading(self) -> None:
        self._broken = True
        assert self._transport is not None
        self._transport.pause_reading()

    # -- httptools' callbacks --------------------------------------------------

    def on_message_begin(self) -> None:
        self._begin()

    def on_url(self, url: bytes) -> None:
        self._target += url
        if len(self._target) > MAX_LINE:
            raise _LineTooLong()

    def on_header(self, name: bytes, value: bytes) -> None:
        if len(name) + len(value) + 2 > MAX_LINE:
            raise _LineTooLong()
        key = _READ_HEADERS.get(name.lower())
        if key is not None:
            self._headers[key] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        length = self._headers.get("content-length", "")
        if length.isdigit() and int(length) > self._server.max_body:
            self._too_large = True
        elif self._headers.get("expect", "").lower() == "100-continue" and not self._busy \
                and self._transport is not None:
            self._transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        if self._too_large:
            return  # read and dropped: the answer is 413, and the connection stays usable
        self._size += len(body)
        if self._size > self._server.max_body:
            self._too_large, self._body = True, []
        else:
            self._body.append(body)

    def on_message_complete(self) -> None:
        assert self._transport is not None
        body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
        request = Request(self._parser.get_method().decode("latin-1"), self._target, self._headers, body,
                          self._transport, self._too_large)
        self._answered = None  # the caller sent another request: it read that answer, or will
        if not self._parser.should_keep_alive():
            request.headers["connection"] = "close"
            self._stop_reading()
        self._queue.append(request)
        if len(self._queue) > 1:
            self._transport.pause_reading()  # answer what is queued before reading more
        self._serve_soon()

    # -- answering -------------------------------------------------------------

    def _serve_soon(self) -> None:
        """Answer the queue now, as far as it goes without waiting; a task goes on from there.

        Most calls never wait (the node's lock is free, no fault delays them), so
        they are answered within the callback that read them, without a task's
        cost (what ``asyncio.eager_task_factory`` does, from Python 3.12 on).
        """
        if self._busy:
            return
        self._busy = True
        coro = self._serve()
        try:
            waiting_on = coro.send(None)
        except StopIteration:
            return
        except BaseException:
            self._busy = False
            raise
        self._server._spawn(_Started(coro, waiting_on))

    async def _serve(self) -> None:
        transport = self._transport
        assert transport is not None
        try:
            while self._queue:
                if transport.is_closing():  # closed by an answer before (dropped, reset): the rest is never read
                    self._queue.clear()
                    return
                request = self._queue.popleft()
                if request is None:
                    transport.write(_head(400, "text/plain; charset=utf-8", 11, None, True) + b"Bad Request")
                    transport.close()
                    return
                self._answering = request
                try:
                    response = await self._server.handler(request)
                except Exception:  # a bug: said as aiohttp says it, and logged
                    _log.exception("a node's handler failed on %s %s", request.method, request.path)
                    response = _FAILED
                finally:
                    self._answering = None
                if transport.is_closing():
                    if not self._ended_here:  # the caller closed or reset it while the call ran
                        self._hangup(request)
                    return
                if response is DROP:
                    transport.close()
                    return
                close = response is _FAILED or request.headers.get("connection", "").lower() == "close"
                body = b"" if request.method == "HEAD" else response.body
                head = _head(response.status, response.content_type, len(response.body), response.headers, close)
                if response.cut:
                    transport.write(head + body[: len(body) // 2])
                    reset(transport)
                    return
                if len(body) < 65536:
                    transport.write(head + body)
                else:  # not copied into one buffer
                    transport.write(head)
                    transport.write(body)
                if close:
                    transport.close()
                    return
                self._answered = request
                if not self._writable.is_set():
                    await self._writable.wait()
                if not self._queue and not self._broken:
                    transport.resume_reading()
        finally:
            self._busy = False

    def close(self) -> None:
        self._ended_here = True
        if self._transport is not None:
            self._transport.close()

    def abort(self) -> None:
        self._ended_here = True
        if self._transport is not None:
            self._transport.abort()
        self._server._connections.discard(self)


class _Started:
    """A coroutine that already ran to its first wait, to be carried on by a task: the task
    waits on what it was waiting on, then drives it as ``await`` would (``yield from``)."""

    def __init__(self, coro: Any, waiting_on: Any) -> None:
        self._coro, self._waiting_on = coro, waiting_on

    def __await__(self) -> Any:
        coro, waiting_on = self._coro, self._waiting_on
        while True:
            try:
                sent = yield waiting_on
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # a cancellation, thrown in by the task
                try:
                    waiting_on = coro.throw(exc)
                except StopIteration as stop:
                    return stop.value
            else:
                try:
                    waiting_on = coro.send(sent)
                except StopIteration as stop:
                    return stop.value


class _LineTooLong(Exception):
    """A request target or header line over ``MAX_LINE`` bytes."""


def _reset_by_peer(transport: Optional[asyncio.BaseTransport]) -> bool:
    """Whether the connection's socket holds an error the peer's reset left (``EPIPE`` when
    the peer had closed its side first, ``ECONNRESET`` before)."""
    sock = None if transport is None else transport.get_extra_info("socket")
    if sock is None:
        return False
    try:
        return sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) != 0
    except OSError:
        return False


def reset(transport: asyncio.BaseTransport) -> None:
    """Reset the connection (RST, not FIN): linger 0, then abort."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()  # type: ignore[attr-defined]


class H1Server:
    """``handler`` behind a listening socket; each connection's requests are answered in order.

    ``on_hangup(request)`` is called when a request's caller hung up before reading its
    answer: it closed or reset the connection while the handler ran, or reset it after the
    answer was written and before it sent another request (closing a socket with data it
    never read resets the connection).  A close read after the answer was written is not
    one (it is also how a caller that read the answer lets an idle connection go), unless
    the connection was reset by then: the caller had closed before the answer came (a
    timeout crossing the answer), and its kernel reset the connection when the answer
    reached it.
    """

    def __init__(self, handler: Handler, *, max_body: int,
                 on_hangup: Optional[Callable[[Request], None]] = None) -> None:
        self.handler, self.max_body, self.on_hangup = handler, max_body, on_hangup
        self._server: Optional[asyncio.Server] = None
        #: Listening: a connection made meanwhile is served (else closed at once).
        self.accepting = False
        self._connections: set[_Connection] = set()
        self._tasks: set[asyncio.Task[Any]] = set()

    async def listen(self, sock: socket.socket) -> None:
        self.accepting = True
        self._server = await asyncio.get_running_loop().create_server(lambda: _Connection(self), sock=sock)

    def stop_listening(self) -> None:
        """Close the listening socket (new connections are refused); open ones stay."""
        self.accepting = False
        if self._server is not None:
            self._server.close()
            self._server = None

    async def drop_connections(self) -> None:
        """Close every open connection, and return once their sockets are closed.

        asyncio closes a transport's socket on a later turn of the loop; an admin
        call that answers before then would let a client send its next request on
        a connection that is about to close, and see it reset instead of refused.
        A connection whose answer the client does not read is reset after 100 turns.
        """
        for connection in list(self._connections):
            connection.close()
        for _ in range(100):
            if not self._connections:
                return
            await asyncio.sleep(0)
        for connection in list(self._connections):
            connection.abort()

    async def close(self) -> None:
        """Stop listening, close every connection and cancel what their requests still await."""
        self.stop_listening()
        for task in list(self._tasks):
            task.cancel()
        await self.drop_connections()

    def _spawn(self, awaitable: Awaitable[None]) -> "asyncio.Task[None]":
        task = asyncio.ensure_future(awaitable)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: "asyncio.Task[Any]") -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            _log.error("a node's request failed", exc_info=task.exception())
