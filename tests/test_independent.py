"""The suites judge an engine by the contract alone.

An engine written from the contract alone (``tests/independent``: its own
runtime, behind an adapter like a user's) passes every contract check in
``tests/`` and ``stateful/``; the same engine with one rule broken fails.
The contract tests run as separate pytest processes, as a user would start
them; a broken engine's machine runs in this process under the ``ci``
settings without the shrink phase, as the planted bugs do.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import settings

from fakeshard.testing._machines import MachineConfig
from fakeshard.testing._registry import replay
from fakeshard.testing._regress import run_machine
from fakeshard.testing._trace import Trace
from planted import CI_NO_SHRINK, MACHINES
from tests.independent import broken
from tests.independent.adapter import make_engine

ROOT = Path(__file__).resolve().parent.parent
INDEPENDENT = "tests.independent.adapter:make_engine"
CHOICE = "fixture choice, not the contract: "


def _pytest(tmp_path: Path, *args: str, timeout: float, profile: str = "") -> subprocess.CompletedProcess:
    """``python -m pytest ARGS`` in the checkout; traces and examples go under ``tmp_path``.

    Under ``profile``, by default the Hypothesis profile this run loaded.
    """
    env = {**os.environ, "FAKESHARD_TRACES_DIR": str(tmp_path / "traces")}
    for var in ("FAKESHARD_ENGINE", "FAKESHARD_CAMPAIGN_DIR", "FAKESHARD_DATABASE", "PYTEST_ADDOPTS",
                "PYTEST_XDIST_WORKER"):
        env.pop(var, None)
    profile = profile or settings.get_current_profile_name()
    if not settings.get_profile(profile).derandomize:  # a derandomized profile keeps no examples
        env["FAKESHARD_DATABASE"] = str(tmp_path / "examples")
    return subprocess.run(
        [sys.executable, "-m", "pytest", *args, "-q", "-rs", "-p", "no:cacheprovider",
         "--hypothesis-profile", profile],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def _skip_reasons(output: str) -> list[str]:
    return re.findall(r"^SKIPPED \[\d+\] [^:]+:\d+: (.*)$", output, flags=re.M)


@pytest.mark.slow
# The same engine twice: answering hidden values as float32 arrays, and as rows of Python
# floats (with a real NaN for a ``nan`` break), the two forms the contract allows.
@pytest.mark.parametrize("factory", [INDEPENDENT, "tests.independent.adapter:make_rows_engine"],
                         ids=["arrays", "rows"])
def test_every_contract_check_passes_on_an_independent_engine(tmp_path, factory):
    # ``-m fixture``: every test that runs on an engine factory (its evidence class marks it).
    # Under ci, the machines at dev size with a fixed seed (the same draws every run): every
    # contract test runs whole either way, and a whole ci campaign of all six machines here
    # would take a third of the test command's time.
    derandomized = settings.default.derandomize
    run = _pytest(tmp_path, "tests", "stateful", "-m", "fixture", "--engine", factory,
                  "--ignore", "tests/test_independent.py", *(["--hypothesis-seed", "0"] if derandomized else []),
                  timeout=1500, profile="dev" if derandomized else "")
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert "judged by the contract alone" in run.stdout
    passed = int(re.search(r"(\d+) passed", run.stdout).group(1))
    assert passed >= 400, run.stdout[-2000:]  # 410 when written: every engine test of both suites
    # Whatever skipped is a fixture choice, named; no contract check skipped. (Also allowed: a
    # module for an optional tool that is not installed, the probe count outside ci, and the
    # checks of a node's HTTP layer, which an engine in process has not.)
    reasons = _skip_reasons(run.stdout)
    assert any(r.startswith(CHOICE) for r in reasons), reasons
    assert all(r.startswith((CHOICE, "could not import", "the probe requirement is made of the ci",
                             "no coordinator program", "a check of a node's HTTP layer"))
               for r in reasons), reasons
    assert not list((tmp_path / "traces").glob("*.json"))


# Each broken engine: contract tests that must catch it, and a machine that must.
CATCHERS = {
    "unfenced_close": (["tests/test_sessions.py"], "sessions"),
    "leaky_replace": (["tests/test_capacity.py", "tests/test_sessions.py"], "sessions"),
    "early_drop": (["tests/test_faults.py"], "faults"),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(broken.RULES))
def test_one_broken_rule_fails_the_tests_and_the_machines(tmp_path, name):
    factory = f"tests.independent.broken:{name}"
    files, machine = CATCHERS[name]
    run = _pytest(tmp_path, *files, "--engine", factory, "-x", timeout=600)  # one failure is enough
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-2000:]
    assert re.search(r"\d+ failed", run.stdout), run.stdout[-2000:]
    # The machine, under ci (derandomized) without Hypothesis's shrink phase, as the planted
    # bugs run (shrinking a campaign's failure takes minutes; the saved trace is reduced anyway).
    config = MachineConfig.for_factory(getattr(broken, name), factory)
    with pytest.raises(AssertionError):
        run_machine(MACHINES[machine], config, settings=CI_NO_SHRINK, save_dir=tmp_path / "traces")
    saved = list((tmp_path / "traces").glob("*.json"))
    assert saved, "the machine failed but saved no trace"
    # The saved trace replays the failure on the broken engine, and passes on the sound one.
    trace = Trace.load(saved[0])
    assert replay(trace, getattr(broken, name), factory).failed
    assert not replay(trace, make_engine, INDEPENDENT).failed
