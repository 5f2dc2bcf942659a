"""The concurrent machine: virtual time, the simulated cluster, determinism, and the planted
async coordinators it must catch."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings

from fakeshard import Delay, EngineCrashed, FakeShardEngine, FaultPlan, FaultRule, ShardSpec, TokenBundle
from fakeshard.testing import _profiles as profiles
from fakeshard.testing._async_coordinator import AsyncCoordinator, reference_async
from fakeshard.testing._concurrent import (
    Client,
    ConcurrentFailure,
    Round,
    Scenario,
    replay_concurrent,
    run_concurrent,
    run_scenario,
    scenarios,
    stop_tasks,
    targeted,
)
from fakeshard.testing._coordinator_machine import CoordinatorError, CoordinatorRunner, load_coordinator, reference
from fakeshard.testing._machines import MachineConfig
from fakeshard.testing._sim import Deadlock, Nemesis, World, new_loop
from fakeshard.testing._trace import Trace
from planted.async_coordinators import PLANTED
from tests.sound_coordinators import ReleasesWhereverItWent, SharesOneRouteTable

ROOT = Path(__file__).resolve().parent.parent
SPEC = ShardSpec("sim-test", 2, 0, 2, hidden_size=4, vocab_size=64)


def _run(coro):
    loop = new_loop()
    try:
        return loop.run_until_complete(coro), loop.time()
    finally:
        loop.close()


# -- virtual time --------------------------------------------------------------------------------

def test_virtual_time_moves_only_to_the_next_timer():
    async def main():
        loop = asyncio.get_running_loop()
        await asyncio.sleep(100)
        at_sleep = loop.time()
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.Event().wait(), 2.5)
        return at_sleep

    at_sleep, end = _run(main())
    assert at_sleep == 100.0
    assert end == pytest.approx(102.5)


def test_the_virtual_time_loop_and_its_deadlock_are_the_kits_public_names():
    # The contract names them for a user's own async tests: an hour passes without a wall second.
    from fakeshard.testing import Deadlock as PublicDeadlock
    from fakeshard.testing import VirtualTimeLoop

    loop = VirtualTimeLoop()

    async def main():
        await asyncio.sleep(3600)
        return loop.time()

    try:
        assert loop.run_until_complete(main()) == 3600.0
    finally:
        loop.close()
    assert PublicDeadlock is Deadlock


def test_a_loop_where_everything_waits_forever_is_a_deadlock_not_a_hang():
    async def main():
        await asyncio.Event().wait()

    with pytest.raises(Deadlock, match="never go on"):
        _run(main())


def test_stopping_a_run_cancels_again_a_task_that_went_on_after_its_cancellation():
    # Python 3.11's wait_for can swallow a cancellation; a task that goes on and then waits
    # for ever (a run's client waiting on a read nobody makes) must still be ended.
    loop = new_loop()
    ended = []

    async def goes_on_once():
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            pass  # swallowed
        try:
            await loop.create_future()  # for ever, no timer
        finally:
            ended.append(loop.time())

    task = loop.create_task(goes_on_once())
    loop.run_until_complete(asyncio.sleep(1))
    stop_tasks(loop)
    assert task.cancelled() and ended == [2.0]  # in the second round, after the first's second
    loop.close()


def test_stopping_a_run_gives_up_on_a_task_that_never_ends(monkeypatch):
    import fakeshard.testing._concurrent as concurrent

    monkeypatch.setattr(concurrent, "STOP_ROUNDS", 3)
    loop = new_loop()

    stubborn = [True]

    async def never_ends():
        while stubborn[0]:
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                pass

    task = loop.create_task(never_ends())
    loop.run_until_complete(asyncio.sleep(0))
    stop_tasks(loop)  # returns: three rounds of at most a (virtual) second each
    assert not task.done() and loop.time() == 3.0
    stubborn[0] = False
    task.cancel()
    loop.run_until_complete(task)
    loop.close()


# -- the simulated cluster -------------------------------------------------------------------------

def _world(loop, replicas=1):
    return World(loop, FakeShardEngine, SPEC, stages=1, replicas=replicas, seed=0, capacity=None,
                 plans=[FaultPlan()] * replicas)


def test_a_partition_that_refuses_answers_engine_crashed_and_applies_nothing():
    async def main():
        world = _world(asyncio.get_running_loop())
        await world.apply(Nemesis(0.0, "partition", node=0, mode="refuse", duration=5.0))
        node = world.stages()[0][0]
        with pytest.raises(EngineCrashed, match="partitioned"):
            await node.prefill(TokenBundle("s", 0, 0, (1, 2)))
        assert world.nodes[0].engine.session("s") is None
        await asyncio.sleep(5.0)  # healed
        out = await node.prefill(TokenBundle("s", 0, 0, (1, 2)))
        return out.pos, [c.outcome for c in world.calls]

    (pos, outcomes), _ = _run(main())
    assert pos == 2 and outcomes == ["refused", "ok"]


def test_a_partition_that_hangs_answers_never_and_only_the_callers_timeout_ends_the_wait():
    async def main():
        world = _world(asyncio.get_running_loop())
        await world.apply(Nemesis(0.0, "partition", node=0, mode="hang", duration=50.0))
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(world.stages()[0][0].prefill(TokenBundle("s", 0, 0, (1,))), 3.0)
        return world.calls[0]

    call, end = _run(main())
    assert call.outcome == "hung" and call.abandoned and end == pytest.approx(3.0)


def test_a_node_that_leaves_is_announced_and_never_the_last_of_its_stage():
    async def main():
        world = _world(asyncio.get_running_loop(), replicas=2)
        told = []
        world.on_nodes_changed = lambda stages: told.append([n.name for n in stages[0]])
        await world.apply(Nemesis(0.0, "leave", node=0))
        await world.apply(Nemesis(0.0, "leave", node=1))  # the stage's last node stays
        await world.apply(Nemesis(0.0, "join", stage=0))
        return told, [e.get("skipped") for e in world.events]

    (told, skipped), _ = _run(main())
    assert told == [["n1"], ["n1", "n2"]]
    assert skipped == [None, "the stage's last node", None]


def test_nemesis_events_refuse_what_they_cannot_be():
    with pytest.raises(ValueError, match="kind"):
        Nemesis(0.0, "flood", node=0)
    with pytest.raises(ValueError, match="mode"):
        Nemesis(0.0, "partition", node=0, mode="slow", duration=1.0)
    with pytest.raises(ValueError, match="stage"):
        Nemesis(0.0, "join")


# -- runs -------------------------------------------------------------------------------------------

SMALL = Scenario(seed=5, stages=2, replicas=2, capacity=None, plans=(FaultPlan(),) * 4,
                 clients=(Client("a", 0.0, (Round([1, 2, 3], 3), Round({"count": 600, "seed": 9}, 2))),
                          Client("b", 0.01, (Round([4], 4, stop=2, stop_after=0.005),))),
                 nemesis=(Nemesis(0.05, "crash", node=0, restart_after=1.0),
                          Nemesis(0.1, "partition", node=3, mode="hang", duration=4.0)))


def test_the_reference_async_coordinator_passes_a_small_run_and_reports_it():
    run = run_scenario(FakeShardEngine, SMALL, reference_async)
    assert run.failure is None, run.failure
    assert run.next_requests >= 5 and 0.0 < run.availability <= 1.0
    ops = [(e["session"], e["op"]) for e in run.events if e["event"] == "complete"]
    assert ops.count(("a", "release")) == 2 and ("b", "release") in ops
    assert run.reached["sim:nemesis:crash"] and run.reached["sim:nemesis:partition"]


def test_a_scenario_survives_its_json_form():
    again = Scenario.from_dict(json.loads(json.dumps(SMALL.to_dict())))
    assert again == SMALL


def test_a_synchronous_coordinator_is_refused_by_the_concurrent_machine():
    run = None
    with pytest.raises(TypeError, match="not an async coordinator"):
        run = run_scenario(FakeShardEngine, SMALL, reference)
    assert run is None


def test_an_async_coordinator_is_refused_by_the_one_call_at_a_time_machine():
    from fakeshard.testing._coordinator_machine import PER_STAGE, RANGES

    with pytest.raises(CoordinatorError, match="concurrent machine"):
        CoordinatorRunner(FakeShardEngine, factory_name="fakeshard:FakeShardEngine", coordinator="x", seed=0,
                          plans=[FaultPlan()] * (len(RANGES) * PER_STAGE), coordinator_factory=reference_async)


# -- same seed, same run -----------------------------------------------------------------------------

def _digest(run):
    return hashlib.sha256(json.dumps([run.events, run.calls], sort_keys=True).encode()).hexdigest()


@settings(max_examples=15, derandomize=True, deadline=None, database=None, phases=[Phase.generate],
          suppress_health_check=list(HealthCheck))
@given(scenarios(max_clients=24))
def test_one_scenario_runs_the_same_interleaving_twice(scenario):
    first = run_scenario(FakeShardEngine, scenario, reference_async)
    second = run_scenario(FakeShardEngine, scenario, reference_async)
    assert first.events == second.events  # event for event, as madsim's check compares
    assert first.calls == second.calls


def test_the_history_does_not_depend_on_the_process_or_its_hash_seed():
    script = ("import hashlib, json, sys\n"
              "from fakeshard import FakeShardEngine\n"
              "from fakeshard.testing._concurrent import Scenario, run_scenario\n"
              "from fakeshard.testing._async_coordinator import reference_async\n"
              "run = run_scenario(FakeShardEngine, Scenario.from_dict(json.loads(sys.argv[1])), reference_async)\n"
              "print(hashlib.sha256(json.dumps([run.events, run.calls], sort_keys=True).encode()).hexdigest())\n")
    digests = {subprocess.run([sys.executable, "-c", script, json.dumps(SMALL.to_dict())], capture_output=True,
                              text=True, check=True, cwd=ROOT, env={"PYTHONHASHSEED": seed, "PATH": ""}).stdout.strip()
               for seed in ("1", "4242")}
    assert digests == {_digest(run_scenario(FakeShardEngine, SMALL, reference_async))}


# -- testing the tester ---------------------------------------------------------------------------------

EXPECTED = {
    "releases_without_waiting": {"after_release", "release", "budget", "leak"},
    "replays_at_same_epoch": {"gave_up", "stream", "budget", "raised"},
    "never_times_out": {"unanswered"},
    "keeps_nodes_that_left": {"gone_node"},
    "releases_only_at_tail": {"release", "leak"},
    "forgets_epoch_on_reuse": {"budget", "gave_up", "raised"},
    "replays_without_a_failure": {"budget"},
    "passes_answers_unchecked": {"stream", "leak"},
}


@pytest.mark.slow
@pytest.mark.parametrize("planted", PLANTED, ids=lambda p: p.name)
def test_a_planted_async_coordinator_is_caught_under_ci_and_its_trace_replays(planted, tmp_path):
    config = MachineConfig.for_factory(FakeShardEngine, "fakeshard:FakeShardEngine", coordinator=planted.factory(),
                                       coordinator_name=f"planted.async_coordinators:{planted.name}")
    with pytest.raises(ConcurrentFailure) as caught:
        run_concurrent(config, settings=profiles.get("ci"), save_dir=tmp_path)
    trace = Trace.load(Path(config.saved[0]))
    assert trace.machine == "concurrent" and trace.config["check"] in EXPECTED[planted.name], str(caught.value)
    scenario = Scenario.from_dict(trace.config["scenario"])
    assert len(scenario.clients) <= 4  # reduced
    again = replay_concurrent(trace, FakeShardEngine, f"planted.async_coordinators:{planted.name}")
    assert again.same_history and again.run.failure == trace.failure


@pytest.mark.slow
def test_the_reference_passes_a_ci_campaign_and_meets_the_cluster_situations():
    config = MachineConfig.for_factory(FakeShardEngine, "fakeshard:FakeShardEngine")
    total = run_concurrent(config, settings=settings(profiles.get("ci"), max_examples=100), save_dir=None)
    assert total.failure is None and total.availability > 0.5
    for situation in ("sim:nemesis:crash", "sim:nemesis:partition", "sim:nemesis:leave", "sim:nemesis:join",
                      "sim:call:hung", "sim:reroute", "sim:replay_new_epoch", "sim:release_raced_token",
                      "sim:churn_mid_session", "sim:in_flight:32"):
        assert total.reached[situation], situation


def test_fakeshard_replay_prints_the_timeline_and_says_the_history_is_the_same(tmp_path):
    name = "planted.async_coordinators:releases_only_at_tail"
    config = MachineConfig.for_factory(FakeShardEngine, "fakeshard:FakeShardEngine",
                                       coordinator=PLANTED[4].factory(), coordinator_name=name)
    with pytest.raises(ConcurrentFailure):
        run_concurrent(config, settings=profiles.get("ci"), save_dir=tmp_path)
    cmd = [sys.executable, "-m", "fakeshard", "replay", config.saved[0]]
    failing = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    assert failing.returncode == 1, failing.stderr
    assert "the same history, event for event" in failing.stdout and "FAILS on" in failing.stdout
    assert "was released, but node" in failing.stdout
    fixed = subprocess.run(cmd + ["--coordinator", "fakeshard.testing._async_coordinator:reference_async"],
                           capture_output=True, text=True, cwd=ROOT)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "NOT the saved history" in fixed.stdout and "passes on" in fixed.stdout


def test_check_reports_a_concurrent_failure_once(tmp_path):
    cmd = [sys.executable, "-m", "fakeshard", "check", "--machines", "concurrent",
           "--coordinator", "planted.async_coordinators:releases_only_at_tail",
           "--profile", "dev", "--seed", "0", "--out", str(tmp_path / "out"),
           "--traces", str(tmp_path / "traces")]
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 1, result.stdout + result.stderr
    # The table names the saved trace's failure once; pytest's own report, below it, names the
    # failure once too, and it is the test's own, not an error raised while handling another one
    # (pytest's short summary, below the failures, may repeat it: it does in full when $CI is set).
    table, pytest_lines = result.stdout.split("pytest's last lines:")
    assert table.count("was released, but node") == 1, result.stdout
    failures = pytest_lines.split("short test summary info")[0]
    assert failures.count("was released, but node") == 1, result.stdout
    assert "During handling" not in result.stdout


# -- every rule has a sound design that passes it ----------------------------------------------------

class CancelsInFlightOnRelease(AsyncCoordinator):
    """Another sound release: instead of waiting for the session's call in flight, cancel it,
    then release everywhere.  Requests it already sent still arrive; the release's epoch
    fences them, so nothing is left and nothing is computed after the release returns."""

    def __init__(self, stages, *, clock=None):
        super().__init__(stages, clock=clock)
        self.in_flight = {}

    async def next_token(self, session_id):
        task = asyncio.get_running_loop().create_task(super().next_token(session_id))
        self.in_flight[session_id] = task
        try:
            return await task
        finally:
            self.in_flight.pop(session_id, None)

    async def release(self, session_id):
        task = self.in_flight.get(session_id)
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await super().release(session_id)


def _ci_campaign(coordinator: type):
    """A ``ci`` campaign of the concurrent machine with ``coordinator``, a class of this module."""
    config = MachineConfig.for_factory(FakeShardEngine, "fakeshard:FakeShardEngine", coordinator=coordinator,
                                       coordinator_name=f"tests.test_concurrent:{coordinator.__name__}")
    return run_concurrent(config, settings=profiles.get("ci"), save_dir=None)


@pytest.mark.slow
def test_a_release_that_cancels_the_call_in_flight_passes_a_ci_campaign():
    total = _ci_campaign(CancelsInFlightOnRelease)
    assert total.reached["sim:release_raced_token"] and total.failure is None


class CleansUpAfterFailures(AsyncCoordinator):
    """Another sound recovery: after a failed attempt, cancel the session at the failed epoch
    on every node of its route (best effort, each under the call timeout), then bump the
    epoch and replay as the reference does.  What the failed attempt left is freed at once
    instead of at release; the cancels are cleanup calls, which the budget counts apart."""

    async def _recover(self, s, failed):
        epoch, route = s.epoch, [node for node in s.route if node is not None and self._present(node)]
        await super()._recover(s, failed)
        await asyncio.gather(*(self._call(node, "cancel", s.session_id, epoch) for node in route),
                             return_exceptions=True)


@pytest.mark.slow
def test_a_coordinator_that_cancels_what_a_failed_attempt_left_passes_a_ci_campaign():
    total = _ci_campaign(CleansUpAfterFailures)
    # It met failures and sent its cancels into them (a cancel a fault answered is one it sent).
    assert total.failure is None and total.reached["sim:replay_new_epoch"]
    assert any(key.startswith("sim:fault:") and key.endswith(":cancel") for key in total.reached)


@pytest.mark.slow
def test_a_coordinator_that_learns_of_a_moved_route_from_a_cache_miss_passes_a_ci_campaign():
    total = _ci_campaign(SharesOneRouteTable)
    # Sessions met the new node's cache miss and recovered from it.
    assert total.failure is None and total.reached["code:cache_miss"] and total.reached["sim:reroute"]


@pytest.mark.slow
def test_a_coordinator_that_releases_on_nodes_that_left_passes_a_ci_campaign():
    total = _ci_campaign(ReleasesWhereverItWent)
    assert total.failure is None and total.reached["sim:nemesis:leave"] and total.reached["sim:churn_mid_session"]


def test_a_cache_miss_after_a_failure_in_another_request_counts_as_a_failure():
    # Session b's decode on n0 is held past the call timeout: the shared route table moves to
    # n1, and session a, back to back, meets n1's cache miss in its next request and replays.
    sc = Scenario(seed=5, stages=1, replicas=2, capacity=None,
                  plans=(FaultPlan((FaultRule(Delay(3.0), op="decode", session_id="b"),)), FaultPlan()),
                  clients=(Client("a", 0.0, (Round([1, 2], 150),)), Client("b", 0.01, (Round([3], 2),))))
    run = run_scenario(FakeShardEngine, sc, SharesOneRouteTable)
    assert run.failure is None, run.failure
    assert any(c["session_id"] == "a" and c["outcome"] == "cache_miss" and not c["after_wipe"] for c in run.calls)
    # Without a failure anywhere, the same miss and replay are one pass too many.
    quiet = Scenario(seed=5, stages=1, replicas=2, capacity=None, plans=(FaultPlan(), FaultPlan()),
                     clients=(Client("a", 0.0, (Round([1, 2], 3),)),))
    run = run_scenario(FakeShardEngine, quiet, MovesWithoutAFailure)
    assert run.check == "budget" and "made 2 compute calls with 0 failures" in run.failure, run.failure


class MovesWithoutAFailure(SharesOneRouteTable):
    """Moves the route table to the next replica after every token, with no failure to answer."""

    async def next_token(self, session_id):
        token = await super().next_token(session_id)
        self.table = [stage[(stage.index(node) + 1) % len(stage)] for stage, node in zip(self.stages, self.table)]
        return token


def _planted(name):
    return next(p.factory() for p in PLANTED if p.name == name)


def test_the_targeted_scenarios_catch_a_coordinator_with_no_call_timeout_and_say_why():
    hang, answers, prefills = targeted()
    assert run_scenario(FakeShardEngine, hang, reference_async).failure is None
    run = run_scenario(FakeShardEngine, hang, _planted("never_times_out"))
    assert run.check == "unanswered"
    assert "swallowed by a partition that hangs" in run.failure and "with no timeout waits for ever" in run.failure


def test_the_targeted_scenarios_catch_answers_taken_unchecked_and_name_the_session_held():
    _, answers, _ = targeted()
    assert run_scenario(FakeShardEngine, answers, reference_async).failure is None
    run = run_scenario(FakeShardEngine, answers, _planted("passes_answers_unchecked"))
    assert run.check == "stream" and "is 64" in run.failure  # the tail's token outside the vocabulary
    # Without the tail's bad token, the middle's answer for session 's0~' leaves its cache on the tail.
    middle_only = dataclasses.replace(answers, plans=answers.plans[:2] + (FaultPlan(),))
    run = run_scenario(FakeShardEngine, middle_only, _planted("passes_answers_unchecked"))
    assert run.check == "leak", run.failure
    assert "node n2 holds 3 positions (session 's0~' live at epoch 0 with 3 cached positions, a session no " \
           "client opened)" in run.failure
    assert run_scenario(FakeShardEngine, middle_only, reference_async).failure is None


def test_every_campaign_runs_the_targeted_scenarios_first_and_they_reach_what_draws_rarely_do():
    from fakeshard.testing._probes import SITUATIONS

    reached = set()
    for sc in targeted():
        reached |= set(run_scenario(FakeShardEngine, sc, reference_async).reached)
    for situation in ("sim:call:hung", "sim:call:refused", "sim:call:crashed_mid_call", "sim:gave_up",
                      "sim:fault:Delay:prefill", "sim:fault:MemoryPressure:prefill", "sim:fault:Malformed:prefill"):
        assert situation in reached and situation in SITUATIONS


def test_cleanup_on_a_node_that_left_is_allowed_and_compute_there_is_not():
    scenario = Scenario(seed=3, stages=1, replicas=2, capacity=None, plans=(FaultPlan(), FaultPlan()),
                        clients=(Client("a", 0.0, (Round([1, 2], 4, pause=0.5),)),),
                        nemesis=(Nemesis(0.05, "leave", node=0),))
    run = run_scenario(FakeShardEngine, scenario, ReleasesWhereverItWent)
    assert run.failure is None, run.failure
    told = next(e["t"] for e in run.events if e["event"] == "nemesis" and e["kind"] == "leave")
    assert any(c["node"] == 0 and c["op"] == "release" and c["sent"] > told for c in run.calls)
    kept = next(p.cls for p in PLANTED if p.name == "keeps_nodes_that_left")
    caught = run_scenario(FakeShardEngine, scenario, kept)
    assert caught.check == "gone_node" and "it is still in a route" in caught.failure, caught.failure


def test_a_plan_fault_that_changed_nothing_is_reported_and_one_that_did_is_not():
    from fakeshard import Crash, FaultRule, MemoryPressure

    plan = FaultPlan((FaultRule(MemoryPressure(reserve_tokens=1000), op="prefill"), FaultRule(Crash(), op="decode")))
    scenario = Scenario(seed=1, stages=1, replicas=2, capacity=None, plans=(plan, FaultPlan()),
                        clients=(Client("a", 0.0, (Round([1, 2], 3),)),))
    run = run_scenario(FakeShardEngine, scenario, reference_async)
    assert run.failure is None, run.failure
    # A reservation on a node without a capacity leaves every call room; the crash answered engine_crashed.
    assert run.quiet_faults == {"MemoryPressure": 1}
    assert run.reached["sim:fault:Crash:decode"] == 1
    assert any("MemoryPressure 1" in note for note in run.notes())


def test_reduction_drops_a_stage_and_renumbers_the_nodes_the_nemesis_names():
    from fakeshard.testing._concurrent import _fewer_stages

    scenario = Scenario(seed=0, stages=3, replicas=2, capacity=None, plans=tuple(FaultPlan(seed=i) for i in range(6)),
                        clients=(Client("a", 0.0, (Round([1], 1),)),),
                        nemesis=(Nemesis(0.5, "crash", node=5), Nemesis(0.6, "crash", node=1),
                                 Nemesis(2.0, "join", stage=0), Nemesis(1.0, "join", stage=2),
                                 Nemesis(3.0, "partition", node=7, mode="hang", duration=1.0)))
    smaller = _fewer_stages(scenario)
    assert (smaller.stages, smaller.replicas) == (2, 2)
    assert [p.seed for p in smaller.plans] == [0, 1, 2, 3]
    # Node 7 joined second (stage 0, after stage 2's join at t=1); without stage 2 it is node 4.
    assert smaller.nemesis == (Nemesis(0.6, "crash", node=1), Nemesis(2.0, "join", stage=0),
                               Nemesis(3.0, "partition", node=4, mode="hang", duration=1.0))
    assert run_scenario(FakeShardEngine, smaller, reference_async).failure is None


def test_a_client_whose_coordinator_gave_up_beyond_the_budget_still_releases_and_nothing_is_left():
    scenario = Scenario(seed=2, stages=1, replicas=1, capacity=None, plans=(FaultPlan(),),
                        clients=(Client("a", 0.0, (Round([1, 2], 2),)),),
                        nemesis=(Nemesis(0.0, "partition", node=0, mode="refuse", duration=40.0),))
    run = run_scenario(FakeShardEngine, scenario, reference_async)
    assert run.failure is None, run.failure
    assert run.reached["sim:gave_up"] == 1 and run.availability == 0.0
    outcomes = [(e["op"], e["outcome"]) for e in run.events if e["event"] == "complete"]
    assert outcomes == [("start", "ok"), ("next_token", "gave_up"), ("release", "ok")]


def test_a_call_the_coordinator_timed_out_on_a_delay_counts_as_a_failure_in_the_budget():
    # Found by a random campaign: a Delay (2.401 s) longer than the reference's call timeout
    # (2 s) on the tail's decode; the reference gives up on it, bumps the epoch and replays,
    # while a release of the session waits.  The release's budget failed with "0 failures".
    delayed = Scenario(
        seed=1877782, stages=3, replicas=1, capacity=None,
        clients=(Client("s0", 0.5, (Round([0], 5, pause=0.119), Round([0], 4, stop=1, stop_after=0.034, pause=0.2),
                                    Round([30], 6, stop=1, stop_after=0.014, pause=0.089))),
                 Client("s4", 0.286, (Round([0], 3, pause=0.2),))),
        plans=(FaultPlan((), 3187), FaultPlan((), 3042),
               FaultPlan((FaultRule(Delay(2.401), op="decode", nth=8, count=2),), 4294967296)))
    run = run_scenario(FakeShardEngine, delayed, reference_async)
    assert run.failure is None, run.failure
    (abandoned,) = [c for c in run.calls if c["abandoned"]]
    assert abandoned["op"] == "decode" and abandoned["held"] == 2.401


def test_a_node_slower_than_the_call_timeout_is_waited_out_not_asked_for_ever():
    # Every prefill on the only node takes 5 s (a long prompt, a loaded machine), more than the
    # reference's 2 s call timeout: each attempt after a timed-out one waits twice as long (2, 4,
    # then 8 s), so the third attempt is answered.  A fixed timeout would ask for ever, and give up.
    slow = Scenario(seed=0, stages=1, replicas=1, capacity=None,
                    plans=(FaultPlan((FaultRule(Delay(5.0), op="prefill", count=None),)),),
                    clients=(Client("a", 0.0, (Round([1, 2], 2),)),))
    run = run_scenario(FakeShardEngine, slow, reference_async)
    assert run.failure is None, run.failure
    assert run.availability == 1.0 and run.reached["sim:gave_up"] == 0
    prefills = [(c["epoch"], c["abandoned"]) for c in run.calls if c["op"] == "prefill"]
    assert prefills == [(0, True), (1, True), (2, False)]


def test_the_reference_async_coordinator_is_the_kit_s_by_its_public_name():
    import fakeshard.testing as kit

    assert {"AsyncCoordinator", "reference_async"} <= set(kit.__all__)
    factory = load_coordinator("fakeshard.testing:reference_async")
    assert factory is kit.reference_async
    scenario = Scenario(seed=1, stages=2, replicas=1, capacity=None, plans=(FaultPlan(), FaultPlan()),
                        clients=(Client("a", 0.0, (Round([1, 2], 2),)),))
    made = []

    def keep(stages, *, clock=None):
        made.append(factory(stages, clock=clock))
        return made[-1]
    run = run_scenario(FakeShardEngine, scenario, keep)
    assert run.failure is None and isinstance(made[0], kit.AsyncCoordinator)
    assert [e["outcome"] for e in run.events if e["event"] == "complete"] == ["ok"] * 4


def test_a_campaign_total_adds_up_every_count_of_its_runs():
    # The concurrent and the program campaigns both sum their runs with Run.add: a count one of
    # them left out (the program campaign once dropped the events and faults without effect)
    # would be missing from its notes.
    from collections import Counter

    from fakeshard.testing._concurrent import Run

    one = Run(reached=Counter({"sim:reroute": 3}), next_requests=4, answered=3, without_effect=["crash of n1 at t=2"],
              quiet_faults=Counter({"Delay": 1}))
    two = Run(reached=Counter({"sim:reroute": 1, "sim:call:hung": 1}), next_requests=2, answered=2,
              quiet_faults=Counter({"Delay": 2, "Malformed": 1}))
    total = Run()
    total.add(one)
    total.add(two)
    assert total.reached == Counter({"sim:reroute": 2, "sim:call:hung": 1})  # situations count runs
    assert (total.next_requests, total.answered) == (6, 5)
    assert total.without_effect == ["crash of n1 at t=2"]
    assert total.quiet_faults == Counter({"Delay": 3, "Malformed": 1})
    assert any("nemesis events with no effect" in n for n in total.notes())


def test_a_campaign_below_the_availability_asked_for_fails_saying_its_share():
    # Both campaigns of many sessions (in process and a program's) judge --availability by this rule.
    from fakeshard.testing._concurrent import ConcurrentFailure, Run, check_availability

    total = Run(next_requests=8, answered=6)
    assert check_availability(total, None) is total and check_availability(total, 0.75) is total
    with pytest.raises(ConcurrentFailure, match=r"availability 0\.750 \(6 of 8 next_token requests answered\) "
                                                r"is below 0\.8"):
        check_availability(total, 0.8)
    assert check_availability(Run(), 1.0).availability == 1.0  # no request: nothing to answer
