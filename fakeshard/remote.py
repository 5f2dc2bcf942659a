"""The client side of served nodes: a :class:`ShardEngine` over HTTP, the admin calls, and factories.

:class:`RemoteShardEngine` is one engine among others: the suites drive it
exactly as an in-process engine.  Answers and errors come back as the same
bundles and typed errors; what only a network can do maps to the contract:

=========================================  =======================================
transport failure                          error raised
=========================================  =======================================
connection refused, or no connection       ``EngineCrashed`` (nothing was sent,
could be made in time                      so nothing was applied)
timeout, reset or close after the          ``ResponseLost`` (the call may or may
request was sent                           not have been applied)
an answer outside the documented set       ``RemoteError``
=========================================  =======================================

``serve(topology)`` runs a topology (in this process, or in a separate
``fakeshard serve`` process) and hands out clients and admin calls;
:func:`served_engine` is an engine factory whose every engine is a node on
a real socket, so ``pytest --engine fakeshard.remote:served_engine`` runs the
contract suite and the machines over the network.
"""

from __future__ import annotations

import atexit
import collections
import json
import os
import subprocess
import sys
import threading
import weakref
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any, Iterator, Optional, Union
from urllib.parse import quote

import httpx

from fakeshard import wire
from fakeshard.clock import Clock
from fakeshard.contract import HiddenBundle, InputBundle, OutputBundle, SampleBundle, ShardSpec, TokenBundle
from fakeshard.engine import SessionView
from fakeshard.errors import EngineCrashed, MalformedBundle, ResponseLost, ShardError
from fakeshard.faults import FaultPlan, Fired

__all__ = [
    "ClusterClient",
    "RemoteError",
    "RemoteShardEngine",
    "SERVER_ENV_VAR",
    "serve",
    "served",
    "served_engine",
]

#: A control URL here makes :func:`served_engine` add its nodes to that running server.
SERVER_ENV_VAR = "FAKESHARD_SERVER"
_DELAY_HEADER = "Fakeshard-Delay"
_BUNDLES = (TokenBundle, HiddenBundle, SampleBundle)


def session_path(session_id: str) -> str:
    """``session_id`` as the last segment of ``/v1/sessions/{session_id}``: its UTF-8 bytes (a lone
    surrogate as its three bytes, as the checksum header gives it) percent-encoded, every byte
    but ASCII letters, digits, ``-``, ``_`` and ``~``; ``.`` too, so that no client or proxy takes
    ``.`` or ``..`` for a dot segment of the path and removes it."""
    return quote(session_id.encode("utf-8", "surrogatepass"), safe="").replace(".", "%2E")


class RemoteError(Exception):
    """The server answered outside the documented set, or refused an admin call (code, message)."""

    def __init__(self, message: str, *, status: Optional[int] = None, code: Optional[str] = None) -> None:
        super().__init__(message)
        self.status, self.code = status, code


def _new_client(timeout: float) -> httpx.Client:
    limits = httpx.Limits(max_connections=256, max_keepalive_connections=64)
    return httpx.Client(timeout=httpx.Timeout(timeout), limits=limits, trust_env=False)


def _error_of(response: httpx.Response) -> Union[ShardError, RemoteError]:
    """The typed error an error answer carries."""
    try:
        error = wire.loads(response.content)
    except MalformedBundle:
        try:
            data = response.json()
            code, message = data.get("code"), data.get("message")
        except (ValueError, AttributeError):
            code, message = None, response.text[:200]
        return RemoteError(f"HTTP {response.status_code} {code}: {message}", status=response.status_code,
                           code=code)
    if not isinstance(error, ShardError):
        return RemoteError(f"HTTP {response.status_code} with a {type(error).__name__}",
                           status=response.status_code)
    return error


def _readable(bundle: Any) -> bytes:
    """``bundle`` as readable JSON, whatever its fields hold.

    A value JSON cannot hold (a numpy array or integer, a ``range``, bytes)
    travels as ``{"no_wire_form": "<its type>"}``, an object no field of any
    bundle accepts: the node's engine makes its own earlier checks (is it up?)
    and then refuses the bundle as malformed, naming that field, as an engine
    in process refuses the original.  Nothing is converted into a value the
    node would accept.
    """
    try:
        return wire.dumps(bundle).encode("utf-8")
    except TypeError:
        pass
    try:
        return json.dumps(wire._to_dict(bundle),
                          default=lambda value: {"no_wire_form": type(value).__name__}).encode("utf-8")
    except (TypeError, ValueError):  # not even that (a non-string key, a cycle): no bundle at all
        return _not_a_bundle(bundle)


def _not_a_bundle(value: Any) -> bytes:
    """The body sent for what is no bundle, so the node's engine refuses it as it would in process."""
    return json.dumps({"kind": "not_a_bundle", "type": type(value).__name__}).encode("utf-8")


