"""What a served node tells a load-aware coordinator: ``GET /metrics``, in Prometheus's text format.

Extra ``serve`` (prometheus_client writes the exposition).  Each node has a registry of its
own, so the nodes of one server never mix their series:

* ``fakeshard_used_tokens``, ``fakeshard_capacity_tokens`` (absent for an unbounded
  engine), ``fakeshard_live_sessions`` and ``fakeshard_crashed`` (0 or 1): gauges read
  from the engine when scraped;
* ``fakeshard_calls_total{op, outcome}``: the engine calls (``prefill``, ``decode``,
  ``cancel``, ``release``) the node answered or dropped, ``outcome`` ``ok`` or the
  contract's error code (``response_lost`` for a dropped answer);
* ``fakeshard_faults_fired_total{kind}``: the fault plan's firings by fault kind
  (``delay``, ``memory_pressure``, ``malformed``, ``crash``, ``drop_response``),
  read from the engine's fault log, which starts again when the plan is replaced;
* ``fakeshard_call_seconds{op}``: a histogram of the time each call took on the node's
  virtual clock (its ``Delay`` faults: what ``Fakeshard-Delay`` reports), so it is the
  same from run to run.
"""

from __future__ import annotations

import bisect
from collections import Counter
from typing import Any, Iterator, Optional

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

__all__ = ["CALL_SECONDS_BUCKETS", "CONTENT_TYPE", "NodeMetrics"]

#: The media type of the exposition, as prometheus_client writes it.
CONTENT_TYPE = CONTENT_TYPE_LATEST
#: Upper bounds of the call-latency histogram, in seconds of the node's virtual clock.
CALL_SECONDS_BUCKETS = (0.0, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class NodeMetrics:
    """The metrics of one served engine: calls as they are answered, state when scraped.

    A call is counted in plain integers (its outcome, its latency's bucket), and
    prometheus_client writes them out at a scrape: a node counts a call for about
    a microsecond, a fifth of what prometheus_client's locked counters take.
    """

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        #: (op, outcome) -> calls.
        self.calls: Counter[tuple[str, str]] = Counter()
        #: op -> [calls in each bucket (not cumulative), then over the last bound; sum of seconds].
        self.seconds: dict[str, list[float]] = {}
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(_Calls(self))
        self.registry.register(_EngineState(engine))

    def record(self, op: str, outcome: str, seconds: float) -> None:
        """One engine call, answered ``outcome`` (``ok`` or an error code) after ``seconds``."""
        self.calls[op, outcome] += 1
        counts = self.seconds.get(op)
        if counts is None:
            counts = self.seconds[op] = [0] * (len(CALL_SECONDS_BUCKETS) + 2)
        counts[bisect.bisect_left(CALL_SECONDS_BUCKETS, seconds)] += 1
        counts[-1] += seconds

    def exposition(self) -> bytes:
        """The text a scrape answers (read from the engine: call it where the engine's calls run)."""
        return generate_latest(self.registry)


class _Calls(Collector):
    """``fakeshard_calls_total`` and ``fakeshard_call_seconds``, from a node's counts."""

    def __init__(self, metrics: NodeMetrics) -> None:
        self.metrics = metrics

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        calls = CounterMetricFamily("fakeshard_calls", "Engine calls the node answered, by op and outcome.",
                                    labels=["op", "outcome"])
        for (op, outcome), n in sorted(self.metrics.calls.items()):
            calls.add_metric([op, outcome], n)
        yield calls
        seconds = HistogramMetricFamily("fakeshard_call_seconds", "Virtual seconds each engine call took on "
                                        "the node's clock (its Delay faults).", labels=["op"])
        bounds = [floatToGoString(b) for b in CALL_SECONDS_BUCKETS] + ["+Inf"]  # as Histogram writes `le`
        for op, counts in sorted(self.metrics.seconds.items()):
            cumulative, total = [], 0
            for bound, in_bucket in zip(bounds, counts[:-1]):
                total += int(in_bucket)
                cumulative.append((bound, total))
            seconds.add_metric([op], cumulative, sum_value=counts[-1])
        yield seconds


class _EngineState(Collector):
    """The gauges and the fault counts, read from the engine at each scrape."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine

    def describe(self) -> list[Metric]:
        return []  # read at scrape time: nothing to declare ahead

    def collect(self) -> Iterator[Metric]:
        engine = self.engine
        yield _gauge("fakeshard_used_tokens", "Positions the engine's caches hold.", engine.used_tokens)
        capacity: Optional[int] = engine.capacity_tokens
        if capacity is not None:
            yield _gauge("fakeshard_capacity_tokens", "Positions the engine's caches may hold.", capacity)
        views = [engine.session(sid) for sid in getattr(engine, "session_ids", tuple)()]
        yield _gauge("fakeshard_live_sessions", "Sessions live on the engine.",
                     sum(1 for view in views if view is not None and view.status == "live"))
        yield _gauge("fakeshard_crashed", "1 while the engine is down (until restart), else 0.",
                     int(bool(getattr(engine, "crashed", False))))
        fired = Counter(record.fault.type_name for record in getattr(engine, "fault_log", ()))
        family = CounterMetricFamily("fakeshard_faults_fired", "Fault plan firings, by fault kind.",
                                     labels=["kind"])
        for kind, n in sorted(fired.items()):
            family.add_metric([kind], n)
        yield family


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)
