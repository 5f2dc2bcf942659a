"""fakeshard: a deterministic fake of a pipeline-parallel shard engine.

The public face: everything a user imports is here, and nothing else is
promised.  See ``docs/contract.md`` (contract v1) and the documentation site in ``docs/``.
"""

from fakeshard._backend import Backend, HashBackend
from fakeshard._clock import RealClock, VirtualClock
from fakeshard._contract import (
    CONTRACT_VERSION,
    HiddenBundle,
    Role,
    SampleBundle,
    ShardSpec,
    TokenBundle,
    validate,
)
from fakeshard._engine import FakeShardEngine, SessionEngine, SessionView
from fakeshard._errors import (
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
from fakeshard._faults import (
    Crash,
    Delay,
    Drawn,
    DropResponse,
    FaultInjector,
    FaultPlan,
    FaultRule,
    Fired,
    Malformed,
    MemoryPressure,
)
from fakeshard._feeder import Feeder
from fakeshard._layer import FaultLayer
from fakeshard._pipeline import Pipeline
from fakeshard._protocol import ShardEngine

__version__ = "0.1.0"

__all__ = [
    "Backend",
    "CONTRACT_VERSION",
    "CacheMiss",
    "Crash",
    "Delay",
    "Drawn",
    "DropResponse",
    "EngineCrashed",
    "EngineError",
    "FakeShardEngine",
    "FaultInjector",
    "FaultLayer",
    "FaultPlan",
    "FaultRule",
    "Feeder",
    "Fired",
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
