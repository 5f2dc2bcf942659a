"""Planted: answers are handed to the next_token requests in the order the requests were
made, not to the session they belong to, so two sessions in flight get each other's tokens."""

from __future__ import annotations

import asyncio
import sys

from fakeshard.testing import AsyncCoordinator
from fakeshard.testing.coordinator_program import main


class Planted(AsyncCoordinator):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.waiting: list[asyncio.Future[int]] = []

    async def next_token(self, session_id: str) -> int:
        mine: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.waiting.append(mine)
        token = await super().next_token(session_id)
        self.waiting.pop(0).set_result(token)  # the oldest request waiting takes this answer
        return await mine


if __name__ == "__main__":
    sys.exit(main(coordinator=Planted))
