"""Ctrl-C and SIGTERM for the CLI's refresh loops (``status --watch``, the demo's live view).

A signal sets an event that the loop checks between steps and races against the step in
progress, instead of relying on ``asyncio.run`` cancelling the main task: a cancellation can be
lost inside a library's timeout or hedged read (a request completing at the moment of the
cancel), and a lost one left the loop refreshing until killed. The event cannot be lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupt:
    """SIGINT/SIGTERM as an event; create it inside the running loop, ``close()`` when done."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        for sig in SIGNALS:
            self._loop.add_signal_handler(sig, self.event.set)

    @property
    def requested(self) -> bool:
        return self.event.is_set()

    async def race(self, step: Awaitable[T]) -> T | None:
        """The step's result, or None when a signal came first (the step is then cancelled
        and awaited, so nothing is left running)."""
        task = asyncio.ensure_future(step)
        stop = asyncio.ensure_future(self.event.wait())
        try:
            await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not task.done():
                task.cancel()
            await asyncio.gather(task, stop, return_exceptions=True)
        if self.requested and not (task.done() and not task.cancelled()
                                   and task.exception() is None):
            return None
        return task.result()

    async def pause(self, seconds: float) -> bool:
        """Wait ``seconds`` or until a signal; True when a signal came."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self.event.wait()
        return self.requested

    def close(self) -> None:
        for sig in SIGNALS:
            self._loop.remove_signal_handler(sig)
