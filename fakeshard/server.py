"""Engines behind real sockets: HTTP API v1 (``docs/contract.md``), on aiohttp's server.

Every node is one engine on its own listener (its data plane), as separate
machines would be; one control listener serves the admin API, apart from
the nodes, so a partitioned node can always be healed.  The server is an
adapter: the engine keeps every session rule, and the server only moves
bundles and errors, applies the network's own faults, and never answers
anything outside the documented set.

* Each call is atomic: a node runs its engine calls one at a time (an
  asyncio lock per node), so nothing interleaves inside one engine call.
  Small calls run on the event loop; a large prefill and every call of a
  real-model engine run on the node's own worker thread, so nodes compute
  in parallel and the loop keeps answering meanwhile.
* ``Delay`` takes real time, scaled by ``time_scale``, awaited after the
  call without holding up the node's event loop or any other node; every
  answer reports the node's virtual delay in the ``Fakeshard-Delay``
  header.
* ``DropResponse`` applies the call and closes the connection unanswered.
* Partitions: ``refuse`` closes the node's listener and its connections,
  ``hang`` accepts and never answers until healed (the call is not
  applied), ``reset`` applies the call and resets the connection in the
  middle of the answer.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import socket
import struct
import threading
import weakref
from dataclasses import asdict
from typing import Any, Awaitable, Callable, Optional
from urllib.parse import unquote

from aiohttp import web

from fakeshard import wire
from fakeshard.clock import Clock, VirtualClock
from fakeshard.contract import ShardSpec
from fakeshard.errors import MalformedBundle, ResponseLost, ShardError
from fakeshard.factory import EngineFactory
from fakeshard.faults import FaultPlan
from fakeshard.node_metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from fakeshard.node_metrics import NodeMetrics
from fakeshard.topology import NAME_PATTERN, NodeConfig, Topology, TopologyError

__all__ = [
    "API_VERSION",
    "DELAY_HEADER",
    "ERROR_STATUS",
    "HTTP_ERROR_CODES",
    "PARTITION_MODES",
    "ServedCluster",
    "ServedNode",
    "ServerThread",
    "run_server",
]

API_VERSION = "v1"
#: The node's virtual time spent on the call (seconds), on every answer.
DELAY_HEADER = "Fakeshard-Delay"
PARTITION_MODES = ("refuse", "hang", "reset")
#: HTTP status of each contract error code.
ERROR_STATUS = {
    "malformed_bundle": 400,
    "cache_miss": 409,
    "stale_epoch": 409,
    "cancelled": 409,
    "released": 409,
    "position_mismatch": 409,
    "out_of_memory": 507,
    "engine_crashed": 503,
}
#: The server's own error codes (not engine errors), with their status.
HTTP_ERROR_CODES = {
    "bad_request": 400,
    "not_found": 404,
    "method_not_allowed": 405,
    "conflict": 409,
    "payload_too_large": 413,
    "unsupported_media_type": 415,
    "not_supported": 501,
}
#: A request body larger than this runs its engine call on the node's worker thread.
_HEAVY_BYTES = 64 * 1024
#: Largest request body a node or the control port reads (a prefill of 8,192 positions at 8,192 wide).
MAX_BODY_BYTES = 256 * 1024 * 1024 + 1024 * 1024


class _HTTPError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


#: The answer of a call or admin action that returns nothing.
_OK = {"kind": "ok", "contract": wire.CONTRACT_VERSION}


def _error_status(code: str) -> int:
    """The HTTP status of an engine error's code (the contract's table: ``ERROR_STATUS``)."""
    return ERROR_STATUS.get(code, 500)


def _error_body(code: str, message: str, session_id: Any = None, epoch: Any = None) -> dict[str, Any]:
    return {"kind": "error", "contract": wire.CONTRACT_VERSION, "code": code, "message": message,
            "session_id": session_id, "epoch": epoch}


def _json(data: Any, status: int = 200, headers: Optional[dict[str, str]] = None) -> web.Response:
    return web.Response(status=status, text=json.dumps(data), content_type=wire.JSON_CONTENT_TYPE,
                        headers=headers)


def _http_error(code: str, message: str) -> web.Response:
    return _json(_error_body(code, message), HTTP_ERROR_CODES[code])


@web.middleware
async def _typed_errors(request: web.Request, handler: Callable[[web.Request], Awaitable[Any]]) -> Any:
    """Every failure as a documented status with the wire's error JSON; never a 500 page."""
    try:
        return await handler(request)
    except _HTTPError as exc:
        return _http_error(exc.code, exc.message)
    except web.HTTPRequestEntityTooLarge as exc:
        return _http_error("payload_too_large", f"request body over the limit: {exc.text}")
    except web.HTTPNotFound:
        return _http_error("not_found", f"no route {request.method} {request.path}")
    except web.HTTPMethodNotAllowed as exc:
        return _http_error("method_not_allowed",
                           f"{request.method} is not allowed on {request.path}; allowed: "
                           f"{', '.join(sorted(exc.allowed_methods))}")
    except web.HTTPException as exc:  # anything else aiohttp itself refuses (a malformed request)
        return _http_error("bad_request", f"{exc.status} {exc.reason}")


