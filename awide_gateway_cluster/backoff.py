"""Back-off of a gateway's etcd loops after failures: capped exponential, full jitter.

A gateway whose etcd calls fail keeps serving its last known state and waits longer between
tries instead of asking every turn: after ``failures`` failures in a row the next try comes
after a delay drawn uniformly between the loop's interval and ``min(cap, interval *
2**failures)``; one success brings it back to the interval. Spread this way, gateways that
failed together (a start storm, an etcd election) do not come back together.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from awide_cluster.store.errors import Timeout

# the longest wait between two tries of a failing loop, in loop intervals
CAP_INTERVALS = 4.0


def delay(failures: int, interval: float, cap: float, u: float) -> float:
    """The wait before the next try: ``interval`` when the last try succeeded (``failures``
    0); else ``interval`` plus ``u`` (in [0, 1)) of the rest up to the capped exponential."""
    if failures <= 0:
        return interval
    ceiling = min(cap, interval * 2.0 ** min(failures, 32))
    return interval + u * max(0.0, ceiling - interval)


@dataclass
class Backoff:
    """The failures in a row of one loop, and the wait they give."""

    interval: float
    cap: float
    rng: random.Random
    failures: int = 0

    def next(self, ok: bool) -> float:
        """Note the outcome of a try; the wait before the next one."""
        self.failures = 0 if ok else self.failures + 1
        return delay(self.failures, self.interval, self.cap, self.rng.random())


# the longest bound of one etcd call of a loop whose calls ran out of time, in call timeouts
STRETCH_MAX = 16.0

# a client whose event loop woke this much later than asked during a call (seconds) was busy:
# its bound passed because it read the answer late, not because etcd did not answer (the
# store's default hedge delay: a wait this late puts off a hedge for the same reason)
LATE_LOOP = 0.05


def stretched(late: int, call_timeout: float, most: float) -> float:
    """The bound of a loop's next etcd call after ``late`` tries in a row whose bound passed:
    ``call_timeout`` doubled each time, at most ``most`` (never below ``call_timeout``)."""
    return max(call_timeout, min(most, call_timeout * 2.0 ** min(max(late, 0), 32)))


def ran_late(outcome: object) -> bool:
    """Whether a try's bound passed while the client's own event loop ran late: a store
    ``Timeout`` whose ``late`` is at least ``LATE_LOOP``, or the caller's own fence around
    the store's bounded call (``TimeoutError``: the store's bound was read that late).
    A deadline that passed on time is etcd not answering (a frozen member, no quorum)."""
    if isinstance(outcome, Timeout):
        return outcome.late >= LATE_LOOP
    return isinstance(outcome, TimeoutError)


@dataclass
class Stretch:
    """The bound of a loop's next etcd call. A client whose own event loop runs seconds late (a
    start storm on a busy host) reads etcd's answer only after a fixed bound has passed: every
    try would fail while etcd answered each in milliseconds, and each failed try is sent
    again. After each try whose bound passed while the loop ran late (``ran_late``) the next
    one gets twice the bound, up to ``most``; an answered try, a deadline that passed on time
    (etcd did not answer: the next try must leave a frozen member as soon as the first did)
    or any other failure brings it back to ``call_timeout``. The bound stays a bound: at
    most ``most``."""

    call_timeout: float
    most: float
    late: int = 0

    def bound(self) -> float:
        return stretched(self.late, self.call_timeout, self.most)

    def note(self, read_late: bool) -> None:
        """Note the outcome of a try: its bound passed while the loop ran late
        (``read_late``, see ``ran_late``) or not."""
        self.late = self.late + 1 if read_late else 0
