"""A served node as a ``ShardEngine``: calls over HTTP, answers and errors mapped back."""

from __future__ import annotations

import json
import weakref
from typing import Any, Optional, Union
from urllib.parse import quote

import httpx

from fakeshard import wire
from fakeshard._clock import Clock
from fakeshard._contract import HiddenBundle, InputBundle, OutputBundle, SampleBundle, ShardSpec, TokenBundle
from fakeshard._engine import SessionView
from fakeshard._errors import EngineCrashed, MalformedBundle, ResponseLost, ShardError
from fakeshard._faults import Fired
from fakeshard.wire._encode import to_dict

SERVER_ENV_VAR = "FAKESHARD_SERVER"
DELAY_HEADER = "Fakeshard-Delay"
_BUNDLES = (TokenBundle, HiddenBundle, SampleBundle)


def session_path(session_id: str) -> str:
    """``session_id`` as the last segment of ``/v1/sessions/{session_id}``: its UTF-8 bytes (a lone
    surrogate as its three bytes, as the checksum header gives it) percent-encoded, every byte
    but ASCII letters, digits, ``-``, ``_`` and ``~``; ``.`` too, so that no client or proxy takes
    ``.`` or ``..`` for a dot segment of the path and removes it."""
    return quote(session_id.encode("utf-8", "surrogatepass"), safe="").replace(".", "%2E")


class RemoteError(Exception):
    """The server answered outside the documented set, or refused an admin call (code, message)."""

    def __init__(self, message: str, *, status: Optional[int] = None, code: Optional[str] = None) -> None:
        super().__init__(message)
        self.status, self.code = status, code


def new_client(timeout: float) -> httpx.Client:
    limits = httpx.Limits(max_connections=256, max_keepalive_connections=64)
    return httpx.Client(timeout=httpx.Timeout(timeout), limits=limits, trust_env=False)


def transport_error(exc: httpx.TransportError, what: str, session_id: Optional[str],
                    epoch: Optional[int]) -> ShardError:
    """The contract's error for a request ``what`` that failed in transport: no connection is
    ``EngineCrashed`` (nothing was applied); anything after the request was sent is
    ``ResponseLost`` (it may or may not have been applied)."""
    if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)):
        return EngineCrashed(f"{what}: no connection ({exc}); nothing was applied", session_id=session_id,
                             epoch=epoch)
    return ResponseLost(f"{what}: {type(exc).__name__} after the request was sent ({exc}); it may or may not "
                        "have been applied", session_id=session_id, epoch=epoch)


def error_of(response: httpx.Response) -> Union[ShardError, RemoteError]:
    """The typed error an error answer carries."""
    try:
        error = wire.loads(response.content)
    except MalformedBundle:
        try:
            data = response.json()
            code, message = data.get("code"), data.get("message")
        except (ValueError, AttributeError):
            code, message = None, response.text[:200]
        return RemoteError(f"HTTP {response.status_code} {code}: {message}", status=response.status_code,
                           code=code)
    if not isinstance(error, ShardError):
        return RemoteError(f"HTTP {response.status_code} with a {type(error).__name__}",
                           status=response.status_code)
    return error


def _readable(bundle: Any) -> bytes:
    """``bundle`` as readable JSON, whatever its fields hold.

    A value JSON cannot hold (a numpy array or integer, a ``range``, bytes)
    travels as ``{"no_wire_form": "<its type>"}``, an object no field of any
    bundle accepts: the node's engine makes its own earlier checks (is it up?)
    and then refuses the bundle as malformed, naming that field, as an engine
    in process refuses the original.  Nothing is converted into a value the
    node would accept.
    """
    try:
        return wire.dumps(bundle).encode("utf-8")
    except TypeError:
        pass
    try:
        return json.dumps(to_dict(bundle),
                          default=lambda value: {"no_wire_form": type(value).__name__}).encode("utf-8")
    except (TypeError, ValueError):  # not even that (a non-string key, a cycle): no bundle at all
        return _not_a_bundle(bundle)


def _not_a_bundle(value: Any) -> bytes:
    """The body sent for what is no bundle, so the node's engine refuses it as it would in process."""
    return json.dumps({"kind": "not_a_bundle", "type": type(value).__name__}).encode("utf-8")


