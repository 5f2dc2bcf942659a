"""The `fakeshard` command."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fakeshard.cli import main


def test_demo_shows_faults_failover_and_equal_streams(capsys):
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    for needle in ("engine_crashed", "response_lost", "reroute", "-> same", "left after release: 0"):
        assert needle in out
    assert "DIFFERENT" not in out
    header = out.splitlines()[0].split()
    assert header[:4] == ["step", "t", "(s)", "op"]


def test_demo_is_deterministic(capsys):
    main(["demo"])
    first = capsys.readouterr().out
    main(["demo"])
    assert capsys.readouterr().out == first


def test_demo_with_another_seed_still_recovers(capsys):
    assert main(["demo", "--seed", "7"]) == 0


def test_unknown_command_is_a_one_line_error():
    result = subprocess.run([sys.executable, "-m", "fakeshard", "dance"], capture_output=True, text=True)
    assert result.returncode == 2
    assert "invalid choice" in result.stderr and "Traceback" not in result.stderr


def test_no_command_is_an_error(capsys):
    with pytest.raises(SystemExit) as info:
        main([])
    assert info.value.code == 2
