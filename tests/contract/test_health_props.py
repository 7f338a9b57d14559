"""Property tests of the health hysteresis (contract/health.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from awide_cluster.contract.health import Hysteresis, tally

obs = st.one_of(st.none(), st.booleans())


START = Hysteresis()


def run(seq, n, m=1, h=START):
    for o in seq:
        h = tally(h, o, sick_polls=n, healthy_polls=m, reason="" if o else "sick")
    return h


@given(st.integers(1, 10))
def test_out_after_exactly_n_bad(n) -> None:
    h = Hysteresis()
    for i in range(1, n + 1):
        h = tally(h, False, sick_polls=n, reason=f"bad {i}")
        assert h.up == (i < n)
    assert h.state == "out" and h.reason == f"bad {n}"


@given(st.integers(1, 10), st.lists(obs, max_size=20))
def test_back_after_one_good(n, history) -> None:
    h = run(history + [False] * n, n)
    assert h.state == "out"
    assert tally(h, True, sick_polls=n).state == "in"


@given(st.integers(1, 10), st.integers(1, 5), st.lists(obs, max_size=30))
def test_none_changes_nothing(n, m, history) -> None:
    h = run(history, n, m)
    assert tally(h, None, sick_polls=n, healthy_polls=m) == h
    without_none = run([o for o in history if o is not None], n, m)
    assert without_none == h


@given(st.integers(2, 10), st.lists(obs, max_size=30))
def test_one_good_resets_the_bad_count(n, history) -> None:
    h = run(history, n)
    if not h.up:
        return
    h = run([False] * (n - 1) + [True] + [False] * (n - 1), n, h=h)
    assert h.up


@given(st.integers(1, 6), st.integers(1, 6), st.lists(obs, max_size=40))
def test_state_is_a_function_of_the_streaks(n, m, history) -> None:
    """out iff the last n real observations were bad (and no m good ones since)."""
    real = [o for o in history if o is not None]
    h = run(real, n, m)
    expect = True
    bad = good = 0
    for o in real:
        if o:
            good, bad = good + 1, 0
            expect = expect or good >= m
        else:
            bad, good = bad + 1, 0
            expect = expect and bad < n
    assert h.up == expect


def test_bad_parameters_refused() -> None:
    with pytest.raises(ValueError):
        tally(Hysteresis(), True, sick_polls=0)
    with pytest.raises(ValueError):
        tally(Hysteresis(), True, sick_polls=1, healthy_polls=0)
