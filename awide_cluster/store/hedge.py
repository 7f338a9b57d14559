"""Which member to ask, and how: hedged idempotent calls, single-shot writes.

``hedged``: ask the preferred member; if it has not answered after ``hedge_after``, ask the
next one as well, and so on; an error answer moves on at once. A hedge is put off while the
caller's own event loop runs late (``lagging``): a busy client's missing answer is not a slow
member's. The first valid answer wins and
the other requests are cancelled. A frozen or dead member is thus left within the deadline.
Every request beyond a call's first (a hedge, or a retry on another member after an error
answer) is paid from the client's ``RetryBudget``; when it is empty the call waits for the
requests it has sent. A retry after a connection that was never made costs etcd nothing and
is not paid for.

``write_once``: a write goes to one member. Only a connection that failed before anything was
sent moves it to the next member; a deadline that passes once the request may have left
raises ``Timeout(maybe_applied=True)``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from awide_cluster.store.codec import AuthNotEnabled
from awide_cluster.store.errors import (
    Denied,
    InvalidRequest,
    LeaseExpired,
    NoSpace,
    StoreError,
    Timeout,
    TooLarge,
    Unavailable,
)
from awide_cluster.store.transport import EtcdUnreachable, SendState

T = TypeVar("T")

# the retry budget of one store client, like gRPC's retry throttling: extra requests (hedges
# and retries) at most BUDGET_RATIO of the calls, saved up to BUDGET_BURST; a new client
# starts with BUDGET_START (a storm of new clients must not start with a burst each, but a new
# client must reach the third member of three when the first is frozen and the second lags
# behind a revision it has already seen: one hedge and one retry)
BUDGET_RATIO = 0.1
BUDGET_BURST = 10.0
BUDGET_START = 2.0


class RetryBudget:
    """A token bucket counted in requests, not time: it starts with ``start`` tokens, every
    call earns ``ratio`` of a token (up to ``burst``), every extra request spends a whole one.
    Over any run of calls the extra requests are at most ``start + ratio * calls``. Counted
    in thousandths of a token (whole numbers: ten calls at 0.1 earn exactly one)."""

    def __init__(self, ratio: float = BUDGET_RATIO, burst: float = BUDGET_BURST,
                 start: float | None = None) -> None:
        if start is None:       # the default start, within a smaller burst
            start = min(BUDGET_START, burst)
        if ratio < 0 or burst < 1 or not 0 <= start <= burst:
            raise ValueError("a retry budget needs ratio >= 0, burst >= 1, 0 <= start <= burst")
        self.ratio, self.burst = ratio, burst
        self._earn, self._cap = round(ratio * 1000), round(burst * 1000)
        self._milli = round(start * 1000)
        self.calls = self.extra = self.refused = 0
        self.deferred = 0       # hedges put off: the caller's event loop was late (lagging)

    @property
    def tokens(self) -> float:
        return self._milli / 1000

    def call(self) -> None:
        """A call's first request: earns its share."""
        self.calls += 1
        self._milli = min(self._cap, self._milli + self._earn)

    def spend(self) -> bool:
        """An extra request: True (and paid) when the budget holds one, else False."""
        if self._milli >= 1000:
            self._milli -= 1000
            self.extra += 1
            return True
        self.refused += 1
        return False


def lagging(asked: float, woke: float, hedge_after: float) -> bool:
    """Whether the caller's own event loop resumed a wait for an answer (asked to end at
    ``asked``, ended at ``woke``, loop time) more than ``hedge_after`` late: the loop was busy
    (a CPU-starved client), the answer may be in the socket unread, and no answer says
    nothing of the member. A hedge then only adds a request to etcd and work to the client."""
    return hedge_after > 0 and woke - asked > hedge_after


# seconds a member stays suspect after it failed or was outrun by a hedge (or a watch on it went
# silent): a watch moving off a silent member opens on the others first (one on a frozen
# member would wait out the whole call bound before it tried the next)
SUSPECT_FOR = 10.0

# answers that another member would give just the same: stop at once (a member lagging
# behind might answer a too-large range smaller, but asking it costs another bound's worth)
FINAL = (Denied, InvalidRequest, LeaseExpired, NoSpace, AuthNotEnabled, TooLarge)


