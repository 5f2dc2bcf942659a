"""Real-model certification: llama GGUF shard engines in numpy (extra ``real``).

``pip install 'fakeshard[real]'`` brings numpy and gguf.  The engine is
:class:`~fakeshard._engine.SessionEngine` (the fixture's session table and
fault layer) over :class:`LlamaBackend`, so only the computation differs
from :class:`~fakeshard.FakeShardEngine`.
"""

from __future__ import annotations

try:
    import gguf  # noqa: F401
    import numpy  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(f"fakeshard.real needs numpy and gguf ({exc}); "
                      "install them with: pip install 'fakeshard[real]'") from exc

from fakeshard.real._engine import GGUFShardEngine, LlamaBackend
from fakeshard.real._model import GGUFError, GGUFModel, LlamaShape, open_model, write_tiny_gguf
from fakeshard.real._tiny import TinyFactory, cache_dir, tiny_engine, tiny_model_path

__all__ = [
    "GGUFError",
    "GGUFModel",
    "GGUFShardEngine",
    "LlamaBackend",
    "LlamaShape",
    "TinyFactory",
    "cache_dir",
    "open_model",
    "tiny_engine",
    "tiny_model_path",
    "write_tiny_gguf",
]