class RemoteShardEngine:
    """A served node, as a :class:`~fakeshard.ShardEngine`.

    ``encoding`` is ``"frame"`` (binary frames, the default) or ``"json"``.
    A ``clock`` given here sleeps for the virtual delay each answer reports,
    so a ``VirtualClock`` accounts the node's ``Delay`` faults (a dropped
    answer reports none).  ``control`` and ``name`` (known when a
    :class:`ClusterClient` made the engine) let :meth:`restart`, :meth:`crash`
    and :attr:`fault_log` reach the node's control port.
    """

    def __init__(self, url: str, *, timeout: float = 30.0, encoding: str = "frame",
                 clock: Optional[Clock] = None, control: Optional[str] = None,
                 name: Optional[str] = None, client: Optional[httpx.Client] = None) -> None:
        if encoding not in ("frame", "json"):
            raise ValueError(f"encoding must be 'frame' or 'json', got {encoding!r}")
        self.url = url.rstrip("/")
        self.encoding, self.clock, self.control, self.name = encoding, clock, control, name
        if client is None:
            client = _new_client(timeout)
            # An engine that made its pool closes it when it goes (or on close()).
            self._finalizer: Optional[weakref.finalize] = weakref.finalize(self, client.close)
        else:
            self._finalizer = None
        self._client = client
        state = self._state()
        self.spec: ShardSpec = ShardSpec(**state["spec"])
        self.evidence_class: str = state["evidence_class"]

    def close(self) -> None:
        """Close the connection pool this engine made (a shared one is its owner's to close)."""
        if self._finalizer is not None:
            self._finalizer()

    def __enter__(self) -> "RemoteShardEngine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        s = self.spec
        return f"RemoteShardEngine({self.url!r}, layers {s.start_layer}..{s.end_layer} of {s.n_layers})"

    # -- transport -----------------------------------------------------------

    def _send(self, method: str, path: str, *, session_id: Any = None, epoch: Any = None,
              **kwargs: Any) -> httpx.Response:
        sid = session_id if isinstance(session_id, str) else None
        ep = epoch if type(epoch) is int else None
        try:
            response = self._client.request(method, self.url + path, **kwargs)
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
            raise EngineCrashed(f"{method} {self.url}{path}: no connection ({exc}); nothing was applied",
                                session_id=sid, epoch=ep) from None
        except httpx.TransportError as exc:
            raise ResponseLost(f"{method} {self.url}{path}: {type(exc).__name__} after the request was "
                               f"sent ({exc}); it may or may not have been applied", session_id=sid,
                               epoch=ep) from None
        if self.clock is not None:
            delay = response.headers.get(_DELAY_HEADER)
            try:
                seconds = float(delay) if delay is not None else 0.0
            except ValueError:
                seconds = 0.0
            if seconds > 0:
                self.clock.sleep(seconds)
        return response

    def _state(self) -> dict[str, Any]:
        response = self._send("GET", "/v1/state")
        if response.status_code != 200:
            raise _error_of(response)
        return response.json()

    # -- the engine surface --------------------------------------------------

    def _compute(self, op: str, bundle: Any) -> Any:
        session_id, epoch = getattr(bundle, "session_id", None), getattr(bundle, "epoch", None)
        if isinstance(bundle, _BUNDLES):
            body: bytes
            try:
                if self.encoding == "frame":
                    body, kind = wire.dumpb(bundle), wire.FRAME_CONTENT_TYPE
                else:
                    body, kind = wire.dumps(bundle, hidden="base64").encode("utf-8"), wire.JSON_CONTENT_TYPE
            except TypeError:  # values with no binary form travel as readable JSON
                body, kind = _readable(bundle), wire.JSON_CONTENT_TYPE
        else:  # not a bundle: sent anyway, so the node's engine refuses it as it would in process
            body, kind = _not_a_bundle(bundle), wire.JSON_CONTENT_TYPE
        response = self._send("POST", f"/v1/{op}", session_id=session_id, epoch=epoch, content=body,
                              headers={"Content-Type": kind})
        if response.status_code != 200:
            raise _error_of(response)
        frame = response.headers.get("Content-Type", "").startswith(wire.FRAME_CONTENT_TYPE)
        out = wire.loads_unchecked(response.content, frame=frame)
        if isinstance(out, ShardError):
            raise out
        return out

    def prefill(self, bundle: InputBundle) -> OutputBundle:
        return self._compute("prefill", bundle)

    def decode(self, bundle: InputBundle) -> OutputBundle:
        return self._compute("decode", bundle)

    def _close(self, op: str, session_id: Any, epoch: Any) -> None:
        try:
            body = json.dumps({"session_id": session_id, "epoch": epoch})
        except (TypeError, ValueError):
            body = json.dumps({"session_id": None, "epoch": None})
        response = self._send("POST", f"/v1/{op}", session_id=session_id, epoch=epoch, content=body,
                              headers={"Content-Type": wire.JSON_CONTENT_TYPE})
        if response.status_code != 200:
            raise _error_of(response)

    def cancel(self, session_id: str, epoch: int) -> None:
        self._close("cancel", session_id, epoch)

    def release(self, session_id: str, epoch: int) -> None:
        self._close("release", session_id, epoch)

    def session(self, session_id: str) -> Optional[SessionView]:
        if not isinstance(session_id, str) or not session_id:
            return None
        response = self._send("GET", "/v1/sessions/" + session_path(session_id))
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise _error_of(response)
        data = response.json()
        return SessionView(data["session_id"], data["epoch"], data["status"], data["cached_tokens"])

    @property
    def used_tokens(self) -> int:
        return int(self._state()["used_tokens"])

    @property
    def capacity_tokens(self) -> Optional[int]:
        return self._state()["capacity_tokens"]

    @property
    def crashed(self) -> bool:
        return bool(self._state()["crashed"])

    def _admin(self, method: str, what: str, **kwargs: Any) -> httpx.Response:
        if self.control is None or self.name is None:
            raise RemoteError(f"{self!r} does not know its control port: build it with "
                              "ClusterClient.engine(name) to reach restart(), crash() and the fault log")
        response = self._client.request(method, f"{self.control}/v1/nodes/{self.name}/{what}", **kwargs)
        if response.status_code != 200:
            raise _error_of(response)
        return response

    def restart(self) -> None:
        self._admin("POST", "restart")

    def crash(self) -> None:
        self._admin("POST", "crash")

    @property
    def fault_log(self) -> tuple[Fired, ...]:
        """Every fault fired on the node so far (through the control port)."""
        fired = self._admin("GET", "log").json()["fired"]
        return tuple(Fired(f["call"], f["rule"], f["op"], f["session_id"], wire.fault_from_dict(f["fault"]))
                     for f in fired)


