"""The kit's engine checks (``fakeshard.testing.checks``): each passes the engine under test,
and each catches an engine (or a pipeline) with one rule broken."""

from __future__ import annotations

import pytest

from fakeshard import FakeShardEngine, FaultPlan, Pipeline
from fakeshard.testing import checks
from fakeshard.testing.suite import CHECKS


@pytest.mark.parametrize("check", CHECKS)
def test_the_engine_passes_the_check(engine_factory, check):
    check(engine_factory)


def test_the_pipeline_answers_pass_the_pipeline_as_it_is():
    checks.check_pipeline_answers(FakeShardEngine)


def test_a_pipeline_that_passes_a_broken_answer_on_is_caught(monkeypatch):
    monkeypatch.setattr("fakeshard._pipeline.answer_problem", lambda *args, **kw: None)
    with pytest.raises(AssertionError, match="broken by Malformed"):
        checks.check_pipeline_answers(FakeShardEngine)


def test_a_pipeline_cancel_that_raises_the_last_stages_error_is_caught(monkeypatch):
    def last_error(self, op, session_id, epoch):
        errors = []
        for i, stage in enumerate(self.stages):
            try:
                getattr(stage, op)(session_id, epoch)
            except Exception as exc:
                errors.append((i, exc))
        if errors:
            self.last_failed_stage, exc = errors[-1]
            raise exc

    monkeypatch.setattr(Pipeline, "_everywhere", last_error)
    with pytest.raises(AssertionError, match="last_failed_stage|StaleEpoch"):
        checks.check_pipeline_answers(FakeShardEngine)


def test_the_bad_close_check_passes_the_engine_as_it_is():
    checks.check_bad_close(FakeShardEngine)


def test_a_cancel_with_a_bool_epoch_taken_as_1_is_caught(monkeypatch):
    close = FakeShardEngine._close

    def takes_bools(self, op, status, session_id, epoch):
        return close(self, op, status, session_id, int(epoch) if isinstance(epoch, bool) else epoch)

    monkeypatch.setattr(FakeShardEngine, "_close", takes_bools)
    with pytest.raises(AssertionError, match="was not refused"):
        checks.check_bad_close(FakeShardEngine)


def test_a_capacity_of_minus_one_taken_is_caught(monkeypatch):
    init = FakeShardEngine.__init__

    def takes_negative(self, spec, *args, capacity_tokens=None, **kw):
        init(self, spec, *args, capacity_tokens=None if capacity_tokens == -1 else capacity_tokens, **kw)

    monkeypatch.setattr(FakeShardEngine, "__init__", takes_negative)
    with pytest.raises(AssertionError, match="capacity_tokens=-1 was not refused"):
        checks.check_factory_arguments(FakeShardEngine)


def test_a_pipeline_labelled_real_model_with_a_fixture_stage_is_caught(monkeypatch):
    init = Pipeline.__init__

    def any_real(self, stages):
        init(self, stages)
        if any(getattr(s, "evidence_class", None) == "real-model" for s in self.stages):
            self.evidence_class = "real-model"

    monkeypatch.setattr(Pipeline, "__init__", any_real)
    with pytest.raises(AssertionError):
        checks.check_pipeline_evidence_class(FakeShardEngine)


def test_a_generate_that_gives_one_token_too_many_is_caught(monkeypatch):
    generate = Pipeline.generate
    monkeypatch.setattr(Pipeline, "generate",
                        lambda self, sid, prompt, n, epoch=0: generate(self, sid, prompt, n + 1, epoch))
    with pytest.raises(AssertionError):
        checks.check_pipeline(FakeShardEngine)


def _pipeline_rule():
    checks.check_pipeline(FakeShardEngine)


def test_the_replace_faults_check_passes_the_engine_as_it_is():
    checks.check_replace_faults(FakeShardEngine)


