"""Checks the machines make of code they also use: each is shown to catch a copy of that code
with one rule broken, and to pass the code as it is (the failover machine's checks of the
Pipeline; the runner's check of a bundle's own equality)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fakeshard import (
    Delay,
    FakeShardEngine,
    FaultPlan,
    FaultRule,
    HiddenBundle,
    Malformed,
    MalformedBundle,
    MemoryPressure,
    Pipeline,
    TokenBundle,
)
from fakeshard.testing._failover import N_NODES, FailoverRunner
from fakeshard.testing._runner import Divergence, equality_problem
from fakeshard.wire import _encode, _format, _frame, _json, _read, _schema
from tests import wire_edges

TAIL = 2  # node 2 serves the last range and is on the route at first


def _runner(plans=None):
    plans = plans or [FaultPlan()] * N_NODES
    return FailoverRunner(FakeShardEngine, factory_name="fakeshard:FakeShardEngine", seed=0, plans=plans)


def _tail_breaks(kind):
    plans = [FaultPlan()] * N_NODES
    plans[TAIL] = FaultPlan((FaultRule(Malformed(kind), op="prefill", count=1),))
    return plans


@pytest.mark.parametrize("kind", ["session", "epoch", "position"])
def test_an_answer_that_does_not_answer_its_request_is_caught(monkeypatch, kind):
    steps = [{"op": "start", "session_id": "p", "prompt": [1, 2]}, {"op": "next", "session_id": "p"}]
    runner = _runner(_tail_breaks(kind))
    for step in steps:  # the Pipeline refuses the broken answer; the coordinator replays
        runner.run(step)
    assert runner.coordinator.replays == 1
    monkeypatch.setattr(Pipeline, "_check", lambda self, *args: None)
    runner = _runner(_tail_breaks(kind))
    runner.run(steps[0])
    with pytest.raises(Divergence, match="answered SampleBundle"):
        runner.run(steps[1])


def test_an_error_that_does_not_name_the_request_is_caught(monkeypatch):
    steps = [{"op": "start", "session_id": "p", "prompt": [1, 2]}, {"op": "next", "session_id": "p"}]
    original = Pipeline._check

    def unnamed(self, *args):
        try:
            original(self, *args)
        except Exception as exc:
            raise type(exc)(str(exc)) from None

    monkeypatch.setattr(Pipeline, "_check", unnamed)
    runner = _runner(_tail_breaks("epoch"))
    runner.run(steps[0])
    with pytest.raises(Divergence, match="naming session None epoch None"):
        runner.run(steps[1])


def test_a_cancel_that_misses_a_stage_is_caught(monkeypatch):
    steps = [{"op": "start", "session_id": "p", "prompt": [1, 2]}, {"op": "next", "session_id": "p"},
             {"op": "cancel", "session_id": "p"}]
    runner = _runner()
    for step in steps:
        runner.run(step)
    assert all(node.session("p").status == "cancelled" for node in runner.coordinator.route)
    runner.finish()  # a cancelled session holds nothing
    monkeypatch.setattr(Pipeline, "cancel", lambda self, sid, epoch: [s.cancel(sid, epoch) for s in self.stages[:-1]]
                        and None)
    runner = _runner()
    for step in steps[:2]:
        runner.run(step)
    with pytest.raises(Divergence, match=r"stage 2 holds it as \(0, 'live', 2\)"):
        runner.run(steps[2])


def test_a_bundle_equality_that_disagrees_with_the_contract_is_caught(monkeypatch):
    rows = HiddenBundle.sealed("s", 0, 0, 1, [(0.5, -0.25), (0.0, float("nan"))])
    array = HiddenBundle.sealed("s", 0, 0, 1, np.array(rows.rows(), dtype=np.float32))
    other = HiddenBundle.sealed("s", 1, 0, 1, rows.rows())
    assert equality_problem(rows, array) is None and equality_problem(rows, other) is None
    monkeypatch.setattr(HiddenBundle, "__eq__", lambda self, o: True)
    assert "is True, but the bundles are not equal" in equality_problem(rows, other)
    monkeypatch.setattr(HiddenBundle, "__eq__", lambda self, o: self.rows() == o.rows())  # NaN != NaN
    assert "is False, but the bundles are equal" in equality_problem(rows, array)


def test_a_refusal_of_bad_input_that_does_not_name_the_call_is_caught():
    from fakeshard import MalformedBundle
    from fakeshard.testing._machines import role_spec
    from fakeshard.testing._runner import EngineRunner

    class Unnamed(FakeShardEngine):
        def prefill(self, bundle):
            try:
                return super().prefill(bundle)
            except MalformedBundle as exc:
                raise MalformedBundle(str(exc)) from None  # the call's session and epoch dropped

    step = {"op": "prefill", "session_id": "a", "epoch": 2, "start": 0, "tokens": [1], "bad": "range"}
    ill_typed = {**step, "bad": "epoch_negative"}  # the contract lets such an error name None
    for factory in (FakeShardEngine, Unnamed):
        runner = EngineRunner(factory, machine="sessions", factory_name="test", spec=role_spec("full"))
        runner.run(ill_typed)
        if factory is FakeShardEngine:
            runner.run(step)
        else:
            with pytest.raises(Divergence, match="malformed_bundle: session_id is None, expected 'a'"):
                runner.run(step)


def test_a_view_of_another_session_is_caught():
    import dataclasses

    from fakeshard.testing._machines import role_spec
    from fakeshard.testing._runner import EngineRunner

    class Misnamed(FakeShardEngine):
        def session(self, session_id):
            view = super().session(session_id)
            return None if view is None else dataclasses.replace(view, session_id=session_id + "?")

    step = {"op": "prefill", "session_id": "a", "epoch": 0, "start": 0, "tokens": [1]}
    EngineRunner(FakeShardEngine, machine="sessions", factory_name="test", spec=role_spec("head")).run(step)
    runner = EngineRunner(Misnamed, machine="sessions", factory_name="test", spec=role_spec("head"))
    with pytest.raises(Divergence, match=r"session\('a'\) answers a view of session 'a\?'"):
        runner.run(step)


#: Values of each kind the readers take: bundles, a plan, a rule, both hidden forms.
_VALUES = (TokenBundle("s", 0, 0, (1, 2)), FaultPlan((FaultRule(Delay(1.0)),), seed=3),
           HiddenBundle.sealed("s", 1, 2, 1, [(0.5, -0.25, 0.0, 1.0), (0.125, 0.0, 1.5, -2.0)]),
           FaultRule(MemoryPressure(2), "decode", "s", 2, None, 0.5),
           HiddenBundle.sealed("s", 3, 0, 2, np.array([[0.1, 1 / 3, -2.7, 1e-3]], dtype=np.float32)))


def _reader_edges(index):
    wire_edges.reader_edges(_VALUES[index % len(_VALUES)], index)


def _lenient_base64(monkeypatch):
    import binascii

    strict = binascii.a2b_base64
    monkeypatch.setattr("fakeshard.wire._schema.binascii.a2b_base64", lambda data, strict_mode=False: strict(data))


@pytest.mark.parametrize("index", range(5))
def test_the_reader_edges_pass_the_reader_as_it_is(index):
    _reader_edges(index)  # every pool value: bundles, a plan, a rule, both hidden forms


def test_a_reader_that_skips_what_base64_does_not_allow_is_caught(monkeypatch):
    _lenient_base64(monkeypatch)
    with pytest.raises(AssertionError, match="accepted what the contract refuses"):
        _reader_edges(2)


def _lax_keys(which):
    """A stand-in for the readers' object hook that lets a key named twice through somewhere."""

    strict = _json._unique_keys

    def hook(pairs):
        if which == "last":  # plain json.loads: the last value wins
            return dict(pairs)
        if which == "agreeing":  # a repeat whose values agree is taken as one key
            first = {}
            for key, value in pairs:
                if first.setdefault(key, value) != value:
                    return strict(pairs)
            return dict(pairs)
        if which == "nested" and not any(key == "kind" for key, _ in pairs):
            return dict(pairs)  # only the outermost object (the one with a kind) is checked
        return strict(pairs)

    return hook


