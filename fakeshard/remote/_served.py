"""Engine factories whose every engine is a node on a real loopback socket."""

from __future__ import annotations

import atexit
import collections
import os
import threading
import weakref
from typing import Any, Optional

import httpx

from fakeshard._clock import Clock
from fakeshard._contract import ShardSpec
from fakeshard._errors import ShardError
from fakeshard._faults import FaultPlan
from fakeshard.remote._admin import ClusterClient
from fakeshard.remote._engine import SERVER_ENV_VAR, RemoteError, RemoteShardEngine, new_client


class _Shared:
    """One server (a thread here, or a running ``fakeshard serve``) and one connection pool."""

    lock = threading.Lock()
    by_factory: dict[int, "_Shared"] = {}

    def __init__(self, factory: Any) -> None:
        from fakeshard.server import ServerThread

        self.remote = os.environ.get(SERVER_ENV_VAR) or None
        self.client = new_client(30.0)
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

    for attr in ("tolerance", "logits", "machine_hidden_size", "machine_wide_hidden_size",
                 "machine_max_positions", "fixture_choices"):
        if hasattr(factory, attr):
            setattr(make, attr, getattr(factory, attr))
    make.makes_http_nodes = True  # type: ignore[attr-defined]
    make.__name__ = f"served_{getattr(factory, '__name__', 'engine')}"
    return make


def _remove_quietly(admin: ClusterClient, name: str) -> None:
    try:
        admin.remove(name)
    except (httpx.HTTPError, RemoteError, ShardError):
        pass


def _fixture_factory(spec: ShardSpec, **kwargs: Any) -> Any:
    from fakeshard._engine import FakeShardEngine

    return FakeShardEngine(spec, **kwargs)


# A factory's optional attribute (docs: how to test an engine); functions take attributes,
# which their type does not say.
_fixture_factory.fixture_choices = True  # type: ignore[attr-defined]

#: The fixture engine, served: ``pytest --engine fakeshard.remote:served_engine``.
served_engine = served(_fixture_factory)
served_engine.__name__ = "served_engine"
