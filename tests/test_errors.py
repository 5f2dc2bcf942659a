"""The error tree: stable codes, who is at fault, fields, equality and pickling."""

from __future__ import annotations

import pickle

import pytest

import fakeshard
from fakeshard._errors import ERROR_CODES

CONTRACT_CODES = {
    "cache_miss": "CacheMiss", "stale_epoch": "StaleEpoch", "cancelled": "SessionCancelled",
    "released": "SessionReleased", "position_mismatch": "PositionMismatch",
    "out_of_memory": "OutOfMemory", "engine_crashed": "EngineCrashed",
    "malformed_bundle": "MalformedBundle", "response_lost": "ResponseLost",
}


def test_every_contract_code_has_its_class():
    assert {code: cls.__name__ for code, cls in ERROR_CODES.items()} == CONTRACT_CODES
    for name in CONTRACT_CODES.values():
        assert issubclass(getattr(fakeshard, name), fakeshard.ShardError)


@pytest.mark.parametrize("name,family", [
    ("StaleEpoch", "SessionError"), ("SessionCancelled", "SessionError"),
    ("SessionReleased", "SessionError"), ("PositionMismatch", "SessionError"),
    ("CacheMiss", "SessionError"), ("OutOfMemory", "EngineError"),
    ("EngineCrashed", "EngineError"), ("ResponseLost", "EngineError"),
])
def test_errors_say_who_is_at_fault(name, family):
    assert issubclass(getattr(fakeshard, name), getattr(fakeshard, family))


@pytest.mark.parametrize("cls", sorted(ERROR_CODES.values(), key=lambda c: c.code))
def test_fields_equality_and_pickling(cls):
    extra = {name: 4 for name in cls._extra}
    err = cls("what happened", session_id="s", epoch=2, **extra)
    assert err.fields() == {"session_id": "s", "epoch": 2, **extra}
    assert pickle.loads(pickle.dumps(err)) == err
    assert err != cls("something else", session_id="s", epoch=2, **extra)
    assert "session_id='s'" in repr(err)


def test_position_errors_need_expected_and_got():
    with pytest.raises(TypeError, match="expected"):
        fakeshard.CacheMiss("m", session_id="s", epoch=0)
    with pytest.raises(TypeError, match="takes no field"):
        fakeshard.StaleEpoch("m", expected=1)