def test_key_twice_writes_the_key_again_last_in_the_object_named():
    from tests.wire_edges import key_twice

    doc = {"a": [{"b": 1}], "c": 2}
    assert key_twice(doc, ("a", 0), "b", 3) == '{"a": [{"b": 1, "b": 3}], "c": 2}'
    assert key_twice(doc, (), "c", None) == '{"a": [{"b": 1}], "c": 2, "c": null}'


@pytest.mark.parametrize(("which", "index"), [("last", 0), ("agreeing", 0), ("nested", 1), ("nested", 2)])
def test_a_reader_that_takes_a_key_named_twice_is_caught(monkeypatch, which, index):

    monkeypatch.setattr(_json, "_unique_keys", _lax_keys(which))
    with pytest.raises(AssertionError, match="accepted what the contract refuses"):
        _reader_edges(index)


def test_a_read_json_without_the_repeated_key_check_is_caught(monkeypatch):
    from fakeshard import wire

    monkeypatch.setattr(wire, "read_json", json.loads)  # what the HTTP API read before 0057ea7
    with pytest.raises(AssertionError, match="accepted what the contract refuses"):
        _reader_edges(0)


@pytest.mark.parametrize("limit", ["max_chars", "max_bytes"])
def test_a_limit_that_refuses_a_value_of_its_own_size_is_caught(monkeypatch, limit):
    from fakeshard import MalformedBundle, wire

    name = {"max_chars": "loads", "max_bytes": "loadb"}[limit]
    original = getattr(wire, name)

    def tight(data, **kw):
        if kw.get(limit) is not None and len(data) >= kw[limit]:
            raise MalformedBundle("wire: over the limit")
        return original(data, **kw)

    monkeypatch.setattr(wire, name, tight)
    with pytest.raises(MalformedBundle, match="over the limit"):
        _reader_edges(0)


