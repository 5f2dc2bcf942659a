"""The edges of each value's constructor, of the fault injector's folding, and of
``load_factory``: each met on both sides."""

from __future__ import annotations

import json

import pytest

from fakeshard import (
    Crash,
    Delay,
    FakeShardEngine,
    FaultPlan,
    FaultRule,
    MalformedBundle,
    MemoryPressure,
    ShardSpec,
    wire,
)
from fakeshard._factory import FactoryError, load_factory
from fakeshard._faults import FaultInjector
from fakeshard.testing._surface import spec_ok

#: One argument of ``("m", 4, 0, 4, 8, 64)`` moved to either side of its bound; what the
#: machine's model of the contract (``spec_ok``) says of each is what is expected.
SPEC_EDGES = (("m", 4, 0, 4, 8, 2), ("m", 4, 0, 4, 8, 1), ("m", 4, 0, 4, 8, 64.0), ("m", 4, 0, 4, 8, True),
              ("m", 4, 0, 4, 4, 64), ("m", 4, 0, 4, 3, 64), ("m", 4, 0, 4, 8.0, 64),
              ("m", 1, 0, 1, 8, 64), ("m", 0, 0, 0, 8, 64), ("m", 4.0, 0, 4, 8, 64), ("m", True, 0, 1, 8, 64),
              ("m", 4, 2, 2, 8, 64), ("m", 4, 2, 3, 8, 64), ("m", 4, 0, 5, 8, 64), ("m", 4, -1, 4, 8, 64),
              ("m", 4, 3, 4, 8, 64), ("m", 4, 0, 4.0, 8, 64), ("", 4, 0, 4, 8, 64), (3, 4, 0, 4, 8, 64),
              (None, 4, 0, 4, 8, 64), (b"m", 4, 0, 4, 8, 64))


@pytest.mark.parametrize("args", SPEC_EDGES, ids=repr)
def test_a_spec_is_built_exactly_within_its_bounds(args):
    if spec_ok(*args):
        assert ShardSpec(*args).n_layers == args[1]
    else:
        with pytest.raises((ValueError, TypeError)):
            ShardSpec(*args)


@pytest.mark.parametrize("build, ok", [
    (lambda: FaultRule(Crash(), probability=0), True), (lambda: FaultRule(Crash(), probability=1), True),
    (lambda: FaultRule(Crash(), probability=1.0000001), False), (lambda: FaultRule(Crash(), probability=-1e-9), False),
    (lambda: FaultRule(Crash(), probability=True), False), (lambda: FaultRule(Crash(), nth=True), False),
    (lambda: FaultRule(Crash(), nth=0), False), (lambda: FaultRule(Crash(), nth=0.5), False),
    (lambda: FaultRule(Crash(), count=0), False), (lambda: FaultRule(Crash(), count=0.5), False),
    (lambda: Delay(0), True), (lambda: Delay(1e-9), True), (lambda: Delay(-1e-9), False),
    (lambda: Delay(True), False), (lambda: Delay("0"), False),
    (lambda: MemoryPressure(0), True), (lambda: MemoryPressure(-1), False),
    (lambda: FaultPlan(("not a rule",)), False),
])
def test_a_rule_s_numbers_are_refused_on_the_far_side_of_their_bound_only(build, ok):
    if ok:
        build()
    else:
        with pytest.raises((ValueError, TypeError)):
            build()


def test_two_delays_on_one_call_add_up_and_so_do_two_reserves():
    """The Faults section's own example."""
    both = FaultInjector(FaultPlan((FaultRule(Delay(0.5)), FaultRule(MemoryPressure(3)), FaultRule(Delay(2)),
                                    FaultRule(MemoryPressure(3))))).draw("prefill", "a")
    assert (both.delay, both.reserve_tokens, both.fail_allocation) == (2.5, 6, False)


@pytest.mark.parametrize("junk", [3, [], {"type": "meltdown"}, {"type": "delay"}, {"type": "crash", "seconds": 1}],
                         ids=repr)
def test_a_fault_record_that_is_no_fault_is_refused(junk):
    with pytest.raises(MalformedBundle):
        wire.fault_from_dict(junk)
    assert wire.fault_from_dict(json.loads(wire.dumps(FaultRule(Delay(2))))["fault"]) == Delay(2)


class _HalfEngine:
    """A factory result that lacks most of the engine surface."""

    def __init__(self, spec, **kw):
        self.spec = spec


def half_engine(spec, **kw):
    return _HalfEngine(spec, **kw)


def gold_engine(spec, **kw):
    """A complete engine claiming an evidence class the contract does not know."""
    engine = FakeShardEngine(spec, **kw)
    engine.evidence_class = "gold"
    return engine


@pytest.mark.parametrize("name, ok", [
    ("fakeshard:FakeShardEngine", True), ("fakeshard", False), ("no_such_module:x", False),
    ("fakeshard:NoSuch", False), ("fakeshard:ShardSpec", False), ("fakeshard:__version__", False),
    ("fakeshard:Pipeline", False), ("tests.test_value_edges:half_engine", False),
    ("tests.test_value_edges:gold_engine", False),
])
def test_load_factory_takes_a_callable_that_makes_engines_and_names_what_else_it_got(name, ok):
    if ok:
        assert load_factory(name) is FakeShardEngine
    else:
        with pytest.raises(FactoryError):
            load_factory(name)
