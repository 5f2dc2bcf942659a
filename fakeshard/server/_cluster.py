"""The served cluster: nodes and the control listener (the admin API), on one event loop."""

from __future__ import annotations

import asyncio
from typing import Any, Optional

from aiohttp import web

from fakeshard import wire
from fakeshard._clock import Clock, VirtualClock
from fakeshard._contract import CONTRACT_VERSION, ShardSpec
from fakeshard._errors import MalformedBundle
from fakeshard._factory import EngineFactory
from fakeshard._faults import FaultPlan
from fakeshard._judge import judging_of
from fakeshard._topology import MAX_LATENCY, NAME_PATTERN, NodeConfig, Topology, TopologyError
from fakeshard.server._calls import CallLog
from fakeshard.server._http import (
    MAX_BODY_BYTES,
    OK,
    HTTPError,
    json_response,
    listen_socket,
    read_body_json,
    typed_errors,
    url_of,
)
from fakeshard.server._node import ServedNode


def _read_spec(data: Any) -> ShardSpec:
    """A request body's ``spec`` (``POST /v1/nodes``, ``POST /v1/logits``): ``bad_request`` naming
    what is wrong with it."""
    try:
        if not isinstance(data, dict):
            raise TypeError("spec must be an object")
        return ShardSpec(**data)
    except (TypeError, ValueError) as exc:
        raise HTTPError("bad_request", f"spec: {exc}") from None


