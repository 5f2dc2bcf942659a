"""What ``fakeshard check`` runs, as the kit knows it: its machines, the examples each runs,
what each is counted against, and the kit's own reading of the options that name its parts
(a known-failing file, a coordinator factory, a coordinator program and its request timeout,
an example database).

The core's ``fakeshard._check`` runs the campaign (a pytest process over ``suite.py``) and
reports it; what it needs to know of the kit it asks here, one module at the harness layer.
Importing this module imports nothing else of the kit: each function imports what it reads.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Optional

__all__ = ["ALL_MACHINES", "COORDINATOR_MACHINES", "ENGINE_MACHINES", "MACHINES", "PROGRAM_MACHINE",
           "coordinator_problem", "database_problem", "examples_of", "fault_kinds", "known_failing_problem",
           "own_probes", "probe_gaps", "program_problem", "required_probes"]

#: The machines that test an engine; a campaign of all of them makes the probe requirement.
ENGINE_MACHINES = ("sessions", "faults", "failover", "surface", "parallel")
#: The machines that test a coordinator: one call at a time (``coordinator``), and an async one
#: with many sessions in flight over a cluster under a nemesis (``concurrent``).
COORDINATOR_MACHINES = ("coordinator", "concurrent")
#: Every machine a campaign runs by default.
MACHINES = ENGINE_MACHINES + COORDINATOR_MACHINES
#: The machine that tests a coordinator program (``--coordinator-cmd``): the concurrent
#: machine's scenarios over served nodes, in real time.
PROGRAM_MACHINE = "program"
#: Every machine there is.
ALL_MACHINES = MACHINES + (PROGRAM_MACHINE,)


def known_failing_problem(path: Path) -> Optional[str]:
    """What is wrong with ``path`` as ``--known-failing`` (``None``: nothing): a file that cannot
    be read, or one naming what ``check`` does not run."""
    from fakeshard.testing._known import KnownFailingError, check_names, read_known_failing

    try:
        unknown = sorted(read_known_failing(path) - check_names())
    except KnownFailingError as exc:
        return str(exc)
    if unknown:
        return (f"--known-failing {path} names what check does not run: {', '.join(unknown)} (it runs the "
                f"machines {', '.join(ALL_MACHINES)} and the checks of fakeshard.testing.checks)")
    return None


def program_problem(command: Optional[str], request_timeout: Optional[float]) -> Optional[str]:
    """What is wrong with ``--coordinator-cmd`` and ``--request-timeout`` (``None``: nothing)."""
    from fakeshard.testing._program import command_problem, request_timeout_problem

    return (command_problem(command) if command is not None else None) or request_timeout_problem(request_timeout)


def database_problem(name: str, profile: str) -> Optional[str]:
    """What is wrong with ``--database name`` under ``profile`` (``None``: nothing)."""
    from fakeshard.testing._database import DatabaseError, example_database

    if profile == "ci":
        return ("--database needs a randomized profile: ci is derandomized and uses no database; use "
                "--profile thorough (or dev) and a --seed per host")
    try:
        example_database(name, check=True)
    except DatabaseError as exc:
        return str(exc)
    return None


def coordinator_problem(name: str, machines: Iterable[str]) -> Optional[str]:
    """What is wrong with ``--coordinator name`` for a campaign of ``machines`` (``None``:
    nothing): a factory that cannot be loaded, or one whose kind of coordinator no machine of
    the campaign tests. Each coordinator machine tests one kind and runs the kit's reference in
    place of the other: asked for only the other machine, a campaign would test no coordinator
    of the user's and pass."""
    from fakeshard.testing._concurrent import builds_async
    from fakeshard.testing._coordinator_machine import CoordinatorError, load_coordinator

    try:
        made = load_coordinator(name)
    except CoordinatorError as exc:
        return str(exc)
    machines = list(machines)
    kind, tester = ("an async", "concurrent") if builds_async(made) else ("a synchronous", "coordinator")
    if tester not in machines and set(COORDINATOR_MACHINES) & set(machines):
        return (f"coordinator factory {name!r} builds {kind} coordinator, which the {tester} machine tests; "
                f"this campaign does not run it (its machines: {','.join(machines)})")
    return None


def examples_of(machine: str, examples: int) -> int:
    """The examples ``machine`` runs in a campaign of ``examples`` examples a machine: a campaign
    of many sessions runs fewer, each a whole scenario, after its targeted ones; the parallel
    machine half, each program run several times."""
    if machine in ("concurrent", PROGRAM_MACHINE):
        from fakeshard.testing._concurrent import scenarios_for, targeted
        from fakeshard.testing._program import program_scenarios_for

        drawn = scenarios_for(examples) if machine == "concurrent" else program_scenarios_for(examples)
        return len(targeted()) + drawn
    if machine == "parallel":
        from fakeshard.testing._parallel import examples_for

        return examples_for(examples)
    return examples


def required_probes(longest: Optional[int] = None) -> frozenset[str]:
    """The probes a full ci campaign must reach (``fakeshard.testing._probes.REQUIRED``), of an
    engine whose prompts stop at ``longest`` positions (``None``: the machines' longest)."""
    from fakeshard.testing import _probes as probes

    return probes.required() if longest is None else probes.required(longest)


def own_probes(machine: str, required: frozenset[str]) -> frozenset[str]:
    """What a machine is counted against: a coordinator machine its own situations, an engine
    machine the probes ``required``."""
    from fakeshard.testing._probes import COORDINATOR_SITUATIONS, PROGRAM_SITUATIONS, SITUATIONS

    return frozenset({"concurrent": SITUATIONS, PROGRAM_MACHINE: PROGRAM_SITUATIONS,
                      "coordinator": COORDINATOR_SITUATIONS}.get(machine, required))


def probe_gaps(reached: Counter[str], factory: Any) -> tuple[int, list[str], list[str]]:
    """Of the probes a campaign on ``factory``'s engines ``reached``: the engines' longest prompt,
    the required probes missed, and the probes reached that no engine can reach."""
    from fakeshard._layer import fault_kinds_of
    from fakeshard.testing import _probes as probes
    from fakeshard.testing._lengths import longest_of

    longest = longest_of(factory)
    return longest, list(probes.missing(reached, longest, fault_kinds_of(factory))), \
        list(probes.impossible(reached))


def fault_kinds() -> tuple[str, ...]:
    """The fault kinds a plan draws (the table's "fault kinds" column counts of them)."""
    from fakeshard.testing._probes import _FAULT_KINDS

    return tuple(_FAULT_KINDS)
