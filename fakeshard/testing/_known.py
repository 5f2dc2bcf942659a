"""Known failures (``--known-failing FILE``): the checks a partial implementation is expected to
fail, so that its CI gates from the first day. A listed check that fails is reported as known;
one that passes fails the run (pytest's strict ``xfail``), so the list only shrinks.

The file names one check a line: a machine (``sessions``, ``faults``, ``failover``,
``surface``, ``parallel``, ``coordinator``, ``concurrent``, ``program``), an engine or HTTP
check of :mod:`fakeshard.testing.checks` (``check_capacity_edges``, ``check_head``), or a
test function of the project's own; blank lines and text after ``#`` are ignored.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: The machines a line may name.
MACHINE_NAMES = ("sessions", "faults", "failover", "surface", "parallel", "coordinator", "concurrent", "program")


class KnownFailingError(ValueError):
    """A known-failing file that cannot be read, or that names no check."""


def read_known_failing(path: Path) -> frozenset[str]:
    """The names a known-failing file lists; :class:`KnownFailingError` naming the file if it
    cannot be read or holds a line that is no name."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise KnownFailingError(f"--known-failing {path}: cannot be read ({exc})") from None
    names = set()
    for number, line in enumerate(text.splitlines(), 1):
        name = line.split("#", 1)[0].strip()
        if not name:
            continue
        if not name.replace("_", "").isalnum():
            raise KnownFailingError(f"--known-failing {path}, line {number}: {name!r} is no check's name "
                                    "(a machine, a check of fakeshard.testing.checks, or a test function)")
        names.add(name)
    return frozenset(names)


def check_names() -> frozenset[str]:
    """Every name ``fakeshard check`` runs: its machines and the engine and HTTP checks."""
    from fakeshard.testing import checks

    return frozenset(MACHINE_NAMES) | {c.__name__ for c in checks.ENGINE_CHECKS + checks.HTTP_CHECKS}


def case_name(item: Any) -> str:
    """The name a known-failing file uses for a collected test: its ``check`` parameter's name, its
    machine's name, or its function's name (``test_machine_concurrent`` is ``concurrent``)."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    if "check" in params:
        return str(getattr(params["check"], "__name__", params["check"]))
    if "machine" in params and hasattr(params["machine"], "machine_name"):
        return str(params["machine"].machine_name)
    name = getattr(item, "originalname", None) or item.name
    suffix = name[len("test_machine_"):]
    return suffix if name.startswith("test_machine_") and suffix in MACHINE_NAMES else name
