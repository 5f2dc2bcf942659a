"""Coordinator programs under test: any language, over real sockets.

A *coordinator program* is any executable that speaks the stdio protocol of
``docs/contract.md`` ("Coordinator programs"): fakeshard starts it, writes one
JSON request a line to its standard input and reads one JSON answer a line from
its standard output (its standard error is kept as its log).  The program
reaches the nodes through HTTP API v1 only.

This module runs the concurrent machine's scenarios (:mod:`fakeshard.testing._concurrent`:
the same workloads, nemesis schedules, fault plans and checks) against such a
program, in *real time*, over a served cluster on loopback
(:class:`fakeshard.server._thread.ServerThread`):

* the nodes are added, crashed, restarted, partitioned (``refuse``, ``hang``,
  ``reset``), healed, removed and added through the control API;
* what the nodes were sent is read from the cluster's call log (``GET /v1/calls``),
  so "no call after release", "no call to a node that left" and the budget are
  judged from what the nodes saw (a failure inside the program, which no node
  sees, counts in the budget by the silence it leaves: :data:`SILENCE`); what a
  node holds, from ``GET /v1/sessions/{id}`` and ``GET /v1/state``;
* a scenario's seconds are scaled by :data:`SCALE` (a partition of 4 scenario
  seconds lasts one real second), and so are the fault plans' delays and the
  simulation's network hop, which every node is given as its latency (so calls
  are in flight when the nemesis strikes, as in the simulation).

Runs are seeded (workload, fault plans, nemesis schedule) but not replayable
event for event: the operating system schedules the program, the nodes and the
harness.  A failing run is saved as a trace of its scenario and observed history;
:func:`replay_program` runs it again, and a reduction re-runs candidates and says
how many re-runs failed again.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import math
import os
import shlex
import shutil
import signal
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, NoReturn, Optional
from urllib.parse import quote

from fakeshard import ShardSpec, wire
from fakeshard._topology import stage_ranges
from fakeshard.testing._concurrent import (
    LAYERS_PER_STAGE,
    ConcurrentFailure,
    CoordinatorBroke,
    Run,
    Scenario,
    _Failed,
    _Runner,
    check_availability,
    probes_of,
    reduce,
    scenarios,
    stop_tasks,
    with_targeted,
)
from fakeshard.testing._reference_coordinator import GaveUp
from fakeshard.testing._save import keep
from fakeshard.testing._sim import HOP, Call, NemesisWorld
from fakeshard.testing._trace import Trace, git_commit, hypothesis_version
from fakeshard.testing._view import saved_history

__all__ = ["PROGRAM_CHECKS", "ProgramCoordinator", "ProgramFailed", "ProgramSettings", "Replayed", "replay_program",
           "run_program", "run_program_scenario"]

#: Real seconds per scenario second: a scenario's moments, pauses, partitions and delays.
SCALE = 0.25
#: Real seconds a request may stay unanswered before the run fails for it.
REQUEST_TIMEOUT = 30.0


def request_timeout_problem(seconds: Optional[float]) -> Optional[str]:
    """What is wrong with ``seconds`` as ``--request-timeout`` (``None``: nothing, or not given)."""
    if seconds is not None and not 0.0 < seconds < math.inf:  # NaN is refused too
        return f"--request-timeout is a number of seconds above 0, got {seconds}"
    return None


def command_problem(command: str) -> Optional[str]:
    """What is wrong with ``command`` as ``--coordinator-cmd`` (``None``: nothing): a command
    line that cannot be read, one that is empty, or one whose program cannot be run (it is
    started without a shell, so its first word is a file, or a name found on ``PATH``)."""
    try:
        argv = _argv(command)
    except ValueError as exc:
        return str(exc)
    if shutil.which(argv[0]) is None:
        where = "is not an executable file" if os.sep in argv[0] else "is not found on PATH"
        return f"--coordinator-cmd: the program {argv[0]!r} {where}"
    return None


#: Real seconds the harness waits, after the workload and the nemesis, for the nodes to empty.
SETTLE = 5.0
#: Real seconds a node that left keeps serving (and logging) after the program was told, before it stops.
LINGER = 1.0
#: Real seconds after the program answered ``nodes_changed`` within which a call may still reach a
#: node that left: a call is logged when it arrives, and one the program sent before it answered
#: may arrive a moment later.
GONE_GRACE = 0.2
#: Real seconds after a refusing partition heals during which a request's budget is not judged
#: (a client's pooled connection that the partition closed may fail without reaching the node).
REFUSE_AFTERMATH = 0.5
#: Real seconds the harness waits for the control API or a node to answer one of its own reads
#: (a read that takes longer breaks the run: the harness cannot judge what it cannot see).
CONTROL_TIMEOUT = 60.0
#: Real seconds a request over its budget waits for the nodes to log a caller's hang-up, before
#: it is judged (the hang-up came before the request's answer; its log entry, a moment later).
HANGUP_GRACE = 0.05
#: Real seconds in which none of a session's calls is on a node, within one of its requests, that
#: count as one failure no node saw (see :meth:`_ProgramRunner._unseen_failures`).
SILENCE = 0.25
#: Re-runs a reduction may make (each is a whole real-time run).
REDUCE_BUDGET = 12
#: Re-runs of the reduced scenario that measure how often it fails again.
CONFIRM_RUNS = 3
#: The checks only a program can fail: an answer that breaks the protocol, a program that exited.
PROGRAM_CHECKS = ("protocol", "exited")


@dataclass(frozen=True)
class ProgramSettings:
    """How a program's runs are timed (real seconds, except ``scale``)."""

    scale: float = SCALE
    request_timeout: float = REQUEST_TIMEOUT
    settle: float = SETTLE

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


