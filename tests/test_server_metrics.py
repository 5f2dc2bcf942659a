"""Each served node's ``GET /metrics``, scraped as Prometheus would, says what the node did."""

from __future__ import annotations

import pytest

pytest.importorskip("aiohttp")
pytest.importorskip("prometheus_client")

import httpx  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from fakeshard import (  # noqa: E402
    Delay,
    DropResponse,
    FaultPlan,
    FaultRule,
    ResponseLost,
    StaleEpoch,
    TokenBundle,
)
from fakeshard.remote import serve  # noqa: E402

TOPOLOGY = {"model": {"model_id": "metrics", "n_layers": 2, "hidden_size": 4, "vocab_size": 32},
            "nodes": [{"name": "full", "start_layer": 0, "end_layer": 2, "capacity_tokens": 100},
                      {"name": "spare", "start_layer": 0, "end_layer": 2}]}


def _scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    answer = httpx.get(url + "/metrics")
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/plain")
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(answer.text) for sample in family.samples}


def test_a_scrape_counts_calls_outcomes_faults_and_virtual_latency():
    plan = FaultPlan((FaultRule(Delay(0.5), op="prefill"), FaultRule(DropResponse(), op="decode")))
    with serve(TOPOLOGY, time_scale=0.0) as cluster:
        cluster.set_faults("full", plan)
        node = cluster.engine("full")
        node.prefill(TokenBundle("s", 1, 0, (1, 2, 3)))
        with pytest.raises(ResponseLost):  # applied, the answer dropped
            node.decode(TokenBundle("s", 1, 3, (4,)))
        with pytest.raises(StaleEpoch):
            node.decode(TokenBundle("s", 0, 4, (5,)))
        node.cancel("t", 0)
        got = _scrape(node.url)
        state = httpx.get(node.url + "/v1/state").json()

        calls = {key[1]: value for key, value in got.items() if key[0] == "fakeshard_calls_total"}
        assert calls == {(("op", "prefill"), ("outcome", "ok")): 1, (("op", "decode"), ("outcome", "response_lost")): 1,
                         (("op", "decode"), ("outcome", "stale_epoch")): 1, (("op", "cancel"), ("outcome", "ok")): 1}
        assert got[("fakeshard_used_tokens", ())] == state["used_tokens"] == 4  # the dropped decode was applied
        assert got[("fakeshard_capacity_tokens", ())] == 100
        assert got[("fakeshard_live_sessions", ())] == 1  # "s" live, "t" a tombstone
        assert got[("fakeshard_crashed", ())] == 0
        fired = {key[1]: value for key, value in got.items() if key[0] == "fakeshard_faults_fired_total"}
        assert fired == {(("kind", "delay"),): 1, (("kind", "drop_response"),): 1}
        # The histogram is of the node's virtual clock: the prefill's 0.5 s Delay, nothing else.
        assert got[("fakeshard_call_seconds_sum", (("op", "prefill"),))] == 0.5
        assert got[("fakeshard_call_seconds_count", (("op", "decode"),))] == 2
        assert got[("fakeshard_call_seconds_bucket", (("le", "0.25"), ("op", "prefill")))] == 0
        assert got[("fakeshard_call_seconds_bucket", (("le", "0.5"), ("op", "prefill")))] == 1

        # Each node has its own series; a crash shows, and an unbounded engine has no capacity.
        spare = _scrape(cluster.engine("spare").url)
        assert ("fakeshard_capacity_tokens", ()) not in spare
        assert not any(key[0] == "fakeshard_calls_total" for key in spare)
        cluster.crash("spare")
        assert _scrape(cluster.engine("spare").url)[("fakeshard_crashed", ())] == 1
