"""The pages in a real browser: headless Chromium (Debian's, driven by Selenium) opens a
timeline of each kind of history and the evidence page, and checks what a person would see.

Each page is also saved as a screenshot: into ``$FAKESHARD_SCREENSHOTS`` when set (the
evidence folder's ``screenshots/`` is made so: ``python3 -m tools.evidence``), else the test's
own folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fakeshard import FakeShardEngine
from fakeshard.testing._registry import history_of
from fakeshard.testing._trace import Trace
from fakeshard.testing._view import write_html
from tests.test_view import IGNORES_START_POS, REGRESSIONS, concurrent_trace  # noqa: F401 (a fixture)
from tools import browser as chromium

pytestmark = pytest.mark.skipif(chromium.missing() is not None, reason=f"needs {chromium.missing()}")


@pytest.fixture(scope="module")
def driver():
    with chromium.browser() as d:
        yield d


def _shots(tmp_path: Path) -> Path:
    chosen = os.environ.get("FAKESHARD_SCREENSHOTS")
    where = Path(chosen) if chosen else tmp_path
    where.mkdir(parents=True, exist_ok=True)
    return where


def _open(driver, page: Path) -> dict:
    chromium.console_errors(driver)  # forget what an earlier page logged
    driver.get(page.resolve().as_uri())
    assert chromium.console_errors(driver) == []
    drawn = driver.execute_script("return window.fakeshardTimeline")
    assert drawn is not None, "the page's script did not finish"
    return drawn


def _hover_shows_the_tooltip(driver, call) -> str:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    tip = driver.find_element(By.ID, "tooltip")
    assert not tip.is_displayed()
    driver.execute_script("arguments[0].scrollIntoView({block: 'center', inline: 'center'})", call)
    ActionChains(driver).move_to_element(call).perform()
    assert tip.is_displayed()
    return tip.text


#: Every call's label as a person sees it without hovering: whole inside its bar, or just after
#: it; what is cut, and any two boxes of one row (bars, labels) that overlap.
_LABELS = """
const problems = [];
let shown = 0;
for (const row of document.querySelectorAll('#timeline .row')) {
  const boxes = [];
  for (const el of row.querySelectorAll('.call, .calllabel')) {
    const r = el.getBoundingClientRect();
    if (el.classList.contains('calllabel') || el.textContent) shown += 1;
    if (el.classList.contains('call') && el.textContent && el.scrollWidth > el.clientWidth + 1)
      problems.push('cut: ' + el.textContent);
    if (el.classList.contains('call') && !el.textContent && !row.querySelector(`.calllabel[data-i="${el.dataset.i}"]`))
      problems.push('no label: call ' + el.dataset.i);
    boxes.push([r, el.className + ' ' + el.dataset.i]);
  }
  for (let a = 0; a < boxes.length; a++) for (let b = a + 1; b < boxes.length; b++) {
    const [p, n] = boxes[a], [q, m] = boxes[b];
    if (p.left < q.right - 0.5 && q.left < p.right - 0.5 && p.top < q.bottom - 0.5 && q.top < p.bottom - 0.5)
      problems.push('overlap: ' + n + ' / ' + m);
  }
}
return [shown, problems.slice(0, 10)];
"""


def _labels_show_whole(driver, calls: int) -> None:
    shown, problems = driver.execute_script(_LABELS)
    assert problems == [] and shown == calls


def test_a_failing_sequential_trace_shows_its_tracks_its_failure_and_a_tooltip(driver, tmp_path):
    from selenium.webdriver.common.by import By

    trace = Trace.load(REGRESSIONS / "sessions-8e972d4b4e3d.json")
    history = history_of(trace, IGNORES_START_POS.factory, "planted")
    page = write_html(history, tmp_path / "sessions.html")
    drawn = _open(driver, page)
    assert drawn["calls"] == len(trace.steps)
    _labels_show_whole(driver, len(history["calls"]))
    rows = driver.find_elements(By.CSS_SELECTOR, "#timeline .row")
    assert len(rows) == len(history["tracks"]) + 1  # and the annotations track
    failure = driver.find_element(By.ID, "failure")
    assert failure.is_displayed() and history["failure"]["message"][:40] in failure.text
    failed = driver.find_element(By.ID, "failed-call")
    assert int(failed.get_attribute("data-i")) == history["failure"]["call"]
    text = _hover_shows_the_tooltip(driver, failed)
    assert "first failing check" in text and "model before" in text and "model after" in text
    driver.save_screenshot(str(_shots(tmp_path) / "timeline-sessions.png"))


def test_a_non_linearizable_history_shows_the_partial_linearization_and_the_stuck_calls(driver, tmp_path):
    from selenium.webdriver.common.by import By

    trace = Trace.load(REGRESSIONS / "parallel-a26abcd2e9ba.json")
    from importlib import import_module

    module, name = trace.engine_factory.split(":")
    history = history_of(trace, getattr(import_module(module), name), trace.engine_factory)
    page = write_html(history, tmp_path / "parallel.html")
    _open(driver, page)
    lin = history["linearization"]
    assert len(driver.find_elements(By.CSS_SELECTOR, "#linear-order li")) == len(lin["order"])
    stuck = driver.find_elements(By.CSS_SELECTOR, "#stuck-calls li")
    assert len(stuck) == max(1, len(lin["stuck"]))
    assert len(driver.find_elements(By.CSS_SELECTOR, ".row.branch")) == len(
        {s["branch"] for s in trace.steps})
    first = driver.find_element(By.CSS_SELECTOR, ".call.stuck")
    assert "could not go next" in _hover_shows_the_tooltip(driver, first)
    driver.save_screenshot(str(_shots(tmp_path) / "timeline-parallel.png"))


def test_a_concurrent_trace_shows_sessions_nodes_marks_and_the_message_diagram(driver, tmp_path, concurrent_trace):  # noqa: F811
    from selenium.webdriver.common.by import By

    history = history_of(Trace.load(concurrent_trace), FakeShardEngine, "fakeshard:FakeShardEngine")
    page = write_html(history, tmp_path / "concurrent.html")
    drawn = _open(driver, page)
    _labels_show_whole(driver, len(history["calls"]))
    assert drawn["outsideLabels"] > 0  # calls too short for their labels: each shown after its bar
    assert driver.find_elements(By.CSS_SELECTOR, ".row.session") and driver.find_elements(By.CSS_SELECTOR, ".row.node")
    assert len(driver.find_elements(By.CSS_SELECTOR, ".row.annotations .mark")) == len(history["marks"])
    svg = driver.find_element(By.CSS_SELECTOR, "#messages-section svg")
    assert svg.is_displayed()
    assert len(driver.find_elements(By.CSS_SELECTOR, "#messages-section line.msg")) == len(history["messages"])
    assert driver.find_element(By.ID, "failure").is_displayed()
    call = driver.find_elements(By.CSS_SELECTOR, ".row.node .call")[0]
    assert history["calls"][int(call.get_attribute("data-i"))]["label"] in _hover_shows_the_tooltip(driver, call)
    driver.save_screenshot(str(_shots(tmp_path) / "timeline-concurrent.png"))


def test_the_evidence_page_shows_its_table_and_charts(driver, tmp_path):
    from selenium.webdriver.common.by import By

    from tests.test_evidence import ROOT as root
    from tests.test_evidence import _page_result
    from tools.evidence import EVIDENCE_ROOT, render_page

    result = _page_result()
    page = tmp_path / "index.html"
    page.write_text(render_page(result, root=root, argv=["--profile", "ci"],
                                coverage_json=root / EVIDENCE_ROOT / "fixture" / "coverage.json"), encoding="utf-8")
    chromium.console_errors(driver)
    driver.get(page.resolve().as_uri())
    assert chromium.console_errors(driver) == []
    assert len(driver.find_elements(By.CSS_SELECTOR, "#run-table tr")) == 1 + len(result.machines)
    for chart in ("probes-chart", "faults-chart", "coverage-chart"):
        svg = driver.find_element(By.ID, chart)
        assert svg.is_displayed() and svg.size["height"] > 10, chart
    assert len(driver.find_elements(By.CSS_SELECTOR, "#probes-chart g.bar")) == len(result.machines)
    driver.save_screenshot(str(_shots(tmp_path) / "evidence-page.png"))
