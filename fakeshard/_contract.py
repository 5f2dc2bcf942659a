"""The contract's data: ``ShardSpec``, ``Role``, the three bundles, ``validate``.

Pure values and pure checks; no state lives here.  Bundles are frozen and do
not validate themselves on construction (so that a broken bundle can exist,
travel and be rejected by its receiver); :func:`validate` says whether one
keeps the contract, and every engine calls it on its input.
"""

from __future__ import annotations

import enum
import itertools
import math
import struct
from dataclasses import dataclass
from typing import Any, Optional, Union

import numpy as np
import xxhash

from fakeshard._errors import MalformedBundle

__all__ = [
    "CONTRACT_VERSION",
    "Bundle",
    "HiddenBundle",
    "Role",
    "SampleBundle",
    "ShardSpec",
    "TokenBundle",
    "frozen_array",
    "hidden_checksum",
    "validate",
]

#: The contract version every bundle carries.
CONTRACT_VERSION = "1"


class Role(enum.Enum):
    """Which end(s) of the model an engine holds."""

    HEAD = "head"
    MIDDLE = "middle"
    TAIL = "tail"
    FULL = "full"

    @property
    def takes_tokens(self) -> bool:
        """Head and full engines embed tokens; the others take hidden states."""
        return self in (Role.HEAD, Role.FULL)

    @property
    def samples(self) -> bool:
        """Tail and full engines sample the next token."""
        return self in (Role.TAIL, Role.FULL)


def _is_int(value: object) -> bool:
    """An int, not a bool (``type(...) is int`` is also the fastest test)."""
    return type(value) is int


@dataclass(frozen=True, slots=True)
class ShardSpec:
    """A contiguous layer range ``[start_layer, end_layer)`` of a model.

    An impossible spec raises ``ValueError`` naming the field::

        >>> ShardSpec("m", n_layers=4, start_layer=0, end_layer=2).role
        <Role.HEAD: 'head'>
    """

    model_id: str
    n_layers: int
    start_layer: int
    end_layer: int
    hidden_size: int = 8
    vocab_size: int = 256

    def __post_init__(self) -> None:
        if not isinstance(self.model_id, str) or not self.model_id:
            raise ValueError(f"ShardSpec.model_id must be a non-empty str, got {self.model_id!r}")
        for name, low in (("n_layers", 1), ("hidden_size", 4), ("vocab_size", 2)):
            value = getattr(self, name)
            if not _is_int(value) or value < low:
                raise ValueError(f"ShardSpec.{name} must be an int >= {low}, got {value!r}")
        for name in ("start_layer", "end_layer"):
            if not _is_int(getattr(self, name)):
                raise ValueError(f"ShardSpec.{name} must be an int, got {getattr(self, name)!r}")
        if not 0 <= self.start_layer < self.end_layer <= self.n_layers:
            raise ValueError(
                "ShardSpec needs 0 <= start_layer < end_layer <= n_layers, got "
                f"start_layer={self.start_layer}, end_layer={self.end_layer}, "
                f"n_layers={self.n_layers}"
            )

    @property
    def role(self) -> Role:
        head = self.start_layer == 0
        tail = self.end_layer == self.n_layers
        if head and tail:
            return Role.FULL
        if head:
            return Role.HEAD
        if tail:
            return Role.TAIL
        return Role.MIDDLE

    def with_layers(self, start_layer: int, end_layer: int) -> "ShardSpec":
        """The same model, another layer range."""
        return ShardSpec(
            self.model_id, self.n_layers, start_layer, end_layer,
            self.hidden_size, self.vocab_size,
        )


@dataclass(frozen=True, slots=True)
class TokenBundle:
    """Input of a head or full engine: ``tokens`` at ``start_pos``, ``start_pos + 1``, ..."""

    session_id: str
    epoch: int
    start_pos: int
    tokens: tuple[int, ...]
    contract: str = CONTRACT_VERSION

    def __post_init__(self) -> None:
        if isinstance(self.tokens, list):
            object.__setattr__(self, "tokens", tuple(self.tokens))