def _every_malformed_kind(role):
    from fakeshard.testing._machines import FaultsMachine, MachineConfig

    config = MachineConfig.for_factory(FakeShardEngine, "fakeshard:FakeShardEngine")
    FaultsMachine(config).every_malformed_kind(role=role, at=0)
    return config


@pytest.mark.parametrize("role", ["head", "tail"])
def test_every_malformed_kind_passes_the_engine_as_it_is(role):
    assert _every_malformed_kind(role).steps > 0


@pytest.mark.parametrize("role,kind", [("head", "nan"), ("middle", "session"), ("tail", "token_range"),
                                       ("head", "checksum")])
def test_a_malformed_kind_that_breaks_nothing_is_caught(monkeypatch, role, kind):
    import fakeshard._engine

    original = fakeshard._engine.corrupt
    monkeypatch.setattr(fakeshard._engine, "corrupt",
                        lambda output, what, spec: output if what == kind else original(output, what, spec))
    with pytest.raises(Divergence, match=f"Malformed\\({kind}"):
        _every_malformed_kind(role)


def test_a_checksum_break_that_leaves_a_checksum_starting_with_0_right_is_caught(monkeypatch):
    import dataclasses

    import fakeshard._engine

    original = fakeshard._engine.corrupt

    def zero_first(output, what, spec):
        if what != "checksum":
            return original(output, what, spec)
        return dataclasses.replace(output, checksum="0" + original(output, what, spec).checksum[1:])

    monkeypatch.setattr(fakeshard._engine, "corrupt", zero_first)
    with pytest.raises(Divergence, match="Malformed\\(checksum"):
        _every_malformed_kind("middle")


def _bundle_rules(session_id="s", epoch=0):
    wire_edges.bundle_rules(session_id, epoch)


@pytest.mark.parametrize("session_id, epoch", [("s", 0), ("s\udc80", 5), ("", 0), (3, -1), ("s", True)])
def test_the_bundle_rules_pass_validate_as_it_is(session_id, epoch):
    _bundle_rules(session_id, epoch)


