"""The checks of a node's HTTP layer (``checks.HTTP_CHECKS``) pass fakeshard's own served node
(CI runs them on the Node.js example host too: tests/test_node_host.py) and fail an HTTP
layer that answers outside the contract: each can fail."""

from __future__ import annotations

import http.server
import threading
from types import SimpleNamespace

import pytest

from fakeshard.testing import checks
from fakeshard.testing._http_checks import makes_http_nodes, node_url

pytest.importorskip("httpx", reason="served nodes: the extra 'serve'")


class _Careless(http.server.BaseHTTPRequestHandler):
    """HTTP/1.0, one answer a connection, a Date header, 200 and "{}" to every GET and POST."""

    def _answer(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    do_GET = do_POST = do_DELETE = _answer

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def careless():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Careless)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("check", checks.HTTP_CHECKS, ids=lambda c: c.__name__)
def test_each_check_fails_an_http_layer_outside_the_contract(careless, check):
    with pytest.raises(AssertionError):
        check(lambda spec, **kw: SimpleNamespace(url=careless))


@pytest.mark.parametrize("check", checks.HTTP_CHECKS, ids=lambda c: c.__name__)
def test_each_check_passes_fakeshards_served_node(check):
    from fakeshard.remote import served_engine

    assert makes_http_nodes(served_engine)
    check(served_engine)


def test_a_node_behind_the_kits_fault_layer_is_found():
    from fakeshard import FakeShardEngine
    from fakeshard._layer import FaultLayer

    inner = SimpleNamespace(url="http://127.0.0.1:1", spec=None, evidence_class="fixture")
    assert node_url(FaultLayer(inner)) == "http://127.0.0.1:1"
    assert node_url(FakeShardEngine(checks.SPEC)) is None