class ProgramFailed(Exception):
    """The program answered a request with an error other than ``gave_up`` (judged as a
    request that raised)."""


# -- the program -------------------------------------------------------------------------------

#: Seconds a program is given to exit once its standard input is closed, and to be gone once killed.
GRACE = 2.0


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    """Kill every process left in the program's process group (it leads one of its own; where
    there are no process groups, the program alone)."""
    try:
        if hasattr(os, "killpg"):
            os.killpg(proc.pid, signal.SIGKILL)
        elif proc.returncode is None:
            proc.kill()
    except (ProcessLookupError, PermissionError):  # nothing left in it
        pass


class _Program:
    """A started coordinator program and the requests in flight to it."""

    def __init__(self, argv: list[str], log: Path, transcript: Optional[list[dict[str, Any]]] = None) -> None:
        self.argv, self.log = argv, log
        #: Where every request and answer goes as it passes, if given.
        self.transcript = transcript
        self.ids = itertools.count(1)
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        #: Requests whose asker stopped waiting: a late answer to one is no protocol error.
        self.abandoned: set[int] = set()
        self.broken: Optional[CoordinatorBroke] = None
        self.proc: Optional[asyncio.subprocess.Process] = None
        self._reader: Optional[asyncio.Task[None]] = None
        self._log_file: Any = None
        #: Lines the program has written on its standard output.
        self.lines = 0

    async def open(self) -> None:
        self._log_file = open(self.log, "wb")
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *self.argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=self._log_file,
                limit=64 * 1024 * 1024, start_new_session=True)  # its own process group: see close()
        except OSError as exc:
            self._log_file.close()
            raise CoordinatorBroke("exited", f"the program {shlex.join(self.argv)!r} could not start: {exc}") from None
        self._reader = asyncio.get_running_loop().create_task(self._read())

    def silent_output(self) -> str:
        """What to add to a request left unanswered when the program has written no line yet:
        an answer written into a buffer that is never flushed reads as no answer."""
        if self.lines:
            return ""
        return ("; the program has written nothing on its standard output yet: if it answered, the answer "
                "may sit in a buffer (a pipe is not a terminal, so stdio buffers it): flush after each line")

    def log_tail(self, lines: int = 12) -> str:
        try:
            text = self.log.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        tail = text.rstrip("\n").splitlines()[-lines:]
        return "\n".join("    " + line for line in tail)

    def _broke(self, check: str, message: str) -> None:
        if self.broken is None:
            tail = self.log_tail()
            # The log is named by whoever keeps it (a campaign saves it beside the trace; a
            # replay says where it is): here, its last lines.
            self.broken = CoordinatorBroke(check, message + (f"; its log ends:\n{tail}" if tail else
                                                             "; its log is empty"))
        for future in self.pending.values():
            if not future.done():
                future.set_exception(self.broken)

    async def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        while True:
            try:
                line = await self.proc.stdout.readline()
            except (ValueError, asyncio.LimitOverrunError):
                self._broke("protocol", "the program wrote a line longer than 64 MiB")
                return
            if not line:
                break
            self.lines += 1
            if not line.strip():
                continue
            try:
                message = json.loads(line)
            except ValueError:
                self._broke("protocol", f"the program wrote a line that is not JSON: {line[:200]!r} (standard "
                            "output carries the protocol alone: write logs to standard error)")
                return
            if self.transcript is not None:
                self.transcript.append(message)
            reply_to = message.get("in_reply_to") if isinstance(message, dict) else None
            if type(reply_to) is int and reply_to in self.abandoned:
                self.abandoned.discard(reply_to)
                continue
            future = self.pending.pop(reply_to, None) if type(reply_to) is int else None
            if future is None:
                self._broke("protocol", f"the program wrote {line[:200]!r}: every line must be a JSON object "
                            "whose in_reply_to is the msg_id of a request in flight")
                return
            if not future.done():
                future.set_result(message)
        while self.proc.returncode is None:  # polled: wait() would also wait for its standard input to close
            await asyncio.sleep(0.02)
        self._broke("exited", f"the program exited (status {self.proc.returncode}) with requests still to come")

    async def _ended(self, seconds: float) -> bool:
        """Whether, within ``seconds``, the program exited and its output reached its end (or
        stopped being read).  Polled: ``Process.wait()`` also waits for every pipe to close,
        which a process the program started may hold open for ever."""
        proc, loop = self.proc, asyncio.get_running_loop()
        assert proc is not None
        deadline = loop.time() + seconds
        while proc.returncode is None or (self._reader is not None and not self._reader.done()):
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(0.02)
        return True

    async def request(self, kind: str, **fields: Any) -> dict[str, Any]:
        if self.broken is not None:
            raise self.broken
        assert self.proc is not None and self.proc.stdin is not None
        msg_id = next(self.ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.pending[msg_id] = future
        message = {"type": kind, "msg_id": msg_id, **fields}
        if self.transcript is not None:
            self.transcript.append(message)
        line = json.dumps(message, separators=(",", ":")) + "\n"
        try:
            self.proc.stdin.write(line.encode("utf-8"))
            await self.proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            self.pending.pop(msg_id, None)
            self._broke("exited", "the program closed its standard input")
            raise self.broken from None  # type: ignore[misc]
        try:
            return await future
        except asyncio.CancelledError:
            if self.pending.pop(msg_id, None) is not None:
                self.abandoned.add(msg_id)
            raise

    async def close(self) -> None:
        """End the program: close its standard input, give it 2 seconds to exit and to close its
        output, then kill its process group, which ends what it started too (the children of a
        wrapper such as ``sh -c '...'`` would otherwise outlive the run, and hold its output open)."""
        proc = self.proc
        if proc is not None:
            if proc.stdin is not None:
                proc.stdin.close()
            await self._ended(GRACE)
            _kill_group(proc)
            await self._ended(GRACE)
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)
        if self._log_file is not None:
            self._log_file.close()


