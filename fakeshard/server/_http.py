"""HTTP API v1's shared pieces: statuses, the ok and error envelopes, the listening socket;
and the control port's (aiohttp's) middleware that turns every failure into one, and its
reading of a JSON body.  A node's own HTTP layer is ``_h1``."""

from __future__ import annotations

import json
import socket
from typing import Any, Awaitable, Callable, Optional

from aiohttp import web

from fakeshard import wire
from fakeshard._contract import CONTRACT_VERSION

API_VERSION = "v1"
#: The node's virtual time spent on the call (seconds), on every answer.
DELAY_HEADER = "Fakeshard-Delay"
PARTITION_MODES = ("refuse", "hang", "reset")
#: HTTP status of each contract error code.
ERROR_STATUS = {
    "malformed_bundle": 400,
    "cache_miss": 409,
    "stale_epoch": 409,
    "cancelled": 409,
    "released": 409,
    "position_mismatch": 409,
    "out_of_memory": 507,
    "engine_crashed": 503,
}
#: The server's own error codes (not engine errors), with their status.
HTTP_ERROR_CODES = {
    "bad_request": 400,
    "not_found": 404,
    "method_not_allowed": 405,
    "conflict": 409,
    "payload_too_large": 413,
    "unsupported_media_type": 415,
    "not_supported": 501,
}
#: A request body larger than this runs its engine call on the node's worker thread.
HEAVY_BYTES = 64 * 1024
#: Largest request body a node or the control port reads (a prefill of 8,192 positions at 8,192 wide).
MAX_BODY_BYTES = 256 * 1024 * 1024 + 1024 * 1024


class HTTPError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


#: The answer of a call or admin action that returns nothing.
OK = {"kind": "ok", "contract": CONTRACT_VERSION}


def error_status(code: str) -> int:
    """The HTTP status of an engine error's code (the contract's table: ``ERROR_STATUS``)."""
    return ERROR_STATUS.get(code, 500)


def error_body(code: str, message: str, session_id: Any = None, epoch: Any = None) -> dict[str, Any]:
    return {"kind": "error", "contract": CONTRACT_VERSION, "code": code, "message": message,
            "session_id": session_id, "epoch": epoch}


def json_response(data: Any, status: int = 200, headers: Optional[dict[str, str]] = None) -> web.Response:
    return web.Response(status=status, text=json.dumps(data), content_type=wire.JSON_CONTENT_TYPE,
                        headers=headers)


def http_error(code: str, message: str) -> web.Response:
    return json_response(error_body(code, message), HTTP_ERROR_CODES[code])


@web.middleware
async def typed_errors(request: web.Request, handler: Callable[[web.Request], Awaitable[Any]]) -> Any:
    """Every failure as a documented status with the wire's error JSON; never a 500 page."""
    try:
        return await handler(request)
    except HTTPError as exc:
        return http_error(exc.code, exc.message)
    except web.HTTPRequestEntityTooLarge as exc:
        return http_error("payload_too_large", f"request body over the limit: {exc.text}")
    except web.HTTPNotFound:
        return http_error("not_found", f"no route {request.method} {request.path}")
    except web.HTTPMethodNotAllowed as exc:
        return http_error("method_not_allowed",
                           f"{request.method} is not allowed on {request.path}; allowed: "
                           f"{', '.join(sorted(exc.allowed_methods))}")
    except web.HTTPException as exc:  # anything else aiohttp itself refuses (a malformed request)
        return http_error("bad_request", f"{exc.status} {exc.reason}")


def read_body_json(body: bytes, what: str) -> Any:
    try:
        return wire.read_json(body.decode("utf-8"))
    except wire.RepeatedKey as exc:
        raise HTTPError("bad_request", f"{what}: {exc}") from None
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise HTTPError("bad_request", f"{what} is not JSON: {exc}") from None


def listen_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.listen(128)
    sock.setblocking(False)
    return sock


def url_of(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
