"""HTTP clients of the kit's async code (the program machine's harness, the reference program)."""

from __future__ import annotations

import functools
import ssl
from typing import Any
from urllib.parse import urlsplit

import httpx

__all__ = ["OriginClients"]


class OriginClients:
    """``request`` and ``get`` as :class:`httpx.AsyncClient`'s, over one client per origin.

    httpcore's pool checks every connection it holds whenever it sends a
    request (is it idle, has it expired: a ``poll`` and a ``getpeername``
    each), so one pool over a whole cluster's nodes made that check the
    largest part of the reference program's CPU in a ``ci`` campaign, about
    1,000 checks a call.  With a pool per node (per origin: scheme, host and
    port) a call checks only that node's connections.  The clients share one
    TLS context (each would load the system's certificates, some 40 ms, for
    nodes that speak plain HTTP).
    """

    def __init__(self, *, timeout: Any, max_connections: int) -> None:
        self._timeout = timeout
        self._limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
        self._clients: dict[str, httpx.AsyncClient] = {}

    def _client(self, url: str) -> httpx.AsyncClient:
        parts = urlsplit(url)
        origin = f"{parts.scheme}://{parts.netloc}"
        client = self._clients.get(origin)
        if client is None:
            client = self._clients[origin] = httpx.AsyncClient(timeout=self._timeout, limits=self._limits,
                                                               verify=_tls_context())
        return client

    async def request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        return await self._client(url).request(method, url, **kwargs)

    async def get(self, url: str, **kwargs: Any) -> httpx.Response:
        return await self._client(url).get(url, **kwargs)

    async def aclose(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.aclose()


@functools.lru_cache(maxsize=None)
def _tls_context() -> ssl.SSLContext:
    return httpx.create_ssl_context()