class ProgramCoordinator:
    """A coordinator program as the concurrent machine's runner holds an async coordinator."""

    def __init__(self, program: _Program) -> None:
        self._program = program

    async def _ask(self, kind: str, **fields: Any) -> dict[str, Any]:
        answer = await self._program.request(kind, **fields)
        got = answer.get("type")
        if got == f"{kind}_ok":
            return answer
        if got == "error":
            code, message = answer.get("code"), answer.get("message", "")
            if code == "gave_up":
                raise GaveUp(str(message))
            raise ProgramFailed(f"the program answered error {code!r}: {message}")
        raise CoordinatorBroke("protocol", f"the program answered {kind} with {json.dumps(answer)[:200]}: "
                                           f"the answer's type must be {kind}_ok or error")

    async def init(self, control: str, stages: list[list[dict[str, Any]]]) -> None:
        await self._ask("init", control=control, stages=stages)

    async def start(self, session_id: str, prompt: list[int]) -> None:
        await self._ask("start", session_id=session_id, prompt=list(prompt))

    async def next_token(self, session_id: str) -> int:
        answer = await self._ask("next_token", session_id=session_id)
        token = answer.get("token")
        if type(token) is not int or token < 0:
            raise CoordinatorBroke("protocol", f"next_token_ok's token must be an integer >= 0, got {token!r}")
        return token

    async def release(self, session_id: str) -> None:
        await self._ask("release", session_id=session_id)

    async def on_nodes_changed(self, stages: list[list[dict[str, Any]]]) -> None:
        await self._ask("nodes_changed", stages=stages)


# -- the served world ----------------------------------------------------------------------------

@dataclass
class _Node:
    index: int
    stage: int
    name: str
    url: str
    spec: ShardSpec
    partition: Optional[str] = None
    removed: bool = False
    told_gone: Optional[float] = None

    def address(self) -> dict[str, Any]:
        return {"name": self.name, "url": self.url, "start_layer": self.spec.start_layer,
                "end_layer": self.spec.end_layer}


@dataclass(frozen=True)
class _View:
    epoch: int
    status: str
    cached_tokens: int


class _RealTimeLoop(asyncio.SelectorEventLoop):
    """An event loop on real (monotonic) time, counted from its creation."""

    def __init__(self) -> None:
        super().__init__()
        self.origin = super().time()

    def time(self) -> float:
        return super().time() - self.origin