def test_the_machines_checksum_gives_the_contracts_test_vectors():
    from tests.wire_edges import contract_checksum

    # docs/contract.md, "The hidden checksum": the table's four vectors.
    row = [0.5, -0.25, 0.0, 1.0]
    assert contract_checksum("s1", 0, 0, 1, [row]) == "312b2ef2fb97af6d"
    assert contract_checksum("s1", 3, 7, 2, [row, [0.1, 2.0, -3.5, 0.001]]) == "7b63b92c3c4e018d"
    assert contract_checksum("模型-ü", 1, 0, 5, [[-1.0, 0.999969482421875, 0.0, -0.0]]) == "f9b6158613c79956"
    assert contract_checksum("s\udc80", 0, 0, 1, [row]) == "470ec5b3d13ac5eb"


def test_a_checksum_that_cannot_encode_a_lone_surrogate_is_caught_whatever_the_drawn_id(monkeypatch):
    import fakeshard._contract as contract

    sealed = contract.HiddenBundle.sealed

    def strict_utf8(cls, session_id, *rest):
        session_id.encode("utf-8")  # no surrogatepass: a lone surrogate raises
        return sealed(session_id, *rest)

    monkeypatch.setattr(contract.HiddenBundle, "sealed", classmethod(strict_utf8))
    with pytest.raises(UnicodeEncodeError):
        _bundle_rules("s", 0)


def _sealed_instead(monkeypatch, hold):
    """``HiddenBundle.sealed`` holding ``hold(hidden)`` over the right checksum."""
    import fakeshard._contract as contract

    sealed = contract.HiddenBundle.sealed.__func__

    def changed(cls, session_id, epoch, start_pos, layer, hidden):
        right = sealed(cls, session_id, epoch, start_pos, layer, hidden)
        return cls(session_id, epoch, start_pos, layer, hold(hidden), right.checksum)

    monkeypatch.setattr(contract.HiddenBundle, "sealed", classmethod(changed))


def test_a_sealed_that_keeps_rows_given_as_arrays_is_caught(monkeypatch):
    # Each row a tuple of the array's own scalars (float32 is refused by validate).
    _sealed_instead(monkeypatch, lambda hidden: hidden if isinstance(hidden, np.ndarray)
                    else tuple(tuple(r) for r in hidden))
    with pytest.raises(AssertionError, match="sealed of list"):
        _bundle_rules("s", 0)


def test_a_sealed_that_turns_an_array_into_rows_is_caught(monkeypatch):
    _sealed_instead(monkeypatch, lambda hidden: tuple(tuple(r.tolist() if isinstance(r, np.ndarray) else r)
                                                      for r in hidden))
    with pytest.raises(AssertionError, match="sealed of ndarray"):
        _bundle_rules("s", 0)


def _validate_broken(monkeypatch, wrong):
    """The edge tables' ``validate`` replaced by one that breaks a rule where ``wrong(bundle, spec)``."""
    from fakeshard import validate

    def broken(bundle, spec=None):
        if wrong(bundle, spec):
            return bundle
        return validate(bundle, spec)

    monkeypatch.setattr("tests.wire_edges.validate", broken)


def test_a_refusal_by_validate_that_does_not_name_the_bundle_is_caught(monkeypatch):
    import fakeshard._contract as contract

    made = contract._fail
    monkeypatch.setattr(contract, "_fail", lambda bundle, message: made(None, message))
    with pytest.raises(AssertionError, match="names session None epoch None"):
        _bundle_rules()


def test_a_layer_at_n_layers_let_through_is_caught(monkeypatch):
    _validate_broken(monkeypatch, lambda b, spec: isinstance(b, HiddenBundle) and spec is not None
                     and b.layer == spec.n_layers)
    with pytest.raises(AssertionError, match="a layer at n_layers"):
        _bundle_rules()


