"""JSON Schemas (draft 2020-12) of every message on the wire, over HTTP API v1, and of the
stdio protocol of coordinator programs (``program_*``).

``python3 -m fakeshard schema`` prints them all as one document (each under
``$defs``); ``python3 -m fakeshard schema NAME`` prints one.  A coordinator
in any language can check its own messages against them.  They state what
JSON can state: field names and types, integer ranges that fit 64 bits,
enumerations.  What needs arithmetic (a hidden bundle's checksum, its row
widths against the model, a base64 payload's length against its shape) is
in ``docs/contract.md``, "The wire"; ``fakeshard.wire.loads`` checks both.
"""

from __future__ import annotations

from typing import Any

from fakeshard._contract import CONTRACT_VERSION
from fakeshard._errors import ERROR_CODES
from fakeshard._faults import MALFORMED_KINDS, OPS
from fakeshard._topology import MAX_LATENCY, NAME_PATTERN

__all__ = ["PROGRAM_SCHEMAS", "SCHEMAS", "document", "schema"]

_I64 = {"type": "integer", "minimum": -(2**63), "maximum": 2**63 - 1}
_NAT = {"type": "integer", "minimum": 0, "maximum": 2**63 - 1}
_DIM = {"type": "integer", "minimum": 0, "maximum": 2**31 - 1}  # a binary shape's rows or columns
_CONTRACT = {"const": CONTRACT_VERSION}
_SESSION = {"type": "string", "minLength": 1}
_NUMBER = {"type": "number"}


def _object(kind: str | None, properties: dict[str, Any], optional: tuple[str, ...] = ()) -> dict[str, Any]:
    props = dict(properties)
    if kind is not None:
        props = {"kind": {"const": kind}, "contract": _CONTRACT, **props}
    return {"type": "object", "properties": props,
            "required": [k for k in props if k not in optional], "additionalProperties": False}


_HIDDEN_BINARY = _object(None, {
    "dtype": {"enum": ["float32", "float16"]},
    "shape": {"type": "array", "prefixItems": [_DIM, _DIM], "items": False, "minItems": 2},
    "base64": {"type": "string", "contentEncoding": "base64"},
})

