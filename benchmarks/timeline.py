"""How long a timeline page takes to draw in a real browser, at 10,000 calls.

Builds seeded histories shaped like a busy concurrent run (64 sessions, 8 nodes, calls that
overlap, faults and nemesis marks, one failing check), writes each page with
``fakeshard.testing._view.render``, opens it in headless Chromium (``tools/browser.py``) and
prints the time the page's own script took to draw it (``performance.now()`` around the
drawing, read back from ``window.fakeshardTimeline``), the page's size, and the time a hover
takes to show its tooltip.  The baseline is a 100-call page drawn in the same browser.

    python3 benchmarks/timeline.py            # 100 and 10,000 calls
    python3 benchmarks/timeline.py 50000      # and any other sizes

Needs Chromium, its driver and Selenium (see ``tools/browser.py``).
"""

from __future__ import annotations

import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fakeshard.testing._view import _Builder, render  # noqa: E402
from tools.browser import browser, console_errors, missing  # noqa: E402

SESSIONS, NODES = 64, 8


def history(calls: int, seed: int = 0) -> dict:
    """A seeded history of ``calls`` calls: half client requests on session tracks, half node calls."""
    rng = random.Random(seed)
    b = _Builder(f"benchmark history of {calls} calls", "concurrent", "virtual second")
    t = 0.0
    for i in range(calls):
        t += rng.expovariate(200.0)
        span = rng.uniform(0.002, 0.05)
        outcome = rng.choices(["ok", "cache_miss", "engine_crashed", "response_lost"], [90, 4, 4, 2])[0]
        if i % 2:
            track = b.track("session", f"s{rng.randrange(SESSIONS)}")
        else:
            track = b.track("node", str(rng.randrange(NODES)))
        b.call(track, round(t, 6), None if outcome == "response_lost" else round(t + span, 6),
               rng.choice(["prefill", "decode", "release"]), outcome, {"call": i, "epoch": rng.randrange(3)})
        if rng.random() < 0.01:
            b.mark(round(t, 6), rng.choice(["fault", "nemesis", "epoch"]), f"event at call {i}")
    b.fail("a planted failure", round(t, 6), calls - 1, "stream")
    b.data["end"] = t + 0.05
    return b.data


def measure(driver, page: Path, repeats: int = 3) -> tuple[float, float]:
    """Median milliseconds to draw ``page``, and to show a tooltip after a hover."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    draws, hovers = [], []
    for _ in range(repeats):
        driver.get(page.resolve().as_uri())
        errors = console_errors(driver)
        if errors:
            raise SystemExit(f"{page}: console errors: {errors}")
        draws.append(driver.execute_script("return window.fakeshardTimeline.renderMs"))
        call = driver.find_element(By.ID, "failed-call")
        driver.execute_script("arguments[0].scrollIntoView({block: 'center', inline: 'center'})", call)
        started = time.perf_counter()
        ActionChains(driver).move_to_element(call).perform()
        if not driver.find_element(By.ID, "tooltip").is_displayed():
            raise SystemExit(f"{page}: hovering a call showed no tooltip")
        hovers.append((time.perf_counter() - started) * 1000)
    return statistics.median(draws), statistics.median(hovers)


def main(sizes: list[int]) -> None:
    why = missing()
    if why is not None:
        raise SystemExit(f"needs {why}")
    with tempfile.TemporaryDirectory() as tmp, browser() as driver:
        figures = {}
        for n in [100] + sizes:
            page = Path(tmp, f"t{n}.html")
            page.write_text(render(history(n)), encoding="utf-8")
            figures[n] = (*measure(driver, page), page.stat().st_size)
        base = figures[100][0]
        print(f"timeline pages in headless Chromium (median of 3 loads); baseline: 100 calls, {base:.1f} ms")
        print(f"{'calls':>7} {'draw ms':>9} {'x base':>7} {'hover ms':>9} {'page KB':>8}")
        for n, (draw, hover, size) in figures.items():
            print(f"{n:>7} {draw:>9.1f} {draw / base:>7.1f} {hover:>9.1f} {size / 1024:>8.0f}")
        print("hover ms is the WebDriver round trip of one hover, an upper bound on the page's own work")


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [10_000])
