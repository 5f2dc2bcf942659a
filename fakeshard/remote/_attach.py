"""Engines on a host the kit did not start in process: a node host in any language, attached by
the URL of its control port or started from a command (docs/contract.md, "Engine hosts").

A host serves HTTP API v1: each node's data plane, and of the control port at least
``GET /v1/nodes``, ``POST /v1/nodes``, ``DELETE /v1/nodes/{name}`` and
``POST /v1/nodes/{name}/restart``. Started from a command, it prints its roster (one JSON
line, as ``fakeshard serve`` does) on standard output when ready. :func:`attached` is an
engine factory whose every engine is a node the host adds; the suites and the machines drive
it as any other engine, judged by the contract alone (``fixture_choices`` is false).
"""

from __future__ import annotations

import atexit
import collections
import dataclasses
import json
import os
import queue
import shlex
import signal
import subprocess
import tempfile
import threading
import weakref
from typing import IO, Any, NoReturn, Optional

import httpx

from fakeshard._clock import Clock, VirtualClock
from fakeshard._contract import ShardSpec
from fakeshard._engine import check_engine_arguments
from fakeshard._errors import ShardError
from fakeshard._factory import FactoryError
from fakeshard._faults import Delay, FaultPlan, FaultRule
from fakeshard._judge import JUDGING_FIELDS, JudgingError, read_judging, read_logits
from fakeshard._layer import ALL_FAULT_KINDS, LAYER_FAULT_KINDS, FaultLayer, without_unapplied
from fakeshard.remote._admin import ClusterClient
from fakeshard.remote._engine import RemoteError, RemoteShardEngine, new_client

#: The environment variable holding the control URL of the host :data:`attached_engine` uses.
ENGINE_URL_ENV_VAR = "FAKESHARD_ENGINE_URL"
#: Seconds a host started from a command has to print its roster.
READY_TIMEOUT = 30.0
#: The answers by which a host says it does not serve an optional route of its control port.
NOT_SERVED = (404, 405, 501)


class HostError(FactoryError):
    """A host that cannot be used: a command that does not start, no roster in time, a control
    port that answers outside the contract. A usage error (``check`` exits 2), never a failure
    the campaign found."""


def check_control_url(url: object) -> str:
    """``url`` if it is a control URL the kit can use (``http://HOST:PORT``), else :class:`HostError`."""
    if not isinstance(url, str) or not url.startswith(("http://", "https://")) or len(url.split("://", 1)[1]) == 0:
        raise HostError(f"a host's control URL is http://HOST:PORT, got {url!r}")
    return url.rstrip("/")


def probe_host(url: str, *, timeout: float = 10.0) -> dict[str, Any]:
    """The roster the host at control URL ``url`` answers to ``GET /v1/nodes``; :class:`HostError`
    naming what was wrong if it cannot be reached or answers outside the contract."""
    control = check_control_url(url)
    try:
        with httpx.Client(timeout=timeout) as client:
            response = client.get(control + "/v1/nodes")
    except httpx.HTTPError as exc:
        raise HostError(f"host {control}: GET /v1/nodes failed: {type(exc).__name__}: {exc}") from None
    if response.status_code != 200:
        raise HostError(f"host {control}: GET /v1/nodes answered HTTP {response.status_code}, "
                        "the contract's answer is 200 and the roster") from None
    try:
        roster = response.json()
    except ValueError:
        raise HostError(f"host {control}: GET /v1/nodes answered no JSON: {response.text[:120]!r}") from None
    if not isinstance(roster, dict) or roster.get("kind") != "roster" or not isinstance(roster.get("nodes"), dict):
        raise HostError(f"host {control}: GET /v1/nodes answered no roster (an object with "
                        f"\"kind\": \"roster\" and a \"nodes\" object): {str(roster)[:120]}")
    return roster


