"""Golden vectors pin the fixture's outputs across processes, hash seeds and platforms."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import golden

ROOT = Path(__file__).resolve().parent.parent


def test_this_process_computes_the_pinned_vectors():
    assert golden.compute() == json.loads(golden.PATH.read_text(encoding="utf-8"))


@pytest.mark.parametrize("hash_seed", ["0", "1", "4242", "random"])
def test_other_processes_compute_the_pinned_vectors(hash_seed):
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    result = subprocess.run([sys.executable, "-m", "tests.golden"], cwd=ROOT, env=env,
                            capture_output=True, text=True, encoding="utf-8", check=True)
    assert json.loads(result.stdout) == json.loads(golden.PATH.read_text(encoding="utf-8"))
