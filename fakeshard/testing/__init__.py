"""The fakeshard test kit: state machines, the reference model and coordinator, traces.

What a project installs to test its engine or its coordinator::

    pip install 'fakeshard[test]'
    python3 -m pytest --pyargs fakeshard.testing.suite --engine mypkg.adapter:make_engine
    python3 -m fakeshard check --coordinator mypkg.adapter:make_coordinator

The names below are the kit's public surface; each is imported on first use, so
``import fakeshard.testing`` (as the pytest plugin does) imports neither Hypothesis
nor the machines.  Modules: ``machines``, ``failover``, ``surface``, ``parallel`` and
``coordinating`` (the machines), ``model`` (the reference model), ``runner`` (the
step runner), ``coordinator`` (the reference coordinator), ``trace`` and ``regress``
(traces, shrinking, replay), ``probes``, ``profiles``, ``campaign``, ``suite`` (the
campaign as pytest tests) and ``plugin`` (the pytest plugin).
"""

from __future__ import annotations

import importlib
from typing import Any

#: Public name -> the module that defines it.
_WHERE = {
    "Cluster": "plugin",
    "Coordinator": "coordinator",
    "CoordinatorMachine": "coordinating",
    "CoordinatorRunner": "coordinating",
    "EngineRunner": "runner",
    "FailoverMachine": "failover",
    "FaultsMachine": "machines",
    "GaveUp": "coordinator",
    "MachineConfig": "machines",
    "Model": "model",
    "SessionsMachine": "machines",
    "SurfaceMachine": "surface",
    "Trace": "trace",
    "WireLink": "coordinator",
    "load_coordinator": "coordinating",
    "reference": "coordinating",
    "replay": "regress",
    "run_machine": "regress",
    "run_parallel": "parallel",
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
