"""Hypothesis profiles for the machines: ``dev`` (fast), ``ci`` (derandomized), ``thorough``,
and ``mutate`` (derandomized, short, no shrinking: a mutant's run stops at its first failure).

Each is registered as ``fakeshard-dev``, ``fakeshard-ci``, ``fakeshard-thorough`` and ``fakeshard-mutate``,
so that installing the kit never replaces a project's own profiles (Hypothesis has
a ``ci`` profile of its own, loaded by default wherever ``CI`` is set).  Choose one
with ``FAKESHARD_PROFILE=NAME`` (the short name) or
``--hypothesis-profile fakeshard-NAME``.  The fakeshard checkout also registers the
short names (its ``conftest.py``), so ``--hypothesis-profile ci`` works there.
"""

from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, Phase, settings

__all__ = ["PREFIX", "PROFILES", "default_profile", "get", "is_ci", "load", "load_default", "reduces_failures",
           "register_short_names"]

PROFILES = ("dev", "ci", "thorough", "mutate")
PREFIX = "fakeshard-"

#: Hypothesis's own defaults.  Where the environment variable CI is set, Hypothesis makes its
#: built-in derandomized ``ci`` profile the default, and a profile built on the default
#: would inherit ``derandomize=True`` and no database; ``dev`` and ``thorough`` stay random
#: (and keep an example database) wherever they run.
_BASE = settings.get_profile("default")

#: Steps per machine run and examples per machine, by profile.
_SETTINGS: dict[str, dict[str, Any]] = {
    "dev": dict(parent=_BASE, max_examples=40, stateful_step_count=30, deadline=None,
                suppress_health_check=[HealthCheck.too_slow]),
    "ci": dict(max_examples=500, stateful_step_count=80, deadline=None, derandomize=True,
               database=None, print_blob=False, suppress_health_check=[HealthCheck.too_slow]),
    "thorough": dict(parent=_BASE, max_examples=2000, stateful_step_count=80, deadline=None,
                     suppress_health_check=[HealthCheck.too_slow]),
    # ``python3 -m tools.mutate``: every mutant runs the machines under this profile.  No shrinking
    # (a mutant is judged by whether it fails, not by its smallest counterexample), and
    # derandomized, so every mutant meets the same interleavings.
    "mutate": dict(max_examples=25, stateful_step_count=25, deadline=None, derandomize=True,
                   database=None, print_blob=False, phases=(Phase.explicit, Phase.generate),
                   suppress_health_check=list(HealthCheck)),
}
for _name, _kwargs in _SETTINGS.items():
    settings.register_profile(PREFIX + _name, **_kwargs)


def register_short_names() -> None:
    """Register the profiles under their short names too (``dev``, ``ci``, ``thorough``)."""
    for name, kwargs in _SETTINGS.items():
        settings.register_profile(name, **kwargs)


def is_ci() -> bool:
    """Whether the loaded profile is the kit's ``ci`` profile (by either name)."""
    return settings.get_current_profile_name() in ("ci", PREFIX + "ci")


def reduces_failures() -> bool:
    """Whether the loaded profile wants failing traces reduced (every profile but ``mutate``,
    whose runs are judged by whether they fail, not by their smallest counterexample)."""
    return settings.get_current_profile_name() not in ("mutate", PREFIX + "mutate")


def default_profile() -> str:
    """``$FAKESHARD_PROFILE``, else ``ci`` where ``CI`` is set, else ``dev``."""
    chosen = os.environ.get("FAKESHARD_PROFILE")
    if chosen:
        if chosen not in PROFILES:
            raise ValueError(f"FAKESHARD_PROFILE={chosen!r} is not one of {PROFILES}")
        return chosen
    return "ci" if os.environ.get("CI") else "dev"


def get(name: str) -> settings:
    """The kit's profile ``name`` (a short name) as a settings object."""
    if name not in PROFILES:
        raise ValueError(f"profile {name!r} is not one of {PROFILES}")
    return settings.get_profile(PREFIX + name)


def load(name: str) -> None:
    """Load the kit's profile ``name`` (a short name)."""
    get(name)  # refuses an unknown name
    settings.load_profile(PREFIX + name)


def load_default() -> str:
    """Load :func:`default_profile` under its short name (the checkout's behaviour)."""
    register_short_names()
    name = default_profile()
    settings.load_profile(name)
    return name
