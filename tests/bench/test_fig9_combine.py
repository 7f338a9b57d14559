"""Figure 9's reading of an arm over several storms: the worst storm for what every storm must
meet, the median storm for the rest (pure, no etcd)."""

from __future__ import annotations

import statistics
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.fig9_storm import NONE_IS_WORST, WORST, combine

counts = st.integers(min_value=0, max_value=500)
seconds = st.one_of(st.none(), st.floats(min_value=0.0, max_value=60.0, allow_nan=False))


@st.composite
def storm(draw: st.DrawFn) -> dict[str, Any]:
    s: dict[str, Any] = {key: draw(seconds if key in NONE_IS_WORST or key == "fresh_p99_s"
                                   else counts) for key in WORST}
    s["etcd_cpu_per_start_ms"] = draw(st.floats(min_value=0.0, max_value=50.0,
                                                allow_nan=False))
    s["tag"] = draw(st.uuids()).hex          # a figure only its own storm has
    s["steady_busy_pct"] = draw(st.floats(min_value=0.0, max_value=100.0, allow_nan=False))
    return s


@given(st.lists(storm(), min_size=1, max_size=7).filter(lambda x: len(x) % 2 == 1))
def test_an_arm_is_its_median_storm_with_each_goal_at_its_worst(storms: list[dict]) -> None:
    got = combine(storms)
    cpus = [s["etcd_cpu_per_start_ms"] for s in storms]
    assert got["etcd_cpu_per_start_ms"] == statistics.median(cpus)
    assert got["etcd_cpu_per_start_each_ms"] == cpus
    assert got["storms"] == len(storms)
    # every other figure is one storm's own: the one whose etcd CPU per start is the median
    mine = [s for s in storms if s["tag"] == got["tag"]]
    assert len(mine) == 1 and mine[0]["etcd_cpu_per_start_ms"] == got["etcd_cpu_per_start_ms"]
    assert got["steady_busy_pct"] == mine[0]["steady_busy_pct"]
    for key in WORST:
        vals = [s[key] for s in storms]
        if key in NONE_IS_WORST and None in vals:
            assert got[key] is None, key           # one storm never came back: never
        elif all(v is None for v in vals):
            assert got[key] is None, key
        else:
            assert got[key] == max(v for v in vals if v is not None), key


def test_one_failed_registration_in_any_storm_is_the_arms() -> None:
    base = {key: 0 for key in WORST} | {"back_to_steady_s": 4.0, "fresh_p99_s": 1.0}
    storms = [base | {"etcd_cpu_per_start_ms": 4.0},
              base | {"etcd_cpu_per_start_ms": 5.0, "failed_registrations": 3},
              base | {"etcd_cpu_per_start_ms": 6.0, "back_to_steady_s": 9.5}]
    got = combine(storms)
    assert got["failed_registrations"] == 3
    assert got["back_to_steady_s"] == 9.5
    assert got["etcd_cpu_per_start_ms"] == 5.0


def test_no_storm_is_an_error_not_an_empty_arm() -> None:
    with pytest.raises(ValueError, match="no storm"):
        combine([])
