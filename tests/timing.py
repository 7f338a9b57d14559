"""Time in tests: one factor for every bound a test waits for or asserts.

``FACTOR`` (environment ``AWIDE_TEST_TIME_FACTOR``, default 2) multiplies every bound the
tests give a condition to hold in (``bound``): a wait gives up, or a "took less than" check
fails, only after ``bound(seconds)``. The default 2 lets a 2-core machine that runs a
benchmark beside the suite pass; a slower machine raises it (``AWIDE_TEST_TIME_FACTOR=4
make test``), a quiet one may lower it to 1 to see the design bounds themselves. Timing is
measured in bench/, never asserted tightly here; a bound that still fails under the factor
is a hang, not a slow machine.

Tests synchronise on conditions (``wait_until``), never on sleeps.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

FACTOR = float(os.environ.get("AWIDE_TEST_TIME_FACTOR", "2"))
POLL = 0.02         # how often a condition is checked, seconds


def bound(seconds: float) -> float:
    """A time bound of a test, scaled by ``FACTOR``."""
    return seconds * FACTOR


async def wait_until(condition: Callable[[], T | Awaitable[T]], within: float,
                     what: str = "") -> T:
    """The condition's first truthy value, checked every ``POLL`` s; AssertionError naming
    ``what`` when it does not hold within ``bound(within)``. ``condition`` may be async."""
    deadline = time.monotonic() + bound(within)
    while True:
        value = condition()
        if asyncio.iscoroutine(value) or isinstance(value, asyncio.Future):
            value = await value
        if value:
            return value        # type: ignore[return-value]
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {bound(within):g} s: {what or condition}")
        await asyncio.sleep(POLL)


def wait_until_sync(condition: Callable[[], T], within: float, what: str = "") -> T:
    """``wait_until`` for plain (non-async) tests."""
    deadline = time.monotonic() + bound(within)
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {bound(within):g} s: {what or condition}")
        time.sleep(POLL)
