"""A served node: one engine on its own listener, the data plane of HTTP API v1."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import socket
import struct
import weakref
from dataclasses import asdict
from typing import Any, Awaitable, Callable, Optional

from aiohttp import web

from fakeshard import wire
from fakeshard._clock import Clock
from fakeshard._contract import CONTRACT_VERSION
from fakeshard._errors import MalformedBundle, ResponseLost, ShardError
from fakeshard.server._calls import LOGGED_OPS, CallLog, describe
from fakeshard.server._http import (
    DELAY_HEADER,
    HEAVY_BYTES,
    MAX_BODY_BYTES,
    OK,
    PARTITION_MODES,
    SESSIONS_PREFIX,
    HTTPError,
    error_status,
    hidden_form,
    http_error,
    json_response,
    listen_socket,
    media_type,
    path_session_id,
    typed_errors,
    url_of,
)
from fakeshard.server._metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from fakeshard.server._metrics import NodeMetrics


class UnreadableBody:
    """What a node's engine is given for a body that is no bundle at all (it refuses it)."""

    def __repr__(self) -> str:
        return "<unreadable body>"


class ServedNode:
    """One engine on its own listener."""

    def __init__(self, name: str, engine: Any, *, clock: Clock, time_scale: float, host: str,
                 port: int, calls: Optional[CallLog] = None) -> None:
        self.name, self.engine, self.clock = name, engine, clock
        #: Where the node logs every call it is sent (the cluster's log, shared by its nodes).
        self.calls = calls if calls is not None else CallLog()
        #: Goes up whenever the engine loses its memory (a crash, a restart).
        self.wipes = 0
        #: Session id -> ``wipes`` when the session's last call here was applied.
        self._seen: dict[str, int] = {}
        self.time_scale = time_scale
        self.host, self.port = host, port
        self.partition: Optional[str] = None
        self._healed = asyncio.Event()
        self._healed.set()
        self._closing = asyncio.Event()
        self._calls = asyncio.Lock()  # one engine call at a time
        self._always_worker = getattr(engine, "evidence_class", "") == "real-model"
        self._transports: "weakref.WeakSet[asyncio.BaseTransport]" = weakref.WeakSet()
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"fakeshard-{name}")
        self._site: Optional[web.SockSite] = None
        app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[self._gate, typed_errors])
        app.router.add_post("/v1/prefill", self._prefill)
        app.router.add_post("/v1/decode", self._decode)
        app.router.add_post("/v1/cancel", self._cancel)
        app.router.add_post("/v1/release", self._release)
        app.router.add_get(SESSIONS_PREFIX + r"{session_id:[\s\S]+}", self._session)  # any char, \n too
        app.router.add_get("/v1/state", self._state)
        app.router.add_get("/metrics", self._metrics)
        self.metrics = NodeMetrics(engine)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None, keepalive_timeout=3600)

    @property
    def url(self) -> str:
        return url_of(self.host, self.port)

    async def start(self) -> None:
        await self._runner.setup()
        await self._listen()

    async def _listen(self) -> None:
        sock = listen_socket(self.host, self.port)
        self.port = sock.getsockname()[1]
        self._site = web.SockSite(self._runner, sock)
        await self._site.start()

    async def close(self) -> None:
        self._healed.set()
        self._closing.set()
        self._drop_connections()
        await self._runner.cleanup()
        self._executor.shutdown(wait=False)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "url": self.url, "spec": asdict(self.engine.spec),
                "evidence_class": self.engine.evidence_class, "partition": self.partition}

    # -- the network's faults ------------------------------------------------

    def _drop_connections(self) -> None:
        for transport in list(self._transports):
            transport.close()

    async def partition_as(self, mode: str) -> None:
        if mode not in PARTITION_MODES:
            raise HTTPError("bad_request", f"partition mode must be one of {list(PARTITION_MODES)}, "
                                            f"got {mode!r}")
        await self.heal()
        self.partition = mode
        if mode == "refuse":
            assert self._site is not None
            await self._site.stop()
            self._site = None
            self._drop_connections()
            for _ in range(3):  # let the loop close the sockets before the admin call answers
                await asyncio.sleep(0)
        elif mode == "hang":
            self._healed.clear()

    async def heal(self) -> None:
        if self.partition == "refuse":
            await self._listen()
        self.partition = None
        self._healed.set()

    @web.middleware
    async def _gate(self, request: web.Request, handler: Callable[[web.Request], Awaitable[Any]]) -> Any:
        if request.transport is not None:
            self._transports.add(request.transport)
        if not self._healed.is_set():
            op = request.path.rsplit("/", 1)[-1]
            if request.path == f"/v1/{op}" and op in LOGGED_OPS:  # logged as it arrives: swallowed
                self.calls.end(self._begin(op, await request.read(), request), "hung")
            # The request was lost in the partition: it is never applied nor answered, not even
            # after the partition heals (a half-open connection: only the caller's timeout ends
            # the wait); its connection is closed when the node stops.
            await self._closing.wait()
            self._abort(request, reset=False)
            return dropped()
        return await handler(request)

    @staticmethod
    def _abort(request: web.Request, *, reset: bool) -> None:
        transport = request.transport
        if transport is None:
            return
        if reset:
            sock = transport.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            transport.abort()
        else:
            transport.close()

    # -- engine calls --------------------------------------------------------

    async def _run(self, fn: Callable[..., Any], *args: Any, heavy: bool = False,
                   entry: Optional[dict[str, Any]] = None) -> tuple[Any, Optional[ShardError], float]:
        """``fn(*args)`` alone on the engine: (result, error, virtual seconds it took).

        The call's ``Delay`` is slept after the node's lock is released, so
        it holds up no other call.  ``entry``, the call's log entry, is filled in as
        the call is applied (before any delay).
        """
        def call() -> tuple[Any, Optional[ShardError], float]:
            before = self.clock.now()
            was_up = not getattr(self.engine, "crashed", False)
            try:
                return fn(*args), None, self.clock.now() - before
            except ShardError as err:
                return None, err, self.clock.now() - before
            finally:
                if was_up and getattr(self.engine, "crashed", False):
                    self.wipes += 1  # taken down by its own fault plan
        async with self._calls:
            fired = self._fault_count()
            if heavy or self._always_worker:
                result, error, took = await asyncio.get_running_loop().run_in_executor(self._executor, call)
            else:
                result, error, took = call()
            if entry is not None:
                self._applied(entry, fired)
        if took > 0 and self.time_scale > 0:
            await asyncio.sleep(took * self.time_scale)
        return result, error, took

    def _begin(self, op: str, body: bytes, request: web.Request) -> dict[str, Any]:
        """A log entry for a call that is not read any further (it hangs in a partition)."""
        if op in ("prefill", "decode"):
            try:
                bundle = wire.loads_unchecked(body, frame=media_type(request) == wire.FRAME_CONTENT_TYPE,
                                              max_bytes=MAX_BODY_BYTES)
            except MalformedBundle:
                bundle = None
            return self.calls.begin(self.name, op, *describe(op, bundle))
        try:
            data = json.loads(body)
        except (UnicodeDecodeError, ValueError, RecursionError):
            data = None
        data = data if isinstance(data, dict) else {}
        return self.calls.begin(self.name, op, data.get("session_id"), data.get("epoch"))

    def _applied(self, entry: dict[str, Any], fired_before: int) -> None:
        """Fill in what the engine did with the logged call: the faults its plan fired, and
        whether it lost its memory since the session's last call here."""
        log = getattr(self.engine, "fault_log", ())
        if len(log) > fired_before:
            entry["fired"] = [type(f.fault).__name__ for f in log[fired_before:]]
        sid = entry["session_id"]
        if sid is not None:
            entry["after_wipe"] = self._seen.get(sid, self.wipes) != self.wipes
            self._seen[sid] = self.wipes

    def _fault_count(self) -> int:
        return len(getattr(self.engine, "fault_log", ()))

    async def _answer(self, request: web.Request, error: Optional[ShardError], took: float,
                      body: bytes, content_type: str, entry: Optional[dict[str, Any]] = None,
                      outcome: str = "ok") -> web.StreamResponse:
        headers = {DELAY_HEADER: repr(float(took))}
        if entry is not None:
            entry["held"] = took * self.time_scale
        if isinstance(error, ResponseLost):
            if entry is not None:
                self.calls.end(entry, error.code)
            self._abort(request, reset=False)  # applied; the answer never leaves
            return dropped()
        if error is not None:
            body, content_type = wire.dumps(error).encode("utf-8"), wire.JSON_CONTENT_TYPE
            status = error_status(error.code)
        else:
            status = 200
        if entry is not None:
            self.calls.end(entry, "reset" if self.partition == "reset" else outcome)
        if self.partition == "reset":
            response = web.StreamResponse(status=status, headers=headers)
            response.content_type = content_type
            response.content_length = len(body)
            await response.prepare(request)
            await response.write(body[: len(body) // 2])
            self._abort(request, reset=True)
            return response
        return web.Response(status=status, body=body, content_type=content_type, headers=headers)

    async def _compute(self, request: web.Request, op: str) -> web.StreamResponse:
        media = media_type(request)
        hidden = hidden_form(request)
        body = await request.read()
        frame = media == wire.FRAME_CONTENT_TYPE
        reason = None
        try:
            bundle: Any = wire.loads_unchecked(body, frame=frame, max_bytes=MAX_BODY_BYTES)
        except MalformedBundle as exc:
            bundle, reason = UnreadableBody(), exc.message
        if isinstance(bundle, ShardError):  # an error object is no bundle either
            bundle, reason = UnreadableBody(), "wire: an error object is not a bundle"
        entry = self.calls.begin(self.name, op, *describe(op, bundle))
        out, error, took = await self._run(getattr(self.engine, op), bundle, heavy=len(body) > HEAVY_BYTES,
                                           entry=entry)
        self.metrics.record(op, "ok" if error is None else error.code, took)
        if reason is not None and isinstance(error, MalformedBundle):
            error = MalformedBundle(f"{error.message} ({reason})")
        if error is not None:
            return await self._answer(request, error, took, b"", media, entry, error.code)
        if frame:
            data = wire.dumpb(out)
        else:
            data = wire.dumps(out, hidden=hidden).encode("utf-8")
        outcome = "malformed_output" if "Malformed" in entry["fired"] else "ok"
        return await self._answer(request, None, took, data, media, entry, outcome)

    async def _prefill(self, request: web.Request) -> web.StreamResponse:
        return await self._compute(request, "prefill")

    async def _decode(self, request: web.Request) -> web.StreamResponse:
        return await self._compute(request, "decode")

    async def _close(self, request: web.Request, op: str) -> web.StreamResponse:
        if request.content_type != wire.JSON_CONTENT_TYPE:
            raise HTTPError("unsupported_media_type",
                             f"{op} takes {wire.JSON_CONTENT_TYPE}, got {request.content_type!r}")
        body = await request.read()
        try:
            data = wire.read_json(body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):  # a key given twice too
            data = None
        # Whatever arrived goes to the engine, which refuses what is not a session id and an epoch.
        if isinstance(data, dict) and set(data) == {"session_id", "epoch"}:
            session_id, epoch = data["session_id"], data["epoch"]
        else:
            session_id, epoch = None, None
        entry = self.calls.begin(self.name, op, session_id, epoch)
        _, error, took = await self._run(getattr(self.engine, op), session_id, epoch, entry=entry)
        self.metrics.record(op, "ok" if error is None else error.code, took)
        if error is None:
            return await self._answer(request, None, took, json.dumps(OK).encode("utf-8"), wire.JSON_CONTENT_TYPE,
                                      entry)
        if session_id is None and epoch is None and isinstance(error, MalformedBundle):
            error = MalformedBundle(f"{op}: the body must be a JSON object "
                                    '{"session_id": <string>, "epoch": <integer>}')
        return await self._answer(request, error, took, b"", wire.JSON_CONTENT_TYPE, entry, error.code)

    async def _cancel(self, request: web.Request) -> web.StreamResponse:
        return await self._close(request, "cancel")

    async def _release(self, request: web.Request) -> web.StreamResponse:
        return await self._close(request, "release")

    async def _session(self, request: web.Request) -> web.StreamResponse:
        session_id = path_session_id(request)
        if session_id is None:
            return http_error("not_found", f"{request.raw_path!r} names no session: its id is not "
                                            "percent-encoded UTF-8")
        view, _, _ = await self._run(self.engine.session, session_id)
        if view is None:
            return http_error("not_found", f"node {self.name!r} holds nothing for session {session_id!r}")
        return json_response({"kind": "session_view", "contract": CONTRACT_VERSION, "session_id": view.session_id,
                      "epoch": view.epoch, "status": view.status, "cached_tokens": view.cached_tokens})

    def _snapshot(self) -> dict[str, Any]:
        engine = self.engine
        return {"kind": "node_state", "contract": CONTRACT_VERSION, "name": self.name,
                "spec": asdict(engine.spec), "evidence_class": engine.evidence_class,
                "crashed": bool(getattr(engine, "crashed", False)), "used_tokens": engine.used_tokens,
                "capacity_tokens": engine.capacity_tokens}

    async def _state(self, request: web.Request) -> web.StreamResponse:
        state, _, _ = await self._run(self._snapshot)
        return json_response(state)

    async def _metrics(self, request: web.Request) -> web.StreamResponse:
        """``GET /metrics``: the node in Prometheus's text format (:mod:`fakeshard.server._metrics`)."""
        text, _, _ = await self._run(self.metrics.exposition)
        return web.Response(body=text, headers={"Content-Type": METRICS_CONTENT_TYPE})

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


def dropped() -> web.Response:
    """What a handler returns after closing its connection on purpose (never reaches anyone)."""
    return web.Response(status=204)