def test_a_bundle_found_valid_once_and_not_checked_again_is_caught(monkeypatch):
    from fakeshard import validate

    seen = set()

    def remembers(bundle, spec=None):
        if id(bundle) in seen:
            return bundle
        out = validate(bundle, spec)
        seen.add(id(bundle))
        return out

    monkeypatch.setattr("tests.wire_edges.validate", remembers)
    with pytest.raises(AssertionError, match="accepted what the contract refuses"):
        _bundle_rules()  # the same bundle, tried against a spec of another width


def _surface(*values):
    from fakeshard.testing._machines import MachineConfig
    from fakeshard.testing._surface import SurfaceMachine

    machine = SurfaceMachine(MachineConfig.for_factory(FakeShardEngine, "fakeshard:FakeShardEngine"))
    machine.seed_pool()
    machine.pool[:] = list(values) or machine.pool
    return machine


def _injector(machine):
    from fakeshard import Crash, Delay, MemoryPressure

    machine.injector(faults=[Delay(0.5), Delay(2), MemoryPressure(3), MemoryPressure(2), Crash()],
                     windows=[("any", None, 1, None, 1.0)] * 5, seed=0, calls=[("prefill", "a"), ("decode", "b")])


def test_the_injector_rule_passes_the_injector_as_it_is():
    _injector(_surface())


def test_an_injector_whose_delays_do_not_add_up_is_caught(monkeypatch):
    from fakeshard import _faults as faults

    draw = faults.FaultInjector.draw

    def last_delay_only(self, op, session_id):
        drawn = draw(self, op, session_id)
        delays = [f.fault.seconds for f in self.log if f.call == self.calls and isinstance(f.fault, faults.Delay)]
        if len(delays) > 1:
            drawn.delay = float(delays[-1])
        return drawn

    monkeypatch.setattr(faults.FaultInjector, "draw", last_delay_only)
    with pytest.raises(AssertionError, match="the contract says"):
        _injector(_surface())


def test_an_injector_that_counts_only_matching_calls_is_caught(monkeypatch):
    from fakeshard import Crash
    from fakeshard import _faults as faults

    draw = faults.FaultInjector.draw

    def counts_matches(self, op, session_id):
        before = len(self.log)
        drawn = draw(self, op, session_id)
        if len(self.log) == before:
            self.calls -= 1  # a call on which nothing fired is not counted
        return drawn

    monkeypatch.setattr(faults.FaultInjector, "draw", counts_matches)
    with pytest.raises(AssertionError):
        _surface().injector(faults=[Crash()], windows=[("decode", None, 1, None, 1.0)] * 5, seed=0,
                            calls=[("prefill", "a"), ("decode", "a")])


def _float16_sender_that_reseals(monkeypatch):
    from fakeshard import wire

    dumpb = wire.dumpb

    def reseals(value, dtype="float32"):
        if isinstance(value, HiddenBundle) and dtype == "float16":
            value = HiddenBundle.sealed(value.session_id, value.epoch, value.start_pos, value.layer, value.hidden)
        return dumpb(value, dtype=dtype)

    monkeypatch.setattr(wire, "dumpb", reseals)


def test_a_float16_hop_that_hides_a_damaged_checksum_is_caught(monkeypatch):
    _float16_sender_that_reseals(monkeypatch)
    hidden = HiddenBundle.sealed("s", 0, 0, 1, np.array([[0.1, 0.2, 0.3, 0.4]], dtype=np.float32))
    with pytest.raises(AssertionError, match="accepted what the contract refuses"):
        wire_edges.reader_edges(hidden, 0)


def test_a_fault_rule_sent_without_its_contract_version_is_caught(monkeypatch):
    import json

    from fakeshard import Crash, FaultRule, wire

    dumps = wire.dumps

    def unversioned(value, **kw):
        doc = json.loads(dumps(value, **kw))
        if doc["kind"] == "fault_rule":
            del doc["contract"]
        return json.dumps(doc)

    monkeypatch.setattr(wire, "dumps", unversioned)
    with pytest.raises(MalformedBundle, match="contract version None"):  # a fault rule is in the pool
        wire_edges.reader_edges(FaultRule(Crash()), 0)


