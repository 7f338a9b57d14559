"""Figure 9's calibration row: what the box needs for a storm, from costs that are not the
storm's own outcome (pure functions of the recorded costs; no cluster)."""

from __future__ import annotations

from typing import Any

import pytest

from bench.fig9_storm import _feasible, demand, generator_calibration

# the built storm of 400 beside 50 as one saturated run recorded it
BUILT = {"storm_n": 400, "generator_start_cpu_ms": 8.33, "generator_ms_per_gateway_second": 1.546,
         "etcd_ms_per_gateway_second": 0.435, "etcd_cpu_per_start_ms": 11.28,
         "steady_busy_pct": 47.4}
REPLAY = {"etcd_cpu_per_start_ms": 2.08}     # the C generator's replay of the start mix


def _cal(replay: dict[str, Any] | None = REPLAY) -> dict[str, Any]:
    cal = generator_calibration(BUILT, 0.0633, 50, replay)
    cal["cores"] = 2        # the box the figures were measured on, whatever runs the test
    return cal


def test_etcds_cost_of_a_start_comes_from_the_replay_not_from_the_storm() -> None:
    cal = _cal()
    assert cal["etcd_cpu_per_start_ms"] == 2.08
    assert cal["storm_etcd_cpu_per_start_ms"] == 11.28     # kept beside it
    assert cal["etcd_cpu_per_start_from"] == "the C replay of the start mix"
    work, hold, absorb = demand(cal, 50, 400)
    assert work == pytest.approx(400 * (8.33 + 2.08) / 1000)
    assert hold == pytest.approx(0.0633 + 450 * (1.546 + 0.435) / 1000)
    assert absorb == pytest.approx(work / (2 - hold))     # 4.0 s of the 7 s the goals allow
    assert _feasible(cal, 50, 400, 2.0)


def test_the_storms_own_retries_would_make_the_box_look_smaller() -> None:
    from_replay, from_storm = _cal(), _cal(None)
    assert from_storm["etcd_cpu_per_start_ms"] == 11.28
    assert from_storm["etcd_cpu_per_start_from"] == "the built storm"
    _, _, a_replay = demand(from_replay, 50, 400)
    _, _, a_storm = demand(from_storm, 50, 400)
    assert a_replay is not None and a_storm is not None and a_storm > a_replay
    assert a_storm > 7.0 and not _feasible(from_storm, 50, 400, 2.0)     # 7.5 s: "too small"


def test_a_running_load_that_leaves_no_core_spare_never_absorbs_the_starts() -> None:
    cal = _cal()
    _, hold, absorb = demand(cal, 50, 1000)
    assert hold == pytest.approx(0.0633 + 1050 * (1.546 + 0.435) / 1000)     # 2.14 cores
    assert absorb is None and not _feasible(cal, 50, 1000, 5.0)
