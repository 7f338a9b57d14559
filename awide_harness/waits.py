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
import inspect
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast, overload

T = TypeVar("T")

POLL = 0.02         # how often a condition is checked, seconds


class WaitTimeout(AssertionError):
    """A condition did not hold in time (an AssertionError, so a test reports it as failed)."""

    def __init__(self, what: str, timeout: float, last: object) -> None:
        super().__init__(f"not within {timeout:g} s: {what}; last seen: {last!r}")
        self.what, self.timeout, self.last = what, timeout, last


@dataclass(frozen=True)
class _Failed:
    """The predicate raised an ``ignore``d error: a falsy round, the error its last value."""

    error: BaseException

    def __bool__(self) -> bool:
        return False


class _Rounds:
    """The bookkeeping both forms share: the deadline, the last value, ``check``."""

    def __init__(self, predicate: object, timeout: float, what: str,
                 check: Callable[[], object] | None) -> None:
        self.what = what or getattr(predicate, "__qualname__", repr(predicate))
        self.timeout, self.check = timeout, check
        self.deadline = time.monotonic() + timeout
        self.value: Any = None
        self.before_round()

    def before_round(self) -> None:
        if self.check is not None:
            self.check()

    def over(self, value: object) -> bool:
        """True when ``value`` ends the wait; WaitTimeout past the deadline."""
        self.value = value
        if value:
            return True
        if time.monotonic() > self.deadline:
            last = value.error if isinstance(value, _Failed) else value
            raise WaitTimeout(self.what, self.timeout, last)
        self.before_round()
        return False


def _call(predicate: Callable[[], Any], ignore: tuple[type[BaseException], ...]) -> Any:
    try:
        return predicate()
    except ignore as e:
        return _Failed(e)


async def _acall(predicate: Callable[[], Any], ignore: tuple[type[BaseException], ...]) -> Any:
    try:
        value = predicate()
        return await value if inspect.isawaitable(value) else value
    except ignore as e:
        return _Failed(e)


def wait_until_sync(predicate: Callable[[], T | None], timeout: float, what: str = "", *,
                    poll: float = POLL, ignore: tuple[type[BaseException], ...] = (),
                    check: Callable[[], object] | None = None) -> T:
    """``predicate``'s first truthy value; WaitTimeout after ``timeout`` seconds."""
    rounds = _Rounds(predicate, timeout, what, check)
    while not rounds.over(_call(predicate, ignore)):
        time.sleep(poll)
    return cast(T, rounds.value)


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
    rounds = _Rounds(predicate, timeout, what, check)
    while not rounds.over(await _acall(predicate, ignore)):
        await asyncio.sleep(poll)
    return rounds.value