def frozen_array(values: np.ndarray) -> np.ndarray:
    """``values`` as a read-only array that nothing else can write to (copied only if needed).

    An array that is read-only all the way down (no base, or a base of
    immutable ``bytes``, as from ``np.frombuffer`` on a frame) is kept as it
    is; anything a caller could still write through is copied once.
    """
    base: Any = values
    while isinstance(base, np.ndarray):
        if base.flags.writeable:
            break
        base = base.base
    else:
        if base is None or isinstance(base, bytes):
            return values
    out = np.array(values, order="C", copy=True)
    out.flags.writeable = False
    return out


@dataclass(frozen=True, slots=True, eq=False)
class HiddenBundle:
    """Hidden states passed between shards.

    ``layer`` is the first layer the receiver runs; ``hidden`` has one row of
    ``hidden_size`` finite floats per position, either as rows of Python
    floats or as one 2-D numpy array of a float dtype (engines answer with
    read-only float32 arrays: the data plane at memory speed).  ``checksum``
    covers the identity fields and the values (build one with
    :meth:`sealed`).  Two bundles are equal when their fields are and their
    values have the same shape and the same bits as float32, whichever form
    holds them: one relation, reflexive, symmetric and transitive, NaN
    included (a NaN equals a NaN of the same bits; ``-0.0`` is not ``0.0``).
    An array given writable is copied once and frozen, so a valid bundle
    stays valid.

    For example::

        >>> nan = float("nan")
        >>> rows = HiddenBundle("s", 0, 0, 1, ((nan, 0.1),), "0" * 16)
        >>> rows == HiddenBundle("s", 0, 0, 1, ((float("nan"), 0.1),), "0" * 16)
        True
        >>> rows == HiddenBundle("s", 0, 0, 1, np.array([[nan, 0.1]], np.float32), "0" * 16)
        True
    """

    session_id: str
    epoch: int
    start_pos: int
    layer: int
    hidden: Any  # tuple[tuple[float, ...], ...] or a 2-D float ndarray
    checksum: str
    contract: str = CONTRACT_VERSION

    def __post_init__(self) -> None:
        hidden = self.hidden
        if isinstance(hidden, np.ndarray):
            object.__setattr__(self, "hidden", frozen_array(hidden))
        elif isinstance(hidden, list) or (
            isinstance(hidden, tuple) and any(isinstance(row, list) for row in hidden)
        ):
            object.__setattr__(
                self, "hidden",
                tuple(tuple(row) if isinstance(row, list) else row for row in hidden),
            )

    def rows(self) -> Any:
        """The values as rows of Python floats (an array's values exactly); other contents as they are."""
        if isinstance(self.hidden, np.ndarray):
            return tuple(map(tuple, self.hidden.tolist())) if self.hidden.ndim == 2 else self.hidden
        return self.hidden

    def array(self) -> np.ndarray:
        """The values as a read-only 2-D float array (float32 when built from rows).

        Raises :class:`MalformedBundle` if the contents are not rows of numbers of one width.
        """
        if isinstance(self.hidden, np.ndarray):
            return self.hidden
        try:
            out = _as_array(self.hidden).astype(np.float32)
        except (TypeError, ValueError, OverflowError) as exc:
            raise _fail(self, f"hidden must be rows of floats ({exc})") from None
        out.flags.writeable = False
        return out

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, HiddenBundle)
        if (self.session_id, self.epoch, self.start_pos, self.layer, self.checksum, self.contract) != \
                (other.session_id, other.epoch, other.start_pos, other.layer, other.checksum,
                 other.contract):
            return False
        return _same_values(self.hidden, other.hidden)

    def __hash__(self) -> int:
        return hash((self.session_id, self.epoch, self.start_pos, self.layer, self.checksum))

    @classmethod
    def sealed(
        cls,
        session_id: str,
        epoch: int,
        start_pos: int,
        layer: int,
        hidden: Any,
    ) -> "HiddenBundle":
        """A bundle with its checksum computed over the given fields.

        ``hidden`` may be rows of floats or a 2-D float array.  Rows given as
        numpy arrays (``list(array)``, say) become rows of Python numbers, so the
        bundle holds one of the two forms.  Values that cannot be checksummed
        (not numbers) raise :class:`MalformedBundle`; anything else is left for
        :func:`validate`.
        """
        try:
            if not isinstance(hidden, np.ndarray):
                hidden = tuple(tuple(row.tolist() if isinstance(row, np.ndarray) else row) for row in hidden)
            checksum = hidden_checksum(session_id, epoch, start_pos, layer, hidden)
        except (TypeError, ValueError, OverflowError) as exc:
            raise MalformedBundle(f"HiddenBundle.sealed: hidden must be rows of floats ({exc})") from None
        return cls(session_id, epoch, start_pos, layer, hidden, checksum)


