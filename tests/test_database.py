"""Campaigns beyond one machine: the example database shared through a real Redis server.

The test starts ``redis-server`` on a free loopback port (skipped, with the
reason, where the binary is missing; CI installs it) and stops it after.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import settings

from fakeshard.testing import _database as database

ROOT = Path(__file__).resolve().parent.parent
redis = pytest.importorskip("redis", reason="the shared database needs the extra 'redis'")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def redis_url():
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (CI installs it: apt-get install redis-server)")
    port = _free_port()
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)
    try:
        for _ in range(100):  # up to 10 s for the server to answer
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.1)
        else:
            pytest.fail("redis-server did not answer within 10 s")
        yield url
    finally:
        client.close()
        proc.terminate()
        proc.communicate(timeout=10)


_HOST = """
import sys
from pathlib import Path

import redis
from hypothesis import Phase, settings
from hypothesis.extra.redis import RedisExampleDatabase

from fakeshard.testing import _profiles as profiles
from fakeshard.testing._machines import MachineConfig, SessionsMachine
from fakeshard.testing._regress import run_machine
from planted.engines import BUGS

url, seed, phases, prefix, save_dir = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
bug = next(b for b in BUGS if b.name == "stale_as_cache_miss")
shared = RedisExampleDatabase(redis.Redis.from_url(url), key_prefix=prefix.encode())
chosen = settings(profiles.get("thorough"), max_examples=300, stateful_step_count=40, database=shared,
                  phases=[getattr(Phase, name) for name in phases.split(",")])
try:
    run_machine(SessionsMachine, MachineConfig(bug.factory, "planted.engines:" + bug.name), settings=chosen,
                save_dir=Path(save_dir), seed=seed)
    print("passed")
except AssertionError:
    print("failed")
except BaseException as exc:  # unittest.SkipTest: no saved example and no generation
    if type(exc).__name__ != "SkipTest":
        raise
    print("nothing to run")
finally:
    shared.redis.close()
"""


def _host(url: str, seed: int, phases: str, tmp_path: Path, prefix: bytes = database.KEY_PREFIX) -> str:
    """One host (its own process) running the sessions machine on a planted bug with the shared database."""
    result = subprocess.run([sys.executable, "-c", _HOST, url, str(seed), phases, prefix.decode(), str(tmp_path)],
                            cwd=ROOT, capture_output=True, text=True, timeout=300,
                            env={k: v for k, v in os.environ.items() if k != database.ENV_VAR})
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.strip().splitlines()[-1]


def test_a_host_replays_another_hosts_failure_from_redis(redis_url, tmp_path):
    with redis.Redis.from_url(redis_url) as client:
        client.flushdb()
    # Host A searches with its seed and finds the planted bug; the failing example goes to Redis.
    assert _host(redis_url, 1, "generate,reuse", tmp_path) == "failed"
    with redis.Redis.from_url(redis_url) as client:
        assert client.keys(database.KEY_PREFIX + b"*"), "host A saved nothing in the shared database"
    # Host B, another process and seed, only replays what the database holds: it fails at once.
    assert _host(redis_url, 2, "reuse", tmp_path) == "failed"
    # Under another key prefix (another campaign's database) there is nothing to replay.
    assert _host(redis_url, 2, "reuse", tmp_path, prefix=b"elsewhere:") == "nothing to run"


def _check(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fakeshard", "check", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, env={**os.environ, **(env or {})})


def test_check_shares_the_database_and_refuses_what_cannot_work(redis_url, tmp_path):
    ok = _check("--profile", "dev", "--machines", "sessions", "--examples", "3", "--steps", "5", "--seed", "7",
                "--database", redis_url, "--out", str(tmp_path / "out"))
    assert ok.returncode == 0, ok.stdout[-2000:] + ok.stderr[-2000:]
    refused = _check("--profile", "ci", "--database", redis_url, "--out", str(tmp_path / "out"))
    assert refused.returncode == 2 and "randomized profile" in refused.stderr
    assert refused.stderr.count("\n") == 1
    down = _check("--profile", "dev", "--database", f"redis://127.0.0.1:{_free_port()}/0",
                  "--out", str(tmp_path / "out"))
    assert down.returncode == 2 and "cannot use the Redis database" in down.stderr
    from_env = _check("--profile", "ci", "--out", str(tmp_path / "out"), env={database.ENV_VAR: redis_url})
    assert from_env.returncode == 2 and "randomized profile" in from_env.stderr


def test_the_environment_variable_reaches_the_machines_settings(redis_url, monkeypatch):
    from fakeshard.testing import _profiles as profiles
    from fakeshard.testing._campaign import machine_settings

    monkeypatch.setenv(database.ENV_VAR, redis_url)
    try:
        settings.load_profile("thorough")
        assert type(machine_settings().database).__name__ == "RedisExampleDatabase"
        settings.load_profile("ci")
        with pytest.raises(database.DatabaseError, match="derandomized"):
            machine_settings()
    finally:
        profiles.load_default()