def test_a_frame_reader_that_refuses_a_header_of_1_mib_is_caught(monkeypatch):
    from fakeshard import TokenBundle

    monkeypatch.setattr(_frame, "MAX_HEADER_BYTES", 2**20 - 1)
    with pytest.raises(MalformedBundle):
        wire_edges.reader_edges(TokenBundle("s", 0, 0, (1, 2)), 0)


def _spec_rule():
    from fakeshard import ShardSpec
    from fakeshard.testing._surface import spec_ok
    from tests.test_value_edges import SPEC_EDGES

    for args in SPEC_EDGES:
        wire_edges.expect(spec_ok(*args), lambda: ShardSpec(*args))


def test_the_spec_rule_passes_shardspec_as_it_is():
    _spec_rule()


@pytest.mark.parametrize("field, value", [("model_id", 3), ("n_layers", 4.0), ("hidden_size", 8.0),
                                          ("vocab_size", 1), ("end_layer", 2)])
def test_a_shardspec_that_lets_one_bound_pass_is_caught(monkeypatch, field, value):
    from fakeshard import _contract as contract

    post_init = contract.ShardSpec.__post_init__

    def lenient(self):
        if getattr(self, field) == value and type(getattr(self, field)) is type(value):
            if field != "end_layer" or self.start_layer == self.end_layer:
                return
        post_init(self)

    monkeypatch.setattr(contract.ShardSpec, "__post_init__", lenient)
    with pytest.raises(AssertionError, match="accepted what the contract refuses"):
        _spec_rule()


def _signed_split_frame(data, max_bytes):
    """The frame reader with its header length read as a signed 32-bit number."""
    import struct

    from fakeshard import wire

    if len(data) < 8 or data[:4] != wire.FRAME_MAGIC:
        raise _format.Bad("no frame")
    (size,) = struct.unpack_from("<i", data, 4)
    if size > _frame.MAX_HEADER_BYTES or 8 + size > len(data):
        raise _format.Bad("header does not fit")
    return bytes(data[8:8 + size]).decode("utf-8"), memoryview(bytes(data))[8 + size:]


def _signed_length():
    from fakeshard import wire
    from fakeshard.testing._surface import frame_damage

    damaged, limit = frame_damage(_VALUES[2], 1, "header_length_signed")
    wire_edges.expect(False, lambda: wire.loadb(damaged, max_bytes=limit), (MalformedBundle,))


def test_a_frame_length_of_2_to_the_31_passes_the_reader_as_it_is():
    _signed_length()


def test_a_frame_reader_that_reads_its_length_signed_is_caught(monkeypatch):
    from fakeshard import wire

    monkeypatch.setattr(_frame, "split", _signed_split_frame)
    assert wire.loadb(wire.dumpb(_VALUES[2])) == _VALUES[2]  # the stand-in reads right frames
    with pytest.raises(AssertionError, match="accepted what the contract refuses"):
        _signed_length()


def _frozen_broken(monkeypatch, copies):
    """frozen_array with one rule broken: copy nothing read-only, or everything."""
    from fakeshard import _contract as contract

    def frozen(values):
        if values.flags.writeable or copies:
            out = np.array(values, order="C", copy=True)
            out.flags.writeable = False
            return out
        return values

    monkeypatch.setattr(contract, "frozen_array", frozen)


@pytest.mark.parametrize("copies, message", [(False, "a read-only view of writable memory was held"),
                                             (True, "a read-only array was copied")])
def test_a_frozen_array_that_breaks_one_rule_is_caught(monkeypatch, copies, message):
    _frozen_broken(monkeypatch, copies)
    with pytest.raises(AssertionError, match=message):
        _bundle_rules()


def test_a_validate_that_refuses_finite_rows_off_its_fast_path_is_caught(monkeypatch):
    from fakeshard import _contract as contract

    rows = contract._check_hidden_rows

    def plain_only(bundle, hidden, spec):
        if any(type(v) is not float and type(v) is not int for r in hidden for v in r):
            raise contract._fail(bundle, "not a plain float")
        rows(bundle, hidden, spec)

    monkeypatch.setattr(contract, "_check_hidden_rows", plain_only)
    with pytest.raises(MalformedBundle, match="not a plain float"):  # a right bundle refused
        _bundle_rules()