@dataclass(frozen=True, slots=True)
class SampleBundle:
    """Tail/full output: ``token`` will sit at position ``pos``."""

    session_id: str
    epoch: int
    pos: int
    token: int
    contract: str = CONTRACT_VERSION


Bundle = Union[TokenBundle, HiddenBundle, SampleBundle]
#: What ``prefill`` and ``decode`` take: tokens (head, full) or hidden states (middle, tail).
InputBundle = Union[TokenBundle, HiddenBundle]
#: What they answer: hidden states (head, middle) or the sampled token (tail, full).
OutputBundle = Union[HiddenBundle, SampleBundle]


def _as_array(hidden: Any) -> np.ndarray:
    """Rows of numbers, or an array, as a 2-D array (``0x0`` for no rows); ``TypeError`` for a
    value that is no number, ``ValueError`` for any other shape."""
    if isinstance(hidden, np.ndarray):
        out = hidden
    else:
        out = _float64_rows(hidden)
        if out.size == 0 and out.ndim == 1:
            out = out.reshape(0, 0)
    if out.ndim != 2:
        raise ValueError(f"hidden must be 2-D, got shape {out.shape}")
    return out


def _float32_bits(hidden: Any) -> Optional[np.ndarray]:
    """The values as a 2-D array of their float32 bit patterns (``uint32``), or ``None`` when
    ``hidden`` holds no values: neither a 2-D array of numbers (a float dtype, or an integer
    one, which ``validate`` refuses but which holds the same numbers) nor a tuple of equally
    long tuples of numbers (ints or floats, not bools)."""
    if isinstance(hidden, np.ndarray):
        if hidden.dtype.kind not in "fiu" or hidden.ndim != 2:
            return None
        values = hidden
    else:
        # The usual row of plain floats is one test in C; anything else is looked at value by value.
        if not isinstance(hidden, tuple) or not all(
                isinstance(row, tuple) and (set(map(type, row)) <= _PLAIN_NUMBERS or all(map(_is_number, row)))
                for row in hidden):
            return None
        if len({len(row) for row in hidden}) > 1:
            return None
        try:
            values = np.array(hidden, dtype=np.float64).reshape(len(hidden), len(hidden[0]) if hidden else 0)
        except OverflowError:  # an int beyond float64: no float32 value either
            return None
    with np.errstate(over="ignore", invalid="ignore"):  # beyond float32's range: inf, as the checksum reads it
        return np.ascontiguousarray(values, dtype=_F32_LE).view(np.uint32)


def _same_values(a: Any, b: Any) -> bool:
    """Whether two bundles' ``hidden`` hold the same values (see :class:`HiddenBundle`).

    Contents in no form the contract gives values (malformed ones: ``None``, bools, ragged
    rows, a row that is no tuple) are equal only to contents of the same structure whose
    leaves are equal, floats and numpy values by their bits.
    """
    if a is b:
        return True
    x, y = _float32_bits(a), _float32_bits(b)
    if x is None or y is None:
        return x is None and y is None and _structure(a) == _structure(b)
    return x.shape == y.shape and bool(np.array_equal(x, y))


