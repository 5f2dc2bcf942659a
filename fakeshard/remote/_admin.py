"""A running server's control port: the admin calls, and clients for its nodes."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any, Optional

from fakeshard import wire
from fakeshard._clock import Clock
from fakeshard._contract import ShardSpec
from fakeshard._faults import FaultPlan
from fakeshard.remote._engine import RemoteShardEngine, error_of, new_client


class ClusterClient:
    """A running server's control port, and clients for its nodes."""

    def __init__(self, roster: dict[str, Any], *, timeout: float = 30.0, encoding: str = "frame") -> None:
        self.roster = roster
        self.control: str = roster["control"]
        self.timeout, self.encoding = timeout, encoding
        self._client = new_client(timeout)

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self._client.request(method, self.control + path, **kwargs)
        if response.status_code != 200:
            raise error_of(response)
        return response.json()

    def nodes(self) -> dict[str, Any]:
        """Every node's URL, spec, evidence class and partition."""
        return self._call("GET", "/v1/nodes")["nodes"]

    def engine(self, name: str, *, clock: Optional[Clock] = None, timeout: Optional[float] = None
               ) -> RemoteShardEngine:
        """A client for node ``name`` (knowing the control port)."""
        url = self.nodes()[name]["url"] if name not in self.roster.get("nodes", {}) \
            else self.roster["nodes"][name]["url"]
        # Engines share this client's pool, unless they need a timeout of their own.
        shared = self._client if timeout is None or timeout == self.timeout else None
        return RemoteShardEngine(url, timeout=self.timeout if timeout is None else timeout,
                                 encoding=self.encoding, clock=clock, control=self.control, name=name,
                                 client=shared)

    def add(self, spec: ShardSpec, *, name: Optional[str] = None, seed: int = 0,
            capacity_tokens: Optional[int] = None, faults: Optional[FaultPlan] = None,
            latency: Optional[tuple[float, float]] = None) -> dict[str, Any]:
        """Add a node; ``latency`` (least, most): seconds each of a call's two hops takes, drawn
        uniformly (docs/contract.md, "Control port")."""
        body: dict[str, Any] = {"spec": asdict(spec), "seed": seed, "capacity_tokens": capacity_tokens,
                                "faults": None if faults is None else json.loads(wire.dumps(faults))}
        if name is not None:
            body["name"] = name
        if latency is not None:
            body["latency"] = list(latency)
        # JSON text in ASCII, as the wire writes it: a session id with a lone surrogate (the
        # contract allows it) travels as its \u escape, which httpx's own encoder refuses.
        return self._call("POST", "/v1/nodes", content=json.dumps(body).encode("ascii"),
                          headers={"Content-Type": "application/json"})

    def remove(self, name: str) -> None:
        self._call("DELETE", f"/v1/nodes/{name}")

    def crash(self, name: str) -> None:
        self._call("POST", f"/v1/nodes/{name}/crash")

    def restart(self, name: str) -> None:
        self._call("POST", f"/v1/nodes/{name}/restart")

    def set_faults(self, name: str, plan: FaultPlan) -> None:
        self._call("PUT", f"/v1/nodes/{name}/faults", content=wire.dumps(plan),
                   headers={"Content-Type": wire.JSON_CONTENT_TYPE})

    def partition(self, name: str, mode: str) -> None:
        self._call("POST", f"/v1/nodes/{name}/partition", json={"mode": mode})

    def heal(self, name: str) -> None:
        self._call("DELETE", f"/v1/nodes/{name}/partition")

    def log(self, name: str) -> list[dict[str, Any]]:
        return self._call("GET", f"/v1/nodes/{name}/log")["fired"]

    def shutdown(self) -> None:
        self._call("POST", "/v1/shutdown")

    def close(self) -> None:
        self._client.close()
