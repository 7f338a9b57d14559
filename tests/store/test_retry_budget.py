"""The retry budget of hedged reads, counted in requests (no clock): at most ``start + ratio *
calls`` extra requests over any run of calls, and a hedge left out when the budget is empty;
no hedge while the client's own event loop runs late."""

from __future__ import annotations

import asyncio
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from awide_cluster.store.errors import Timeout, Unavailable
from awide_cluster.store.hedge import EndpointRing, RetryBudget, hedged, lagging
from awide_cluster.store.transport import EtcdUnreachable


@given(st.lists(st.integers(min_value=0, max_value=3), max_size=400),
       st.sampled_from([0.0, 0.05, 0.1, 0.5]), st.integers(min_value=1, max_value=20))
def test_extra_requests_never_exceed_the_burst_plus_the_ratio_of_calls(
        wants: list[int], ratio: float, burst: int) -> None:
    b = RetryBudget(ratio=ratio, burst=float(burst), start=float(burst))
    for n, extra in enumerate(wants, start=1):
        b.call()
        for _ in range(extra):
            b.spend()
        assert b.extra <= burst + ratio * n + 1e-9
        assert 0.0 <= b.tokens <= burst
    assert b.extra + b.refused == sum(wants)


def test_a_new_client_has_two_extra_requests_then_one_per_ten_calls() -> None:
    b = RetryBudget()                       # the defaults: two to start, then 10 % of calls
    assert [b.spend() for _ in range(3)] == [True, True, False]
    granted = 0
    for _ in range(100):
        b.call()
        granted += b.spend()
    assert granted == 10 and b.extra == 12 and b.refused == 91


def test_unused_calls_save_up_to_the_burst() -> None:
    b = RetryBudget()
    for _ in range(1000):
        b.call()
    assert b.tokens == 10.0
    assert sum(b.spend() for _ in range(12)) == 10


def test_a_bad_budget_is_refused() -> None:
    with pytest.raises(ValueError):
        RetryBudget(ratio=-0.1)
    with pytest.raises(ValueError):
        RetryBudget(burst=0.5)
    with pytest.raises(ValueError):
        RetryBudget(burst=2.0, start=3.0)


class Members:
    """Attempts counted per member: ``a`` never answers, the others answer at once (or with
    ``errors``)."""

    def __init__(self, errors: dict[str, Exception] | None = None) -> None:
        self.asked: list[str] = []
        self.errors = errors or {}

    async def attempt(self, ep: str) -> str:
        self.asked.append(ep)
        if ep in self.errors:
            raise self.errors[ep]
        if ep == "a":
            await asyncio.Event().wait()
        return ep


async def call(members: Members, budget: RetryBudget | None, timeout: float = 0.3) -> str:
    loop = asyncio.get_running_loop()
    _, answer = await hedged(members.attempt, EndpointRing(("a", "b", "c")), 0.01,
                             loop.time() + timeout, "get", budget=budget)
    return answer


async def test_a_slow_member_is_hedged_while_the_budget_holds_a_request() -> None:
    budget = RetryBudget(ratio=0.0, burst=1.0)
    members = Members()
    assert await call(members, budget) == "b"
    assert members.asked == ["a", "b"] and budget.extra == 1


async def test_no_hedge_is_sent_when_the_budget_is_empty() -> None:
    budget = RetryBudget(ratio=0.0, burst=1.0)
    budget.spend()
    members = Members()
    with pytest.raises(Timeout):
        await call(members, budget, timeout=0.1)
    assert members.asked == ["a"] and budget.refused == 1


async def test_a_member_silent_until_the_deadline_is_no_longer_preferred() -> None:
    empty = RetryBudget(ratio=0.0, burst=1.0)
    empty.spend()
    members = Members()
    ring = EndpointRing(("a", "b", "c"))
    loop = asyncio.get_running_loop()
    with pytest.raises(Timeout):
        await hedged(members.attempt, ring, 0.01, loop.time() + 0.1, "get", budget=empty)
    assert ring.preferred == "b"
    _, answer = await hedged(members.attempt, ring, 0.01, loop.time() + 0.1, "get",
                             budget=empty)
    assert answer == "b" and members.asked == ["a", "b"]