def _read_json(body: bytes, what: str) -> Any:
    try:
        return wire.read_json(body.decode("utf-8"))
    except wire.RepeatedKey as exc:
        raise _HTTPError("bad_request", f"{what}: {exc}") from None
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise _HTTPError("bad_request", f"{what} is not JSON: {exc}") from None


def _media_type(request: web.Request) -> str:
    kind = request.content_type
    if kind not in (wire.JSON_CONTENT_TYPE, wire.FRAME_CONTENT_TYPE):
        raise _HTTPError("unsupported_media_type",
                         f"Content-Type must be {wire.JSON_CONTENT_TYPE} or {wire.FRAME_CONTENT_TYPE}, "
                         f"got {kind!r}")
    return kind


HIDDEN_FORMS = ("base64", "floats")


def _hidden_form(request: web.Request) -> str:
    """The ``hidden`` query's form of a JSON answer, refused before the call reaches the engine.

    A value the node does not know would otherwise be answered in base64 after the call was
    applied, so a typo (``?hidden=float``) is ``bad_request`` and nothing is applied.
    """
    forms = request.query.getall("hidden", [])
    if len(forms) > 1 or (forms and forms[0] not in HIDDEN_FORMS):
        raise _HTTPError("bad_request", f"the query's hidden must be one of {list(HIDDEN_FORMS)}, "
                                        f"given once; got {forms!r}")
    return forms[0] if forms else "base64"


SESSIONS_PREFIX = "/v1/sessions/"


def _path_session_id(request: web.Request) -> Optional[str]:
    """The session id a ``GET /v1/sessions/...`` names: the rest of the raw path, percent-decoded
    as UTF-8 where a surrogate's three bytes stand for the lone surrogate (the client's
    ``session_path``); bytes that are no such text name no session (``None``, so not found)."""
    raw = request.raw_path.partition("?")[0]
    try:
        path = unquote(raw, errors="surrogatepass")
    except UnicodeDecodeError:
        return None
    return path[len(SESSIONS_PREFIX):] if path.startswith(SESSIONS_PREFIX) else None


class UnreadableBody:
    """What a node's engine is given for a body that is no bundle at all (it refuses it)."""

    def __repr__(self) -> str:
        return "<unreadable body>"