class EndpointRing:
    """The endpoints in a fixed ring, with a preferred one (the last that answered first),
    and the suspect ones (failed, outrun by a hedge, or silent on a watch within
    ``SUSPECT_FOR`` seconds; cleared when one answers first)."""

    def __init__(self, endpoints: Sequence[str],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.endpoints = tuple(endpoints)
        self._preferred = 0
        self._clock = clock
        self._suspect: dict[str, float] = {}    # endpoint -> when it was last suspected

    @property
    def preferred(self) -> str:
        return self.endpoints[self._preferred]

    def order(self, after: str | None = None) -> list[str]:
        """All endpoints, the preferred first (or the one following ``after``)."""
        start = self._preferred
        if after in self.endpoints:
            start = (self.endpoints.index(after) + 1) % len(self.endpoints)
        return [self.endpoints[(start + i) % len(self.endpoints)]
                for i in range(len(self.endpoints))]

    def open_order(self, after: str | None) -> list[str]:
        """Where a watch leaving ``after`` opens: the ring from the one following it, the
        members not suspect first (each group in ring order), ``after`` itself last."""
        ring = self.order(after=after)
        if after in ring:
            ring.remove(after)
        suspect = self.suspects()
        return ([ep for ep in ring if ep not in suspect] + [ep for ep in ring if ep in suspect]
                + ([after] if after in self.endpoints else []))

    def suspects(self) -> set[str]:
        now = self._clock()
        return {ep for ep, at in self._suspect.items() if now - at < SUSPECT_FOR}

    def suspect(self, endpoint: str) -> None:
        if endpoint in self.endpoints:
            self._suspect[endpoint] = self._clock()

    def prefer(self, endpoint: str) -> None:
        self._preferred = self.endpoints.index(endpoint)
        self._suspect.pop(endpoint, None)

    def demote(self, endpoint: str) -> None:
        self.suspect(endpoint)
        if self.preferred == endpoint:
            self._preferred = (self._preferred + 1) % len(self.endpoints)


def combine(errors: list[StoreError], what: str) -> StoreError:
    """One error for a call every member failed: same kind if all agree, else Unavailable."""
    detail = "; ".join(str(e) for e in errors)
    kinds = {type(e) for e in errors}
    if len(kinds) == 1:
        kind = kinds.pop()
        if kind is EtcdUnreachable:
            return Unavailable(f"{what}: no member reachable: {detail}")
        if kind is Timeout:
            return Timeout(f"{what}: {detail}", maybe_applied=any(e.maybe_applied for e in errors),
                           late=max(getattr(e, "late", 0.0) for e in errors))
        try:
            return kind(f"{what}: {detail}")
        except TypeError:
            return errors[0]
    return Unavailable(f"{what}: every member failed: {detail}")


async def hedged(attempt: Callable[[str], Awaitable[T]], ring: EndpointRing, hedge_after: float,
                 deadline: float, what: str, *,
                 budget: RetryBudget | None = None) -> tuple[str, T]:
    """Run ``attempt(endpoint)`` on the members in ring order, hedged; first success wins.
    Requests after the first are paid from ``budget`` (when given)."""
    loop = asyncio.get_running_loop()
    queue = ring.order()
    pending: dict[asyncio.Task[T], str] = {}
    launched: list[str] = []        # the endpoints asked, in order
    errors: list[StoreError] = []
    next_launch = loop.time()
    free = True             # the next request is not paid for (the first, or after no send)
    late = 0.0              # the most this client's loop woke late from a wait (Timeout.late)
    if budget is not None:
        budget.call()
    try:
        while True:
            now = loop.time()
            if queue and (not pending or now >= next_launch):
                if free or budget is None or budget.spend():
                    ep = queue.pop(0)
                    launched.append(ep)
                    pending[asyncio.ensure_future(attempt(ep))] = ep
                    next_launch = now + hedge_after
                    free = False
                else:
                    queue.clear()   # budget empty: wait for what was sent
            if not pending:
                raise combine(errors, what)
            remaining = deadline - now
            if remaining <= 0:
                # the next call starts elsewhere (as a write's does): with hedges put off while
                # this client runs late, a frozen preferred member must not hold every read
                for ep in pending.values():
                    ring.demote(ep)
                waiting = ", ".join(pending.values())
                extra = f" (others failed: {'; '.join(map(str, errors))})" if errors else ""
                raise Timeout(f"{what}: no answer within the deadline from {waiting}{extra}",
                              late=max(late, now - deadline))
            wait = min(remaining, max(0.0, next_launch - now)) if queue else remaining
            done, _ = await asyncio.wait(pending, timeout=wait,
                                         return_when=asyncio.FIRST_COMPLETED)
            if not done:
                late = max(late, loop.time() - (now + wait))
            if not done and queue and lagging(now + wait, loop.time(), hedge_after):
                # this client was late, not the member: the member gets another hedge delay
                # of a loop that runs (a start storm on a busy host sends no hedges)
                next_launch = loop.time() + hedge_after
                if budget is not None:
                    budget.deferred += 1
            for task in done:
                ep = pending.pop(task)
                exc = task.exception()
                if exc is None:
                    for oep in pending.values():
                        if launched.index(oep) < launched.index(ep):
                            ring.suspect(oep)       # asked first, outrun by a hedge
                    ring.prefer(ep)
                    return ep, task.result()
                if isinstance(exc, FINAL) or not isinstance(exc, StoreError):
                    raise exc
                ring.demote(ep)
                errors.append(exc)
                next_launch = loop.time()  # an error answer moves on at once
                free = free or isinstance(exc, EtcdUnreachable)
    finally:
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)


async def write_once(attempt: Callable[[str, SendState], Awaitable[T]], ring: EndpointRing,
                     deadline: float, what: str) -> tuple[str, T]:
    """Send a write to one member; move on only when the connection failed before sending."""
    errors: list[StoreError] = []
    for ep in ring.order():
        sent = SendState()
        try:
            async with asyncio.timeout_at(deadline):
                result = await attempt(ep, sent)
        except TimeoutError:
            ring.demote(ep)
            raise Timeout(f"{what}: no answer from {ep} within the deadline"
                          + (" (the write may have been applied)" if sent.connected else ""),
                          maybe_applied=sent.connected,
                          late=max(0.0, asyncio.get_running_loop().time() - deadline)) from None
        except EtcdUnreachable as exc:
            ring.demote(ep)
            errors.append(exc)
            continue
        except (Unavailable, Timeout):
            ring.demote(ep)
            raise
        ring.prefer(ep)
        return ep, result
    raise combine(errors, what)