def test_a_validate_that_cannot_name_a_value_of_an_array_all_nan_is_caught(monkeypatch):
    from fakeshard import _contract as contract

    array = contract._check_hidden_array

    def names_a_finite_one(bundle, hidden, spec):
        if hidden.size and not np.isfinite(hidden).any():
            np.argwhere(np.isfinite(hidden))[0]  # the index of a finite value: there is none
        array(bundle, hidden, spec)

    monkeypatch.setattr(contract, "_check_hidden_array", names_a_finite_one)
    with pytest.raises(IndexError):
        _bundle_rules()


def _old_float64_rows(hidden):
    """Rows as numpy alone reads them into float64: None as NaN, "1.5" as 1.5, True as 1.0."""
    return np.array(hidden, dtype=np.float64)


@pytest.mark.parametrize("case", ["none_array", "text_array", "bool_array", "none_binary", "bool_binary"])
def test_a_conversion_that_reads_what_is_no_number_as_a_number_is_caught(monkeypatch, case):
    from fakeshard import _contract as contract

    wire_edges.binary_edge(case)  # passes as it is
    monkeypatch.setattr(contract, "_float64_rows", _old_float64_rows)
    monkeypatch.setattr(_encode, "_float64_rows", _old_float64_rows)
    with pytest.raises(AssertionError, match="accepted what the contract refuses"):
        wire_edges.binary_edge(case)


def test_an_array_refusal_that_names_no_bundle_is_caught(monkeypatch):
    def nameless(self):
        raise MalformedBundle("hidden must be rows of floats")

    wire_edges.binary_edge("junk_array")
    monkeypatch.setattr(HiddenBundle, "array", nameless)
    with pytest.raises(AssertionError, match="None"):
        wire_edges.binary_edge("junk_array")


@pytest.mark.parametrize("where", ["checksum", "wire"])
def test_a_cast_that_warns_beyond_a_float_s_range_is_caught(monkeypatch, where):
    import warnings

    from fakeshard import _contract as contract

    wire_edges.binary_edge("no_warnings")
    module, name = (contract, "hidden_checksum") if where == "checksum" else (_encode, "_binary_values")
    original = getattr(module, name)

    def loud(*args, **kw):
        warnings.warn("overflow encountered in cast", RuntimeWarning)
        return original(*args, **kw)

    monkeypatch.setattr(module, name, loud)
    with pytest.raises(RuntimeWarning):
        wire_edges.binary_edge("no_warnings")


def test_a_dtype_that_cannot_be_looked_up_must_still_be_a_value_error(monkeypatch):

    wire_edges.binary_edge("dumps_dtype_list")
    original = _encode._binary_values

    def unhashable(bundle, dtype):
        {dtype: None}  # a list is no key: TypeError
        return original(bundle, dtype)

    monkeypatch.setattr(_encode, "_binary_values", unhashable)
    with pytest.raises(TypeError, match="unhashable"):
        wire_edges.binary_edge("dumps_dtype_list")


@pytest.mark.parametrize("what", ["array_row_binary", "range_row_base64"])
def test_a_binary_form_that_reads_a_row_which_is_no_tuple_is_caught(monkeypatch, what):

    wire_edges.binary_edge(what)
    original = _encode._binary_values

    def lenient(bundle, dtype):  # rows read by numpy, whatever holds them
        if not isinstance(bundle.hidden, np.ndarray):
            bundle = HiddenBundle(bundle.session_id, bundle.epoch, bundle.start_pos, bundle.layer,
                                  tuple(tuple(float(v) for v in row) for row in bundle.hidden), bundle.checksum)
        return original(bundle, dtype)

    monkeypatch.setattr(_encode, "_binary_values", lenient)
    with pytest.raises(AssertionError):
        wire_edges.binary_edge(what)


def _reader_edges_of(value):
    wire_edges.reader_edges(value, 0)


