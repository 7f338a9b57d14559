"""The back-off of a failing etcd loop: never faster than the loop's interval, never slower
than its cap, growing with the failures in a row, spread by the jitter, reset by a success."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from awide_gateway_cluster.backoff import Backoff, delay

intervals = st.floats(min_value=0.01, max_value=10.0)
unit = st.floats(min_value=0.0, max_value=1.0, exclude_max=True)


@given(st.integers(min_value=0, max_value=10_000), intervals,
       st.floats(min_value=1.0, max_value=64.0), unit)
def test_a_wait_lies_between_the_interval_and_the_cap(failures: int, interval: float,
                                                      cap_intervals: float, u: float) -> None:
    cap = cap_intervals * interval
    d = delay(failures, interval, cap, u)
    assert interval <= d <= cap + 1e-9
    if failures == 0:
        assert d == interval


@given(st.integers(min_value=1, max_value=60), intervals, unit)
def test_the_ceiling_doubles_with_each_failure_up_to_the_cap(failures: int, interval: float,
                                                             u: float) -> None:
    cap = 4 * interval
    top = delay(failures, interval, cap, 1.0)
    assert top == min(cap, interval * 2 ** failures)
    assert delay(failures, interval, cap, u) <= delay(failures + 1, interval, cap, u) + 1e-9


def test_gateways_that_failed_together_do_not_come_back_together() -> None:
    waits = [Backoff(1.0, 4.0, random.Random(seed)) for seed in range(200)]
    for b in waits:
        b.next(False)
    third = [b.next(False) for b in waits]       # ceiling 4 s: spread over 1..4 s
    assert min(third) < 1.5 and max(third) > 3.5
    assert len({round(w, 2) for w in third}) > 150


def test_one_success_brings_the_interval_back() -> None:
    b = Backoff(0.5, 2.0, random.Random(1))
    for _ in range(5):
        b.next(False)
    assert b.failures == 5
    assert b.next(True) == 0.5 and b.failures == 0
