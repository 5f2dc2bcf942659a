"""Engines behind real sockets: HTTP API v1 (``docs/contract.md``): nodes on asyncio and
httptools' parser, the control port on aiohttp.

Every node is one engine on its own listener (its data plane), as separate
machines would be; one control listener serves the admin API, apart from
the nodes, so a partitioned node can always be healed.  The server is an
adapter: the engine keeps every session rule, and the server only moves
bundles and errors, applies the network's own faults, and never answers
anything outside the documented set.

The package holds one idea a module: ``_http`` (statuses, the ok and error
envelopes, the control port's middleware), ``_h1`` (a node's HTTP/1.1: keep-alive,
pipelining, the body limit, closing and resetting), ``_node`` (a node: the data
plane), ``_cluster`` (nodes and the control listener: the admin API),
``_thread`` (a cluster on its own thread, and ``fakeshard serve``) and
``_metrics`` (a node's Prometheus series).

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

from fakeshard.server._cluster import ServedCluster
from fakeshard.server._http import (
    API_VERSION,
    DELAY_HEADER,
    ERROR_STATUS,
    HTTP_ERROR_CODES,
    MAX_BODY_BYTES,
    PARTITION_MODES,
)
from fakeshard.server._node import ServedNode
from fakeshard.server._thread import ServerThread, run_server

__all__ = [
    "API_VERSION",
    "DELAY_HEADER",
    "ERROR_STATUS",
    "HTTP_ERROR_CODES",
    "MAX_BODY_BYTES",
    "PARTITION_MODES",
    "ServedCluster",
    "ServedNode",
    "ServerThread",
    "run_server",
]
