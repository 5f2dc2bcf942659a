"""The engine surface every implementation offers, as a ``typing.Protocol``."""

from __future__ import annotations

from typing import Any, Optional, Protocol, runtime_checkable

from fakeshard._contract import InputBundle, OutputBundle, ShardSpec

__all__ = ["ShardEngine"]


@runtime_checkable
class ShardEngine(Protocol):
    """What the contract promises of an engine; the machines use nothing else.

    ``prefill``/``decode`` take a ``TokenBundle`` (head, full) or a
    ``HiddenBundle`` (middle, tail) and return a ``HiddenBundle`` (head,
    middle) or a ``SampleBundle`` (tail, full).
    """

    spec: ShardSpec
    evidence_class: str

    @property
    def capacity_tokens(self) -> Optional[int]: ...

    @property
    def used_tokens(self) -> int: ...

    def prefill(self, bundle: InputBundle) -> OutputBundle: ...

    def decode(self, bundle: InputBundle) -> OutputBundle: ...

    def cancel(self, session_id: str, epoch: int) -> None: ...

    def release(self, session_id: str, epoch: int) -> None: ...

    def restart(self) -> None: ...

    def session(self, session_id: str) -> Any: ...
