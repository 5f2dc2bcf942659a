"""The fakeshard test kit: state machines, the reference model and coordinator, traces.

What a project installs to test its engine or its coordinator::

    pip install 'fakeshard[test]'
    python3 -m pytest --pyargs fakeshard.testing.suite --engine mypkg.adapter:make_engine
    python3 -m fakeshard check --coordinator mypkg.adapter:make_coordinator

The names below are the kit's public surface; each is imported on first use, so
``import fakeshard.testing`` (as the pytest plugin does) imports neither Hypothesis
nor the machines.  Public modules: ``checks`` (checks to run on any engine factory),
``strategies`` (Hypothesis strategies for your own tests), ``suite`` (the campaign as
pytest tests) and ``plugin`` (the pytest plugin).  The rest is private by name: the
machines (``_machines``, ``_failover``, ``_surface``, ``_parallel``,
``_coordinator_machine``), the reference model (``_model``) and coordinators
(``_reference_coordinator``, ``_async_coordinator``), the step runner (``_runner``), traces and replay
(``_trace``, ``_registry``, ``_regress``), ``_probes``, ``_profiles``, ``_campaign`` and the rest.
"""

from __future__ import annotations

import importlib
from typing import Any

#: Public name -> the module that defines it.
_WHERE = {
    "AsyncCoordinator": "_async_coordinator",
    "Cluster": "plugin",
    "Coordinator": "_reference_coordinator",
    "CoordinatorMachine": "_coordinator_machine",
    "CoordinatorRunner": "_coordinator_machine",
    "Deadlock": "_sim",
    "EngineRunner": "_runner",
    "FailoverMachine": "_failover",
    "FaultsMachine": "_machines",
    "GaveUp": "_reference_coordinator",
    "MachineConfig": "_machines",
    "Model": "_model",
    "SessionsMachine": "_machines",
    "SurfaceMachine": "_surface",
    "Trace": "_trace",
    "VirtualTimeLoop": "_sim",
    "WireLink": "_reference_coordinator",
    "load_coordinator": "_coordinator_machine",
    "reference": "_coordinator_machine",
    "reference_async": "_async_coordinator",
    "replay": "_registry",
    "run_machine": "_regress",
    "run_parallel": "_parallel",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'fakeshard.testing' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"fakeshard.testing.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