def _structure(value: Any) -> Any:
    """``value`` as a comparable structure in which every leaf equals itself (NaN included)."""
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, tuple(_structure(v) for v in value))
    if isinstance(value, float):  # numpy's float64 among them, as everywhere in the contract
        return ("float", struct.pack("<d", value))
    if isinstance(value, (np.ndarray, np.generic)):
        return ("numpy", value.dtype.str, np.shape(value), np.asarray(value).tobytes())
    if isinstance(value, (bool, int)):
        return (type(value).__name__, int(value))
    return ("object", type(value).__qualname__, value)


def _float64_rows(hidden: Any) -> np.ndarray:
    """Rows of numbers as numpy reads them into float64; ``TypeError`` for a value that is no
    number (``None``, a str, a bool, which numpy would read as NaN, the number it spells, 1.0)."""
    for i, row in enumerate(hidden):
        # The usual row of floats: one test in C. What is no row numpy refuses by its shape.
        if isinstance(row, (tuple, list)) and not set(map(type, row)) <= _PLAIN_NUMBERS:
            for j, value in enumerate(row):
                if not _is_number(value):
                    raise TypeError(f"hidden[{i}][{j}] is {type(value).__name__} {value!r}, not a number")
    return np.array(hidden, dtype=np.float64)


def hidden_checksum(
    session_id: str,
    epoch: int,
    start_pos: int,
    layer: int,
    hidden: Any,
    contract: str = CONTRACT_VERSION,
) -> str:
    """16 lowercase hex digits of XXH3-64 (seed 0) over the identity fields and the values.

    The hashed bytes are the UTF-8 header
    ``f"{contract}\\0{session_id}\\0{epoch}\\0{start_pos}\\0{layer}\\0{rows}x{cols}\\0"``
    followed by every value as a little-endian IEEE-754 float32, row after
    row (values held in another precision are rounded to float32 first).
    ``docs/contract.md`` gives test vectors.  Rows of floats and arrays of
    the same values have the same checksum.
    """
    if isinstance(hidden, np.ndarray):
        values = _as_array(hidden)
        n_rows, n_cols = values.shape
    else:  # rows of numbers; ragged rows (which validate refuses) are hashed one after another
        n_rows = len(hidden)
        n_cols = len(hidden[0]) if n_rows else 0
        values = np.fromiter(itertools.chain.from_iterable(hidden), dtype=np.float64)
    header = f"{contract}\x00{session_id}\x00{epoch}\x00{start_pos}\x00{layer}\x00{n_rows}x{n_cols}\x00"
    if values.dtype != _F32_LE or not values.flags.c_contiguous:
        with np.errstate(over="ignore", invalid="ignore"):  # beyond float32's range: inf, as any cast
            values = np.ascontiguousarray(values, dtype=_F32_LE)
    digest = xxhash.xxh3_64(header.encode("utf-8", "surrogatepass"))
    if values.size:
        digest.update(values.data.cast("B"))
    return digest.hexdigest()


_F32_LE = np.dtype("<f4")


def _fail(bundle: object, message: str) -> MalformedBundle:
    session_id = getattr(bundle, "session_id", None)
    epoch = getattr(bundle, "epoch", None)
    return MalformedBundle(
        f"{type(bundle).__name__}: {message}",
        session_id=session_id if isinstance(session_id, str) else None,
        epoch=epoch if _is_int(epoch) else None,
    )


