"""A served cluster driven from plain code: on its own thread, or as ``fakeshard serve``."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any, Awaitable, Optional

from fakeshard._contract import ShardSpec
from fakeshard._factory import EngineFactory
from fakeshard._topology import Topology
from fakeshard.server._cluster import ServedCluster
from fakeshard.server._node import ServedNode


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
               time_scale: float = 1.0, out: Any = None, fault_plans: bool = True) -> int:
    """``fakeshard serve``: run until SIGINT, SIGTERM or ``POST /v1/shutdown``; the roster when ready."""
    import signal
    import sys

    from fakeshard._factory import load_factory

    factory = load_factory(topology.engine)
    out = out if out is not None else sys.stdout

    async def main() -> None:
        cluster = await ServedCluster.from_topology(topology, factory, host=host, time_scale=time_scale,
                                                    fault_plans=fault_plans)
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
