"""Timelines: what a trace's page holds, that it needs nothing from a network, and that the
campaigns write one beside every failing trace (the browser's own checks: test_browser.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from xml.etree import ElementTree

import pytest

from fakeshard import FakeShardEngine
from fakeshard.testing import _profiles as profiles
from fakeshard.testing._concurrent import ConcurrentFailure, run_concurrent
from fakeshard.testing._machines import MachineConfig
from fakeshard.testing._registry import history_of, replay
from fakeshard.testing._trace import Trace
from fakeshard.testing._view import message_diagram, render
from planted.async_coordinators import PLANTED
from planted.engines import BUGS

ROOT = Path(__file__).resolve().parent.parent
REGRESSIONS = ROOT / "stateful" / "regressions"
IGNORES_START_POS = next(b for b in BUGS if b.name == "ignores_start_pos")


class _Page(HTMLParser):
    """The elements of a page that could reach past it: scripts, links, sources."""

    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[dict[str, str | None]] = []
        self.outside: list[str] = []
        self.data: dict[str, str] = {}
        self._in: str | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "script":
            self.scripts.append(a)
            self._in = a.get("id") or "script"
        for key in ("src", "href"):
            if a.get(key) and not str(a[key]).startswith("#"):
                self.outside.append(f"<{tag} {key}={a[key]}>")
        if tag == "link":
            self.outside.append("<link>")

    def handle_endtag(self, tag):
        if tag == "script":
            self._in = None

    def handle_data(self, data):
        if self._in:
            self.data[self._in] = self.data.get(self._in, "") + data


def _parsed(html: str) -> _Page:
    page = _Page()
    page.feed(html)
    return page


@pytest.fixture(scope="module")
def concurrent_trace(tmp_path_factory):
    """A failing concurrent trace (a planted coordinator that releases only at the tail), saved
    by the campaign, with the page the campaign wrote beside it."""
    where = tmp_path_factory.mktemp("concurrent")
    planted = next(p for p in PLANTED if p.name == "releases_only_at_tail")
    config = MachineConfig.for_factory(FakeShardEngine, "fakeshard:FakeShardEngine", coordinator=planted.factory(),
                                       coordinator_name=f"planted.async_coordinators:{planted.name}")
    with pytest.raises(ConcurrentFailure):
        run_concurrent(config, settings=profiles.get("ci"), save_dir=where)
    return Path(config.saved[0])


def test_a_sequential_trace_has_a_call_per_step_and_the_diverging_step_is_the_failure():
    trace = Trace.load(REGRESSIONS / "sessions-8e972d4b4e3d.json")
    result = replay(trace, IGNORES_START_POS.factory, "planted")
    assert result.failed
    history = history_of(trace, IGNORES_START_POS.factory, "planted")
    calls = history["calls"]
    assert len(calls) == len(trace.steps)
    assert [c["start"] for c in calls] == list(range(len(trace.steps)))
    failure = history["failure"]
    assert failure["call"] == result.first_divergence - 1 and failure["message"] == result.message
    # The model's state is read around every step: each after is the next one's before.
    for one, two in zip(calls, calls[1:]):
        assert one["after"] == two["before"] and one["after"] is not None
    # On a correct engine the same trace holds, and the page says no check failed.
    assert history_of(trace, FakeShardEngine, "fakeshard:FakeShardEngine")["failure"] is None


def test_a_parallel_history_keeps_its_ticks_and_shows_its_longest_partial_linearization():
    trace = Trace.load(REGRESSIONS / "parallel-a26abcd2e9ba.json")
    factory = trace.engine_factory.split(":")
    from importlib import import_module

    engine = getattr(import_module(factory[0]), factory[1])
    history = history_of(trace, engine, trace.engine_factory)
    assert {(c["start"], c["end"]) for c in history["calls"]} == {
        (s["invoked"], s["returned"]) for s in trace.steps}
    lin = history["linearization"]
    assert lin is not None and lin["linearizable"] is False
    assert history["failure"]["check"] == "linearizability"
    # The calls that could not go next are neither in the partial order nor unexplained.
    assert lin["stuck"] and not {s["call"] for s in lin["stuck"]} & set(lin["order"])
    # Every call placed in the order has the model's state around it, chained per session.
    placed = [history["calls"][i] for i in lin["order"]]
    assert all(c["before"] is not None and c["after"] is not None for c in placed)


def test_the_linearization_of_a_linearizable_history_explains_every_call():
    trace = Trace.load(REGRESSIONS / "parallel-a26abcd2e9ba.json")
    history = history_of(trace, FakeShardEngine, "fakeshard:FakeShardEngine")
    lin = history["linearization"]
    if lin["linearizable"]:  # on the fixture, the torn view this trace caught does not happen
        ambiguous = {i for i, c in enumerate(history["calls"]) if c["outcome"] == "ambiguous"}
        assert set(range(len(history["calls"]))) - ambiguous <= set(lin["order"])
        assert history["failure"] is None
    else:
        assert history["failure"] is not None


def test_a_concurrent_trace_has_session_and_node_tracks_nemesis_marks_and_messages(concurrent_trace):
    trace = Trace.load(concurrent_trace)
    history = history_of(trace, FakeShardEngine, "fakeshard:FakeShardEngine")
    kinds = {t["kind"] for t in history["tracks"]}
    assert kinds == {"session", "node"}
    node_calls = [c for c in history["calls"] if history["tracks"][c["track"]]["kind"] == "node"]
    assert len(node_calls) == len(trace.actual)
    invokes = [e for e in trace.steps if e["event"] == "invoke"]
    assert len(history["calls"]) - len(node_calls) == len(invokes)
    assert len([m for m in history["marks"] if m["kind"] == "nemesis"]) == \
        len([e for e in trace.steps if e["event"] == "nemesis"])
    failure = next(e for e in trace.steps if e["event"] == "failure")
    assert history["failure"]["message"] == failure["message"]
    assert history["failure"]["t"] == pytest.approx(failure["t"], abs=1e-6)
    # A message per request that arrived, and one per answer that came back.
    arrived = sum(c["arrived"] is not None for c in trace.actual)
    answered = sum(c["answered"] is not None and c["done"] is not None for c in trace.actual)
    assert len(history["messages"]) == arrived + answered


def test_the_message_diagram_draws_an_arrow_per_message_forward_in_time(concurrent_trace):
    history = history_of(Trace.load(concurrent_trace), FakeShardEngine, "fakeshard:FakeShardEngine")
    svg = ElementTree.fromstring(message_diagram(history["messages"], limit=10_000))
    arrows = [e for e in svg.iter("{http://www.w3.org/2000/svg}line") if e.get("class", "").startswith("msg")]
    assert len(arrows) == len(history["messages"])
    assert all(float(a.get("y1")) <= float(a.get("y2")) for a in arrows)
    assert all(a.get("marker-end") == "url(#arrow)" for a in arrows)


def test_the_message_diagrams_labels_each_have_a_row_of_their_own(concurrent_trace):
    from fakeshard.testing._view import ROW

    history = history_of(Trace.load(concurrent_trace), FakeShardEngine, "fakeshard:FakeShardEngine")
    svg = ElementTree.fromstring(message_diagram(history["messages"]))
    labels = [e for e in svg.iter("{http://www.w3.org/2000/svg}text") if e.get("class") == "msglabel"]
    arrows = [e for e in svg.iter("{http://www.w3.org/2000/svg}line") if e.get("class", "").startswith("msg")]
    assert len(labels) == len(arrows) >= 2
    rows = sorted(float(e.get("y")) for e in labels)
    # A label is 9 px high: rows ROW (> 9) px apart never overlap, whatever their length.
    assert all(b - a >= ROW for a, b in zip(rows, rows[1:]))
    shown = sorted(history["messages"], key=lambda m: (m["sent"], m["received"]))
    for label, arrow, m in zip(labels, arrows, shown):  # each just above its arrow's start
        assert float(arrow.get("y1")) - float(label.get("y")) == 2
        assert label.text == f"{m['label']} (t={m['sent']:g})"
    # Sixty-four requests sent at once to four nodes, answered at once: still a row each.
    crowd = [{"from": "coordinator", "to": f"n{k % 4}", "label": f"decode s{k} e0 @{4096 + k}", "sent": 1.0,
              "received": 1.0} for k in range(64)]
    crowd += [{"from": f"n{k % 4}", "to": "coordinator", "label": f"ok s{k}", "sent": 1.0, "received": 1.5}
              for k in range(64)]
    svg = ElementTree.fromstring(message_diagram(crowd))
    labels = [e for e in svg.iter("{http://www.w3.org/2000/svg}text") if e.get("class") == "msglabel"]
    arrows = [e for e in svg.iter("{http://www.w3.org/2000/svg}line") if e.get("class", "").startswith("msg")]
    rows = sorted(float(e.get("y")) for e in labels)
    assert len(rows) == 128 and all(b - a >= ROW for a, b in zip(rows, rows[1:]))
    assert all(float(a.get("y1")) < float(a.get("y2")) for a in arrows)  # a receipt after its sending
    for label, arrow in zip(labels, arrows):
        assert float(arrow.get("y1")) - float(label.get("y")) == 2


def test_the_page_is_self_contained_and_no_text_of_the_history_can_close_its_script():
    trace = Trace.load(REGRESSIONS / "sessions-8e972d4b4e3d.json")
    history = history_of(trace, IGNORES_START_POS.factory, "planted")
    history["note"] = "</script><script>alert(1)</script> & <b>"
    page = _parsed(render(history))
    assert page.outside == []
    assert len(page.scripts) == 2 and page.scripts[0] == {"type": "application/json", "id": "history"}
    assert json.loads(page.data["history"]) == json.loads(json.dumps(history))


def test_the_campaign_writes_a_timeline_beside_every_trace_it_saves(concurrent_trace):
    page = concurrent_trace.with_suffix(".html")
    assert page.exists()
    data = json.loads(_parsed(page.read_text(encoding="utf-8")).data["history"])
    assert data["machine"] == "concurrent" and data["failure"] is not None


def test_fakeshard_replay_html_writes_the_page_and_refuses_several_traces(concurrent_trace, tmp_path):
    out = tmp_path / "t.html"
    done = subprocess.run([sys.executable, "-m", "fakeshard", "replay", str(concurrent_trace), "--html", str(out)],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 1 and f"written to {out}" in done.stderr  # the planted coordinator fails again
    data = json.loads(_parsed(out.read_text(encoding="utf-8")).data["history"])
    assert data["failure"]["check"] == Trace.load(concurrent_trace).config["check"]
    two = subprocess.run([sys.executable, "-m", "fakeshard", "replay", str(concurrent_trace), str(concurrent_trace),
                          "--html", str(tmp_path / "u.html")], capture_output=True, text=True, cwd=ROOT)
    assert two.returncode == 2 and "--html writes one trace's timeline; 2 traces were given" in two.stderr
    assert not (tmp_path / "u.html").exists()
