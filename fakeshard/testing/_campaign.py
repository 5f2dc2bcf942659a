"""Campaign plumbing shared by `pytest stateful` and `fakeshard check`.

Environment variables (set by ``fakeshard check``, usable by hand):

* ``FAKESHARD_MAX_EXAMPLES``, ``FAKESHARD_STEPS``: override the profile's
  ``max_examples`` and ``stateful_step_count`` for the machines.
* ``FAKESHARD_SEED``: a Hypothesis seed; each pytest-xdist worker adds its
  index (``gw3`` -> seed + 3), so workers explore different examples and a
  campaign replays exactly.  Ignored under a derandomized profile (``ci``).
* ``FAKESHARD_CAMPAIGN_DIR``: where each machine run writes its progress and
  summary as JSON, for ``fakeshard check`` to show and add up.
* ``FAKESHARD_DATABASE``: a Hypothesis example database shared between
  hosts (``redis://...`` or a folder; see :mod:`fakeshard.testing._database`).
* ``FAKESHARD_TRACES_DIR``: where a failing machine saves its reduced trace
  (default: ``stateful/regressions``, which ``pytest stateful`` replays).
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any, Optional

from hypothesis import settings as Settings

from fakeshard.testing import _database as database


def _int_env(name: str) -> Optional[int]:
    value = os.environ.get(name)
    if value in (None, ""):
        return None
    try:
        number = int(value)
    except ValueError:
        raise ValueError(f"{name}={value!r} is not an integer") from None
    if number < 0:
        raise ValueError(f"{name}={value!r} must be >= 0")
    return number


def whole_profile() -> bool:
    """Whether the machines run the loaded profile's own size (no ``FAKESHARD_MAX_EXAMPLES`` or
    ``FAKESHARD_STEPS``): what a campaign must reach is stated for the ``ci`` profile's size,
    and a campaign made smaller on purpose is not held to it."""
    return _int_env("FAKESHARD_MAX_EXAMPLES") is None and _int_env("FAKESHARD_STEPS") is None


def machine_settings() -> Settings:
    """The loaded profile, with the campaign's overrides (``FAKESHARD_MAX_EXAMPLES``,
    ``FAKESHARD_STEPS``, ``FAKESHARD_DATABASE``), and without Hypothesis's shrink phase.

    A failing run is reduced by the kit itself instead (steps removed, fault plans simplified,
    each candidate replayed: :func:`fakeshard.testing._regress.reduce`), which the saved trace
    gets either way.  Hypothesis's shrinker replays whole machines, engine and model at every
    step, and took minutes to report a failure the campaign had found in seconds (five, then
    it gave up, on a coordinator that trusts a malformed output: 316 s against 7.2 s without
    it, a reduced trace of 2 steps against 3; ``python3 benchmarks/report.py``)."""
    from hypothesis import Phase

    overrides: dict[str, Any] = {}
    examples, steps = _int_env("FAKESHARD_MAX_EXAMPLES"), _int_env("FAKESHARD_STEPS")
    if examples is not None:
        overrides["max_examples"] = max(examples, 1)
    default = Settings.default
    assert default is not None  # a profile is always loaded
    if steps is not None:
        overrides["stateful_step_count"] = max(steps, 1)
    shared = database.from_environment(default.derandomize)
    if shared is not None:
        overrides["database"] = shared
    return Settings(default, phases=[phase for phase in default.phases if phase is not Phase.shrink], **overrides)


#: Where traces of a user's own coordinator go by default: under the working folder.
USER_TRACES = Path(".fakeshard", "traces")


def traces_dir(users_coordinator: bool = False) -> Path:
    """``$FAKESHARD_TRACES_DIR``, else the saved regressions folder; for a trace of a user's own
    coordinator (a program, or a factory other than the kit's), ``.fakeshard/traces`` in the
    working folder: such a trace replays only with that coordinator, so it never lands among a
    checkout's regressions (which replay on the engine alone) unless asked for."""
    from fakeshard.testing._trace import REGRESSIONS

    chosen = os.environ.get("FAKESHARD_TRACES_DIR")
    return Path(chosen) if chosen else USER_TRACES if users_coordinator else REGRESSIONS


def worker_index() -> int:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0


def worker_seed() -> Optional[int]:
    """``FAKESHARD_SEED`` plus this xdist worker's index, or ``None``."""
    seed = _int_env("FAKESHARD_SEED")
    return None if seed is None else seed + worker_index()


class Reporter:
    """Writes a machine run's progress (throttled) and summary under the campaign directory."""

    def __init__(self, directory: Path, machine: str) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        stem = f"{machine}-{os.getpid()}"
        self.progress_path = self.directory / f"{stem}.progress.json"
        self.summary_path = self.directory / f"{stem}.summary.json"
        self.machine = machine
        # Wall-clock time here only paces the display and reports elapsed time;
        # nothing the engines compute reads it.
        self.started = time.monotonic()
        self._last = 0.0

    def tick(self, config: Any, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last < 0.25:
            return
        self._last = now
        self._write(self.progress_path, {"machine": self.machine, "runs": config.examples,
                                         "discarded": config.discarded, "steps": config.steps,
                                         "failures": len(config.failures),
                                         "reruns": config.reruns, "elapsed": now - self.started})

    def finish(self, config: Any, reached: Counter[str], failed: bool, traces: list[str],
               evidence_class: str, notes: Optional[list[str]] = None) -> None:
        """Write the summary; ``notes`` are lines ``fakeshard check`` prints under its table."""
        self.tick(config, force=True)
        self._write(self.summary_path, {
            "machine": self.machine, "runs": config.examples, "discarded": config.discarded,
            "steps": config.steps, "failed": failed,
            "traces": traces, "probes": dict(sorted(reached.items())), "evidence_class": evidence_class,
            "elapsed": time.monotonic() - self.started, "notes": list(notes or []),
        })

    @staticmethod
    def _write(path: Path, data: dict[str, Any]) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, sort_keys=True), encoding="utf-8")
        tmp.replace(path)


def reporter_for(machine: str) -> Optional[Reporter]:
    directory = os.environ.get("FAKESHARD_CAMPAIGN_DIR")
    return Reporter(Path(directory), machine) if directory else None