class ServedCluster:
    """Nodes and the control listener, on the running event loop."""

    def __init__(self, factory: EngineFactory, *, host: str = "127.0.0.1", time_scale: float = 1.0,
                 factory_name: str = "", fault_plans: bool = True) -> None:
        if isinstance(time_scale, bool) or not isinstance(time_scale, (int, float)) or not time_scale >= 0:
            raise ValueError(f"time_scale must be a number >= 0, got {time_scale!r}")
        self.factory, self.factory_name = factory, factory_name
        self.host, self.time_scale = host, float(time_scale)
        #: Whether the control port takes fault plans (``fakeshard serve --no-fault-plans``: no,
        #: as a host that implements only the least of the contract answers).
        self.fault_plans = fault_plans
        self.nodes: dict[str, ServedNode] = {}
        #: Every call the nodes were sent (``GET /v1/calls``).
        self.calls = CallLog()
        self.stopped = asyncio.Event()
        self._control: Optional[web.AppRunner] = None
        self.control_port = 0
        self._next = 0

    @property
    def control_url(self) -> str:
        return url_of(self.host, self.control_port)

    async def add(self, name: Optional[str], spec: ShardSpec, *, seed: int = 0,
                  capacity_tokens: Optional[int] = None, faults: Optional[FaultPlan] = None,
                  port: int = 0, clock: Optional[Clock] = None,
                  time_scale: Optional[float] = None, latency: tuple[float, float] = (0.0, 0.0)) -> ServedNode:
        """Build an engine with the cluster's factory and serve it on its own port."""
        if name is None:
            self._next += 1
            while f"node-{self._next}" in self.nodes:
                self._next += 1
            name = f"node-{self._next}"
        if name in self.nodes:
            raise HTTPError("conflict", f"a node named {name!r} exists")
        clock = clock if clock is not None else VirtualClock()
        engine = self.factory(spec, seed=seed, capacity_tokens=capacity_tokens, clock=clock, faults=faults)
        node = ServedNode(name, engine, clock=clock, host=self.host, port=port,
                          time_scale=self.time_scale if time_scale is None else time_scale, calls=self.calls,
                          latency=latency, seed=seed)
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
            raise HTTPError("not_found", f"no node named {name!r}")
        return node

    def roster(self) -> dict[str, Any]:
        return {"kind": "roster", "contract": CONTRACT_VERSION, "control": self.control_url,
                "engine": self.factory_name,
                "nodes": {name: node.describe() for name, node in self.nodes.items()}}

    async def start_control(self, port: int = 0) -> None:
        app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[typed_errors])
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
        r.add_get("/v1/nodes/{name}/calls", self._node_calls)
        r.add_get("/v1/calls", self._calls)
        r.add_get("/v1/judging", self._judging)
        r.add_post("/v1/logits", self._logits)
        r.add_post("/v1/shutdown", self._shutdown)
        self._control = web.AppRunner(app, handle_signals=False, access_log=None, keepalive_timeout=3600)
        await self._control.setup()
        sock = listen_socket(self.host, port)
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
                            time_scale: float = 1.0, fault_plans: bool = True) -> "ServedCluster":
        cluster = cls(factory, host=host, time_scale=time_scale, factory_name=topology.engine,
                      fault_plans=fault_plans)
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
        return json_response(OK)

    async def _list(self, request: web.Request) -> web.Response:
        return json_response(self.roster())

    async def _add(self, request: web.Request) -> web.Response:
        data = read_body_json(await request.read(), "node")
        if not isinstance(data, dict):
            raise HTTPError("bad_request", "the body must be a JSON object")
        extra = sorted(set(data) - {"name", "spec", "seed", "capacity_tokens", "faults", "port", "latency"})
        if extra:
            raise HTTPError("bad_request", f"unknown field(s) {extra}")
        name = data.get("name")
        if name is not None and (not isinstance(name, str) or not NAME_PATTERN.match(name)):
            raise HTTPError("bad_request", f"name must match {NAME_PATTERN.pattern}, got {name!r}")
        spec = _read_spec(data.get("spec"))
        node_data = {"name": "x", "start_layer": spec.start_layer, "end_layer": spec.end_layer,
                     **{k: data[k] for k in ("capacity_tokens", "faults", "port") if k in data}}
        seed = data.get("seed", 0)
        if type(seed) is not int:
            raise HTTPError("bad_request", f"seed must be an integer, got {seed!r}")
        latency = data.get("latency")
        latency = [0, 0] if latency is None else latency  # absent or null: none
        if not (isinstance(latency, list) and len(latency) == 2
                and all(type(x) in (int, float) and 0 <= x <= MAX_LATENCY for x in latency)
                and latency[0] <= latency[1]):
            raise HTTPError("bad_request", f"latency must be [least, most] seconds, 0 <= least <= most <= "
                                            f"{MAX_LATENCY}, got {latency!r}")
        try:
            config: NodeConfig = Topology.from_dict({
                "model": {"model_id": spec.model_id, "n_layers": spec.n_layers,
                          "hidden_size": spec.hidden_size, "vocab_size": spec.vocab_size},
                "nodes": [node_data]}).nodes[0]
        except TopologyError as exc:
            raise HTTPError("bad_request", str(exc)) from None
        if config.faults is not None and config.faults.rules and not self.fault_plans:
            raise HTTPError("not_supported", "this host applies no fault plans (fakeshard serve --no-fault-plans): "
                                             "add the node without one")
        try:
            node = await self.add(name, spec, seed=seed, capacity_tokens=config.capacity_tokens,
                                  faults=config.faults, port=config.port, latency=(latency[0], latency[1]))
        except OSError as exc:
            raise HTTPError("conflict", f"cannot listen on port {config.port}: {exc.strerror}") from None
        except (TypeError, ValueError) as exc:
            raise HTTPError("bad_request", f"the engine factory refused: {exc}") from None
        return json_response(node.describe())

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
        if not self.fault_plans:
            raise HTTPError("not_supported", "this host applies no fault plans (fakeshard serve --no-fault-plans)")
        body = await request.read()
        try:
            plan = wire.loads(body)
        except MalformedBundle as exc:  # an admin body the server cannot read, as for POST /v1/nodes
            raise HTTPError("bad_request", f"faults: {exc.message}") from None
        if not isinstance(plan, FaultPlan):
            raise HTTPError("bad_request", f"the body must be a fault_plan, got {type(plan).__name__}")
        await node.admin("faults", plan)
        return self._ok()

    async def _partition(self, request: web.Request) -> web.Response:
        node = self.node(request.match_info["name"])
        data = read_body_json(await request.read(), "partition")
        if not isinstance(data, dict) or set(data) != {"mode"}:
            raise HTTPError("bad_request", 'the body must be {"mode": "refuse" | "hang" | "reset"}')
        await node.partition_as(data["mode"])
        return self._ok()

    async def _heal(self, request: web.Request) -> web.Response:
        await self.node(request.match_info["name"]).heal()
        return self._ok()

    async def _log(self, request: web.Request) -> web.Response:
        entries = await self.node(request.match_info["name"]).admin("log")
        return json_response({"kind": "fault_log", "contract": CONTRACT_VERSION, "fired": entries})

    @staticmethod
    def _since(request: web.Request) -> int:
        text = request.query.get("since", "0")
        if not text.isdigit() or not text.isascii():
            raise HTTPError("bad_request", f"since must be a call's number (an integer >= 0), got {text!r}")
        return int(text)

    async def _calls(self, request: web.Request) -> web.Response:
        return json_response({**self.calls.since(self._since(request)), "contract": CONTRACT_VERSION})

    async def _node_calls(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        self.node(name)
        return json_response({**self.calls.since(self._since(request), name), "contract": CONTRACT_VERSION,
                              "node": name})

    async def _judging(self, request: web.Request) -> web.Response:
        return json_response({"kind": "judging", "contract": CONTRACT_VERSION, **judging_of(self.factory)})

    async def _logits(self, request: web.Request) -> web.Response:
        logits = getattr(self.factory, "logits", None)
        if not callable(logits):
            raise HTTPError("not_supported", f"the engine factory {self.factory_name or 'served'} states no logits "
                                             "(its engines are judged exactly)")
        data = read_body_json(await request.read(), "logits")
        if not isinstance(data, dict) or set(data) != {"spec", "seed", "tokens"}:
            raise HTTPError("bad_request", 'the body must be {"spec": {...}, "seed": INT, "tokens": [INT, ...]}')
        spec = _read_spec(data["spec"])
        seed, tokens = data["seed"], data["tokens"]
        if type(seed) is not int:
            raise HTTPError("bad_request", f"seed must be an integer, got {seed!r}")
        if not isinstance(tokens, list) or not tokens or \
                not all(type(t) is int and 0 <= t < spec.vocab_size for t in tokens):
            raise HTTPError("bad_request", f"tokens must be a non-empty array of token ids below the spec's "
                                           f"vocab_size {spec.vocab_size}")
        # The full model's pass runs off the event loop: the nodes keep answering meanwhile.
        values = await asyncio.get_running_loop().run_in_executor(None, logits, spec, seed, tokens)
        return json_response({"kind": "logits", "contract": CONTRACT_VERSION, "logits": [float(v) for v in values]})

    async def _shutdown(self, request: web.Request) -> web.Response:
        self.stopped.set()
        return self._ok()