class ClusterClient:
    """A running server's control port, and clients for its nodes."""

    def __init__(self, roster: dict[str, Any], *, timeout: float = 30.0, encoding: str = "frame") -> None:
        self.roster = roster
        self.control: str = roster["control"]
        self.timeout, self.encoding = timeout, encoding
        self._client = _new_client(timeout)

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self._client.request(method, self.control + path, **kwargs)
        if response.status_code != 200:
            raise _error_of(response)
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
            capacity_tokens: Optional[int] = None, faults: Optional[FaultPlan] = None) -> dict[str, Any]:
        body: dict[str, Any] = {"spec": asdict(spec), "seed": seed, "capacity_tokens": capacity_tokens,
                                "faults": None if faults is None else json.loads(wire.dumps(faults))}
        if name is not None:
            body["name"] = name
        return self._call("POST", "/v1/nodes", json=body)

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


@contextmanager
def serve(topology: Any, *, host: str = "127.0.0.1", time_scale: float = 1.0, subprocess: bool = False,
          timeout: float = 30.0, encoding: str = "frame") -> Iterator[ClusterClient]:
    """Run ``topology`` (a :class:`~fakeshard.topology.Topology`, its dict, or a path) while the block runs.

    In this process by default (a server thread); ``subprocess=True`` runs
    ``python -m fakeshard serve`` in a child process, as a coordinator's CI
    would.  For example::

        with serve("topology.json") as cluster:
            head = cluster.engine("head")
            cluster.partition("mid", "hang")
    """
    from fakeshard.factory import load_factory
    from fakeshard.server import ServerThread
    from fakeshard.topology import Topology

    if isinstance(topology, (str, Path)):
        topology = Topology.load(topology)
    elif isinstance(topology, dict):
        topology = Topology.from_dict(topology)
    if subprocess:
        with _serve_process(topology, host=host, time_scale=time_scale) as roster:
            client = ClusterClient(roster, timeout=timeout, encoding=encoding)
            try:
                yield client
            finally:
                client.close()
        return
    server = ServerThread(load_factory(topology.engine), host=host, time_scale=time_scale,
                          topology=topology)
    client = ClusterClient(server.cluster.roster(), timeout=timeout, encoding=encoding)
    try:
        yield client
    finally:
        client.close()
        server.close()


