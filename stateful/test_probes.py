"""A ci campaign must reach every contract row, error code and fault kind (the test lives in the kit)."""

from __future__ import annotations

from fakeshard.testing.suite import test_ci_campaign_reaches_every_probe

__all__ = ["test_ci_campaign_reaches_every_probe"]
