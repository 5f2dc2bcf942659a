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

The package holds one idea a module: ``_engine`` (the ``ShardEngine`` over HTTP),
``_admin`` (the control port's calls), ``_serve`` (``serve()``) and ``_served``
(the factories of served engines), ``_attach`` (engines on a host in any language,
attached by its control URL or started from a command).

``serve(topology)`` runs a topology (in this process, or in a separate
``fakeshard serve`` process) and hands out clients and admin calls;
:func:`served_engine` is an engine factory whose every engine is a node on
a real socket, so ``pytest --engine fakeshard.remote:served_engine`` runs the
contract suite and the machines over the network.
"""

from __future__ import annotations

from fakeshard.remote._admin import ClusterClient
from fakeshard.remote._attach import (
    ENGINE_URL_ENV_VAR,
    AttachedFactory,
    Host,
    HostError,
    attached,
    attached_engine,
    probe_host,
)
from fakeshard.remote._engine import SERVER_ENV_VAR, RemoteError, RemoteShardEngine, session_path
from fakeshard.remote._serve import serve
from fakeshard.remote._served import served, served_engine

__all__ = [
    "AttachedFactory",
    "ClusterClient",
    "ENGINE_URL_ENV_VAR",
    "Host",
    "HostError",
    "RemoteError",
    "RemoteShardEngine",
    "SERVER_ENV_VAR",
    "attached",
    "attached_engine",
    "probe_host",
    "serve",
    "served",
    "served_engine",
    "session_path",
]
