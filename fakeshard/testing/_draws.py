"""Draws that do not depend on what else the process imported.

Hypothesis (6.13x and later) mixes into its draws, with a small probability on each
choice, constants scraped from the source of every *local* module in ``sys.modules``
at that moment (``hypothesis.internal.conjecture.providers._get_local_constants``).
So a derandomized campaign draws differently in a process that imported other local
modules first: a script and a pytest run, two xdist workers, or the same test after
a different set of tests.  A campaign of the kit is meant to replay exactly, so while
a machine runs, :func:`stable_draws` pins that pool to empty (Hypothesis's global
constants still apply).  Where the Hypothesis in use has no such pool, it does nothing.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from typing import Any, Callable, Iterator, Optional, Sequence

__all__ = ["draw_one", "search_until_found", "stable_draws"]

_lock = threading.Lock()
_depth = 0
_original: Any = None


@contextlib.contextmanager
def stable_draws() -> Iterator[None]:
    """Run the body with Hypothesis's pool of local-module constants empty (re-entrant)."""
    global _depth, _original
    try:
        from hypothesis.internal.conjecture import providers
    except ImportError:  # pragma: no cover - another Hypothesis layout: nothing to pin
        yield
        return
    getter = getattr(providers, "_get_local_constants", None)
    constants = getattr(providers, "Constants", None)
    cache = getattr(providers, "CONSTANTS_CACHE", None)
    if getter is None or constants is None or cache is None:  # pragma: no cover
        yield
        return
    empty = constants()
    with _lock:
        if _depth == 0:
            _original = getter
            providers._get_local_constants = lambda: empty
            cache.cache.clear()  # allowed constants computed from the old pool
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                providers._get_local_constants = _original
                cache.cache.clear()


def search_until_found(search: Callable[[], None], found: list[Any], seed: Optional[int] = None) -> None:
    """Run the Hypothesis test ``search``, which appends its first failing example to ``found``
    and raises to stop the search, under :func:`stable_draws` (and ``seed``, if given).  An
    exception with nothing found is the search's own error, and propagates."""
    if seed is not None:
        from hypothesis import seed as hypothesis_seed

        search = hypothesis_seed(seed)(search)
    try:
        with stable_draws():
            search()
    except Exception:
        if not found:
            raise


@functools.lru_cache(maxsize=4096)
def _sampled(items: tuple[Any, ...]) -> Any:
    from hypothesis import strategies as st

    return st.sampled_from(items)


def draw_one(data: Any, items: Sequence[Any]) -> Any:
    """``data.draw(st.sampled_from(items))``, drawing exactly what it draws, over one strategy per
    tuple of ``items``: Hypothesis validates a strategy object at its first draw, and a new one at
    every draw (a rule choosing among the open sessions) was 6% of a sound coordinator's campaign
    in a profile (no gain was measured beyond the noise of a loaded machine)."""
    return data.draw(_sampled(tuple(items)))
