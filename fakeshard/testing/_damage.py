"""Input damage: the ways a step's input breaks the contract, and an input broken in each.

Every kind must be refused with ``MalformedBundle`` by an engine in any state.  The machines
send them (``bad`` in a step), and the public strategy ``malformed_inputs`` draws them: this
module needs nothing of the kit but the contract's values, so the strategies load no model.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from fakeshard._contract import HiddenBundle, ShardSpec, TokenBundle

__all__ = ["BAD_INPUTS", "break_input"]

#: Ways a step's input can break the contract (each must be refused as MalformedBundle).
BAD_INPUTS = ("contract", "range", "type", "two_positions", "session_type", "empty_session",
              "epoch_negative", "epoch_bool", "start_negative", "no_positions", "token_type",
              "not_a_bundle", "nan", "checksum", "width", "ragged", "layer", "value_type", "rows_type")


def break_input(bundle: Any, bad: str, spec: ShardSpec) -> Any:
    """``bundle`` broken in the named way (a kind that does not fit its type breaks the contract version)."""
    replace = dataclasses.replace
    sid, epoch, start = bundle.session_id, bundle.epoch, bundle.start_pos
    identity: dict[str, dict[str, Any]] = {"session_type": {"session_id": 7}, "empty_session": {"session_id": ""},
                "epoch_negative": {"epoch": -1}, "epoch_bool": {"epoch": True},
                "start_negative": {"start_pos": -1}, "contract": {"contract": "0"}}
    if bad in identity:
        return replace(bundle, **identity[bad])
    if bad == "not_a_bundle":
        return {"session_id": sid, "epoch": epoch, "start_pos": start}
    if isinstance(bundle, TokenBundle):
        if bad == "range":
            return replace(bundle, tokens=(spec.vocab_size,) + bundle.tokens[1:])
        if bad == "no_positions":
            return replace(bundle, tokens=())
        if bad == "token_type":
            return replace(bundle, tokens=("7",) + bundle.tokens[1:])
        if bad == "type":
            return HiddenBundle.sealed(sid, epoch, start, max(1, spec.start_layer),
                                       [(0.0,) * spec.hidden_size] * len(bundle.tokens))
        return replace(bundle, contract="0")
    rows = list(bundle.rows())
    if bad in ("range", "nan"):
        return HiddenBundle.sealed(sid, epoch, start, bundle.layer, [(math.nan,) + rows[0][1:]] + rows[1:])
    if bad == "checksum":
        return replace(bundle, checksum="0" * 16)
    if bad == "width":
        return HiddenBundle.sealed(sid, epoch, start, bundle.layer, [r + (0.0,) for r in rows])
    if bad == "ragged":
        return HiddenBundle.sealed(sid, epoch, start, bundle.layer, rows + [rows[0][:-1]])
    if bad == "layer":
        return HiddenBundle.sealed(sid, epoch, start, bundle.layer + 1, rows)
    if bad == "no_positions":
        return HiddenBundle.sealed(sid, epoch, start, bundle.layer, [])
    if bad == "value_type":
        return replace(bundle, hidden=(("x",) + rows[0][1:],) + tuple(rows[1:]))
    if bad == "rows_type":
        return replace(bundle, hidden=rows[0])
    if bad == "type":
        return TokenBundle(sid, epoch, start, (0,) * len(rows))
    return replace(bundle, contract="0")
