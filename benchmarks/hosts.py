"""The harness's cost on an engine host: the same campaign of the engine machines on three
factories of nodes over HTTP, in one run, with engine calls a second and the ratio of each
to the served fixture nodes (the baseline, run first, in this process):

* ``served``: ``fakeshard.remote:served_engine`` (fixture nodes served in this process);
* ``fakeshard serve``: the same fixture engine in a ``fakeshard serve`` process, attached as
  any host is (``--engine-cmd``; its nodes run the fault plans);
* ``node host``: the Node.js example host (``examples/node-host/``), attached so (the kit
  applies the plans in front of its nodes).

    python3 benchmarks/hosts.py                 # 20 examples a machine, the ci profile's steps
    python3 benchmarks/hosts.py --examples 50

An engine call is a ``prefill``, ``decode``, ``cancel`` or ``release`` sent to a node (counted
at the client). Goal (issue 57, item 8): a campaign of every engine machine on an attached host
within 1.5x the time of the same campaign on served fixture nodes. The draws are the same
(derandomized), but an engine's answers steer later draws, so the calls made differ a little
between engines: compare calls a second, and the time ratio beside it.
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path

from hypothesis import settings

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fakeshard.remote import Host, attached, served_engine  # noqa: E402
from fakeshard.remote._engine import RemoteShardEngine  # noqa: E402
from fakeshard.testing import _profiles as profiles  # noqa: E402
from fakeshard.testing._failover import FailoverMachine  # noqa: E402
from fakeshard.testing._machines import FaultsMachine, MachineConfig, SessionsMachine  # noqa: E402
from fakeshard.testing._parallel import run_parallel  # noqa: E402
from fakeshard.testing._regress import run_machine  # noqa: E402
from fakeshard.testing._surface import SurfaceMachine  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CALLS = ("/v1/prefill", "/v1/decode", "/v1/cancel", "/v1/release")
counted = [0]
_send = RemoteShardEngine._send


def _counting_send(self, method, path, **kwargs):  # type: ignore[no-untyped-def]
    if path in CALLS:
        counted[0] += 1
    return _send(self, method, path, **kwargs)


def campaign(factory: object, name: str, examples: int) -> tuple[float, int]:
    """Seconds and engine calls of one campaign of the engine machines on ``factory``."""
    chosen = settings(profiles.get("ci"), max_examples=examples)
    counted[0] = 0
    started = time.perf_counter()
    for machine in (SessionsMachine, FaultsMachine, FailoverMachine, SurfaceMachine):
        run_machine(machine, MachineConfig.for_factory(factory, name), settings=chosen, save_dir=None)
    run_parallel(MachineConfig.for_factory(factory, name), settings=chosen, save_dir=None)
    return time.perf_counter() - started, counted[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=20)
    args = parser.parse_args()
    RemoteShardEngine._send = _counting_send  # type: ignore[method-assign]
    print(f"python {platform.python_version()}, {platform.machine()}, {args.examples} examples a machine "
          "(sessions, faults, failover, surface, parallel), the ci profile's steps")
    rows = [("served", *campaign(served_engine, "fakeshard.remote:served_engine", args.examples))]
    with tempfile.TemporaryDirectory() as tmp:
        topology = Path(tmp) / "topology.json"
        topology.write_text(json.dumps({"model": {"model_id": "bench", "n_layers": 1}, "nodes": []}), encoding="utf-8")
        serve = shlex.join([sys.executable, "-m", "fakeshard", "serve", str(topology), "--time-scale", "0"])
        with Host(serve) as host:
            rows.append(("fakeshard serve", *campaign(attached(host.control), "fakeshard serve", args.examples)))
    if shutil.which("node"):
        with Host(f"node {ROOT / 'examples' / 'node-host' / 'host.mjs'}") as host:
            rows.append(("node host", *campaign(attached(host.control), "node host", args.examples)))
    else:
        print("node is missing: the Node.js example host is not measured")
    base_seconds = rows[0][1]
    print(f"{'factory':16} {'seconds':>8} {'calls':>7} {'calls/s':>8} {'time ratio':>10}")
    for name, seconds, calls in rows:
        print(f"{name:16} {seconds:8.1f} {calls:7d} {calls / seconds:8.0f} {seconds / base_seconds:9.2f}x")


if __name__ == "__main__":
    main()
