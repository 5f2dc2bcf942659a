"""The engine host in Node.js of ``examples/node-host/`` (docs/contract.md, "Engine hosts"):
its checksum against xxHash and the contract's vectors, its control port, and every engine
check and HTTP check on its nodes. CI runs the contract suite and the machines on it too
(``pytest -m fixture --engine-cmd "node examples/node-host/host.mjs"``). Skipped without ``node``."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("httpx", reason="an engine host is reached over HTTP: the extra 'serve'")
if shutil.which("node") is None:
    pytest.skip("needs Node.js (`node` on PATH; CI installs it)", allow_module_level=True)

import httpx  # noqa: E402
import xxhash  # noqa: E402

from fakeshard import Crash, FaultPlan, FaultRule, ShardSpec, TokenBundle, wire  # noqa: E402
from fakeshard.remote import Host, attached  # noqa: E402
from fakeshard.testing import checks  # noqa: E402

pytestmark = pytest.mark.xdist_group("node_host")

HOST = Path(__file__).resolve().parent.parent / "examples" / "node-host"
COMMAND = f"node {HOST / 'host.mjs'}"


def _node(script: str) -> object:
    done = subprocess.run(["node", "--input-type=module", "-e", script], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_its_xxh3_is_xxhashs_at_every_length_of_each_branch():
    """Every length up to 2,100 bytes: the short forms, 17 to 240, and the long form's stripes and blocks."""
    lengths = list(range(0, 2101))
    got = _node(f"""
        import {{ xxh3hex }} from {json.dumps(str(HOST / 'xxh3.mjs'))};
        const out = [];
        for (let n = 0; n <= 2100; n++) {{
          const b = Buffer.alloc(n);
          for (let i = 0; i < n; i++) b[i] = (i * 131 + n * 7 + 3) & 255;
          out.push(xxh3hex(b));
        }}
        console.log(JSON.stringify(out));""")
    want = [xxhash.xxh3_64(bytes((i * 131 + n * 7 + 3) & 255 for i in range(n))).hexdigest() for n in lengths]
    assert got == want


def test_its_checksum_gives_the_contracts_vectors():
    got = _node(f"""
        import {{ checksum }} from {json.dumps(str(HOST / 'wire.mjs'))};
        const cases = [['s1', 0, 0, 1, [[0.5, -0.25, 0.0, 1.0]]],
                       ['s1', 3, 7, 2, [[0.5, -0.25, 0.0, 1.0], [0.1, 2.0, -3.5, 0.001]]],
                       ['模型-ü', 1, 0, 5, [[-1.0, 0.999969482421875, 0.0, -0.0]]],
                       ['s\\udc80', 0, 0, 1, [[0.5, -0.25, 0.0, 1.0]]]];
        console.log(JSON.stringify(cases.map(([s, e, p, l, rows]) =>
          checksum(s, e, p, l, rows.length, rows[0].length, Float32Array.from(rows.flat())))));""")
    assert got == ["312b2ef2fb97af6d", "7b63b92c3c4e018d", "f9b6158613c79956", "470ec5b3d13ac5eb"]


@pytest.fixture(scope="module")
def host():
    with Host(COMMAND) as running:
        yield running


def test_its_control_port_refuses_what_it_does_not_serve_and_changes_nothing(host):
    spec = {"model_id": "m", "n_layers": 2, "start_layer": 0, "end_layer": 2}
    plan = json.loads(wire.dumps(FaultPlan((FaultRule(Crash()),))))
    before = httpx.get(host.control + "/v1/nodes", timeout=10).json()["nodes"]
    cases = [({"spec": spec, "faults": plan}, 501, "not_supported"),
             ({"spec": {**spec, "end_layer": 3}}, 400, "bad_request"),
             ({"spec": spec, "colour": 1}, 400, "bad_request"),
             ({"spec": spec, "name": "../x"}, 400, "bad_request")]
    for body, status, code in cases:
        answer = httpx.post(host.control + "/v1/nodes", json=body, timeout=10)
        assert (answer.status_code, answer.json()["code"]) == (status, code), body
    assert httpx.get(host.control + "/v1/nodes", timeout=10).json()["nodes"] == before
    first = httpx.post(host.control + "/v1/nodes", json={"spec": spec, "name": "twice"}, timeout=10)
    again = httpx.post(host.control + "/v1/nodes", json={"spec": spec, "name": "twice"}, timeout=10)
    assert first.status_code == 200 and (again.status_code, again.json()["code"]) == (409, "conflict")
    assert httpx.delete(host.control + "/v1/nodes/twice", timeout=10).status_code == 200


def test_a_pipeline_of_its_nodes_gives_a_full_nodes_tokens(host):
    factory = attached(host.control)
    spec = ShardSpec("node-model", 5, 0, 5, hidden_size=6, vocab_size=50)
    full = factory(spec, seed=3)
    stages = [factory(spec.with_layers(a, b), seed=3) for a, b in ((0, 1), (1, 4), (4, 5))]
    prompt = (4, 9, 1, 0, 49)
    want = full.prefill(TokenBundle("p", 0, 0, prompt)).token
    out = TokenBundle("p", 0, 0, prompt)
    for stage in stages:
        out = stage.prefill(out)
    assert out.token == want and out.pos == len(prompt)


@pytest.mark.parametrize("check", checks.ENGINE_CHECKS + checks.HTTP_CHECKS, ids=lambda c: c.__name__)
def test_every_check_passes_on_its_nodes(host, check):
    factory = attached(host.control)
    lacking = getattr(check, "fault_kinds_needed", frozenset()) - factory.fault_kinds
    if lacking:
        pytest.skip(f"needs {sorted(lacking)}, which the kit cannot apply in front of a node")
    check(factory)
