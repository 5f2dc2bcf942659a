"""Topology files: the model, the engine factory and the named nodes that ``fakeshard serve`` runs.

A topology is pure data, read from JSON and checked field by field; any
mistake is a :class:`TopologyError` naming the field.  For example::

    >>> t = Topology.from_dict({
    ...     "model": {"model_id": "demo", "n_layers": 4, "hidden_size": 8, "vocab_size": 64},
    ...     "nodes": [{"name": "head", "start_layer": 0, "end_layer": 2},
    ...               {"name": "tail", "start_layer": 2, "end_layer": 4}]})
    >>> [t.spec_of(n).role.value for n in t.nodes]
    ['head', 'tail']

``docs/contract.md`` ("HTTP API v1") documents every field.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

from fakeshard._contract import ShardSpec
from fakeshard._errors import MalformedBundle
from fakeshard._factory import DEFAULT_FACTORY
from fakeshard._faults import FaultPlan

__all__ = ["NodeConfig", "Topology", "TopologyError"]

#: A node's name: it appears in URLs, so letters, digits, ``.``, ``_`` and ``-``.
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
#: Most seconds a served node's latency may draw for one hop (``POST /v1/nodes``).
MAX_LATENCY = 60


def stage_ranges(stages: int, layers_per_stage: int = 2) -> tuple[tuple[int, int], ...]:
    """The layer range of each stage of a model cut into ``stages`` stages of ``layers_per_stage``
    layers: the kit's clusters (three stages of two layers: ``(0, 2), (2, 4), (4, 6)``)."""
    return tuple((i * layers_per_stage, (i + 1) * layers_per_stage) for i in range(stages))


class TopologyError(ValueError):
    """A topology that cannot be run; the message names the field."""


def _int(data: dict[str, Any], key: str, where: str, low: int, default: Any = ...) -> Any:
    value = data.get(key, default)
    if value is ...:
        raise TopologyError(f"{where}.{key} is missing")
    if value is None and default is None:
        return None
    if type(value) is not int or value < low:
        raise TopologyError(f"{where}.{key} must be an integer >= {low}, got {value!r}")
    return value


def _only(data: Any, keys: set[str], where: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise TopologyError(f"{where} must be an object, got {type(data).__name__}")
    extra = sorted(set(data) - keys)
    if extra:
        raise TopologyError(f"{where} has unknown field(s) {extra}")
    return data


@dataclass(frozen=True)
class NodeConfig:
    """One node: its layer range, its data-plane port (0: a free one), capacity and fault plan."""

    name: str
    start_layer: int
    end_layer: int
    port: int = 0
    capacity_tokens: Optional[int] = None
    faults: Optional[FaultPlan] = None


@dataclass(frozen=True)
class Topology:
    """The model every node serves part of, the engine factory, and the nodes."""

    model_id: str
    n_layers: int
    hidden_size: int
    vocab_size: int
    nodes: tuple[NodeConfig, ...]
    seed: int = 0
    engine: str = DEFAULT_FACTORY
    control_port: int = 0

    def spec_of(self, node: NodeConfig) -> ShardSpec:
        return ShardSpec(self.model_id, self.n_layers, node.start_layer, node.end_layer,
                         self.hidden_size, self.vocab_size)

    @classmethod
    def load(cls, path: Union[str, Path]) -> "Topology":
        from fakeshard import wire  # as in from_dict

        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise TopologyError(f"cannot read topology {str(path)!r}: {exc.strerror}") from None
        try:
            data = wire.read_json(text)
        except wire.RepeatedKey as exc:
            raise TopologyError(f"topology {str(path)!r}: {exc}") from None
        except (ValueError, RecursionError) as exc:
            raise TopologyError(f"topology {str(path)!r} is not JSON: {exc}") from None
        return cls.from_dict(data)

    @classmethod
    def from_dict(cls, data: Any) -> "Topology":
        from fakeshard import wire  # wire imports nothing of ours that imports this module

        top = _only(data, {"model", "engine", "control_port", "nodes"}, "topology")
        model = _only(top.get("model"), {"model_id", "n_layers", "hidden_size", "vocab_size", "seed"},
                      "model")
        model_id = model.get("model_id")
        if not isinstance(model_id, str) or not model_id:
            raise TopologyError(f"model.model_id must be a non-empty string, got {model_id!r}")
        seed = model.get("seed", 0)
        if type(seed) is not int:
            raise TopologyError(f"model.seed must be an integer, got {seed!r}")
        engine = top.get("engine", DEFAULT_FACTORY)
        if not isinstance(engine, str) or ":" not in engine:
            raise TopologyError(f"engine must be a factory name module:callable, got {engine!r}")
        raw_nodes = top.get("nodes")
        if not isinstance(raw_nodes, list):
            raise TopologyError("nodes must be an array (empty: a server that nodes are added to)")
        nodes = []
        for i, raw in enumerate(raw_nodes):
            where = f"nodes[{i}]"
            node = _only(raw, {"name", "start_layer", "end_layer", "port", "capacity_tokens", "faults"},
                         where)
            name = node.get("name")
            if not isinstance(name, str) or not NAME_PATTERN.match(name):
                raise TopologyError(f"{where}.name must match {NAME_PATTERN.pattern}, got {name!r}")
            faults = node.get("faults")
            if faults is not None:
                try:
                    faults = wire.loads(json.dumps(faults))
                except (MalformedBundle, TypeError, ValueError) as exc:
                    raise TopologyError(f"{where}.faults: {exc}") from None
                if not isinstance(faults, FaultPlan):
                    raise TopologyError(f"{where}.faults must be a fault_plan, got {type(faults).__name__}")
            nodes.append(NodeConfig(
                name, _int(node, "start_layer", where, 0), _int(node, "end_layer", where, 1),
                _int(node, "port", where, 0, 0), _int(node, "capacity_tokens", where, 0, None), faults))
            if nodes[-1].port > 65535:
                raise TopologyError(f"{where}.port must be <= 65535, got {nodes[-1].port}")
        names = [n.name for n in nodes]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise TopologyError(f"node names must be unique, repeated: {dupes}")
        topology = cls(model_id, _int(model, "n_layers", "model", 1), _int(model, "hidden_size", "model", 4, 8),
                       _int(model, "vocab_size", "model", 2, 256), tuple(nodes), seed, engine,
                       _int(top, "control_port", "topology", 0, 0))
        for i, config in enumerate(topology.nodes):
            try:
                topology.spec_of(config)
            except ValueError as exc:
                raise TopologyError(f"nodes[{i}] ({config.name}): {exc}") from None
        return topology

    def to_dict(self) -> dict[str, Any]:
        from fakeshard import wire

        return {
            "model": {"model_id": self.model_id, "n_layers": self.n_layers,
                      "hidden_size": self.hidden_size, "vocab_size": self.vocab_size, "seed": self.seed},
            "engine": self.engine,
            "control_port": self.control_port,
            "nodes": [{"name": n.name, "start_layer": n.start_layer, "end_layer": n.end_layer,
                       "port": n.port, "capacity_tokens": n.capacity_tokens,
                       "faults": None if n.faults is None else json.loads(wire.dumps(n.faults))}
                      for n in self.nodes],
        }
