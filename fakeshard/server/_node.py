"""A served node: one engine on its own listener (HTTP/1.1 of ``_h1``), the data plane of HTTP API v1:
its routes, the reading of a call and its answer, and the network's faults."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import json
import random
from dataclasses import asdict
from typing import Any, Awaitable, Callable, Optional
from urllib.parse import parse_qsl, unquote

from fakeshard import wire
from fakeshard._clock import Clock
from fakeshard._contract import CONTRACT_VERSION
from fakeshard._errors import MalformedBundle, ResponseLost, ShardError
from fakeshard.server._calls import LOGGED_OPS, CallLog, describe
from fakeshard.server._h1 import DROP, H1Server, Request, Response
from fakeshard.server._http import (
    DELAY_HEADER,
    HEAVY_BYTES,
    HTTP_ERROR_CODES,
    MAX_BODY_BYTES,
    OK,
    PARTITION_MODES,
    HTTPError,
    error_body,
    error_status,
    listen_socket,
    url_of,
)
from fakeshard.server._metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from fakeshard.server._metrics import NodeMetrics
from fakeshard.wire import _format as wire_format

SESSIONS_PREFIX = "/v1/sessions/"
_OK_BODY = json.dumps(OK).encode("utf-8")
HIDDEN_FORMS = tuple(sorted(wire_format.HIDDEN_FORMS))


def json_answer(data: Any, status: int = 200, headers: Optional[dict[str, str]] = None) -> Response:
    return Response(status, json.dumps(data).encode("utf-8"), wire.JSON_CONTENT_TYPE, headers)


def error_answer(code: str, message: str, headers: Optional[dict[str, str]] = None) -> Response:
    """One of the server's own errors (``HTTP_ERROR_CODES``), as the wire's error JSON."""
    return json_answer(error_body(code, message), HTTP_ERROR_CODES[code], headers)


def media_type(request: Request) -> str:
    kind = request.content_type
    if kind not in (wire.JSON_CONTENT_TYPE, wire.FRAME_CONTENT_TYPE):
        raise HTTPError("unsupported_media_type",
                         f"Content-Type must be {wire.JSON_CONTENT_TYPE} or {wire.FRAME_CONTENT_TYPE}, "
                         f"got {kind!r}")
    return kind


def hidden_form(request: Request) -> str:
    """The ``hidden`` query's form of a JSON answer, refused before the call reaches the engine.

    A value the node does not know would otherwise be answered in base64 after the call was
    applied, so a typo (``?hidden=float``) is ``bad_request`` and nothing is applied.
    """
    if not request.query_string:
        return "base64"
    forms = [value for name, value in parse_qsl(request.query_string, keep_blank_values=True) if name == "hidden"]
    if len(forms) > 1 or (forms and forms[0] not in HIDDEN_FORMS):
        raise HTTPError("bad_request", f"the query's hidden must be one of {list(HIDDEN_FORMS)}, "
                                        f"given once; got {forms!r}")
    return forms[0] if forms else "base64"


def path_session_id(raw_path: str) -> Optional[str]:
    """The session id a ``GET /v1/sessions/...`` names: the rest of the raw path, percent-decoded
    as UTF-8 where a surrogate's three bytes stand for the lone surrogate (the client's
    ``session_path``); bytes that are no such text name no session (``None``, so not found)."""
    try:
        path = unquote(raw_path.encode("latin-1").decode("utf-8", "surrogatepass"), errors="surrogatepass")
    except UnicodeDecodeError:
        return None
    return path[len(SESSIONS_PREFIX):] if path.startswith(SESSIONS_PREFIX) else None


def _close_ids(body: bytes) -> tuple[Any, Any]:
    """The session id and epoch of a ``cancel`` or ``release`` body, as they were sent; both
    ``None`` unless it is a JSON object of exactly those two keys, each given once.  Whatever
    arrived goes to the engine, which refuses what is not a session id and an epoch."""
    try:
        data = wire.read_json(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):  # a key given twice too
        return None, None
    if isinstance(data, dict) and set(data) == {"session_id", "epoch"}:
        return data["session_id"], data["epoch"]
    return None, None


class UnreadableBody:
    """What a node's engine is given for a body that is no bundle at all (it refuses it)."""

    def __repr__(self) -> str:
        return "<unreadable body>"


