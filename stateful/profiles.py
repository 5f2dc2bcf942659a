"""Hypothesis profiles for the suite: ``dev`` (fast), ``ci`` (derandomized), ``thorough``.

Choose one with ``--hypothesis-profile NAME`` or ``FAKESHARD_PROFILE=NAME``;
without either, ``ci`` when the environment variable ``CI`` is set, else ``dev``.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

#: Hypothesis's own defaults.  Where the environment variable CI is set, Hypothesis makes its
#: built-in derandomized ``ci`` profile the default, and a profile built on the default
#: would inherit ``derandomize=True`` and no database; ``dev`` and ``thorough`` stay random
#: (and keep an example database) wherever they run.
_BASE = settings.get_profile("default")

#: Steps per machine run and examples per machine, by profile.
settings.register_profile(
    "dev", parent=_BASE, max_examples=40, stateful_step_count=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "ci", max_examples=500, stateful_step_count=80, deadline=None, derandomize=True,
    database=None, print_blob=False, suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "thorough", parent=_BASE, max_examples=2000, stateful_step_count=80, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

PROFILES = ("dev", "ci", "thorough")


def default_profile() -> str:
    chosen = os.environ.get("FAKESHARD_PROFILE")
    if chosen:
        if chosen not in PROFILES:
            raise ValueError(f"FAKESHARD_PROFILE={chosen!r} is not one of {PROFILES}")
        return chosen
    return "ci" if os.environ.get("CI") else "dev"


def load_default() -> str:
    name = default_profile()
    settings.load_profile(name)
    return name