SCHEMAS: dict[str, dict[str, Any]] = {
    "token_bundle": _object("token_bundle", {
        "session_id": _SESSION, "epoch": _NAT, "start_pos": _NAT,
        "tokens": {"type": "array", "items": _NAT, "minItems": 1}}),
    "hidden_bundle": _object("hidden_bundle", {
        "session_id": _SESSION, "epoch": _NAT, "start_pos": _NAT,
        "layer": {"type": "integer", "minimum": 1, "maximum": 2**63 - 1},
        "hidden": {"oneOf": [
            {"type": "array", "minItems": 1, "items": {"type": "array", "minItems": 1, "items": _NUMBER}},
            _HIDDEN_BINARY]},
        "checksum": {"type": "string", "pattern": "^[0-9a-f]{16}$"}}),
    "sample_bundle": _object("sample_bundle", {
        "session_id": _SESSION, "epoch": _NAT, "pos": {"type": "integer", "minimum": 1, "maximum": 2**63 - 1},
        "token": _NAT}),
    "error": _object("error", {
        "code": {"enum": sorted(ERROR_CODES) + ["bad_request", "not_found", "method_not_allowed", "conflict",
                                                  "payload_too_large", "unsupported_media_type",
                                                  "not_supported"]},
        "message": {"type": "string"},
        "session_id": {"type": ["string", "null"]},
        "epoch": {"oneOf": [_I64, {"type": "null"}]},
        "expected": _I64, "got": _I64}, optional=("expected", "got")),
    "fault": {"oneOf": [
        _object(None, {"type": {"const": "delay"}, "seconds": {"type": "number", "minimum": 0}}),
        _object(None, {"type": {"const": "memory_pressure"}, "reserve_tokens": {"oneOf": [_NAT, {"type": "null"}]}}),
        _object(None, {"type": {"const": "malformed"}, "kind": {"enum": list(MALFORMED_KINDS)}}),
        _object(None, {"type": {"const": "crash"}}),
        _object(None, {"type": {"const": "drop_response"}}),
    ]},
    "fault_rule_body": _object(None, {
        "fault": {"$ref": "#/$defs/fault"},
        "op": {"enum": ["any", *OPS]},
        "session_id": {"type": ["string", "null"]},
        "nth": {"type": "integer", "minimum": 1, "maximum": 2**63 - 1},
        "count": {"oneOf": [{"type": "integer", "minimum": 1, "maximum": 2**63 - 1}, {"type": "null"}]},
        "probability": {"type": "number", "minimum": 0, "maximum": 1}}),
    "fault_plan": _object("fault_plan", {
        "seed": _I64, "rules": {"type": "array", "items": {"$ref": "#/$defs/fault_rule_body"}}}),
    "close_request": _object(None, {"session_id": _SESSION, "epoch": _NAT}),
    "ok": _object("ok", {}),
    "session_view": _object("session_view", {
        "session_id": _SESSION, "epoch": _NAT, "status": {"enum": ["live", "cancelled", "released"]},
        "cached_tokens": _NAT}),
    "spec": _object(None, {
        "model_id": {"type": "string", "minLength": 1}, "n_layers": {"type": "integer", "minimum": 1},
        "start_layer": {"type": "integer", "minimum": 0}, "end_layer": {"type": "integer", "minimum": 1},
        "hidden_size": {"type": "integer", "minimum": 4}, "vocab_size": {"type": "integer", "minimum": 2}}),
    "node_state": _object("node_state", {
        "name": {"type": "string"}, "spec": {"$ref": "#/$defs/spec"},
        "evidence_class": {"enum": ["fixture", "real-model"]}, "crashed": {"type": "boolean"},
        "used_tokens": _NAT, "capacity_tokens": {"oneOf": [_NAT, {"type": "null"}]}}),
    "node": _object(None, {
        "name": {"type": "string"}, "url": {"type": "string"}, "spec": {"$ref": "#/$defs/spec"},
        "evidence_class": {"enum": ["fixture", "real-model"]},
        "partition": {"enum": ["refuse", "hang", "reset", None]}}),
    "roster": _object("roster", {
        "control": {"type": "string"}, "engine": {"type": "string"},
        "nodes": {"type": "object", "additionalProperties": {"$ref": "#/$defs/node"}}}),
    "partition_request": _object(None, {"mode": {"enum": ["refuse", "hang", "reset"]}}),
    "add_node_request": _object(None, {
        "name": {"type": "string", "pattern": NAME_PATTERN.pattern},
        "spec": {"$ref": "#/$defs/spec"}, "seed": _I64,
        "capacity_tokens": {"oneOf": [_NAT, {"type": "null"}]},
        "faults": {"oneOf": [{"$ref": "#/$defs/fault_plan"}, {"type": "null"}]},
        "port": {"type": "integer", "minimum": 0, "maximum": 65535},
        "latency": {"oneOf": [{"type": "array", "items": {"type": "number", "minimum": 0, "maximum": MAX_LATENCY},
                               "minItems": 2, "maxItems": 2}, {"type": "null"}]}},
        optional=("name", "seed", "capacity_tokens", "faults", "port", "latency")),
    "fault_log": _object("fault_log", {"fired": {"type": "array", "items": _object(None, {
        "call": {"type": "integer", "minimum": 1}, "rule": {"type": "integer", "minimum": 0},
        "op": {"enum": list(OPS)}, "session_id": {}, "fault": {"$ref": "#/$defs/fault"}})}}),
    "frame_hidden": _object(None, {
        "dtype": {"enum": ["float32", "float16"]},
        "shape": {"type": "array", "prefixItems": [_DIM, _DIM], "items": False, "minItems": 2}}),
    "call_log": _object("call_log", {
        "first": _NAT, "next": _NAT, "now": _NUMBER, "node": {"type": "string"},
        "calls": {"type": "array", "items": _object(None, {
            "seq": _NAT, "node": {"type": "string"}, "op": {"enum": list(OPS)},
            "session_id": {"type": ["string", "null"]}, "epoch": {"oneOf": [_I64, {"type": "null"}]},
            "start_pos": {"oneOf": [_I64, {"type": "null"}]}, "positions": _NAT,
            "received": _NUMBER, "answered": {"type": ["number", "null"]},
            "outcome": {"enum": ["pending", "ok", "hung", "reset", "malformed_output", *ERROR_CODES]},
            "fired": {"type": "array", "items": {"enum": ["Crash", "Delay", "DropResponse", "Malformed",
                                                          "MemoryPressure"]}},
            "held": _NUMBER, "after_wipe": {"type": "boolean"},
            "abandoned": {"type": ["number", "null"]}})}}, optional=("node",)),
}
# A fault rule on its own also carries kind and contract: the body's fields plus those two.
SCHEMAS["fault_rule"] = _object("fault_rule", dict(SCHEMAS["fault_rule_body"]["properties"]))


