"""The kit's reference async coordinator as a coordinator program::

    python3 -m fakeshard.testing.coordinator_program [--call-timeout SECONDS]

It speaks the stdio protocol of ``docs/contract.md`` ("Coordinator programs"):
one JSON request a line on standard input, one JSON answer a line on standard
output, in any order; its log goes to standard error.  Behind the protocol it is
:class:`fakeshard.testing.AsyncCoordinator` unchanged, holding
each node as :class:`HttpNode`, a node reached through HTTP API v1 only (binary
frames for prefill and decode, JSON for the rest; a node's restart through the
control API the ``init`` request names).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import stat
import sys
from typing import Any, Awaitable, Callable, Optional, Sequence
from urllib.parse import quote

import httpx

from fakeshard import EngineCrashed, ShardError, ShardSpec, wire
from fakeshard.remote._engine import error_of, transport_error
from fakeshard.testing._async_coordinator import MAX_STRETCH, AsyncCoordinator
from fakeshard.testing._http import OriginClients
from fakeshard.testing._reference_coordinator import GaveUp

__all__ = ["CoordinatorProgram", "HttpNode", "main"]


class HttpNode:
    """A node as :class:`AsyncCoordinator` holds it, over HTTP API v1.

    A refused connection is ``EngineCrashed`` (nothing was applied); a connection that
    broke after the request was sent is ``ResponseLost``; an error answer is its typed
    error (an answer no engine gives, such as a node that is gone, is ``EngineCrashed``).
    """

    def __init__(self, client: OriginClients, control: str, address: dict[str, Any], spec: ShardSpec) -> None:
        self._client, self._control = client, control
        self.name: str = address["name"]
        self.url: str = address["url"]
        self.spec = spec
        self.evidence_class = "fixture"

    def __repr__(self) -> str:
        return f"HttpNode({self.name}, {self.url})"

    async def _send(self, method: str, url: str, session_id: Any = None, epoch: Any = None,
                    **kwargs: Any) -> httpx.Response:
        sid = session_id if isinstance(session_id, str) else None
        ep = epoch if type(epoch) is int else None
        try:
            response = await self._client.request(method, url, **kwargs)
        except httpx.TransportError as exc:
            raise transport_error(exc, f"{method} {url}", sid, ep) from None
        if response.status_code != 200:
            error = error_of(response)
            if isinstance(error, ShardError):
                raise error
            raise EngineCrashed(f"{method} {url}: {error}", session_id=sid, epoch=ep)
        return response

    async def _compute(self, op: str, bundle: Any) -> Any:
        response = await self._send("POST", f"{self.url}/v1/{op}", bundle.session_id, bundle.epoch,
                                    content=wire.dumpb(bundle), headers={"Content-Type": wire.FRAME_CONTENT_TYPE})
        out = wire.loads_unchecked(response.content, frame=True)
        if isinstance(out, ShardError):
            raise out
        return out

    async def prefill(self, bundle: Any) -> Any:
        return await self._compute("prefill", bundle)

    async def decode(self, bundle: Any) -> Any:
        return await self._compute("decode", bundle)

    async def _close(self, op: str, session_id: str, epoch: int) -> None:
        await self._send("POST", f"{self.url}/v1/{op}", session_id, epoch,
                         content=json.dumps({"session_id": session_id, "epoch": epoch}).encode("utf-8"),
                         headers={"Content-Type": wire.JSON_CONTENT_TYPE})

    async def cancel(self, session_id: str, epoch: int) -> None:
        await self._close("cancel", session_id, epoch)

    async def release(self, session_id: str, epoch: int) -> None:
        await self._close("release", session_id, epoch)

    async def session(self, session_id: str) -> Optional[dict[str, Any]]:
        """What the node holds of the session (the session view as JSON), ``None`` for nothing."""
        try:
            response = await self._client.get(f"{self.url}/v1/sessions/{quote(session_id, safe='')}")
        except httpx.TransportError as exc:
            raise EngineCrashed(f"GET {self.url}/v1/sessions: {type(exc).__name__}", session_id=session_id) from None
        return dict(response.json()) if response.status_code == 200 else None

    async def restart(self) -> None:
        await self._send("POST", f"{self._control}/v1/nodes/{quote(self.name, safe='')}/restart")


class CoordinatorProgram:
    """The protocol's requests, answered by an :class:`AsyncCoordinator` over :class:`HttpNode` s."""

    def __init__(self, call_timeout: float, out: Any, coordinator: type[AsyncCoordinator] = AsyncCoordinator) -> None:
        self.call_timeout, self.out, self.coordinator_class = call_timeout, out, coordinator
        self.client = OriginClients(timeout=None, max_connections=256)
        self.control = ""
        self.nodes: dict[str, HttpNode] = {}
        self.coordinator: Optional[AsyncCoordinator] = None

    async def _stages(self, stages: Sequence[Sequence[dict[str, Any]]]) -> list[list[HttpNode]]:
        """The nodes of ``stages``, the same object for a name seen before."""
        out = []
        for stage in stages:
            nodes = []
            for address in stage:
                node = self.nodes.get(address["name"])
                if node is None:
                    response = await self.client.get(f"{address['url']}/v1/state", timeout=self.call_timeout * 4)
                    node = HttpNode(self.client, self.control, address, ShardSpec(**response.json()["spec"]))
                    self.nodes[node.name] = node
                nodes.append(node)
            out.append(nodes)
        return out

    async def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        kind = request.get("type")
        if kind == "init":
            self.control = request["control"]
            self.coordinator = self.coordinator_class(await self._stages(request["stages"]))
            self.coordinator.call_timeout = self.call_timeout
            return {"type": "init_ok"}
        coordinator = self.coordinator
        if coordinator is None:
            raise ValueError(f"{kind} before init")
        if kind == "start":
            await coordinator.start(request["session_id"], request["prompt"])
            return {"type": "start_ok"}
        if kind == "next_token":
            return {"type": "next_token_ok", "token": await coordinator.next_token(request["session_id"])}
        if kind == "release":
            await coordinator.release(request["session_id"])
            return {"type": "release_ok"}
        if kind == "nodes_changed":
            coordinator.on_nodes_changed(await self._stages(request["stages"]))
            return {"type": "nodes_changed_ok"}
        raise ValueError(f"unknown request type {kind!r}")

    async def answer(self, request: dict[str, Any]) -> None:
        try:
            reply = await self.handle(request)
        except GaveUp as exc:
            reply = {"type": "error", "code": "gave_up", "message": str(exc)}
        except Exception as exc:  # answered, never swallowed: the harness judges it
            reply = {"type": "error", "code": "failed", "message": f"{type(exc).__name__}: {exc}"}
        reply["in_reply_to"] = request.get("msg_id")
        self.out.write(json.dumps(reply, separators=(",", ":")) + "\n")
        self.out.flush()


