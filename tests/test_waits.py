"""The one wait loop: its value, what it says on timeout, ignored errors, ``check``."""

from __future__ import annotations

import itertools

import pytest

from awide_harness.waits import WaitTimeout, wait_until, wait_until_sync


def test_the_first_truthy_value_is_returned():
    n = itertools.count()
    assert wait_until_sync(lambda: next(n) >= 3 and "done", 5.0, poll=0.001) == "done"


def test_a_timeout_names_what_and_the_last_value():
    with pytest.raises(WaitTimeout) as err:
        wait_until_sync(lambda: 0, 0.05, "the answer", poll=0.01)
    assert "the answer" in str(err.value) and "last seen: 0" in str(err.value)
    assert isinstance(err.value, AssertionError) and err.value.last == 0


def test_ignored_errors_are_retried_and_reported():
    calls = itertools.count()

    def flaky() -> bool:
        if next(calls) < 2:
            raise OSError("not yet")
        return True

    assert wait_until_sync(flaky, 5.0, poll=0.001, ignore=(OSError,)) is True
    with pytest.raises(WaitTimeout) as err:
        wait_until_sync(lambda: 1 / 0, 0.02, "division", poll=0.01, ignore=(ZeroDivisionError,))
    assert isinstance(err.value.last, ZeroDivisionError)
    with pytest.raises(ZeroDivisionError):           # not ignored: raised at once
        wait_until_sync(lambda: 1 / 0, 5.0)


def test_check_gives_up_early():
    def gone() -> None:
        raise RuntimeError("the process exited")

    with pytest.raises(RuntimeError, match="exited"):
        wait_until_sync(lambda: False, 60.0, check=gone)


async def test_the_async_form_takes_sync_and_async_predicates():
    n = itertools.count()

    async def later() -> int | None:
        v = next(n)
        return v if v >= 2 else None

    assert await wait_until(later, 5.0, poll=0.001) == 2
    assert await wait_until(lambda: "now", 5.0) == "now"
    with pytest.raises(WaitTimeout, match="never"):
        await wait_until(lambda: None, 0.02, "never", poll=0.01)
