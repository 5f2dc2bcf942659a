"""The serving guide's "three nodes and curl" block runs, in a fresh folder, and says what the guide says."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fakeshard import FakeShardEngine, Pipeline, ShardSpec

pytest.importorskip("aiohttp")
ROOT = Path(__file__).resolve().parent.parent


def test_three_nodes_and_curl(tmp_path):
    if shutil.which("curl") is None or shutil.which("bash") is None:
        pytest.skip("needs curl and bash (CI installs curl)")
    readme = (ROOT / "docs" / "how-to" / "serve-nodes.md").read_text(encoding="utf-8")
    block = next(b for b in re.findall(r"```sh\n(.*?)```", readme, flags=re.S) if "fakeshard serve" in b)
    (tmp_path / "docs" / "examples").mkdir(parents=True)
    shutil.copy(ROOT / "docs" / "examples" / "three-nodes.json", tmp_path / "docs" / "examples")
    # The block's `python3` is the interpreter running the suite (an unactivated venv's included).
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    result = subprocess.run(["bash", "-c", "set -e\n" + block], cwd=tmp_path, capture_output=True, text=True,
                            timeout=120, env={**os.environ, "PATH": path})
    assert result.returncode == 0, result.stderr
    sample, view, partitioned, stopped = [json.loads(line) for line in result.stdout.splitlines() if line]
    spec = ShardSpec("demo", 6, 0, 6, hidden_size=8, vocab_size=256)
    expected = Pipeline([FakeShardEngine(spec)]).prefill("s1", 0, 0, [1, 2, 3])
    assert sample["kind"] == "sample_bundle" and (sample["pos"], sample["token"]) == (3, expected.token)
    assert view == {"kind": "session_view", "contract": "1", "session_id": "s1", "epoch": 0,
                    "status": "live", "cached_tokens": 3}
    assert partitioned == stopped == {"kind": "ok", "contract": "1"}
