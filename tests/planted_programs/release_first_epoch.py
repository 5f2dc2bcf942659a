"""Planted: release is sent at the epoch the session started with, so after any re-route the
nodes answer stale_epoch, which the coordinator takes for "already released", and the
session's cache stays where it is."""

from __future__ import annotations

import sys

from fakeshard.testing import AsyncCoordinator
from fakeshard.testing.coordinator_program import main


class Planted(AsyncCoordinator):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.first: dict[str, int] = {}

    async def start(self, session_id, prompt) -> None:
        await super().start(session_id, prompt)
        self.first[session_id] = self.sessions[session_id].epoch

    async def _call(self, node, op, session_id, epoch) -> None:
        await super()._call(node, op, session_id, self.first.get(session_id, epoch) if op == "release" else epoch)


if __name__ == "__main__":
    sys.exit(main(coordinator=Planted))