def _read_bundle(body: bytes, frame: bool) -> tuple[Any, Optional[str]]:
    """A compute call's bundle as it was sent, and ``None``; or, for a body that is no bundle
    (an error object neither), an :class:`UnreadableBody` and why."""
    try:
        bundle = wire.loads_unchecked(body, frame=frame, max_bytes=MAX_BODY_BYTES)
    except MalformedBundle as exc:
        return UnreadableBody(), exc.message
    if isinstance(bundle, ShardError):
        return UnreadableBody(), "wire: an error object is not a bundle"
    return bundle, None


class ServedNode:
    """One engine on its own listener."""

    def __init__(self, name: str, engine: Any, *, clock: Clock, time_scale: float, host: str,
                 port: int, calls: Optional[CallLog] = None, latency: tuple[float, float] = (0.0, 0.0),
                 seed: int = 0) -> None:
        self.name, self.engine, self.clock = name, engine, clock
        #: Where the node logs every call it is sent (the cluster's log, shared by its nodes).
        self.calls = calls if calls is not None else CallLog()
        #: Goes up whenever the engine loses its memory (a crash, a restart).
        self.wipes = 0
        #: Session id -> ``wipes`` when the session's last call here was applied.
        self._seen: dict[str, int] = {}
        self.time_scale = time_scale
        #: A call's hop each way, seconds, drawn uniformly from this range (real time, not scaled).
        self.latency = latency
        self._hops = random.Random(f"{seed}:{name}")  # a str seeds through SHA-512: the same in every process
        self.host, self.port = host, port
        self.partition: Optional[str] = None
        self._healed = asyncio.Event()
        self._healed.set()
        self._closing = asyncio.Event()
        self._calls = asyncio.Lock()  # one engine call at a time
        self._always_worker = getattr(engine, "evidence_class", "") == "real-model"
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"fakeshard-{name}")
        self._posts: dict[str, Callable[[Request], Awaitable[Response]]] = {
            "/v1/prefill": functools.partial(self._compute, op="prefill"),
            "/v1/decode": functools.partial(self._compute, op="decode"),
            "/v1/cancel": functools.partial(self._close, op="cancel"),
            "/v1/release": functools.partial(self._close, op="release")}
        self._gets: dict[str, Callable[[Request], Awaitable[Response]]] = {
            "/v1/state": self._state, "/metrics": self._metrics}
        self.metrics = NodeMetrics(engine)
        self._http = H1Server(self._handle, max_body=MAX_BODY_BYTES, on_hangup=self._hangup)

    @property
    def url(self) -> str:
        return url_of(self.host, self.port)

    async def start(self) -> None:
        await self._listen()

    async def _listen(self) -> None:
        sock = listen_socket(self.host, self.port)
        self.port = sock.getsockname()[1]
        await self._http.listen(sock)

    async def close(self) -> None:
        self._healed.set()
        self._closing.set()
        await asyncio.sleep(0)  # let the calls a partition swallowed see it and end
        await self._http.close()
        self._executor.shutdown(wait=False)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "url": self.url, "spec": asdict(self.engine.spec),
                "evidence_class": self.engine.evidence_class, "partition": self.partition}

    # -- the network's faults ------------------------------------------------

    async def partition_as(self, mode: str) -> None:
        if mode not in PARTITION_MODES:
            raise HTTPError("bad_request", f"partition mode must be one of {list(PARTITION_MODES)}, "
                                            f"got {mode!r}")
        await self.heal()
        self.partition = mode
        if mode == "refuse":
            self._http.stop_listening()
            await self._http.drop_connections()  # closed before the admin call answers
        elif mode == "hang":
            self._healed.clear()

    async def heal(self) -> None:
        if self.partition == "refuse":
            await self._listen()
        self.partition = None
        self._healed.set()

    async def _handle(self, request: Request) -> Response:
        """Every request: swallowed by a ``hang`` partition, else routed; failures as typed errors."""
        try:
            if not self._healed.is_set():
                await self._swallow(request)
                return DROP
            route = self._route(request)
            return route if isinstance(route, Response) else await route(request)
        except HTTPError as exc:
            return error_answer(exc.code, exc.message)

    def _route(self, request: Request) -> "Callable[[Request], Awaitable[Response]] | Response":
        """The handler of the request's method and path, or the error that answers it."""
        method, path = request.method, request.path
        session = path.startswith(SESSIONS_PREFIX) and path != SESSIONS_PREFIX
        if method == "POST" and path in self._posts:
            handler = self._posts[path]
        elif method in ("GET", "HEAD") and (path in self._gets or session):
            handler = self._gets.get(path, self._session)
        elif path in self._posts or path in self._gets or session:
            allowed = "POST" if path in self._posts else "GET, HEAD"
            return error_answer("method_not_allowed", f"{method} is not allowed on {path}; allowed: {allowed}",
                                {"Allow": allowed})
        else:
            raise HTTPError("not_found", f"no route {method} {path}")
        if request.too_large:
            raise HTTPError("payload_too_large", f"request body over the limit of {MAX_BODY_BYTES} bytes")
        return handler

    def _hangup(self, request: Request) -> None:
        """A call's caller hung up before reading its answer: its log entry says when."""
        if request.tag is not None:
            self.calls.abandon(request.tag)

    async def _swallow(self, request: Request) -> None:
        """A request lost in a ``hang`` partition: never applied nor answered, not even after the
        partition heals (a half-open connection: only the caller's timeout ends the wait); its
        connection is closed when the node stops."""
        op = request.path.rsplit("/", 1)[-1]
        if request.method == "POST" and request.path == f"/v1/{op}" and op in LOGGED_OPS:
            request.tag = self._begin(op, request)
            self.calls.end(request.tag, "hung")  # logged as it arrives
        await self._closing.wait()

    # -- engine calls --------------------------------------------------------

    async def _run(self, fn: Callable[..., Any], *args: Any, heavy: bool = False,
                   entry: Optional[dict[str, Any]] = None) -> tuple[Any, Optional[ShardError], float]:
        """``fn(*args)`` alone on the engine: (result, error, virtual seconds it took).

        The call's ``Delay`` is slept after the node's lock is released, so
        it holds up no other call.  ``entry``, the call's log entry, is filled in as
        the call is applied (before any delay).
        """
        if entry is not None and self.latency[1] > 0:
            await asyncio.sleep(self._hops.uniform(*self.latency))  # the request's hop
        async with self._calls:
            fired = self._fault_count()
            if heavy or self._always_worker:
                result, error, took = await asyncio.get_running_loop().run_in_executor(
                    self._executor, self._timed, fn, args)
            else:
                result, error, took = self._timed(fn, args)
            if entry is not None:
                self._applied(entry, fired)
        if took > 0 and self.time_scale > 0:
            await asyncio.sleep(took * self.time_scale)
        if entry is not None and self.latency[1] > 0:
            await asyncio.sleep(self._hops.uniform(*self.latency))  # the answer's hop
        return result, error, took

    def _timed(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> tuple[Any, Optional[ShardError], float]:
        """``fn(*args)``: (result, error, virtual seconds it took); counts a crash it caused."""
        engine, now = self.engine, self.clock.now
        before = now()
        was_up = not getattr(engine, "crashed", False)
        try:
            return fn(*args), None, now() - before
        except ShardError as err:
            return None, err, now() - before
        finally:
            if was_up and getattr(engine, "crashed", False):
                self.wipes += 1  # taken down by its own fault plan

    def _begin(self, op: str, request: Request) -> dict[str, Any]:
        """A log entry for a call that is not read any further (it hangs in a partition)."""
        body = request.body
        if op in ("prefill", "decode"):
            bundle, _ = _read_bundle(body, request.content_type == wire.FRAME_CONTENT_TYPE)
            return self.calls.begin(self.name, op, *describe(op, bundle))
        return self.calls.begin(self.name, op, *_close_ids(body))

    def _applied(self, entry: dict[str, Any], fired_before: int) -> None:
        """Fill in what the engine did with the logged call: the faults its plan fired, and
        whether it lost its memory since the session's last call here."""
        log = getattr(self.engine, "fault_log", ())
        if len(log) > fired_before:
            entry["fired"] = tuple(type(f.fault).__name__ for f in log[fired_before:])
        sid = entry["session_id"]
        if sid is not None:
            entry["after_wipe"] = self._seen.get(sid, self.wipes) != self.wipes
            self._seen[sid] = self.wipes

    def _fault_count(self) -> int:
        return len(getattr(self.engine, "fault_log", ()))

    def _answer(self, error: Optional[ShardError], took: float, body: bytes, content_type: str,
                entry: Optional[dict[str, Any]] = None, outcome: str = "ok") -> Response:
        headers = {DELAY_HEADER: repr(float(took))}
        if entry is not None:
            entry["held"] = took * self.time_scale
        if isinstance(error, ResponseLost):
            if entry is not None:
                self.calls.end(entry, error.code)
            return DROP  # applied; the answer never leaves
        if error is not None:
            body, content_type = wire.dumps(error).encode("utf-8"), wire.JSON_CONTENT_TYPE
            status = error_status(error.code)
        else:
            status = 200
        if entry is not None:
            self.calls.end(entry, "reset" if self.partition == "reset" else outcome)
        return Response(status, body, content_type, headers, cut=self.partition == "reset")

    async def _compute(self, request: Request, op: str) -> Response:
        media = media_type(request)
        hidden = hidden_form(request)
        body = request.body
        frame = media == wire.FRAME_CONTENT_TYPE
        bundle, reason = _read_bundle(body, frame)
        entry = request.tag = self.calls.begin(self.name, op, *describe(op, bundle))
        out, error, took = await self._run(getattr(self.engine, op), bundle, heavy=len(body) > HEAVY_BYTES,
                                           entry=entry)
        self.metrics.record(op, "ok" if error is None else error.code, took)
        if reason is not None and isinstance(error, MalformedBundle):
            error = MalformedBundle(f"{error.message} ({reason})")
        if error is not None:
            return self._answer(error, took, b"", media, entry, error.code)
        if frame:
            data = wire.dumpb(out)
        else:
            data = wire.dumps(out, hidden=hidden).encode("utf-8")
        outcome = "malformed_output" if "Malformed" in entry["fired"] else "ok"
        return self._answer(None, took, data, media, entry, outcome)

    async def _close(self, request: Request, op: str) -> Response:
        if request.content_type != wire.JSON_CONTENT_TYPE:
            raise HTTPError("unsupported_media_type",
                             f"{op} takes {wire.JSON_CONTENT_TYPE}, got {request.content_type!r}")
        session_id, epoch = _close_ids(request.body)
        entry = request.tag = self.calls.begin(self.name, op, session_id, epoch)
        _, error, took = await self._run(getattr(self.engine, op), session_id, epoch, entry=entry)
        self.metrics.record(op, "ok" if error is None else error.code, took)
        if error is None:
            return self._answer(None, took, _OK_BODY, wire.JSON_CONTENT_TYPE, entry)
        if session_id is None and epoch is None and isinstance(error, MalformedBundle):
            error = MalformedBundle(f"{op}: the body must be a JSON object "
                                    '{"session_id": <string>, "epoch": <integer>}')
        return self._answer(error, took, b"", wire.JSON_CONTENT_TYPE, entry, error.code)

    async def _session(self, request: Request) -> Response:
        session_id = path_session_id(request.path)
        if session_id is None:
            return error_answer("not_found", f"{request.path!r} names no session: its id is not "
                                            "percent-encoded UTF-8")
        view, _, _ = await self._run(self.engine.session, session_id)
        if view is None:
            return error_answer("not_found", f"node {self.name!r} holds nothing for session {session_id!r}")
        return json_answer({"kind": "session_view", "contract": CONTRACT_VERSION, "session_id": view.session_id,
                      "epoch": view.epoch, "status": view.status, "cached_tokens": view.cached_tokens})

    def _snapshot(self) -> dict[str, Any]:
        engine = self.engine
        return {"kind": "node_state", "contract": CONTRACT_VERSION, "name": self.name,
                "spec": asdict(engine.spec), "evidence_class": engine.evidence_class,
                "crashed": bool(getattr(engine, "crashed", False)), "used_tokens": engine.used_tokens,
                "capacity_tokens": engine.capacity_tokens}

    async def _state(self, request: Request) -> Response:
        state, _, _ = await self._run(self._snapshot)
        return json_answer(state)

    async def _metrics(self, request: Request) -> Response:
        """``GET /metrics``: the node in Prometheus's text format (:mod:`fakeshard.server._metrics`)."""
        text, _, _ = await self._run(self.metrics.exposition)
        return Response(200, text, METRICS_CONTENT_TYPE)

    # -- admin ---------------------------------------------------------------

    async def admin(self, what: str, *args: Any) -> Any:
        """Run an admin action alone on the engine (atomic with respect to its calls)."""
        def action() -> Any:
            engine = self.engine
            if what == "crash":
                if not callable(getattr(engine, "crash", None)):
                    raise HTTPError("not_supported", f"node {self.name!r}'s engine has no crash()")
                engine.crash()
                self.wipes += 1
            elif what == "restart":
                engine.restart()
                self.wipes += 1
            elif what == "faults":
                if not callable(getattr(engine, "replace_faults", None)):
                    raise HTTPError("not_supported", f"node {self.name!r}'s engine cannot replace its faults")
                engine.replace_faults(args[0])
            elif what == "log":
                return [{"call": f.call, "rule": f.rule, "op": f.op, "session_id": f.session_id,
                         "fault": wire.fault_to_dict(f.fault)}
                        for f in getattr(engine, "fault_log", ())]
            return None
        async with self._calls:
            return action()