def _check_index(bundle: object, name: str, value: Any, low: int) -> None:
    if type(value) is not int:
        raise _fail(bundle, f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < low:
        raise _fail(bundle, f"{name} must be >= {low}, got {value}")


def _check_identity(bundle: Bundle) -> None:
    if bundle.contract != CONTRACT_VERSION:
        raise _fail(bundle, f"contract version {bundle.contract!r} is not {CONTRACT_VERSION!r}")
    if not isinstance(bundle.session_id, str) or not bundle.session_id:
        raise _fail(bundle, f"session_id must be a non-empty str, got {bundle.session_id!r}")
    _check_index(bundle, "epoch", bundle.epoch, 0)


def _check_token(bundle: object, name: str, token: Any, spec: ShardSpec | None) -> None:
    _check_index(bundle, name, token, 0)
    if spec is not None and token >= spec.vocab_size:
        raise _fail(
            bundle,
            f"{name} = {token} is outside 0..{spec.vocab_size - 1} (vocab_size {spec.vocab_size})",
        )


_PLAIN_NUMBERS = frozenset({float, int})
_TUPLE = frozenset({tuple})


def _is_number(value: object) -> bool:
    """An int or a float (numpy's float64 among them), and not a bool: what a hidden value may be."""
    return isinstance(value, (float, int)) and not isinstance(value, bool)


def _check_hidden_array(bundle: HiddenBundle, rows: np.ndarray, spec: ShardSpec | None) -> None:
    if rows.dtype.kind != "f":
        raise _fail(bundle, f"hidden must be an array of a float dtype, got {rows.dtype}")
    if rows.ndim != 2:
        raise _fail(bundle, f"hidden must be a 2-D array of rows, got shape {rows.shape}")
    if rows.shape[0] == 0:
        raise _fail(bundle, "hidden must be a non-empty sequence of rows")
    if rows.shape[1] == 0:
        raise _fail(bundle, "hidden rows must not be empty")
    if spec is not None and rows.shape[1] != spec.hidden_size:
        raise _fail(
            bundle,
            f"hidden has shape mismatch: row 0 has {rows.shape[1]} values, expected {spec.hidden_size}",
        )
    finite = np.isfinite(rows)
    if not finite.all():
        i, j = (int(k) for k in np.argwhere(~finite)[0])
        raise _fail(bundle, f"hidden[{i}][{j}] = {float(rows[i, j])} is not finite")


def _check_hidden_rows(bundle: HiddenBundle, rows: Any, spec: ShardSpec | None) -> None:
    if not isinstance(rows, tuple) or not rows:
        raise _fail(bundle, "hidden must be a non-empty sequence of rows")
    width = spec.hidden_size if spec is not None else None
    # Fast path in C for the usual rows (tuples of plain numbers, one width, a finite sum: an inf
    # or NaN never sums to a finite value); otherwise the loop decides, and names what is wrong.
    first = rows[0]
    expect = width if width is not None else (len(first) if isinstance(first, tuple) else 0)
    if expect and set(map(type, rows)) <= _TUPLE and set(map(len, rows)) == {expect} \
            and set(map(type, itertools.chain.from_iterable(rows))) <= _PLAIN_NUMBERS:
        try:
            if math.isfinite(sum(itertools.chain.from_iterable(rows))):
                return
        except OverflowError:  # an int too large for a float
            pass
    for i, row in enumerate(rows):
        if not isinstance(row, tuple):
            raise _fail(bundle, f"hidden[{i}] must be a row of floats, got {type(row).__name__}")
        if width is None:
            width = len(row)
            if width == 0:
                raise _fail(bundle, "hidden rows must not be empty")
        if len(row) != width:
            raise _fail(
                bundle,
                f"hidden has shape mismatch: row {i} has {len(row)} values, expected {width}",
            )
        # Fast path in C for the usual row of plain numbers: a finite sum means every value is
        # finite (an inf or NaN never sums to a finite value); otherwise the loop decides, and
        # names the bad value.
        if set(map(type, row)) <= _PLAIN_NUMBERS:
            try:
                if math.isfinite(sum(row)):
                    continue
            except OverflowError:  # an int too large for a float
                pass
        for j, value in enumerate(row):
            if not _is_number(value):
                raise _fail(bundle, f"hidden[{i}][{j}] must be a float, got {type(value).__name__}")
            try:
                finite = math.isfinite(value)
            except OverflowError:
                raise _fail(bundle, f"hidden[{i}][{j}] is an int of {value.bit_length()} bits, "
                            "too large for a float64") from None
            if not finite:
                raise _fail(bundle, f"hidden[{i}][{j}] = {value} is not finite")


def _check_hidden(bundle: HiddenBundle, spec: ShardSpec | None) -> None:
    rows = bundle.hidden
    if isinstance(rows, np.ndarray):
        _check_hidden_array(bundle, rows, spec)
    else:
        _check_hidden_rows(bundle, rows, spec)
    if not isinstance(bundle.checksum, str):
        raise _fail(bundle, f"checksum must be a str, got {type(bundle.checksum).__name__}")
    expected = hidden_checksum(
        bundle.session_id, bundle.epoch, bundle.start_pos, bundle.layer, rows, bundle.contract
    )
    if bundle.checksum != expected:
        raise _fail(bundle, f"checksum {bundle.checksum!r} does not match the contents")


#: The last HiddenBundle found valid, and the model shape it was checked against.
_last_valid_hidden: tuple[HiddenBundle, tuple[int, int] | None] | None = None


def validate(bundle: object, spec: ShardSpec | None = None) -> object:
    """Raise :class:`MalformedBundle` if ``bundle`` breaks the contract.

    Without ``spec`` it checks what the bundle alone shows (types, version,
    positions, shape consistency, finiteness, checksum); with ``spec`` also
    ``vocab_size``, ``hidden_size`` and that a hidden bundle's ``layer`` is a
    boundary inside the model.  Returns the bundle.  For example::

        >>> validate(TokenBundle("s", 0, 0, (1, 2)), ShardSpec("m", 2, 0, 2))
        TokenBundle(session_id='s', epoch=0, start_pos=0, tokens=(1, 2), contract='1')
    """
    if isinstance(bundle, TokenBundle):
        _check_identity(bundle)
        _check_index(bundle, "start_pos", bundle.start_pos, 0)
        tokens = bundle.tokens
        if not isinstance(tokens, tuple) or not tokens:
            raise _fail(bundle, "tokens must be a non-empty sequence of ints")
        vocab = spec.vocab_size if spec is not None else None
        for i, token in enumerate(tokens):
            # The common case in one test; the slow path says what is wrong.
            if type(token) is not int or token < 0 or (vocab is not None and token >= vocab):
                _check_token(bundle, f"tokens[{i}]", token, spec)
    elif isinstance(bundle, HiddenBundle):
        global _last_valid_hidden
        # A valid HiddenBundle is immutable all the way down (frozen, tuples of numbers), so
        # the one just found valid for the same model shape need not be checked again: a
        # pipeline checks each stage's output and the next stage validates it as input.
        shape = None if spec is None else (spec.n_layers, spec.hidden_size)
        last = _last_valid_hidden
        if last is not None and last[0] is bundle and last[1] == shape:
            return bundle
        _check_identity(bundle)
        _check_index(bundle, "start_pos", bundle.start_pos, 0)
        _check_index(bundle, "layer", bundle.layer, 1)
        if spec is not None and bundle.layer >= spec.n_layers:
            raise _fail(
                bundle,
                f"layer {bundle.layer} is not a boundary inside a model of {spec.n_layers} layers",
            )
        _check_hidden(bundle, spec)
        if type(bundle) is HiddenBundle:
            _last_valid_hidden = (bundle, shape)
    elif isinstance(bundle, SampleBundle):
        _check_identity(bundle)
        _check_index(bundle, "pos", bundle.pos, 1)
        _check_token(bundle, "token", bundle.token, spec)
    else:
        raise MalformedBundle(
            f"expected a TokenBundle, HiddenBundle or SampleBundle, got {type(bundle).__name__}"
        )
    return bundle
