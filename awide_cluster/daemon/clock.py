"""The clock the daemon reads, passed in so tests can drive time by hand.

``monotonic()`` measures intervals on this host (lease confirmation, poll pacing); ``wall()``
is only ever written into documents for people to read (``since``, ``changed_at``): no decision
compares wall clocks across hosts.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def wall(self) -> str: ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> str:
        return datetime.now(UTC).isoformat(timespec="seconds")

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))