@pytest.mark.parametrize("broken", ["keeps_counters", "ignores_plan", "takes_anything"])
def test_a_replace_faults_that_breaks_one_rule_is_caught(monkeypatch, broken):
    from fakeshard import _engine as engine
    from fakeshard._faults import FaultInjector

    def keeps_counters(self, plan):
        self._faults.plan = plan  # the old counters carry on

    def ignores_plan(self, plan):
        self._faults = FaultInjector(None)

    def takes_anything(self, plan):
        self._faults = FaultInjector(plan if isinstance(plan, FaultPlan) else None)

    monkeypatch.setattr(engine.SessionEngine, "replace_faults", locals()[broken])
    with pytest.raises(AssertionError, match="was not refused"):
        checks.check_replace_faults(FakeShardEngine)


def test_an_engine_that_ignores_a_reserve_is_caught(monkeypatch):
    from fakeshard._faults import FaultInjector

    draw = FaultInjector.draw

    def no_reserve(self, op, session_id):
        drawn = draw(self, op, session_id)
        drawn.reserve_tokens = 0
        return drawn

    monkeypatch.setattr(FaultInjector, "draw", no_reserve)
    with pytest.raises(AssertionError, match="was not refused"):
        checks.check_capacity_edges(FakeShardEngine)


class _HoldsTheOlderCache(FakeShardEngine):
    """Counts the cache a newer epoch's prefill replaces as still held (reserve 2 as in the check)."""

    def prefill(self, bundle):
        from fakeshard import OutOfMemory

        view = self.session(bundle.session_id)
        if view is not None and view.epoch < bundle.epoch and self.capacity_tokens is not None \
                and self.used_tokens + len(bundle.tokens) > self.capacity_tokens - 2:
            raise OutOfMemory("the older cache is held", session_id=bundle.session_id, epoch=bundle.epoch)
        return super().prefill(bundle)


def test_the_capacity_edges_pass_the_engine_as_it_is():
    checks.check_capacity_edges(FakeShardEngine)


def test_an_engine_that_holds_the_older_cache_through_a_newer_prefill_is_caught():
    from fakeshard import OutOfMemory

    with pytest.raises(OutOfMemory, match="the older cache is held"):
        checks.check_capacity_edges(_HoldsTheOlderCache)


def test_the_defaults_pass_the_engine_as_it_is():
    checks.check_defaults(FakeShardEngine)


def test_an_engine_whose_default_seed_is_1_is_caught():
    def seed_1(spec, *, seed=1, **kw):
        return FakeShardEngine(spec, seed=seed, **kw)

    with pytest.raises(AssertionError, match="the default seed is not 0"):
        checks.check_defaults(seed_1)


def test_an_engine_without_a_clock_of_its_own_is_caught():
    def no_clock(spec, **kw):
        engine = FakeShardEngine(spec, **kw)
        if kw.get("clock") is None:
            engine.clock = None
        return engine

    with pytest.raises(AttributeError):
        checks.check_defaults(no_clock)


class _CrashedNone(FakeShardEngine):
    """Says it is up after a restart with None, not False."""

    def restart(self):
        super().restart()
        self._crashed = None


def test_a_crashed_flag_that_is_no_bool_after_a_restart_is_caught():
    checks.check_replace_faults(FakeShardEngine)
    with pytest.raises(AssertionError):
        checks.check_replace_faults(_CrashedNone)


def test_the_pipeline_check_passes_the_pipeline_as_it_is():
    _pipeline_rule()


def test_a_generate_that_runs_at_epoch_1_by_default_is_caught(monkeypatch):
    generate = Pipeline.generate
    monkeypatch.setattr(Pipeline, "generate",
                        lambda self, sid, prompt, n, epoch=1: generate(self, sid, prompt, n, epoch))
    from fakeshard import StaleEpoch

    with pytest.raises(StaleEpoch):  # the decode at epoch 0 that follows is refused
        _pipeline_rule()