# -- the stdio protocol of coordinator programs (docs/contract.md, "Coordinator programs") ---------

_MSG_ID = {"type": "integer", "minimum": 1, "maximum": 2**53}
_ADDRESS = _object(None, {"name": {"type": "string"}, "url": {"type": "string"},
                          "start_layer": _NAT, "end_layer": _NAT})
_STAGES = {"type": "array", "minItems": 1, "items": {"type": "array", "items": _ADDRESS}}


def _message(kind: str, properties: dict[str, Any], optional: tuple[str, ...] = ()) -> dict[str, Any]:
    return _object(None, {"type": {"const": kind}, **properties}, optional)


def _request(kind: str, **properties: Any) -> dict[str, Any]:
    return _message(kind, {"msg_id": _MSG_ID, **properties})


def _answer(kind: str, **properties: Any) -> dict[str, Any]:
    return _message(kind, {"in_reply_to": _MSG_ID, **properties})


PROGRAM_SCHEMAS: dict[str, dict[str, Any]] = {
    "program_init": _request("init", control={"type": "string"}, stages=_STAGES),
    "program_start": _request("start", session_id=_SESSION, prompt={"type": "array", "items": _NAT, "minItems": 1}),
    "program_next_token": _request("next_token", session_id=_SESSION),
    "program_release": _request("release", session_id=_SESSION),
    "program_nodes_changed": _request("nodes_changed", stages=_STAGES),
    "program_init_ok": _answer("init_ok"),
    "program_start_ok": _answer("start_ok"),
    "program_next_token_ok": _answer("next_token_ok", token=_NAT),
    "program_release_ok": _answer("release_ok"),
    "program_nodes_changed_ok": _answer("nodes_changed_ok"),
    "program_error": _answer("error", code={"type": "string", "minLength": 1}, message={"type": "string"}),
}
# A program's answers may carry fields of its own (the harness reads only those above).
for _name, _schema in PROGRAM_SCHEMAS.items():
    if _name.endswith(("_ok", "_error")):
        _schema["additionalProperties"] = True
SCHEMAS.update(PROGRAM_SCHEMAS)
SCHEMAS["program_request"] = {"oneOf": [{"$ref": f"#/$defs/program_{k}"} for k in
                                        ("init", "start", "next_token", "release", "nodes_changed")]}
SCHEMAS["program_answer"] = {"oneOf": [{"$ref": f"#/$defs/program_{k}"} for k in
                                       ("init_ok", "start_ok", "next_token_ok", "release_ok", "nodes_changed_ok",
                                        "error")]}


def document() -> dict[str, Any]:
    """Every schema under ``$defs`` of one document."""
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": "https://fakeshard.invalid/schema/v1",
            "title": f"fakeshard wire and HTTP API v1 (contract {CONTRACT_VERSION})",
            "$defs": SCHEMAS}


def schema(name: str) -> dict[str, Any]:
    """One schema, standalone (with the ``$defs`` it refers to); ``KeyError`` for an unknown name."""
    if name not in SCHEMAS:
        raise KeyError(f"no schema {name!r}; known: {', '.join(sorted(SCHEMAS))}")
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **SCHEMAS[name], "$defs": SCHEMAS}