class _ServedWorld(NemesisWorld):
    """A served cluster as the concurrent machine's runner sees a world (see :class:`_sim.World`)."""

    gone_grace = GONE_GRACE

    def __init__(self, loop: _RealTimeLoop, control: str, http: Any, spec: ShardSpec, scenario: Scenario,
                 scale: float) -> None:
        self.loop: _RealTimeLoop = loop
        self.control, self.http, self.spec = control, http, spec
        self.scenario, self.scale = scenario, scale
        self.ranges = stage_ranges(scenario.stages, LAYERS_PER_STAGE)
        self.nodes: list[_Node] = []
        self.calls: list[Call] = []
        self.by_session: dict[Any, list[Call]] = {}
        self.events: list[dict[str, Any]] = []
        self.nemesis_log: list[dict[str, Any]] = []
        self.on_call: Optional[Callable[[Call], None]] = None
        self.on_nodes_changed: Optional[Callable[[Any], Any]] = None
        #: Called with a call and the moment its caller hung up before reading its answer.
        self.on_abandoned: Optional[Callable[[Call, float], None]] = None
        self._by_seq: dict[int, Call] = {}
        #: A call's place in :attr:`calls` -> its number in the call log.
        self._log_seq: dict[int, int] = {}
        #: The call log's numbers of the calls not ended yet.
        self._pending: set[int] = set()
        self._cursor = 0
        #: The read of the call log the callers of :meth:`sync` wait for next (``None``: none asked).
        self._next_read: Optional[asyncio.Future[None]] = None
        #: The read being made, and the task that reads (``None``: none).
        self._read_for: Optional[asyncio.Future[None]] = None
        self._reader: Optional[asyncio.Task[None]] = None
        self._names: dict[str, int] = {}
        self._views: dict[tuple[int, str], Optional[_View]] = {}
        self._used: dict[int, int] = {}
        self.in_flight: set[asyncio.Task[Any]] = set()

    # -- the cluster ---------------------------------------------------------------------------

    async def _control(self, method: str, path: str, body: Any = None) -> Any:
        kwargs: dict[str, Any] = {}
        if body is not None:
            kwargs["content"] = body if isinstance(body, bytes) else json.dumps(body).encode("utf-8")
            kwargs["headers"] = {"Content-Type": wire.JSON_CONTENT_TYPE}
        response = await self.http.request(method, self.control + path, **kwargs)
        return response

    async def _add(self, stage: int, plan: Any) -> _Node:
        a, b = self.ranges[stage]
        spec = self.spec.with_layers(a, b)
        index = len(self.nodes)
        name = f"n{index}"
        body: dict[str, Any] = {"name": name, "spec": asdict(spec), "seed": self.scenario.engine_seed,
                                "latency": [hop * self.scale for hop in HOP]}
        if self.scenario.capacity is not None:
            body["capacity_tokens"] = self.scenario.capacity
        if plan is not None and plan.rules:
            body["faults"] = json.loads(wire.dumps(plan))
        response = await self._control("POST", "/v1/nodes", body)
        if response.status_code != 200:
            raise RuntimeError(f"the control API refused node {name}: {response.text}")
        node = _Node(index, stage, name, response.json()["url"], spec)
        self.nodes.append(node)
        self._names[name] = index
        return node

    async def open(self) -> None:
        sc = self.scenario
        for stage in range(sc.stages):
            for _ in range(sc.replicas):
                await self._add(stage, sc.plans[len(self.nodes)])

    def stages(self) -> list[list[dict[str, Any]]]:
        """The cluster as the program is told of it: per stage, the nodes present, oldest first."""
        out: list[list[dict[str, Any]]] = [[] for _ in self.ranges]
        for node in self.nodes:
            if not node.removed:
                out[node.stage].append(node.address())
        return out

    def record(self, event: str, **data: Any) -> None:
        self.events.append({"t": round(self.loop.time(), 6), "event": event, **data})
        if event == "nemesis":
            self.nemesis_log.append(self.events[-1])

    # -- what the nodes saw ------------------------------------------------------------------------

    def known_at(self, call: Call) -> float:
        return call.done if call.done is not None else call.sent

    def view(self, node: _Node, session_id: str) -> Optional[_View]:
        return self._views.get((node.index, session_id))

    def used(self, node: _Node) -> int:
        return self._used.get(node.index, 0)

    def _time(self, t: Any) -> Optional[float]:
        return None if t is None else round(float(t) - self.loop.origin, 6)

    async def sync(self) -> None:
        """Read the call log from the first call not yet ended; hand each call that ended to ``on_call``.

        Callers share reads: each waits for a read sent after it called, so the
        log it sees holds every call logged before it called.  With many sessions
        in flight, many requests end at once, and one read serves them all (each
        read alone was most of the harness's HTTP calls).
        """
        if self._next_read is None:
            self._next_read = self.loop.create_future()
        waiting = self._next_read
        if self._reader is None or self._reader.done():  # done: its callback has not run yet
            self._reader = task = self.loop.create_task(self._read_log())
            self.in_flight.add(task)
            task.add_done_callback(self._read_ended)
        await asyncio.shield(waiting)

    async def _read_log(self) -> None:
        """Read the log for the callers waiting, again while more came during a read."""
        while self._next_read is not None:
            self._read_for = waiting = self._next_read
            self._next_read = None
            try:
                await self._read_log_once()
            except Exception as exc:
                waiting.set_exception(exc)
            else:
                waiting.set_result(None)

    def _read_ended(self, task: "asyncio.Task[None]") -> None:
        """The reader ended: whoever still waits is cancelled with it (a reader cancelled
        before it ever ran ran none of its own code, so this is a callback, not a ``finally``)."""
        self.in_flight.discard(task)
        if self._reader is not task:
            return  # a newer reader serves whoever waits
        self._reader = None
        for left in (self._read_for, self._next_read):
            if left is not None and not left.done():
                left.cancel()
        self._read_for = self._next_read = None

    async def _read_log_once(self) -> None:
        response = await self._control("GET", f"/v1/calls?since={self._cursor}")
        log = response.json()
        for e in log["calls"]:
            call = self._by_seq.get(e["seq"])
            if call is None:
                call = Call(len(self.calls), self._names.get(e["node"], -1), e["op"], e["session_id"], e["epoch"],
                            e["start_pos"], e["positions"], sent=self._time(e["received"]) or 0.0,
                            arrived=self._time(e["received"]))
                self._by_seq[e["seq"]] = call
                self._log_seq[call.seq] = e["seq"]
                self._pending.add(e["seq"])
                self.calls.append(call)
                self.by_session.setdefault(call.session_id, []).append(call)
            if call.outcome == "pending" and e["outcome"] != "pending":
                self._pending.discard(e["seq"])
                call.outcome = e["outcome"]
                call.answered = call.done = self._time(e["answered"])
                call.fired, call.held, call.after_wipe = tuple(e["fired"]), e["held"], e["after_wipe"]
                if self.on_call is not None:
                    self.on_call(call)
            self._hung_up(call, e)
        self._cursor = min(self._pending) if self._pending else log["next"]

    async def recheck(self, calls: list[Call]) -> None:
        """Read the log again from the first of ``calls`` on, for callers that hung up since:
        a caller may hang up after its call ended (it closes the connection with the answer
        unread), when :meth:`sync` may have read the call for the last time."""
        if not calls:
            return
        since = min(self._log_seq[c.seq] for c in calls)
        response = await self._control("GET", f"/v1/calls?since={since}")
        for e in response.json()["calls"]:
            call = self._by_seq.get(e["seq"])
            if call is not None:
                self._hung_up(call, e)

    def _hung_up(self, call: Call, entry: dict[str, Any]) -> None:
        if entry.get("abandoned") is not None and not call.abandoned:
            call.abandoned = True
            if self.on_abandoned is not None:
                self.on_abandoned(call, self._time(entry["abandoned"]) or 0.0)

    def _reachable(self) -> list[_Node]:
        return [n for n in self.nodes if not n.removed and n.partition is None]

    async def look(self, session_id: str) -> None:
        """Read what every reachable node holds of ``session_id``."""
        async def one(node: _Node) -> None:
            try:
                response = await self.http.get(f"{node.url}/v1/sessions/{quote(session_id, safe='')}")
            except Exception:  # unreachable after all: judged at the end of the run instead
                self._views.pop((node.index, session_id), None)
                return
            data = response.json() if response.status_code == 200 else None
            self._views[(node.index, session_id)] = None if data is None else _View(
                data["epoch"], data["status"], data["cached_tokens"])
        await asyncio.gather(*(one(node) for node in self._reachable()))

    async def usage(self) -> None:
        """Read how many positions each node present holds."""
        async def one(node: _Node) -> None:
            try:
                response = await self.http.get(f"{node.url}/v1/state")
                self._used[node.index] = int(response.json()["used_tokens"])
            except Exception:
                pass  # a partitioned node keeps what it was last seen to hold
        await asyncio.gather(*(one(n) for n in self.nodes if not n.removed))

    # -- the nemesis (when and what: :class:`NemesisWorld`; how: the control API) -----------------

    async def drain(self) -> None:
        """Wait for the restarts, heals and stops the nemesis scheduled."""
        while self.in_flight:
            await asyncio.gather(*list(self.in_flight))

    async def _join(self, stage: int) -> _Node:
        return await self._add(stage, None)

    async def _crash(self, node: _Node) -> Optional[str]:
        response = await self._control("POST", f"/v1/nodes/{node.name}/crash")
        return None if response.status_code == 200 else str(response.json().get("message", ""))

    async def _partition(self, node: _Node, mode: Optional[str]) -> None:
        await self._control("POST", f"/v1/nodes/{node.name}/partition", {"mode": mode})
        node.partition = mode

    async def _leave(self, node: _Node) -> None:
        node.removed = True

    async def _left(self, node: _Node) -> None:
        # A node that left may serve a moment longer (it drains): calls it still gets are logged.
        self._later(LINGER, lambda: self._stop(node))

    async def _restart(self, node: _Node) -> None:
        if not node.removed:
            await self._control("POST", f"/v1/nodes/{node.name}/restart")
            self.record("nemesis", kind="restart", node=node.index)

    async def _heal(self, node: _Node, mode: Optional[str]) -> None:
        if node.partition == mode and not node.removed:
            await self._control("DELETE", f"/v1/nodes/{node.name}/partition")
            node.partition = None
            self.record("nemesis", kind="heal", node=node.index)

    async def _stop(self, node: _Node) -> None:
        await self.sync()  # the node's calls, before it goes
        await self._control("DELETE", f"/v1/nodes/{node.name}")


