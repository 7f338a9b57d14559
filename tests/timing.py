"""Time in tests: one factor for every bound a test waits for or asserts.

``FACTOR`` (environment ``AWIDE_TEST_TIME_FACTOR``, default 2) multiplies every bound the
tests give a condition to hold in (``bound``): a wait gives up, or a "took less than" check
fails, only after ``bound(seconds)``. The default 2 lets a 2-core machine that runs a
benchmark beside the suite pass; a slower machine raises it (``AWIDE_TEST_TIME_FACTOR=4
make test``), a quiet one may lower it to 1 to see the design bounds themselves. Timing is
measured in bench/, never asserted tightly here; a bound that still fails under the factor
is a hang, not a slow machine.

Tests synchronise on conditions (``wait_until``: the harness's one wait loop,
``awide_harness.waits``, with the bound scaled), never on sleeps.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

from awide_harness import waits
from awide_harness.waits import POLL, WaitTimeout

__all__ = ["FACTOR", "POLL", "WaitTimeout", "bound", "wait_until", "wait_until_sync"]

T = TypeVar("T")

FACTOR = float(os.environ.get("AWIDE_TEST_TIME_FACTOR", "2"))


def bound(seconds: float) -> float:
    """A time bound of a test, scaled by ``FACTOR``."""
    return seconds * FACTOR


@overload
async def wait_until(condition: Callable[[], Awaitable[T | None]], timeout: float = ...,
                     what: str = "") -> T: ...
@overload
async def wait_until(condition: Callable[[], T | None], timeout: float = ...,
                     what: str = "") -> T: ...
async def wait_until(condition: Callable[[], Any], timeout: float = 10.0, what: str = "") -> Any:
    """The condition's first truthy value; WaitTimeout (an AssertionError) naming ``what`` and
    the last value when it does not hold within ``bound(timeout)``. May be async."""
    return await waits.wait_until(condition, bound(timeout), what)


def wait_until_sync(condition: Callable[[], T | None], timeout: float = 10.0,
                    what: str = "") -> T:
    """``wait_until`` for plain (non-async) tests."""
    return waits.wait_until_sync(condition, bound(timeout), what)