def _listen_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.listen(128)
    sock.setblocking(False)
    return sock


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class ServedNode:
    """One engine on its own listener."""

    def __init__(self, name: str, engine: Any, *, clock: Clock, time_scale: float, host: str,
                 port: int) -> None:
        self.name, self.engine, self.clock = name, engine, clock
        self.time_scale = time_scale
        self.host, self.port = host, port
        self.partition: Optional[str] = None
        self._healed = asyncio.Event()
        self._healed.set()
        self._calls = asyncio.Lock()  # one engine call at a time
        self._always_worker = getattr(engine, "evidence_class", "") == "real-model"
        self._transports: "weakref.WeakSet[asyncio.BaseTransport]" = weakref.WeakSet()
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"fakeshard-{name}")
        self._site: Optional[web.SockSite] = None
        app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[self._gate, _typed_errors])
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
        return _url(self.host, self.port)

    async def start(self) -> None:
        await self._runner.setup()
        await self._listen()

    async def _listen(self) -> None:
        sock = _listen_socket(self.host, self.port)
        self.port = sock.getsockname()[1]
        self._site = web.SockSite(self._runner, sock)
        await self._site.start()

    async def close(self) -> None:
        self._healed.set()
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
            raise _HTTPError("bad_request", f"partition mode must be one of {list(PARTITION_MODES)}, "
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
            await self._healed.wait()
            # The request was lost in the partition: it is never applied nor answered.
            self._abort(request, reset=False)
            return _dropped()
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

    async def _run(self, fn: Callable[..., Any], *args: Any, heavy: bool = False
                   ) -> tuple[Any, Optional[ShardError], float]:
        """``fn(*args)`` alone on the engine: (result, error, virtual seconds it took).

        The call's ``Delay`` is slept after the node's lock is released, so
        it holds up no other call.
        """
        def call() -> tuple[Any, Optional[ShardError], float]:
            before = self.clock.now()
            try:
                return fn(*args), None, self.clock.now() - before
            except ShardError as err:
                return None, err, self.clock.now() - before
        async with self._calls:
            if heavy or self._always_worker:
                result, error, took = await asyncio.get_running_loop().run_in_executor(self._executor, call)
            else:
                result, error, took = call()
        if took > 0 and self.time_scale > 0:
            await asyncio.sleep(took * self.time_scale)
        return result, error, took

    async def _answer(self, request: web.Request, error: Optional[ShardError], took: float,
                      body: bytes, content_type: str) -> web.StreamResponse:
        headers = {DELAY_HEADER: repr(float(took))}
        if isinstance(error, ResponseLost):
            self._abort(request, reset=False)  # applied; the answer never leaves
            return _dropped()
        if error is not None:
            body, content_type = wire.dumps(error).encode("utf-8"), wire.JSON_CONTENT_TYPE
            status = _error_status(error.code)
        else:
            status = 200
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
        media = _media_type(request)
        hidden = _hidden_form(request)
        body = await request.read()
        frame = media == wire.FRAME_CONTENT_TYPE
        reason = None
        try:
            bundle: Any = wire.loads_unchecked(body, frame=frame, max_bytes=MAX_BODY_BYTES)
        except MalformedBundle as exc:
            bundle, reason = UnreadableBody(), exc.message
        if isinstance(bundle, ShardError):  # an error object is no bundle either
            bundle, reason = UnreadableBody(), "wire: an error object is not a bundle"
        out, error, took = await self._run(getattr(self.engine, op), bundle, heavy=len(body) > _HEAVY_BYTES)
        self.metrics.record(op, "ok" if error is None else error.code, took)
        if reason is not None and isinstance(error, MalformedBundle):
            error = MalformedBundle(f"{error.message} ({reason})")
        if error is not None:
            return await self._answer(request, error, took, b"", media)
        if frame:
            data = wire.dumpb(out)
        else:
            data = wire.dumps(out, hidden=hidden).encode("utf-8")
        return await self._answer(request, None, took, data, media)

    async def _prefill(self, request: web.Request) -> web.StreamResponse:
        return await self._compute(request, "prefill")

    async def _decode(self, request: web.Request) -> web.StreamResponse:
        return await self._compute(request, "decode")

    async def _close(self, request: web.Request, op: str) -> web.StreamResponse:
        if request.content_type != wire.JSON_CONTENT_TYPE:
            raise _HTTPError("unsupported_media_type",
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
        _, error, took = await self._run(getattr(self.engine, op), session_id, epoch)
        self.metrics.record(op, "ok" if error is None else error.code, took)
        if error is None:
            return await self._answer(request, None, took, json.dumps(_OK).encode("utf-8"), wire.JSON_CONTENT_TYPE)
        if session_id is None and epoch is None and isinstance(error, MalformedBundle):
            error = MalformedBundle(f"{op}: the body must be a JSON object "
                                    '{"session_id": <string>, "epoch": <integer>}')
        return await self._answer(request, error, took, b"", wire.JSON_CONTENT_TYPE)

    async def _cancel(self, request: web.Request) -> web.StreamResponse:
        return await self._close(request, "cancel")

    async def _release(self, request: web.Request) -> web.StreamResponse:
        return await self._close(request, "release")

    async def _session(self, request: web.Request) -> web.StreamResponse:
        session_id = _path_session_id(request)
        if session_id is None:
            return _http_error("not_found", f"{request.raw_path!r} names no session: its id is not "
                                            "percent-encoded UTF-8")
        view, _, _ = await self._run(self.engine.session, session_id)
        if view is None:
            return _http_error("not_found", f"node {self.name!r} holds nothing for session {session_id!r}")
        return _json({"kind": "session_view", "contract": wire.CONTRACT_VERSION, "session_id": view.session_id,
                      "epoch": view.epoch, "status": view.status, "cached_tokens": view.cached_tokens})

    def _snapshot(self) -> dict[str, Any]:
        engine = self.engine
        return {"kind": "node_state", "contract": wire.CONTRACT_VERSION, "name": self.name,
                "spec": asdict(engine.spec), "evidence_class": engine.evidence_class,
                "crashed": bool(getattr(engine, "crashed", False)), "used_tokens": engine.used_tokens,
                "capacity_tokens": engine.capacity_tokens}

    async def _state(self, request: web.Request) -> web.StreamResponse:
        state, _, _ = await self._run(self._snapshot)
        return _json(state)

    async def _metrics(self, request: web.Request) -> web.StreamResponse:
        """``GET /metrics``: the node in Prometheus's text format (:mod:`fakeshard.node_metrics`)."""
        text, _, _ = await self._run(self.metrics.exposition)
        return web.Response(body=text, headers={"Content-Type": METRICS_CONTENT_TYPE})

    # -- admin ---------------------------------------------------------------

    async def admin(self, what: str, *args: Any) -> Any:
        """Run an admin action alone on the engine (atomic with respect to its calls)."""
        def action() -> Any:
            engine = self.engine
            if what == "crash":
                if not callable(getattr(engine, "crash", None)):
                    raise _HTTPError("not_supported", f"node {self.name!r}'s engine has no crash()")
                engine.crash()
            elif what == "restart":
                engine.restart()
            elif what == "faults":
                if not callable(getattr(engine, "replace_faults", None)):
                    raise _HTTPError("not_supported", f"node {self.name!r}'s engine cannot replace its faults")
                engine.replace_faults(args[0])
            elif what == "log":
                return [{"call": f.call, "rule": f.rule, "op": f.op, "session_id": f.session_id,
                         "fault": wire.fault_to_dict(f.fault)}
                        for f in getattr(engine, "fault_log", ())]
            return None
        async with self._calls:
            return action()


def _dropped() -> web.Response:
    """What a handler returns after closing its connection on purpose (never reaches anyone)."""
    return web.Response(status=204)


class ServedCluster:
    """Nodes and the control listener, on the running event loop."""

    def __init__(self, factory: EngineFactory, *, host: str = "127.0.0.1", time_scale: float = 1.0,
                 factory_name: str = "") -> None:
        if isinstance(time_scale, bool) or not isinstance(time_scale, (int, float)) or not time_scale >= 0:
            raise ValueError(f"time_scale must be a number >= 0, got {time_scale!r}")
        self.factory, self.factory_name = factory, factory_name
        self.host, self.time_scale = host, float(time_scale)
        self.nodes: dict[str, ServedNode] = {}
        self.stopped = asyncio.Event()
        self._control: Optional[web.AppRunner] = None
        self.control_port = 0
        self._next = 0

    @property
    def control_url(self) -> str:
        return _url(self.host, self.control_port)

    async def add(self, name: Optional[str], spec: ShardSpec, *, seed: int = 0,
                  capacity_tokens: Optional[int] = None, faults: Optional[FaultPlan] = None,
                  port: int = 0, clock: Optional[Clock] = None,
                  time_scale: Optional[float] = None) -> ServedNode:
        """Build an engine with the cluster's factory and serve it on its own port."""
        if name is None:
            self._next += 1
            while f"node-{self._next}" in self.nodes:
                self._next += 1
            name = f"node-{self._next}"
        if name in self.nodes:
            raise _HTTPError("conflict", f"a node named {name!r} exists")
        clock = clock if clock is not None else VirtualClock()
        engine = self.factory(spec, seed=seed, capacity_tokens=capacity_tokens, clock=clock, faults=faults)
        node = ServedNode(name, engine, clock=clock, host=self.host, port=port,
                          time_scale=self.time_scale if time_scale is None else time_scale)
        await node.start()
        self.nodes[name] = node
        return node

    async def remove(self, name: str) -> None:
        node = self.nodes.pop(name, None)
        if node is not None:
            await node.close()

    def node(self, name: str) -> ServedNode:
        node = self.nodes.get(name)
        if node is None:
            raise _HTTPError("not_found", f"no node named {name!r}")
        return node

    def roster(self) -> dict[str, Any]:
        return {"kind": "roster", "contract": wire.CONTRACT_VERSION, "control": self.control_url,
                "engine": self.factory_name,
                "nodes": {name: node.describe() for name, node in self.nodes.items()}}

    async def start_control(self, port: int = 0) -> None:
        app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[_typed_errors])
        r = app.router
        r.add_get("/v1/nodes", self._list)
        r.add_post("/v1/nodes", self._add)
        r.add_delete("/v1/nodes/{name}", self._remove)
        r.add_post("/v1/nodes/{name}/crash", self._crash)
        r.add_post("/v1/nodes/{name}/restart", self._restart)
        r.add_put("/v1/nodes/{name}/faults", self._faults)
        r.add_post("/v1/nodes/{name}/partition", self._partition)
        r.add_delete("/v1/nodes/{name}/partition", self._heal)
        r.add_get("/v1/nodes/{name}/log", self._log)
        r.add_post("/v1/shutdown", self._shutdown)
        self._control = web.AppRunner(app, handle_signals=False, access_log=None, keepalive_timeout=3600)
        await self._control.setup()
        sock = _listen_socket(self.host, port)
        self.control_port = sock.getsockname()[1]
        await web.SockSite(self._control, sock).start()

    async def close(self) -> None:
        for name in list(self.nodes):
            await self.remove(name)
        if self._control is not None:
            await self._control.cleanup()
            self._control = None

    @classmethod
    async def from_topology(cls, topology: Topology, factory: EngineFactory, *, host: str = "127.0.0.1",
                            time_scale: float = 1.0) -> "ServedCluster":
        cluster = cls(factory, host=host, time_scale=time_scale, factory_name=topology.engine)
        try:
            await cluster.start_control(topology.control_port)
            for node in topology.nodes:
                await cluster.add(node.name, topology.spec_of(node), seed=topology.seed,
                                  capacity_tokens=node.capacity_tokens, faults=node.faults, port=node.port)
        except BaseException:
            await cluster.close()
            raise
        return cluster

    # -- control handlers ----------------------------------------------------

    @staticmethod
    def _ok() -> web.Response:
        return _json(_OK)

    async def _list(self, request: web.Request) -> web.Response:
        return _json(self.roster())

    async def _add(self, request: web.Request) -> web.Response:
        data = _read_json(await request.read(), "node")
        if not isinstance(data, dict):
            raise _HTTPError("bad_request", "the body must be a JSON object")
        extra = sorted(set(data) - {"name", "spec", "seed", "capacity_tokens", "faults", "port"})
        if extra:
            raise _HTTPError("bad_request", f"unknown field(s) {extra}")
        name = data.get("name")
        if name is not None and (not isinstance(name, str) or not NAME_PATTERN.match(name)):
            raise _HTTPError("bad_request", f"name must match {NAME_PATTERN.pattern}, got {name!r}")
        spec_data = data.get("spec")
        try:
            if not isinstance(spec_data, dict):
                raise TypeError("spec must be an object")
            spec = ShardSpec(**spec_data)
        except (TypeError, ValueError) as exc:
            raise _HTTPError("bad_request", f"spec: {exc}") from None
        node_data = {"name": "x", "start_layer": spec.start_layer, "end_layer": spec.end_layer,
                     **{k: data[k] for k in ("capacity_tokens", "faults", "port") if k in data}}
        seed = data.get("seed", 0)
        if type(seed) is not int:
            raise _HTTPError("bad_request", f"seed must be an integer, got {seed!r}")
        try:
            config: NodeConfig = Topology.from_dict({
                "model": {"model_id": spec.model_id, "n_layers": spec.n_layers,
                          "hidden_size": spec.hidden_size, "vocab_size": spec.vocab_size},
                "nodes": [node_data]}).nodes[0]
        except TopologyError as exc:
            raise _HTTPError("bad_request", str(exc)) from None
        try:
            node = await self.add(name, spec, seed=seed, capacity_tokens=config.capacity_tokens,
                                  faults=config.faults, port=config.port)
        except OSError as exc:
            raise _HTTPError("conflict", f"cannot listen on port {config.port}: {exc.strerror}") from None
        except (TypeError, ValueError) as exc:
            raise _HTTPError("bad_request", f"the engine factory refused: {exc}") from None
        return _json(node.describe())

    async def _remove(self, request: web.Request) -> web.Response:
        self.node(request.match_info["name"])
        await self.remove(request.match_info["name"])
        return self._ok()

    async def _crash(self, request: web.Request) -> web.Response:
        await self.node(request.match_info["name"]).admin("crash")
        return self._ok()

    async def _restart(self, request: web.Request) -> web.Response:
        await self.node(request.match_info["name"]).admin("restart")
        return self._ok()

    async def _faults(self, request: web.Request) -> web.Response:
        node = self.node(request.match_info["name"])
        body = await request.read()
        try:
            plan = wire.loads(body)
        except MalformedBundle as exc:  # an admin body the server cannot read, as for POST /v1/nodes
            raise _HTTPError("bad_request", f"faults: {exc.message}") from None
        if not isinstance(plan, FaultPlan):
            raise _HTTPError("bad_request", f"the body must be a fault_plan, got {type(plan).__name__}")
        await node.admin("faults", plan)
        return self._ok()

    async def _partition(self, request: web.Request) -> web.Response:
        node = self.node(request.match_info["name"])
        data = _read_json(await request.read(), "partition")
        if not isinstance(data, dict) or set(data) != {"mode"}:
            raise _HTTPError("bad_request", 'the body must be {"mode": "refuse" | "hang" | "reset"}')
        await node.partition_as(data["mode"])
        return self._ok()

    async def _heal(self, request: web.Request) -> web.Response:
        await self.node(request.match_info["name"]).heal()
        return self._ok()

    async def _log(self, request: web.Request) -> web.Response:
        entries = await self.node(request.match_info["name"]).admin("log")
        return _json({"kind": "fault_log", "contract": wire.CONTRACT_VERSION, "fired": entries})

    async def _shutdown(self, request: web.Request) -> web.Response:
        self.stopped.set()
        return self._ok()


class ServerThread:
    """A :class:`ServedCluster` on its own event loop in a daemon thread, driven with plain calls."""

    def __init__(self, factory: EngineFactory, *, host: str = "127.0.0.1", time_scale: float = 1.0,
                 factory_name: str = "", topology: Optional[Topology] = None) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="fakeshard-server", daemon=True)
        self._thread.start()

        async def build() -> ServedCluster:
            if topology is not None:
                return await ServedCluster.from_topology(topology, factory, host=host, time_scale=time_scale)
            cluster = ServedCluster(factory, host=host, time_scale=time_scale, factory_name=factory_name)
            await cluster.start_control(0)
            return cluster
        try:
            self.cluster = self.call(build())
        except BaseException:
            self._stop_loop()
            raise

    def call(self, coro: Awaitable[Any]) -> Any:
        # run_coroutine_threadsafe runs any awaitable coroutine; its annotation asks for a Coroutine.
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()  # type: ignore[arg-type]

    def add(self, spec: ShardSpec, **kwargs: Any) -> ServedNode:
        return self.call(self.cluster.add(None, spec, **kwargs))

    def remove_soon(self, name: str) -> None:
        """Remove a node without waiting (safe from any thread, and from a finalizer)."""
        if self.loop.is_running():
            try:
                asyncio.run_coroutine_threadsafe(self.cluster.remove(name), self.loop)
            except RuntimeError:  # the loop closed meanwhile
                pass

    def close(self) -> None:
        if self.loop.is_running():
            self.call(self.cluster.close())
        self._stop_loop()

    def _stop_loop(self) -> None:
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=10)
        if not self.loop.is_running() and not self.loop.is_closed():
            self.loop.close()


def run_server(topology: Topology, *, host: str = "127.0.0.1", roster: Optional[Any] = None,
               time_scale: float = 1.0, out: Any = None) -> int:
    """``fakeshard serve``: run until SIGINT, SIGTERM or ``POST /v1/shutdown``; the roster when ready."""
    import signal
    import sys

    from fakeshard.factory import load_factory

    factory = load_factory(topology.engine)
    out = out if out is not None else sys.stdout

    async def main() -> None:
        cluster = await ServedCluster.from_topology(topology, factory, host=host, time_scale=time_scale)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, cluster.stopped.set)
        try:
            text = json.dumps(cluster.roster())
            if roster is not None:
                from pathlib import Path

                tmp = Path(str(roster) + ".tmp")
                tmp.write_text(text + "\n", encoding="utf-8")
                tmp.replace(roster)  # a reader never sees half a roster
            out.write(text + "\n")
            out.flush()
            await cluster.stopped.wait()
        finally:
            await cluster.close()

    asyncio.run(main())
    return 0
