"""Llama-architecture GGUF files: the tiny test models we write, and reading any of them.

:func:`write_tiny_gguf` writes a small llama model with seeded random
weights.  The weights come from SHAKE-256 streams keyed by the seed and the
tensor's name, not from numpy's generators (whose streams numpy does not
promise to keep across releases), so the same call writes the same bytes on
every machine and version.

:class:`GGUFModel` reads a file with the ``gguf`` package and dequantizes
tensors (F32, F16, Q8_0, Q4_0) on first use; :func:`open_model` shares one
reader per file within a process, so the many engines a test run builds do
not each re-read and re-dequantize the weights.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Union

import gguf
import numpy as np

__all__ = ["GGUFError", "GGUFModel", "LlamaShape", "QUANTS", "open_model", "write_tiny_gguf"]

#: Weight formats :func:`write_tiny_gguf` writes and :class:`GGUFModel` reads.
QUANTS = {
    "F32": gguf.GGMLQuantizationType.F32,
    "F16": gguf.GGMLQuantizationType.F16,
    "Q8_0": gguf.GGMLQuantizationType.Q8_0,
    "Q4_0": gguf.GGMLQuantizationType.Q4_0,
}
# llama.cpp's file-type codes for "all F32", "mostly F16", "mostly Q8_0", "mostly Q4_0".
_FILE_TYPES = {"F32": 0, "F16": 1, "Q8_0": 7, "Q4_0": 2}
_BLOCK = 32  # Q8_0 and Q4_0 quantize rows in blocks of 32 values
_ARCH = "llama"


class GGUFError(ValueError):
    """A file that is not a llama GGUF this engine can run, or one missing what it needs."""


@dataclass(frozen=True)
class LlamaShape:
    """The hyperparameters of a llama model."""

    n_layers: int
    hidden_size: int
    vocab_size: int
    n_head: int
    n_kv_head: int
    n_ff: int
    rms_eps: float = 1e-5
    rope_base: float = 10000.0
    context_length: int = 4096

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.n_head

    @classmethod
    def tiny(cls, n_layers: int, hidden_size: int, vocab_size: int) -> "LlamaShape":
        """The shape :func:`write_tiny_gguf` uses: 4 heads over 2 K/V heads (2 over 1 when
        ``hidden_size`` is not a multiple of 8), so attention is grouped-query; FFN width 3x."""
        for name, value, least in (("n_layers", n_layers, 1), ("hidden_size", hidden_size, 4),
                                   ("vocab_size", vocab_size, 2)):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"{name} must be an int >= {least}, got {value!r}")
        if hidden_size % 4:
            raise ValueError(f"a tiny llama needs hidden_size divisible by 4 (two heads of even "
                             f"width, for rotary positions), got {hidden_size}")
        n_head = 4 if hidden_size % 8 == 0 else 2
        return cls(n_layers, hidden_size, vocab_size, n_head, n_head // 2, 3 * hidden_size)

    def tensor_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every tensor's numpy shape (rows = outputs, columns = inputs), by GGUF name."""
        h, hd = self.hidden_size, self.head_dim
        shapes: dict[str, tuple[int, ...]] = {"token_embd.weight": (self.vocab_size, h)}
        for i in range(self.n_layers):
            shapes.update({
                f"blk.{i}.attn_norm.weight": (h,),
                f"blk.{i}.attn_q.weight": (self.n_head * hd, h),
                f"blk.{i}.attn_k.weight": (self.n_kv_head * hd, h),
                f"blk.{i}.attn_v.weight": (self.n_kv_head * hd, h),
                f"blk.{i}.attn_output.weight": (h, self.n_head * hd),
                f"blk.{i}.ffn_norm.weight": (h,),
                f"blk.{i}.ffn_gate.weight": (self.n_ff, h),
                f"blk.{i}.ffn_up.weight": (self.n_ff, h),
                f"blk.{i}.ffn_down.weight": (h, self.n_ff),
            })
        shapes["output_norm.weight"] = (h,)
        shapes["output.weight"] = (self.vocab_size, h)
        return shapes


def _uniform(seed: int, name: str, shape: tuple[int, ...]) -> np.ndarray:
    """Values in ``[-1, 1)`` from SHAKE-256 keyed by ``(seed, name)``: the same on every platform."""
    n = int(np.prod(shape))
    stream = hashlib.shake_256(f"fakeshard.tiny-llama.v1\x00{seed}\x00{name}".encode()).digest(4 * n)
    words = np.frombuffer(stream, dtype="<u4").astype(np.float64)
    return (words / 2.0**31 - 1.0).reshape(shape)


def _tiny_weights(shape: LlamaShape, seed: int) -> dict[str, np.ndarray]:
    weights = {}
    for name, dims in shape.tensor_shapes().items():
        u = _uniform(seed, name, dims)
        if len(dims) == 1:  # norm gains around 1
            w = 1.0 + 0.1 * u
        elif name == "token_embd.weight":
            w = u
        else:  # variance 1/fan_in (logits: 4/fan_in, so they spread over a few units)
            gain = 2.0 if name == "output.weight" else 1.0
            w = gain * np.sqrt(3.0 / dims[1]) * u
        weights[name] = w.astype(np.float32)
    return weights


