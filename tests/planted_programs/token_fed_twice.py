"""Planted: after a decode's answer is lost, the coordinator takes the token as fed twice
(once by the lost call, once to come) and keeps it twice in the history it replays."""

from __future__ import annotations

import sys

from fakeshard import ResponseLost
from fakeshard.testing import AsyncCoordinator
from fakeshard.testing.coordinator_program import main


class Planted(AsyncCoordinator):
    async def _recover(self, s, failed) -> None:
        if isinstance(failed.error, ResponseLost) and not s.needs_replay and s.generated:
            s.generated.append(s.generated[-1])
        await super()._recover(s, failed)


if __name__ == "__main__":
    sys.exit(main(coordinator=Planted))