class RemoteShardEngine:
    """A served node, as a :class:`~fakeshard.ShardEngine`.

    ``encoding`` is ``"frame"`` (binary frames, the default) or ``"json"``.
    A ``clock`` given here sleeps for the virtual delay each answer reports,
    so a ``VirtualClock`` accounts the node's ``Delay`` faults (a dropped
    answer reports none).  ``control`` and ``name`` (known when a
    :class:`ClusterClient` made the engine) let :meth:`restart`, :meth:`crash`
    and :attr:`fault_log` reach the node's control port.
    """

    def __init__(self, url: str, *, timeout: float = 30.0, encoding: str = "frame",
                 clock: Optional[Clock] = None, control: Optional[str] = None,
                 name: Optional[str] = None, client: Optional[httpx.Client] = None) -> None:
        if encoding not in ("frame", "json"):
            raise ValueError(f"encoding must be 'frame' or 'json', got {encoding!r}")
        self.url = url.rstrip("/")
        self.encoding, self.clock, self.control, self.name = encoding, clock, control, name
        if client is None:
            client = new_client(timeout)
            # An engine that made its pool closes it when it goes (or on close()).
            self._finalizer: Optional[weakref.finalize] = weakref.finalize(self, client.close)
        else:
            self._finalizer = None
        self._client = client
        state = self._state()
        self.spec: ShardSpec = ShardSpec(**state["spec"])
        self.evidence_class: str = state["evidence_class"]

    def close(self) -> None:
        """Close the connection pool this engine made (a shared one is its owner's to close)."""
        if self._finalizer is not None:
            self._finalizer()

    def __enter__(self) -> "RemoteShardEngine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        s = self.spec
        return f"RemoteShardEngine({self.url!r}, layers {s.start_layer}..{s.end_layer} of {s.n_layers})"

    # -- transport -----------------------------------------------------------

    def _send(self, method: str, path: str, *, session_id: Any = None, epoch: Any = None,
              **kwargs: Any) -> httpx.Response:
        sid = session_id if isinstance(session_id, str) else None
        ep = epoch if type(epoch) is int else None
        try:
            response = self._client.request(method, self.url + path, **kwargs)
        except httpx.TransportError as exc:
            raise transport_error(exc, f"{method} {self.url}{path}", sid, ep) from None
        if self.clock is not None:
            delay = response.headers.get(DELAY_HEADER)
            try:
                seconds = float(delay) if delay is not None else 0.0
            except ValueError:
                seconds = 0.0
            if seconds > 0:
                self.clock.sleep(seconds)
        return response

    def _state(self) -> dict[str, Any]:
        response = self._send("GET", "/v1/state")
        if response.status_code != 200:
            raise error_of(response)
        return response.json()

    # -- the engine surface --------------------------------------------------

    def _compute(self, op: str, bundle: Any) -> Any:
        session_id, epoch = getattr(bundle, "session_id", None), getattr(bundle, "epoch", None)
        if isinstance(bundle, _BUNDLES):
            body: bytes
            try:
                if self.encoding == "frame":
                    body, kind = wire.dumpb(bundle), wire.FRAME_CONTENT_TYPE
                else:
                    body, kind = wire.dumps(bundle, hidden="base64").encode("utf-8"), wire.JSON_CONTENT_TYPE
            except TypeError:  # values with no binary form travel as readable JSON
                body, kind = _readable(bundle), wire.JSON_CONTENT_TYPE
        else:  # not a bundle: sent anyway, so the node's engine refuses it as it would in process
            body, kind = _not_a_bundle(bundle), wire.JSON_CONTENT_TYPE
        response = self._send("POST", f"/v1/{op}", session_id=session_id, epoch=epoch, content=body,
                              headers={"Content-Type": kind})
        if response.status_code != 200:
            raise error_of(response)
        frame = response.headers.get("Content-Type", "").startswith(wire.FRAME_CONTENT_TYPE)
        out = wire.loads_unchecked(response.content, frame=frame)
        if isinstance(out, ShardError):
            raise out
        return out

    def prefill(self, bundle: InputBundle) -> OutputBundle:
        return self._compute("prefill", bundle)

    def decode(self, bundle: InputBundle) -> OutputBundle:
        return self._compute("decode", bundle)

    def _close(self, op: str, session_id: Any, epoch: Any) -> None:
        try:
            body = json.dumps({"session_id": session_id, "epoch": epoch})
        except (TypeError, ValueError):
            body = json.dumps({"session_id": None, "epoch": None})
        response = self._send("POST", f"/v1/{op}", session_id=session_id, epoch=epoch, content=body,
                              headers={"Content-Type": wire.JSON_CONTENT_TYPE})
        if response.status_code != 200:
            raise error_of(response)

    def cancel(self, session_id: str, epoch: int) -> None:
        self._close("cancel", session_id, epoch)

    def release(self, session_id: str, epoch: int) -> None:
        self._close("release", session_id, epoch)

    def session(self, session_id: str) -> Optional[SessionView]:
        if not isinstance(session_id, str) or not session_id:
            return None
        response = self._send("GET", "/v1/sessions/" + session_path(session_id))
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise error_of(response)
        data = response.json()
        return SessionView(data["session_id"], data["epoch"], data["status"], data["cached_tokens"])

    @property
    def used_tokens(self) -> int:
        return int(self._state()["used_tokens"])

    @property
    def capacity_tokens(self) -> Optional[int]:
        return self._state()["capacity_tokens"]

    @property
    def crashed(self) -> bool:
        return bool(self._state()["crashed"])

    def _admin(self, method: str, what: str, **kwargs: Any) -> httpx.Response:
        if self.control is None or self.name is None:
            raise RemoteError(f"{self!r} does not know its control port: build it with "
                              "ClusterClient.engine(name) to reach restart(), crash() and the fault log")
        response = self._client.request(method, f"{self.control}/v1/nodes/{self.name}/{what}", **kwargs)
        if response.status_code != 200:
            raise error_of(response)
        return response

    def restart(self) -> None:
        self._admin("POST", "restart")

    def crash(self) -> None:
        self._admin("POST", "crash")

    @property
    def fault_log(self) -> tuple[Fired, ...]:
        """Every fault fired on the node so far (through the control port)."""
        fired = self._admin("GET", "log").json()["fired"]
        return tuple(Fired(f["call"], f["rule"], f["op"], f["session_id"], wire.fault_from_dict(f["fault"]))
                     for f in fired)