@contextmanager
def _serve_process(topology: Any, *, host: str, time_scale: float) -> Iterator[dict[str, Any]]:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="fakeshard-serve-") as tmp:
        path = Path(tmp) / "topology.json"
        path.write_text(json.dumps(topology.to_dict()), encoding="utf-8")
        proc = _popen([sys.executable, "-m", "fakeshard", "serve", str(path), "--host", host,
                               "--time-scale", repr(float(time_scale))])
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if not line:
                err = proc.stderr.read() if proc.stderr is not None else ""
                raise RuntimeError(f"fakeshard serve exited before it was ready: {err.strip()[-500:]}")
            yield json.loads(line)
        finally:
            proc.terminate()
            try:
                proc.communicate(timeout=10)
            except subprocess.TimeoutExpired:  # pragma: no cover - a server that ignores SIGTERM
                proc.kill()
                proc.communicate()


def _popen(argv: list[str]) -> "subprocess.Popen[str]":
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


# -- a factory whose engines are served nodes ---------------------------------------------------


class _Shared:
    """One server (a thread here, or a running ``fakeshard serve``) and one connection pool."""

    lock = threading.Lock()
    by_factory: dict[int, "_Shared"] = {}

    def __init__(self, factory: Any) -> None:
        from fakeshard.server import ServerThread

        self.remote = os.environ.get(SERVER_ENV_VAR) or None
        self.client = _new_client(30.0)
        self.server = None if self.remote else ServerThread(factory, time_scale=0.0,
                                                            factory_name=getattr(factory, "__name__", ""))
        control = self.remote if self.server is None else self.server.cluster.control_url
        self.admin = ClusterClient({"control": control})
        #: Nodes whose engines are gone, to remove from a running server. A finalizer only
        #: appends here: it may run inside any call, even one holding this pool's lock, so
        #: the removal itself waits for the next engine this factory makes (or exit).
        self.doomed: "collections.deque[str]" = collections.deque()
        atexit.register(self.close)

    def sweep(self) -> None:
        """Remove from the running server every node whose engine is gone."""
        while self.doomed:
            _remove_quietly(self.admin, self.doomed.popleft())

    def close(self) -> None:
        if self.remote:
            self.sweep()
        if self.server is not None:
            self.server.close()
            self.server = None

    @classmethod
    def of(cls, factory: Any) -> "_Shared":
        with cls.lock:
            shared = cls.by_factory.get(id(factory))
            if shared is None:
                shared = cls.by_factory[id(factory)] = cls(factory)
            return shared


def served(factory: Any) -> Any:
    """An engine factory like ``factory`` whose every engine is a node on a real loopback socket.

    The nodes run in a server thread of this process; with
    ``$FAKESHARD_SERVER`` set to a control URL, they are added to that
    running ``fakeshard serve`` instead (which runs its own factory).  The
    caller's clock accounts each node's delays (``Fakeshard-Delay``).  The
    factory's ``tolerance``, ``logits``, ``machine_hidden_size`` and
    ``fixture_choices`` carry over.
    """
    def make(spec: ShardSpec, *, seed: int = 0, capacity_tokens: Optional[int] = None,
             clock: Optional[Clock] = None, faults: Optional[FaultPlan] = None) -> RemoteShardEngine:
        shared = _Shared.of(factory)
        if shared.server is not None:
            # In this process the node sleeps on the caller's clock itself.
            node = shared.server.add(spec, seed=seed, capacity_tokens=capacity_tokens, faults=faults,
                                     clock=clock)
            engine = RemoteShardEngine(node.url, control=shared.admin.control, name=node.name,
                                       client=shared.client)
            weakref.finalize(engine, shared.server.remove_soon, node.name)
            return engine
        shared.sweep()
        described = shared.admin.add(spec, seed=seed, capacity_tokens=capacity_tokens, faults=faults)
        engine = RemoteShardEngine(described["url"], control=shared.admin.control, name=described["name"],
                                   client=shared.client, clock=clock)
        weakref.finalize(engine, shared.doomed.append, described["name"])
        return engine

    for attr in ("tolerance", "logits", "machine_hidden_size", "fixture_choices"):
        if hasattr(factory, attr):
            setattr(make, attr, getattr(factory, attr))
    make.__name__ = f"served_{getattr(factory, '__name__', 'engine')}"
    return make


def _remove_quietly(admin: ClusterClient, name: str) -> None:
    try:
        admin.remove(name)
    except (httpx.HTTPError, RemoteError, ShardError):
        pass


def _fixture_factory(spec: ShardSpec, **kwargs: Any) -> Any:
    from fakeshard.engine import FakeShardEngine

    return FakeShardEngine(spec, **kwargs)


# A factory's optional attribute (docs: how to test an engine); functions take attributes,
# which their type does not say.
_fixture_factory.fixture_choices = True  # type: ignore[attr-defined]

#: The fixture engine, served: ``pytest --engine fakeshard.remote:served_engine``.
served_engine = served(_fixture_factory)
served_engine.__name__ = "served_engine"