async def test_an_error_answer_is_retried_only_from_the_budget() -> None:
    members = Members({"a": Unavailable("etcd: too many requests")})
    empty = RetryBudget(ratio=0.0, burst=1.0)
    empty.spend()
    with pytest.raises(Unavailable):
        await call(members, empty)
    assert members.asked == ["a"]
    members.asked.clear()
    assert await call(members, RetryBudget(ratio=0.0, burst=1.0)) == "b"
    assert members.asked == ["a", "b"]


async def test_a_connection_never_made_moves_on_free() -> None:
    members = Members({"a": EtcdUnreachable("a: connection refused")})
    empty = RetryBudget(ratio=0.0, burst=1.0)
    empty.spend()
    assert await call(members, empty) == "b"
    assert members.asked == ["a", "b"] and empty.extra == 1


async def test_a_new_client_reaches_the_third_member_past_a_frozen_and_a_lagging_one() -> None:
    # a frozen first member (hedged after the delay) and a second that answers below a
    # revision the client has seen (an error answer): the default budget pays for both
    members = Members({"b": Unavailable("b: answered at revision 7, below revision 8")})
    budget = RetryBudget()
    budget.call()
    assert await call(members, budget) == "c"
    assert members.asked == ["a", "b", "c"] and budget.extra == 2


def test_a_wait_resumed_later_than_a_hedge_delay_is_the_clients_lag() -> None:
    assert lagging(asked=10.0, woke=10.2, hedge_after=0.05)
    assert not lagging(asked=10.0, woke=10.04, hedge_after=0.05)
    assert not lagging(asked=10.0, woke=11.0, hedge_after=0.0)    # hedging at once: never


async def test_no_hedge_is_sent_while_the_clients_own_loop_runs_late() -> None:
    # the first member answers, but this client's event loop is busy past the hedge delay
    # (a CPU-bound step) and the answer needs a few more turns of the loop to be read: the
    # hedge is put off (not paid), the first member's answer is taken
    asked: list[str] = []

    async def attempt(ep: str) -> str:
        asked.append(ep)
        if ep == "a":
            await asyncio.sleep(0)
            busy_until = time.monotonic() + 0.3
            while time.monotonic() < busy_until:    # the loop is busy, not waiting
                pass
            for _ in range(3):
                await asyncio.sleep(0)
        return ep

    budget = RetryBudget()
    loop = asyncio.get_running_loop()
    _, answer = await hedged(attempt, EndpointRing(("a", "b", "c")), 0.05, loop.time() + 2.0,
                             "get", budget=budget)
    assert answer == "a" and asked == ["a"]
    assert budget.extra == 0 and budget.deferred >= 1


async def test_a_deadline_a_silent_member_let_pass_is_not_the_clients_lateness() -> None:
    # the member never answers and this client's loop waits (keeps time): the Timeout says the
    # loop woke about on time (the caller must not take a silent member for a late client)
    empty = RetryBudget(ratio=0.0, burst=1.0)
    empty.spend()
    with pytest.raises(Timeout) as silent:
        await call(Members(), empty, timeout=0.1)
    assert 0.0 <= silent.value.late < 0.1


async def test_a_deadline_read_by_a_busy_loop_carries_how_late_it_woke() -> None:
    # the member answers only after this client's loop was busy (a CPU-bound step) well past
    # the deadline: the Timeout carries at least the overrun (the loop could not wake sooner)
    async def attempt(ep: str) -> str:
        await asyncio.sleep(0)
        busy_until = time.monotonic() + 0.4
        while time.monotonic() < busy_until:        # the loop is busy, not waiting
            pass
        await asyncio.Event().wait()
        return ep

    loop = asyncio.get_running_loop()
    deadline = loop.time() + 0.1
    with pytest.raises(Timeout) as busy:
        await hedged(attempt, EndpointRing(("a",)), 0.05, deadline, "get",
                     budget=RetryBudget())
    assert busy.value.late >= 0.25
