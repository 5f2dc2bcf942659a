"""Engine hosts in Node.js with one bug planted in each: how this repository shows that the
machines catch a host's bugs through HTTP API v1 (``tests/test_planted_hosts.py``). Each is
the example host of ``examples/node-host/`` with one method overridden, a mistake real engines
make; the kit applies the fault plans in front of them, as for any host without plans."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: The correct host each planted one is a variant of.
EXAMPLE_HOST = HERE.parent.parent / "examples" / "node-host" / "host.mjs"


@dataclass(frozen=True)
class HostBug:
    name: str
    rule: str
    #: What catches it: a machine of ``planted.MACHINES``, or an engine check's name.
    machine: str
    #: Seconds its catcher took on this machine (a machine's search over HTTP, then the trace's
    #: reduction): a catch over a minute runs only where ``FAKESHARD_LONG_CATCHES=1``.
    seconds: int
    #: An engine check that also catches it, at once: what runs where the machine's catch is long.
    check: str = ""

    @property
    def command(self) -> str:
        return shlex.join(["node", str(HERE / f"{self.name}.mjs")])


HOST_BUGS = (
    HostBug("stale_epoch_accepted", "fencing", "sessions", 7),
    HostBug("cache_miss_expected_wrong", "errors: a cache miss's expected", "sessions", 2),
    HostBug("cancel_without_tombstone", "tombstones", "sessions", 7),
    HostBug("release_keeps_cache", "accounting", "sessions", 5),
    HostBug("restart_keeps_cache", "crash", "faults", 18),
    HostBug("capacity_off_by_one", "capacity", "sessions", 9),
    HostBug("checksum_unchecked", "validation", "sessions", 7),
    # The sessions machine reaches 32,768 positions in a session late in its ci campaign; the
    # check of a long session crosses every power of two to 2**16 in under a second.
    HostBug("positions_wrap_at_32768", "lengths", "sessions", 240, check="check_long_session"),
    # The sessions machine catches it too, in about 420 s (a capacity, a newer epoch and a
    # prefill that does not fit, drawn together late in the campaign); the check, at once.
    HostBug("failed_call_changes_state", "a failed call changes nothing", "check_capacity_without_faults", 1),
)
