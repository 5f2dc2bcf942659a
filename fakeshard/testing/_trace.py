"""Traces: the durable record of a machine run, saved as JSON (dataclasses-json)."""

from __future__ import annotations

import functools
import hashlib
import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from dataclasses_json import DataClassJsonMixin


def checkout_root() -> Optional[Path]:
    """The source checkout this package runs from (it holds ``stateful/``), or ``None``
    for an installed package."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "stateful" / "regressions").is_dir() else None


#: Where failing machines save their reduced traces by default: the checkout's
#: ``stateful/regressions`` (which ``pytest stateful`` replays), or, for an installed
#: package, ``.fakeshard/traces`` in the working folder.
_ROOT = checkout_root()
REGRESSIONS = _ROOT / "stateful" / "regressions" if _ROOT else Path(".fakeshard", "traces")
FORMAT = 1


@dataclass
class Trace(DataClassJsonMixin):
    """One run: how to rebuild the engine(s), every step, and what each returned.

    ``config`` holds what the machine's runner needs to rebuild its world
    (spec, seed, capacity, fault plans in wire form).  ``expected`` and
    ``actual`` are summaries for people; replay recomputes the expectation
    from the reference model.
    """

    machine: str
    engine_factory: str
    evidence_class: str
    config: dict[str, Any]
    steps: list[dict[str, Any]] = field(default_factory=list)
    expected: list[dict[str, Any]] = field(default_factory=list)
    actual: list[dict[str, Any]] = field(default_factory=list)
    failure: Optional[str] = None
    note: str = ""
    hypothesis_version: str = ""
    git_commit: str = ""
    format: int = FORMAT

    def save(self, directory: Path, stem: str) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{stem}.json"
        path.write_text(json.dumps(self.to_dict(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
        return path

    @classmethod
    def load(cls, path: Path) -> "Trace":
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"{path}: not a fakeshard trace of format {FORMAT}")
        return cls.from_dict(data)


@functools.lru_cache(maxsize=None)
def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                             cwd=Path(__file__).parent, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() or "unknown"


def hypothesis_version() -> str:
    try:
        import hypothesis
    except ImportError:  # pragma: no cover
        return "not installed"
    return hypothesis.__version__


def stem(trace: Trace) -> str:
    """The file name (without ``.json``) a trace is saved under: its machine and a digest of
    its config and steps, so the same counterexample is saved once."""
    body = json.dumps({"config": trace.config, "steps": trace.steps}, sort_keys=True)
    return f"{trace.machine}-{hashlib.sha256(body.encode()).hexdigest()[:12]}"