class Host:
    """A host started from ``command`` (one shell-quoted command line, run without a shell, in a
    process group of its own): ready once it printed its roster line; :meth:`close` stops it
    and its children (SIGTERM to the group; once the host exited, or ``grace`` seconds passed,
    SIGKILL to what remains of the group)."""

    def __init__(self, command: str, *, ready_timeout: float = READY_TIMEOUT, grace: float = 5.0) -> None:
        try:
            argv = shlex.split(command)
        except ValueError as exc:
            raise HostError(f"--engine-cmd {command!r} is no command line: {exc}") from None
        if not argv:
            raise HostError("--engine-cmd is empty: give the command that starts your host")
        self.command, self.grace = command, grace
        self._stderr: IO[bytes] = tempfile.TemporaryFile()
        try:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                         stderr=self._stderr, start_new_session=True)
        except OSError as exc:
            self._stderr.close()
            raise HostError(f"--engine-cmd {command!r} did not start: {exc.strerror or exc}") from None
        lines: "queue.Queue[bytes]" = queue.Queue()
        # Standard output is read to its end, so a host that keeps printing never blocks on it.
        self._reader = threading.Thread(target=_drain, args=(self.proc.stdout, lines), daemon=True)
        self._reader.start()
        try:
            line = lines.get(timeout=ready_timeout)
        except queue.Empty:
            self._fail(f"printed no roster line within {ready_timeout:g} s")
        if not line:
            self._fail(f"exited ({self.proc.wait()}) before it printed its roster")
        try:
            roster = json.loads(line)
            self.control = check_control_url(roster["control"])
        except (ValueError, KeyError, TypeError, HostError):
            self._fail("printed a first line that is no roster (one JSON object with \"control\": "
                       f"\"http://HOST:PORT\"): {line[:120]!r}")
        self.roster: dict[str, Any] = roster

    def _fail(self, what: str) -> "NoReturn":
        self._stderr.seek(0)
        tail = self._stderr.read()[-400:].decode("utf-8", "replace").strip()
        self.close()
        said = f"; its standard error ends: {tail}" if tail else ""
        raise HostError(f"--engine-cmd {self.command!r} {what}{said}")

    def close(self) -> None:
        """Stop the host and its children; idempotent."""
        if self.proc.poll() is None:
            _signal_group(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=self.grace)
            except subprocess.TimeoutExpired:
                pass
        # Whatever of the group outlived the host (or ignored SIGTERM) is killed.
        _signal_group(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self._reader.join(timeout=self.grace)  # it closes standard output at its end
        if not self._stderr.closed:
            self._stderr.close()

    def __enter__(self) -> "Host":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _signal_group(group: int, signum: int) -> None:
    try:
        os.killpg(group, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _drain(stream: Optional[IO[bytes]], lines: "queue.Queue[bytes]") -> None:
    if stream is None:  # pragma: no cover - stdout is a pipe
        lines.put(b"")
        return
    first = True
    with stream:
        for line in iter(stream.readline, b""):
            if first:
                lines.put(line)
                first = False
    if first:
        lines.put(b"")


class _Attached:
    """One host's control port and connection pool, shared by the engines made on it."""

    lock = threading.Lock()
    by_url: dict[str, "_Attached"] = {}

    def __init__(self, control: str) -> None:
        self.admin = ClusterClient({"control": control})
        self.client = new_client(30.0)
        #: Nodes whose engines are gone: removed before the next node is added (or at exit).
        self.doomed: "collections.deque[str]" = collections.deque()
        self._plans: Optional[bool] = None
        self._judging: Optional[dict[str, Any]] = None
        self._logits: Optional[bool] = None
        atexit.register(self.sweep)

    def sweep(self) -> None:
        while self.doomed:
            try:
                self.admin.remove(self.doomed.popleft())
            except (httpx.HTTPError, RemoteError, ShardError):
                pass

    @property
    def fault_plans(self) -> bool:
        """Whether the host's nodes run fault plans: asked once, by adding a node with a plan
        that never fires (``501 not_supported``: they do not, and the kit applies plans itself)."""
        if self._plans is None:
            probe = FaultPlan((FaultRule(Delay(0.0), op="decode", session_id="fakeshard-probe"),))
            try:
                described = self.admin.add(ShardSpec("fakeshard-probe", 1, 0, 1), faults=probe)
            except RemoteError as exc:
                if exc.status != 501:
                    raise HostError(f"host {self.admin.control}: POST /v1/nodes with a fault plan answered "
                                    f"{exc}; the contract's answers are the node, or 501 not_supported") from None
                self._plans = False
            except (httpx.HTTPError, ShardError) as exc:
                raise HostError(f"host {self.admin.control}: POST /v1/nodes failed: {exc}") from None
            else:
                self.doomed.append(described["name"])
                self._plans = True
        return self._plans

    def _get(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            return self.client.request(method, self.admin.control + path, **kwargs)
        except httpx.HTTPError as exc:
            raise HostError(f"host {self.admin.control}: {method} {path} failed: {type(exc).__name__}: {exc}") from None

    @property
    def judging(self) -> dict[str, Any]:
        """What the host states of how its nodes are judged (``GET /v1/judging``, asked once; a
        host that does not serve it states nothing: its nodes are judged exactly, at the kit's
        sizes). An answer outside the contract is a :class:`HostError`."""
        if self._judging is None:
            response = self._get("GET", "/v1/judging")
            if response.status_code in NOT_SERVED:
                self._judging = {}
            elif response.status_code != 200:
                raise HostError(f"host {self.admin.control}: GET /v1/judging answered HTTP {response.status_code}; "
                                "the contract's answers are 200 and a judging object, or 404 (not served)")
            else:
                try:
                    self._judging = read_judging(response.json())
                except (ValueError, JudgingError) as exc:
                    raise HostError(f"host {self.admin.control}: GET /v1/judging: {exc}") from None
        return self._judging

    @property
    def serves_logits(self) -> bool:
        """Whether the host serves ``POST /v1/logits``: asked once, with a body it must refuse
        (``400 bad_request``: it does; 404, 405 or 501: it does not)."""
        if self._logits is None:
            response = self._get("POST", "/v1/logits", content=b"{}", headers={"Content-Type": "application/json"})
            if response.status_code in NOT_SERVED:
                self._logits = False
            elif response.status_code == 400:
                self._logits = True
            else:
                raise HostError(f"host {self.admin.control}: POST /v1/logits with an empty object answered HTTP "
                                f"{response.status_code}; the contract's answers are 400 bad_request, or 404 "
                                "(not served)")
        return self._logits

    def logits(self, spec: ShardSpec, seed: int, tokens: Any) -> list[float]:
        """The host's full model's next-token logits after ``tokens`` (``POST /v1/logits``)."""
        body = {"spec": dataclasses.asdict(spec), "seed": seed, "tokens": [int(t) for t in tokens]}
        response = self._get("POST", "/v1/logits", content=json.dumps(body).encode("ascii"),
                             headers={"Content-Type": "application/json"})
        if response.status_code != 200:
            raise HostError(f"host {self.admin.control}: POST /v1/logits answered HTTP {response.status_code}: "
                            f"{response.text[:200]}")
        try:
            return read_logits(response.json(), spec.vocab_size)
        except (ValueError, JudgingError) as exc:
            raise HostError(f"host {self.admin.control}: POST /v1/logits: {exc}") from None

    def real_model_problem(self) -> Optional[str]:
        """Why the host's real-model nodes cannot be judged (``None``: they can): a tolerance must
        be stated, and above 0, the logits that decide near ties must be served."""
        judging = self.judging
        if "tolerance" not in judging:
            return ("a real-model host states how its arithmetic is judged: serve GET /v1/judging on the control "
                    "port with its tolerance (docs/contract.md, \"Judging a real-model host\"); judged exactly, "
                    "it would fail for rounding alone")
        if judging["tolerance"] > 0 and not self.serves_logits:
            return ("a real-model host judged within a tolerance serves POST /v1/logits on the control port, "
                    "the full model's logits that decide a near tie (docs/contract.md, \"Judging a real-model "
                    "host\"); without them a near tie would be judged a wrong token")
        return None

    @classmethod
    def of(cls, control: str) -> "_Attached":
        with cls.lock:
            attached = cls.by_url.get(control)
            if attached is None:
                attached = cls.by_url[control] = cls(control)
            return attached


def _check_arguments(spec: object, seed: object, capacity_tokens: object, clock: object, faults: object) -> None:
    """The factory's arguments, refused here with a typed error before anything is sent."""
    if not isinstance(spec, ShardSpec):
        raise TypeError(f"spec must be a ShardSpec, got {type(spec).__name__}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    check_engine_arguments(capacity_tokens, clock, faults)


class AttachedFactory:
    """An engine factory whose every engine is a node added to the host at control URL
    ``control`` (``None``: ``$FAKESHARD_ENGINE_URL``, read at each call), with the signature of
    ``FakeShardEngine``. The caller's clock accounts the node's delays. A fault plan goes to the
    host with the node where its nodes run plans (``POST /v1/nodes``, ``faults``); else the kit
    applies it in front of the node (:class:`~fakeshard._layer.FaultLayer`: every kind but
    ``MemoryPressure``, which :attr:`fault_kinds` then leaves out). Judged by the contract alone,
    unless the host says otherwise (``GET /v1/judging``: its tolerance, its machines' sizes,
    ``fixture_choices``), with the host's logits deciding near ties (``POST /v1/logits``)."""

    #: Its engines are nodes over HTTP: the checks of a node's HTTP layer run on them.
    makes_http_nodes = True
    __name__ = "attached_engine"

    def __init__(self, control: Optional[str] = None) -> None:
        self.control = control

    def _host(self) -> "_Attached":
        url = self.control if self.control is not None else os.environ.get(ENGINE_URL_ENV_VAR)
        if not url:
            raise HostError(f"no host to attach to: give --engine-url URL or --engine-cmd CMD "
                            f"(or set ${ENGINE_URL_ENV_VAR})")
        return _Attached.of(check_control_url(url))

    @property
    def fixture_choices(self) -> bool:
        """Whether the host says its nodes make the fixture's choices (``GET /v1/judging``); false
        unless it does."""
        return self._host().judging.get("fixture_choices", False) is True

    def __getattr__(self, name: str) -> Any:
        # The judging attributes a factory may state (fakeshard._judge): those the host states.
        if name in JUDGING_FIELDS:
            judging = self._host().judging
            if name in judging:
                return judging[name]
        elif name == "logits":
            host = self._host()
            if host.judging.get("tolerance", 0.0) > 0 and host.serves_logits:
                return host.logits
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def judged_by(self) -> str:
        """How the host's nodes are judged, in words (a report's line)."""
        host = self._host()
        tol = host.judging.get("tolerance", 0.0)
        how = "exactly" if tol == 0 else f"within tolerance {tol:g}, near ties by the host's logits"
        return how + (", and by the fixture's choices" if self.fixture_choices else ", by the contract alone")

    @property
    def fault_kinds(self) -> frozenset[str]:
        """The fault kinds the engines apply: every kind where the host's nodes run plans."""
        return ALL_FAULT_KINDS if self._host().fault_plans else LAYER_FAULT_KINDS

    def faults_applied_by(self) -> str:
        """Who applies the plans, in words (a report's line)."""
        return ("the host's nodes" if self._host().fault_plans else
                "the kit, in front of the host's nodes (the host runs no fault plans): every kind but "
                "MemoryPressure, which is not applied")

    def __call__(self, spec: ShardSpec, *, seed: int = 0, capacity_tokens: Optional[int] = None,
                 clock: Optional[Clock] = None, faults: Optional[FaultPlan] = None) -> Any:
        _check_arguments(spec, seed, capacity_tokens, clock, faults)
        host = self._host()
        url = host.admin.control
        host.sweep()
        plan = faults if faults is not None and faults.rules else None
        # A host that runs no plans gets every engine behind the kit's layer, a plan or none: its
        # crash() and fault log are the layer's, so nothing asks the host for what it need not serve.
        layer = not host.fault_plans
        try:
            described = host.admin.add(spec, seed=seed, capacity_tokens=capacity_tokens,
                                       faults=None if layer else plan)
        except httpx.HTTPError as exc:
            raise HostError(f"host {url}: POST /v1/nodes failed: {type(exc).__name__}: {exc}") from None
        except (RemoteError, ShardError) as exc:
            what = "with a fault plan " if plan is not None and not layer else ""
            raise HostError(f"host {url}: POST /v1/nodes {what}was refused: {exc}") from None
        clock = clock if clock is not None else VirtualClock()
        engine = RemoteShardEngine(described["url"], control=url, name=described["name"],
                                   client=host.client, clock=clock)
        weakref.finalize(engine, host.doomed.append, described["name"])
        if engine.evidence_class != "fixture":
            # Real arithmetic is judged within the tolerance the host states, near ties by its logits.
            problem = host.real_model_problem()
            if problem is not None:
                raise HostError(f"host {url}: its nodes' evidence class is {engine.evidence_class!r}; {problem}")
        if layer:
            return FaultLayer(engine, without_unapplied(plan), clock=clock)
        return engine


def attached(control: Optional[str] = None) -> AttachedFactory:
    """The engine factory of the host at control URL ``control`` (``None``: ``$FAKESHARD_ENGINE_URL``)."""
    return AttachedFactory(control)


#: The factory ``--engine-url`` and ``--engine-cmd`` run the suites on: ``$FAKESHARD_ENGINE_URL``'s host.
attached_engine = attached()