def _vocab(n: int) -> tuple[list[str], list[int]]:
    """A SentencePiece-style vocabulary (llama.cpp wants one): <unk>, <s>, </s>, then byte tokens."""
    tokens, types = [], []
    for i in range(n):
        if i < 3:
            tokens.append(("<unk>", "<s>", "</s>")[i])
            types.append(gguf.TokenType.UNKNOWN if i == 0 else gguf.TokenType.CONTROL)
        elif i < 3 + 256:
            tokens.append(f"<0x{i - 3:02X}>")
            types.append(gguf.TokenType.BYTE)
        else:
            tokens.append(f"\u2581t{i}")
            types.append(gguf.TokenType.NORMAL)
    return tokens, [int(t) for t in types]


def write_tiny_gguf(
    path: Union[str, os.PathLike[str]],
    *,
    n_layers: int,
    hidden_size: int,
    vocab_size: int,
    seed: int = 0,
    quant: str = "F32",
    name: Optional[str] = None,
) -> Path:
    """Write a small random-weight llama GGUF to ``path`` (atomically) and return the path.

    ``quant`` is ``F32``, ``F16``, ``Q8_0`` or ``Q4_0``.  Q8_0 and Q4_0 pack
    rows in blocks of 32, so a matrix whose rows are not a multiple of 32
    long stays F32 (as llama.cpp's converter does); norm gains are always
    F32.  ``name`` is stored as ``general.name``, which becomes the engine's
    ``model_id`` (default: the file name without ``.gguf``).
    """
    shape = LlamaShape.tiny(n_layers, hidden_size, vocab_size)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an int, got {seed!r}")
    if quant not in QUANTS:
        raise ValueError(f"quant must be one of {', '.join(QUANTS)}, got {quant!r}")
    path = Path(path)
    name = path.name.removesuffix(".gguf") if name is None else name
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty str, got {name!r}")
    writer = gguf.GGUFWriter(None, _ARCH)
    _write_metadata(writer, shape, name, quant)
    qtype = QUANTS[quant]
    for tensor_name, w in _tiny_weights(shape, seed).items():
        if w.ndim == 1 or qtype == gguf.GGMLQuantizationType.F32:
            writer.add_tensor(tensor_name, w)
        elif qtype == gguf.GGMLQuantizationType.F16:
            writer.add_tensor(tensor_name, w.astype(np.float16))
        elif w.shape[1] % _BLOCK:
            writer.add_tensor(tensor_name, w)
        else:
            writer.add_tensor(tensor_name, gguf.quants.quantize(w, qtype), raw_dtype=qtype)
    _write_atomically(writer, path)
    return path


def _write_metadata(writer: gguf.GGUFWriter, shape: LlamaShape, name: str, quant: str) -> None:
    """The llama architecture's keys and a tokenizer of ``shape.vocab_size`` placeholder tokens."""
    writer.add_name(name)
    writer.add_context_length(shape.context_length)
    writer.add_embedding_length(shape.hidden_size)
    writer.add_block_count(shape.n_layers)
    writer.add_feed_forward_length(shape.n_ff)
    writer.add_head_count(shape.n_head)
    writer.add_head_count_kv(shape.n_kv_head)
    writer.add_rope_dimension_count(shape.head_dim)
    writer.add_rope_freq_base(shape.rope_base)
    writer.add_layer_norm_rms_eps(shape.rms_eps)
    writer.add_vocab_size(shape.vocab_size)
    writer.add_file_type(_FILE_TYPES[quant])
    if quant != "F32":
        writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    tokens, types = _vocab(shape.vocab_size)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores([0.0] * len(tokens))
    writer.add_token_types(types)
    writer.add_bos_token_id(1 if shape.vocab_size > 1 else 0)
    writer.add_eos_token_id(2 if shape.vocab_size > 2 else 0)
    writer.add_unk_token_id(0)


