"""``serve(topology)``: a topology run while a block runs, in this process or as ``fakeshard serve``."""

from __future__ import annotations

import json
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from fakeshard.remote._admin import ClusterClient


@contextmanager
def serve(topology: Any, *, host: str = "127.0.0.1", time_scale: float = 1.0, subprocess: bool = False,
          timeout: float = 30.0, encoding: str = "frame") -> Iterator[ClusterClient]:
    """Run ``topology`` (a :class:`~fakeshard._topology.Topology`, its dict, or a path) while the block runs.

    In this process by default (a server thread); ``subprocess=True`` runs
    ``python -m fakeshard serve`` in a child process, as a coordinator's CI
    would.  For example::

        with serve("topology.json") as cluster:
            head = cluster.engine("head")
            cluster.partition("mid", "hang")
    """
    from fakeshard._factory import load_factory
    from fakeshard._topology import Topology
    from fakeshard.server import ServerThread

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
