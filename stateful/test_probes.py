"""A ci campaign must reach every contract row, error code and fault kind (the test lives in the kit)."""

from __future__ import annotations

import pytest

from fakeshard.testing.suite import test_ci_campaign_reaches_every_probe

__all__ = ["test_ci_campaign_reaches_every_probe"]

# Under ``pytest -n N`` the machines and the probe check run on one worker, in order, so the
# probe check adds up what the machines reached there instead of running them again.
pytestmark = pytest.mark.xdist_group("campaign")