def _write_atomically(writer: gguf.GGUFWriter, path: Path) -> None:
    """``writer``'s file at ``path``, written beside it and moved in place: a reader never sees half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        writer.write_header_to_file(Path(tmp))
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        os.replace(tmp, path)
    except BaseException:
        writer.close()
        Path(tmp).unlink(missing_ok=True)
        raise


def _scalar(reader: gguf.GGUFReader, path: Path, key: str, default: Any = None) -> Any:
    field = reader.get_field(key)
    if field is None:
        if default is None:
            raise GGUFError(f"{path}: missing metadata key {key!r}")
        return default
    return field.contents()


class GGUFModel:
    """One llama GGUF file: its shape, identity and (lazily) dequantized tensors."""

    def __init__(self, path: Union[str, os.PathLike[str]]) -> None:
        self.path = Path(path)
        try:
            reader = gguf.GGUFReader(self.path)
        except (ValueError, OSError) as exc:
            if isinstance(exc, FileNotFoundError):
                raise
            raise GGUFError(f"{self.path}: not a readable GGUF file: {exc}") from None
        arch = _scalar(reader, self.path, "general.architecture")
        if arch != _ARCH:
            raise GGUFError(f"{self.path}: architecture {arch!r}, only {_ARCH!r} is supported")
        p = f"{_ARCH}."
        n_embd = int(_scalar(reader, self.path, p + "embedding_length"))
        n_head = int(_scalar(reader, self.path, p + "attention.head_count"))
        tensors = {t.name: t for t in reader.tensors}
        if "token_embd.weight" not in tensors:
            raise GGUFError(f"{self.path}: no token_embd.weight tensor")
        vocab = int(tensors["token_embd.weight"].shape[1])
        self.shape = LlamaShape(
            n_layers=int(_scalar(reader, self.path, p + "block_count")),
            hidden_size=n_embd,
            vocab_size=int(_scalar(reader, self.path, p + "vocab_size", vocab)),
            n_head=n_head,
            n_kv_head=int(_scalar(reader, self.path, p + "attention.head_count_kv", n_head)),
            n_ff=int(_scalar(reader, self.path, p + "feed_forward_length")),
            rms_eps=float(_scalar(reader, self.path, p + "attention.layer_norm_rms_epsilon")),
            rope_base=float(_scalar(reader, self.path, p + "rope.freq_base", 10000.0)),
            context_length=int(_scalar(reader, self.path, p + "context_length", 4096)),
        )
        s = self.shape
        if n_embd % n_head or s.head_dim % 2 or n_head % s.n_kv_head:
            raise GGUFError(f"{self.path}: {n_head} heads over {s.n_kv_head} K/V heads do not "
                            f"divide hidden size {n_embd} into even-width heads")
        rope_dims = int(_scalar(reader, self.path, p + "rope.dimension_count", s.head_dim))
        if rope_dims != s.head_dim:
            raise GGUFError(f"{self.path}: partial rotary ({rope_dims} of {s.head_dim} dims) "
                            "is not supported")
        expected = s.tensor_shapes()
        if "output.weight" not in tensors:  # tied output head
            expected.pop("output.weight")
        for tname, dims in expected.items():
            t = tensors.get(tname)
            if t is None:
                raise GGUFError(f"{self.path}: missing tensor {tname!r}")
            got = tuple(int(d) for d in reversed(t.shape.tolist()))
            if got != dims:
                raise GGUFError(f"{self.path}: tensor {tname!r} has shape {got}, expected {dims}")
            if t.tensor_type not in QUANTS.values():
                raise GGUFError(f"{self.path}: tensor {tname!r} is {t.tensor_type.name}; "
                                f"supported: {', '.join(QUANTS)}")
        name = reader.get_field("general.name")
        self.model_id = str(name.contents()) if name is not None and name.contents() else \
            "gguf-" + _file_digest(self.path)[:16]
        self._tensors = tensors
        self._cache: dict[str, np.ndarray] = {}
        self._prepared: dict[tuple[str, ...], Any] = {}

    def tensor(self, name: str) -> np.ndarray:
        """The tensor as a read-only float32 array (rows = outputs), dequantized once."""
        if name == "output.weight" and name not in self._tensors:
            name = "token_embd.weight"
        w = self._cache.get(name)
        if w is None:
            t = self._tensors[name]
            w = np.ascontiguousarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32)
            w = w.reshape(tuple(int(d) for d in reversed(t.shape.tolist())))
            w.flags.writeable = False
            self._cache[name] = w
        return w

    def prepared(self, key: tuple[str, ...], build: Callable[[], Any]) -> Any:
        """What ``build()`` makes of this model's tensors (read-only arrays), made once per
        ``key``: engines over the same layers share their transposed and joined weights."""
        value = self._prepared.get(key)
        if value is None:
            value = self._prepared[key] = build()
        return value

    def tensor_type(self, name: str) -> str:
        return self._tensors[name].tensor_type.name


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


_OPEN: dict[tuple[str, int, int, int], GGUFModel] = {}
#: How many files stay open (the least recently opened is dropped first).
OPEN_MODELS_MAX = 32


def open_model(path: Union[str, os.PathLike[str]]) -> GGUFModel:
    """The :class:`GGUFModel` for ``path``, shared within the process while the file is unchanged.

    "Unchanged" is the same inode, size and modification time; :func:`write_tiny_gguf`
    replaces files whole, so a rewrite is always seen.
    """
    real = os.path.realpath(path)
    st = os.stat(real)
    # The inode too: a file replaced within one timestamp tick keeps size and mtime.
    key = (real, st.st_ino, st.st_size, st.st_mtime_ns)
    model = _OPEN.pop(key, None)
    if model is None:
        model = GGUFModel(real)
        while len(_OPEN) >= OPEN_MODELS_MAX:
            del _OPEN[next(iter(_OPEN))]
    _OPEN[key] = model  # newest last
    return model
