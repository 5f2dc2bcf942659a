"""fakeshard: a deterministic fake of a pipeline-parallel shard engine.

The public face: everything a user imports is here, and nothing else is
promised.  See ``docs/contract.md`` (contract v1) and the documentation site in ``docs/``.
"""

from fakeshard.backend import Backend, HashBackend
from fakeshard.clock import RealClock, VirtualClock
from fakeshard.contract import (
    CONTRACT_VERSION,
    HiddenBundle,
    Role,
    SampleBundle,
    ShardSpec,
    TokenBundle,
    validate,
)
from fakeshard.engine import FakeShardEngine, SessionEngine, SessionView
from fakeshard.errors import (
    CacheMiss,
    EngineCrashed,
    EngineError,
    MalformedBundle,
    OutOfMemory,
    PositionMismatch,
    ResponseLost,
    SessionCancelled,
    SessionError,
    SessionReleased,
    ShardError,
    StaleEpoch,
)
from fakeshard.faults import (
    Crash,
    Delay,
    DropResponse,
    FaultPlan,
    FaultRule,
    Malformed,
    MemoryPressure,
)
from fakeshard.feeder import Feeder
from fakeshard.pipeline import Pipeline
from fakeshard.protocol import ShardEngine

__version__ = "0.1.0"

__all__ = [
    "Backend",
    "CONTRACT_VERSION",
    "CacheMiss",
    "Crash",
    "Delay",
    "DropResponse",
    "EngineCrashed",
    "EngineError",
    "FakeShardEngine",
    "FaultPlan",
    "FaultRule",
    "Feeder",
    "HashBackend",
    "HiddenBundle",
    "Malformed",
    "MalformedBundle",
    "MemoryPressure",
    "OutOfMemory",
    "Pipeline",
    "PositionMismatch",
    "RealClock",
    "ResponseLost",
    "Role",
    "SampleBundle",
    "SessionCancelled",
    "SessionEngine",
    "SessionError",
    "SessionReleased",
    "SessionView",
    "ShardEngine",
    "ShardError",
    "ShardSpec",
    "StaleEpoch",
    "TokenBundle",
    "VirtualClock",
    "validate",
]