def test_a_pipeline_spec_of_the_head_alone_is_caught(monkeypatch):
    init = Pipeline.__init__

    def head_spec(self, stages):
        init(self, stages)
        self.spec = self.stages[0].spec

    monkeypatch.setattr(Pipeline, "__init__", head_spec)
    with pytest.raises(AssertionError):
        _pipeline_rule()


def test_a_last_failed_stage_kept_after_a_right_call_is_caught(monkeypatch):
    everywhere = Pipeline._everywhere

    def keeps(self, op, session_id, epoch):
        kept = self.last_failed_stage
        everywhere(self, op, session_id, epoch)
        self.last_failed_stage = kept

    monkeypatch.setattr(Pipeline, "_everywhere", keeps)
    with pytest.raises(AssertionError):
        _pipeline_rule()


def test_a_pipeline_that_refuses_a_stage_without_a_spec_by_attribute_error_is_caught(monkeypatch):
    init = Pipeline.__init__

    def reads_spec(self, stages):
        [stage.spec for stage in stages]
        init(self, stages)

    monkeypatch.setattr(Pipeline, "__init__", reads_spec)
    with pytest.raises(AttributeError):
        _pipeline_rule()


def test_a_pipeline_whose_last_failed_stage_starts_as_no_int_and_no_none_is_caught(monkeypatch):
    init = Pipeline.__init__

    def empty(self, stages):
        init(self, stages)
        self.last_failed_stage = ""

    monkeypatch.setattr(Pipeline, "__init__", empty)
    with pytest.raises(AssertionError):
        _pipeline_rule()


def test_the_new_engine_check_passes_the_engine_as_it_is():
    checks.check_new_engine(FakeShardEngine)


def test_an_engine_that_shows_another_spec_is_caught():
    def whole_model(spec, **kw):
        return FakeShardEngine(spec.with_layers(0, spec.n_layers), **kw)  # ignores its range

    with pytest.raises(AssertionError, match="an engine built for"):
        checks.check_new_engine(whole_model)


def test_an_engine_that_counts_a_prefill_s_positions_twice_is_caught(monkeypatch):
    from fakeshard import _engine

    compute = _engine.SessionEngine._compute

    def doubled(self, op, bundle):
        out = compute(self, op, bundle)
        self._used += len(getattr(bundle, "tokens", ())) if op == "prefill" else 0
        return out

    monkeypatch.setattr(_engine.SessionEngine, "_compute", doubled)
    with pytest.raises(AssertionError):
        checks.check_new_engine(FakeShardEngine)


@pytest.mark.parametrize("bug", ["partial_allocation", "replace_counts_old"])
def test_the_capacity_check_without_faults_catches_an_accounting_bug(bug):
    from planted import factories

    with pytest.raises(AssertionError):
        checks.check_capacity_without_faults(getattr(factories, bug))


@pytest.mark.parametrize("name", ["used_tokens_16_bit", "miss_across_power_of_two", "capped_cached_view",
                                  "drift_past_round_length"])
def test_a_long_session_catches_a_length_bug_wherever_it_sits(name):
    # Each planted engine breaks at another length (a 16-bit count, a block table's power of two,
    # a view capped below the cache, a drift past a rounding length): one walk past every power
    # of two to 2**16 meets them all.
    from planted.engines import BUGS

    bug = next(b for b in BUGS if b.name == name)
    with pytest.raises(AssertionError):
        checks.check_long_session(bug.factory)


def test_a_long_session_grows_only_as_far_as_the_factory_says_its_engines_go():
    def short(spec, **kwargs):
        return FakeShardEngine(spec, **{**kwargs, "capacity_tokens": 42})

    with pytest.raises(AssertionError, match="was refused: OutOfMemory"):
        checks.check_long_session(short)
    short.machine_max_positions = 42  # type: ignore[attr-defined]
    checks.check_long_session(short)  # past 8, 16 and 32; 64 is beyond what it states