# -- a run ---------------------------------------------------------------------------------------

class _ProgramRunner(_Runner):
    """The concurrent machine's runner, against a program over a served cluster in real time."""

    def __init__(self, factory: Callable[..., Any], scenario: Scenario, argv: list[str], *,
                 settings: ProgramSettings, log: Path, tolerance: float = 0.0,
                 transcript: Optional[list[dict[str, Any]]] = None) -> None:
        super().__init__(factory, scenario, lambda *a, **k: None, tolerance)
        self.argv, self.settings, self.log = argv, settings, log
        self.request_timeout = settings.request_timeout
        self.program = _Program(argv, log, transcript)

    def go(self) -> Run:
        from fakeshard.server._thread import ServerThread

        loop = _RealTimeLoop()
        server = ServerThread(self.factory, time_scale=self.settings.scale, factory_name="program")
        try:
            loop.run_until_complete(self._main(loop, server.cluster.control_url))
        except _Failed:
            pass
        finally:
            stop_tasks(loop)
            loop.run_until_complete(self._close())
            loop.close()
            server.close()
        world = getattr(self, "world", None)
        if world is not None:
            self.run.events = world.events
            self.run.calls = [c.to_dict() for c in world.calls]
        return self.run

    async def _close(self) -> None:
        await self.program.close()
        http = getattr(self, "http", None)
        if http is not None:
            await http.aclose()

    async def _sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds * self.settings.scale)

    async def _observe(self, req: Any) -> None:
        world: _ServedWorld = self.world  # type: ignore[assignment]
        await world.sync()
        if not self._refused_during(req) and self._budget_problem(
                req, self._overlapping(req), self._failures(req)) is not None:
            # Over the budget, unless a call was abandoned: the program's own timeout ended its
            # wait for a late answer (on a loaded machine), which the node may log only after
            # the call ended.  The hang-up came before the request's answer; its log, a moment later.
            await asyncio.sleep(HANGUP_GRACE)
            await world.recheck(self._sent_between(req.session_id, req.invoked, req.returned))
        if req.op == "release" and req.outcome == "ok":
            await world.look(req.session_id)

    async def _main(self, loop: asyncio.AbstractEventLoop, control: str) -> None:  # type: ignore[override]
        from fakeshard.testing._http import OriginClients

        assert isinstance(loop, _RealTimeLoop)
        sc = self.scenario
        self.http = OriginClients(timeout=CONTROL_TIMEOUT, max_connections=64)
        self.world = _ServedWorld(loop, control, self.http, self.spec, sc, self.settings.scale)  # type: ignore[assignment]
        world: _ServedWorld = self.world  # type: ignore[assignment]
        await world.open()
        world.on_call = self._on_call
        world.on_abandoned = self._abandoned
        coordinator = ProgramCoordinator(self.program)
        self.coordinator = coordinator
        try:
            await self.program.open()
        except CoordinatorBroke as exc:
            self._fail(exc.check, f"init: {exc}")
        await self._tell("init", coordinator.init(control, world.stages()))
        world.on_nodes_changed = self._nodes_changed(self._told)
        nemesis = loop.create_task(world.run_nemesis(list(sc.nemesis)))
        clients = [loop.create_task(self._client(c)) for c in sc.clients]
        await asyncio.gather(*clients)
        await nemesis
        await world.drain()
        deadline = loop.time() + self.settings.settle
        while True:
            await world.sync()
            await world.usage()
            if not any(world.used(n) for n in world.nodes if not n.removed) or loop.time() >= deadline:
                break
            await asyncio.sleep(0.1)
        await world.recheck(world.calls)  # the history keeps every hang-up the nodes logged
        for node in world.nodes:  # what a leak holds, by session, for its report
            if not node.removed and world.used(node):
                for sid in self.sessions_seen(node):
                    await world.look(sid)
        self._final()

    def _unseen_failures(self, req: Any) -> int:
        """Failures inside the program that no node saw, as the silences they leave.

        A call can fail in the program before it leaves it: its own timeout fires while
        its event loop is starved on a loaded machine, or it waits for a connection; no
        node logs it, yet the program recovers from it (a retry, a re-route, a replay).
        Such a failure leaves a silence: a stretch in which none of the session's calls
        is on any node.  Each silence within the request that came after a call that
        ended ``ok`` (or from the request's start) and that ended with another call counts
        one failure for every :data:`SILENCE` seconds it lasted.  A silence after a call
        that failed, or was abandoned, is that failure's (counted already); one that no
        call ends is a program that did nothing (not counted).
        """
        assert req.returned is not None
        count, quiet_from, after_ok = 0, req.invoked, True
        for call in self._sent_between(req.session_id, req.invoked, req.returned):
            gap = call.sent - quiet_from
            if after_ok and gap >= SILENCE:
                count += int(gap // SILENCE)
            quiet_from = max(quiet_from, math.inf if call.answered is None else call.answered)
            after_ok = call.outcome == "ok" and not call.abandoned
        return count

    def _check_budget(self, req: Any, overlapping: list[Any], faults: int) -> None:
        """The budget, for a request no refusing node overlapped: a refused connection never
        reaches a node's call log, so the failures it caused cannot be counted (the simulation
        counts them); such a request's calls are not judged."""
        if self._refused_during(req):
            self.run.reached["program:budget_unjudged_refused"] += 1
            return
        unseen = self._unseen_failures(req)
        if unseen:
            self.run.reached["program:silent_failure"] += unseen
        problem = self._budget_problem(req, overlapping, faults)
        if problem is not None:
            if unseen:
                problem += (f" ({unseen} of the failures: silences, {SILENCE:g} s each, in which no node had a "
                            f"call of the session, which a failure inside the program would leave)")
            self._fail("budget", problem)

    def _unreachable(self, sid: str, start: float, end: float) -> set[int]:
        """The simulation's nodes a release could not be sure to reach, and every node the
        release sent no cleanup call for ``sid`` (reaching the nodes' log): a call can fail
        in the program before it leaves (its own timeout, on a loaded machine), unseen by any
        node.  What they hold is judged at the end of the run."""
        out = super()._unreachable(sid, start, end)
        cleaned = {c.node for c in self._sent_between(sid, start, end) if c.op in ("cancel", "release")}
        unseen = {node.index for node in self.world.nodes} - cleaned
        if any(self.world.view(self.world.nodes[i], sid) is not None for i in unseen - out):
            self.run.reached["program:release_judged_at_end"] += 1
        return out | unseen

    def _unanswered_why(self, req: Any) -> str:
        """The calls for the request's session the program hung up on though their nodes
        answered them: a call timeout shorter than the nodes take (a long prefill on a slow
        machine) makes a coordinator retry for ever."""
        calls = self._sent_between(req.session_id, req.invoked, req.returned)
        late = [c.answered - c.sent for c in calls
                if c.abandoned and c.outcome == "ok" and c.answered is not None]
        if not late:
            return self._hung_why(req) or self.program.silent_output()
        return (f"; meanwhile the program hung up on {len(late)} of its {len(calls)} calls for the session "
                f"though their nodes answered them, in {min(late):.2f} to {max(late):.2f} s: its call "
                "timeout may be shorter than the nodes take")

    def _refused_during(self, req: Any) -> bool:
        """Whether a refusing partition was on at some moment of ``req`` (or healed just before)."""
        for e in self.world.nemesis_log:
            if e["kind"] == "partition" and e.get("mode") == "refuse" and "skipped" not in e:
                healed = next((h["t"] for h in self.world.nemesis_log
                               if h["kind"] == "heal" and h["node"] == e["node"] and h["t"] >= e["t"]), None)
                if e["t"] <= req.returned and (healed is None or healed + REFUSE_AFTERMATH >= req.invoked):
                    return True
        return False

    def _abandoned(self, call: Call, at: float) -> None:
        self.run.reached["program:call_abandoned"] += 1
        super()._abandoned(call, at)

    async def _told(self, stages: Any) -> None:
        """Tell the program the cluster's new shape."""
        await self._tell("nodes_changed", self.coordinator.on_nodes_changed(stages))

    async def _tell(self, what: str, request: Any) -> None:
        """Await a request that belongs to no session (``init``, ``nodes_changed``): any answer
        but its ``_ok`` fails the run."""
        try:
            await asyncio.wait_for(request, self.request_timeout)
        except asyncio.TimeoutError:
            self._fail("unanswered", f"{what} was left unanswered for {self.request_timeout:g} s"
                       + self.program.silent_output())
        except CoordinatorBroke as exc:
            self._fail(exc.check, f"{what}: {exc}")
        except (GaveUp, ProgramFailed) as exc:
            self._fail("raised", f"{what}: {exc}")


def _argv(command: str) -> list[str]:
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise ValueError(f"--coordinator-cmd cannot be read as a command line: {exc}") from None
    if not argv:
        raise ValueError("--coordinator-cmd is empty: give the program and its arguments")
    return argv


def run_program_scenario(factory: Callable[..., Any], scenario: Scenario, command: str, *,
                         settings: ProgramSettings = ProgramSettings(), log: Optional[Path] = None,
                         tolerance: float = 0.0, transcript: Optional[list[dict[str, Any]]] = None) -> Run:
    """Run ``scenario`` against the coordinator program ``command`` (a shell-quoted command
    line) over nodes from ``factory`` served on loopback; the run, ``failure`` set at the first
    broken check (quoting the end of the program's log).  The program's standard error goes
    to ``log``, else to a temporary file removed after the run; every request and answer, to
    ``transcript`` if given."""
    argv = _argv(command)
    with contextlib.ExitStack() as scratch:
        if log is None:
            log = Path(scratch.enter_context(tempfile.TemporaryDirectory(prefix="fakeshard-program-"))) / "program.log"
        return _ProgramRunner(factory, scenario, argv, settings=settings, log=log, tolerance=tolerance,
                              transcript=transcript).go()


def make_trace(scenario: Scenario, run: Run, *, factory_name: str, command: str, settings: ProgramSettings,
               evidence_class: str, note: str = "") -> Trace:
    return Trace(machine="program", engine_factory=factory_name, evidence_class=evidence_class,
                 config={"scenario": scenario.to_dict(), "coordinator_cmd": command, "check": run.check,
                         "settings": settings.to_dict()},
                 steps=run.events, actual=run.calls, failure=run.failure, note=note,
                 hypothesis_version=hypothesis_version(), git_commit=git_commit())


def program_examples(settings: Any) -> int:
    """Scenarios per campaign of a program: a twenty-fifth of the profile's examples (each is a
    whole run in real time: ``ci`` runs 20), at least four."""
    return program_scenarios_for(settings.max_examples)


def program_scenarios_for(max_examples: int) -> int:
    """:func:`program_examples` of a profile of ``max_examples`` examples."""
    return max(max_examples // 25, 4)


def run_program(config: Any, command: str, *, settings: Any = None, program: ProgramSettings = ProgramSettings(),
                save_dir: Any = None, seed: Optional[int] = None, availability: Optional[float] = None,
                reduce_failure: Optional[bool] = None) -> Run:
    """The concurrent campaign against the program ``command``; the runs' situations summed.

    On the first failing scenario: reduce it by re-running candidates (unless the profile
    says not to; at most :data:`REDUCE_BUDGET` re-runs), re-run the result
    :data:`CONFIRM_RUNS` times to say how often it fails again, save its trace under
    ``save_dir`` and raise :class:`ConcurrentFailure`.
    """
    from hypothesis import settings as Settings

    from fakeshard.testing._lengths import MANY_HOPS, longest_prompt

    _argv(command)
    settings = settings if settings is not None else Settings.default
    longest = longest_prompt(config.max_positions, config.hidden_size, share=MANY_HOPS)
    with tempfile.TemporaryDirectory(prefix="fakeshard-program-") as logs:
        return _campaign(config, command, settings, program, save_dir, seed, availability, reduce_failure,
                         longest, Path(logs))


def _campaign(config: Any, command: str, settings: Any, program: ProgramSettings, save_dir: Any,
              seed: Optional[int], availability: Optional[float], reduce_failure: Optional[bool], longest: int,
              logs: Path) -> Run:
    from hypothesis import HealthCheck, Phase, given
    from hypothesis import settings as Settings

    from fakeshard.testing._draws import search_until_found

    total = Run()
    found: list[tuple[Scenario, Run]] = []
    counter = itertools.count()
    last_log = [logs / "none.log"]

    def once(sc: Scenario) -> Run:
        last_log[0] = logs / f"run-{next(counter)}.log"
        return run_program_scenario(config.factory, sc, command, settings=program, log=last_log[0],
                                    tolerance=config.tolerance)

    @with_targeted(config.hidden_size)
    @Settings(settings, max_examples=program_examples(settings), phases=[Phase.explicit, Phase.generate],
              database=None, deadline=None, suppress_health_check=list(HealthCheck), print_blob=False)
    @given(scenarios(longest=longest, hidden_size=config.hidden_size, modes=("refuse", "hang", "reset")))
    def search(sc: Scenario) -> None:
        if found:
            return
        run = once(sc)
        config.runs += 1
        config.steps += sum(1 for e in run.events if e["event"] == "complete")
        if config.on_step is not None:
            config.on_step(config)
        total.add(run)
        probes_of(run)
        if run.failure is not None:
            found.append((sc, run))
            raise ConcurrentFailure("found")

    search_until_found(search, found, seed)
    if not found:
        return check_availability(total, availability)
    scenario, run = found[0]
    _report_failure(config, command, program, save_dir, reduce_failure, scenario, run, once, last_log)


def _report_failure(config: Any, command: str, program: ProgramSettings, save_dir: Any,
                    reduce_failure: Optional[bool], scenario: Scenario, run: Run, once: Callable[[Scenario], Run],
                    last_log: list[Path]) -> NoReturn:
    """The failure a campaign found in ``run`` of ``scenario``: reduced by re-running candidates
    (unless the profile says not to), re-run :data:`CONFIRM_RUNS` times to say how often it fails
    again, saved with the program's log of a failing run, and raised as :class:`ConcurrentFailure`."""
    from fakeshard.testing import _profiles as profiles

    check = run.check
    if reduce_failure is None:
        reduce_failure = profiles.reduces_failures()
    tried = [0, 0]

    def rerun(candidate: Scenario) -> Run:
        """A run of the failure found, or of a candidate reduction: seconds each, so counted
        where the progress display sees them."""
        run = once(candidate)
        config.reruns += 1
        if config.on_step is not None:
            config.on_step(config)
        return run

    def fails(candidate: Scenario) -> bool:
        tried[0] += 1
        again = rerun(candidate).check == check
        tried[1] += again
        return again

    if reduce_failure:
        scenario = reduce(scenario, fails, budget=REDUCE_BUDGET)
    confirm = []
    for _ in range(CONFIRM_RUNS):
        confirm.append((rerun(scenario), last_log[0]))
    again = [(r, path) for r, path in confirm if r.check == check]
    run, log = again[0] if again else (run, last_log[0])
    note = (f"real time: the reduced scenario failed the {check!r} check again in {len(again)} of "
            f"{CONFIRM_RUNS} re-runs"
            + (f"; the reduction re-ran {tried[0]} candidates, {tried[1]} of which failed again" if tried[0] else ""))
    evidence = getattr(config.factory, "evidence_class", "fixture")
    trace = make_trace(scenario, run, factory_name=config.factory_name, command=command, settings=program,
                       evidence_class=evidence if isinstance(evidence, str) else "fixture", note=note)
    message = (f"coordinator program {command!r} failed on {config.factory_name}: {run.failure}\n"
               f"{scenario.describe()}\n{note}")
    path = keep(trace, config, save_dir, lambda: saved_history(trace))
    if path is not None:
        message += f"\nfakeshard: trace saved to {path}"
        try:
            shutil.copyfile(log, path.with_suffix(".log"))
            message += f", the program's log of that run to {path.with_suffix('.log')}"
        except OSError:
            pass
    config.last_failure = trace
    raise ConcurrentFailure(message, trace)


@dataclass
class Replayed:
    """A program trace run again: the new run, whether it broke the same check, and the
    program's log of the run (a file the caller may keep or remove)."""

    run: Run
    same_check: bool
    log: Path


def replay_program(trace: Trace, factory: Callable[..., Any], command: Optional[str] = None,
                   tolerance: float = 0.0) -> Replayed:
    """Run ``trace``'s scenario again against ``command`` (else the program it names), in real
    time: the same scenario, not the same interleaving."""
    scenario = Scenario.from_dict(trace.config["scenario"])
    settings = ProgramSettings(**trace.config.get("settings", {}))
    command = command or trace.config["coordinator_cmd"]
    fd, name = tempfile.mkstemp(prefix="fakeshard-program-", suffix=".log")
    os.close(fd)
    run = run_program_scenario(factory, scenario, command, settings=settings, tolerance=tolerance, log=Path(name))
    return Replayed(run, run.check == trace.config.get("check"), Path(name))