def test_a_transport_reading_that_lets_a_token_beyond_64_bits_through_is_caught(monkeypatch):
    from fakeshard import TokenBundle

    _reader_edges_of(TokenBundle("s", 0, 0, (1, 2)))
    int64 = _read.int64
    monkeypatch.setattr(_read, "int64", lambda value, path: value if "[" in path else int64(value, path))
    with pytest.raises(AssertionError, match="accepted what the contract refuses"):
        _reader_edges_of(TokenBundle("s", 0, 0, (1, 2)))


def test_a_transport_reading_that_holds_hidden_values_to_64_bits_is_caught(monkeypatch):
    from fakeshard import wire

    sealed = HiddenBundle.sealed("s", 0, 0, 1, [(0.5, 0.25)])
    _reader_edges_of(sealed)
    unchecked = wire.loads_unchecked

    def hidden_int64(data, **kw):
        out = unchecked(data, **kw)
        for item in out.hidden if isinstance(out, HiddenBundle) and isinstance(out.hidden, tuple) else ():
            if isinstance(item, int) and not -(2**63) <= item < 2**63:
                raise MalformedBundle("hidden does not fit in 64 bits")
        return out

    monkeypatch.setattr(wire, "loads_unchecked", hidden_int64)
    with pytest.raises(MalformedBundle, match="64 bits"):
        _reader_edges_of(sealed)


def test_an_error_reader_that_lets_a_missing_field_through_is_caught(monkeypatch):
    from fakeshard._errors import ERROR_CODES

    error = ERROR_CODES["cache_miss"]("m", session_id="s", epoch=0, expected=0, got=1)
    _reader_edges_of(error)
    read = _schema._error
    monkeypatch.setattr(_schema, "_error", lambda data: read({"message": "", **data}))
    with pytest.raises(AssertionError, match="accepted what the contract refuses"):
        _reader_edges_of(error)


@pytest.mark.parametrize("code", ["cache_miss", "cancelled"])
def test_an_error_reader_that_lets_an_unknown_field_through_is_caught(monkeypatch, code):
    from fakeshard import wire
    from fakeshard._errors import ERROR_CODES

    positions = {"expected": 0, "got": 1} if code == "cache_miss" else {}
    error = ERROR_CODES[code]("m", session_id="s", epoch=0, **positions)
    _reader_edges_of(error)
    read = _schema._error
    own = set(json.loads(wire.dumps(error)))  # the keys this error's code has
    monkeypatch.setattr(_schema, "_error", lambda data: read({k: v for k, v in data.items() if k in own}))
    with pytest.raises(AssertionError, match="accepted what the contract refuses"):
        _reader_edges_of(error)


@pytest.mark.parametrize("field", ["delay", "reserve_tokens"])
def test_an_injector_that_keeps_only_the_last_delay_or_reserve_is_caught(monkeypatch, field):
    from fakeshard._faults import FaultInjector

    draw = FaultInjector.draw

    def last_only(self, op, session_id):
        before = len(self.log)
        drawn = draw(self, op, session_id)
        fired = [entry.fault for entry in self.log[before:]]
        kept = [getattr(f, "seconds" if field == "delay" else "reserve_tokens", None) for f in fired]
        kept = [k for k in kept if k is not None]
        if len(kept) > 1:
            setattr(drawn, field, kept[-1])
        return drawn

    monkeypatch.setattr(FaultInjector, "draw", last_only)
    with pytest.raises(AssertionError):
        _injector(_surface())


def test_a_conversion_that_refuses_rows_of_numpy_floats_is_caught(monkeypatch):
    from fakeshard import _contract as contract

    wire_edges.binary_edge("numpy_rows")
    rows = contract._float64_rows

    def plain_only(hidden):
        for row in hidden:
            if any(type(value) not in (float, int) for value in row):
                raise TypeError("not a plain number")
        return rows(hidden)

    monkeypatch.setattr(contract, "_float64_rows", plain_only)
    with pytest.raises(contract.MalformedBundle):
        wire_edges.binary_edge("numpy_rows")
