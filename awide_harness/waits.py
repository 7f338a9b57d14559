"""The one wait loop of the harness, the tests and the benchmarks.

``wait_until_sync(predicate, timeout, what=...)`` calls ``predicate`` every ``poll`` seconds
until it returns a truthy value and returns that value; after ``timeout`` seconds it raises
``WaitTimeout`` naming ``what`` and the last value seen (or the last error, with
``ignore``). ``wait_until`` is the same for async code (``predicate`` may be async).
``check``, called before each round, may raise to give up early (a process that exited).

A caller that wants ``None`` instead of an error catches ``WaitTimeout``. Nothing else here
sleeps: a wait is a condition polled, never a fixed pause.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

T = TypeVar("T")

POLL = 0.02         # how often a condition is checked, seconds


class WaitTimeout(AssertionError):
    """A condition did not hold in time (an AssertionError, so a test reports it as failed)."""

    def __init__(self, what: str, timeout: float, last: object) -> None:
        super().__init__(f"not within {timeout:g} s: {what}; last seen: {last!r}")
        self.what, self.timeout, self.last = what, timeout, last


def _name(predicate: object, what: str) -> str:
    return what or getattr(predicate, "__qualname__", repr(predicate))


def wait_until_sync(predicate: Callable[[], T | None], timeout: float, what: str = "", *,
                    poll: float = POLL, ignore: tuple[type[BaseException], ...] = (),
                    check: Callable[[], object] | None = None) -> T:
    """``predicate``'s first truthy value; WaitTimeout after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        if check is not None:
            check()
        try:
            value = predicate()
        except ignore as e:
            last = e
        else:
            if value:
                return value
            last = value
        if time.monotonic() > deadline:
            raise WaitTimeout(_name(predicate, what), timeout, last)
        time.sleep(poll)


@overload
async def wait_until(predicate: Callable[[], Awaitable[T | None]], timeout: float,
                     what: str = "", *,
                     poll: float = ..., ignore: tuple[type[BaseException], ...] = ...,
                     check: Callable[[], object] | None = ...) -> T: ...
@overload
async def wait_until(predicate: Callable[[], T | None], timeout: float, what: str = "", *,
                     poll: float = ..., ignore: tuple[type[BaseException], ...] = ...,
                     check: Callable[[], object] | None = ...) -> T: ...
async def wait_until(predicate: Callable[[], Any], timeout: float, what: str = "", *,
                     poll: float = POLL, ignore: tuple[type[BaseException], ...] = (),
                     check: Callable[[], object] | None = None) -> Any:
    """``wait_until_sync`` for async code: ``predicate`` may return an awaitable."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        if check is not None:
            check()
        try:
            value: Any = predicate()
            if asyncio.iscoroutine(value) or isinstance(value, asyncio.Future):
                value = await value
        except ignore as e:
            last = e
        else:
            if value:
                return value
            last = value
        if time.monotonic() > deadline:
            raise WaitTimeout(_name(predicate, what), timeout, last)
        await asyncio.sleep(poll)