async def serve(call_timeout: float, stdin: Any = None, out: Any = None,
                coordinator: type[AsyncCoordinator] = AsyncCoordinator) -> None:
    """Answer the requests on ``stdin`` (default: standard input) until it closes, with a
    ``coordinator`` (a subclass of :class:`AsyncCoordinator`, to try a variant)."""
    loop = asyncio.get_running_loop()
    readline = await _line_reader(loop, stdin or sys.stdin)
    program = CoordinatorProgram(call_timeout, out or sys.stdout, coordinator)
    tasks: set[asyncio.Task[None]] = set()
    while True:
        line = await readline()
        if not line:
            break
        if not line.strip():
            continue
        request = json.loads(line)
        task = loop.create_task(program.answer(request))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.gather(*tasks, return_exceptions=True)
    await program.client.aclose()


async def _line_reader(loop: asyncio.AbstractEventLoop, stdin: Any) -> Callable[[], Awaitable[bytes]]:
    """``readline`` of ``stdin``: on the event loop for a pipe or a socket (as the harness runs
    the program), in a thread for what the loop cannot watch (a file, ``/dev/null``, a terminal:
    the program run by hand, as in ``< requests.jsonl``)."""
    mode = os.fstat(stdin.fileno()).st_mode
    if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
        reader = asyncio.StreamReader(limit=64 * 1024 * 1024)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), stdin)
        return reader.readline
    source = getattr(stdin, "buffer", stdin)
    return functools.partial(loop.run_in_executor, None, source.readline)


def main(argv: Optional[list[str]] = None, coordinator: type[AsyncCoordinator] = AsyncCoordinator) -> int:
    p = argparse.ArgumentParser(prog="python3 -m fakeshard.testing.coordinator_program",
                                description="The kit's reference async coordinator, as a coordinator program "
                                            "speaking the stdio protocol.")
    p.add_argument("--call-timeout", type=float, default=1.0,
                   help="seconds a node call may take before it is abandoned (default 1.0); within a request, "
                        f"each attempt after a timed-out one waits twice as long, up to {MAX_STRETCH} times this")
    args = p.parse_args(argv)
    asyncio.run(serve(args.call_timeout, coordinator=coordinator))
    return 0


if __name__ == "__main__":
    sys.exit(main())
