"""Figure 9's "back to steady load": when the machine's busy share stays near its steady load
after a storm's last start (a pure function of the sampled series; no cluster)."""

from __future__ import annotations

from bench.fig9_storm import back_to_steady


def series(values: list[float], period: float = 0.5) -> list[tuple[float, float]]:
    return [(i * period, v) for i, v in enumerate(values)]


# the storm's last start at t = 1.0 (the third sample); steady load about 30 %
STORM = [90.0, 100.0, 100.0, 95.0, 70.0, 50.0, 31.0, 30.0, 29.0, 32.0]
TAIL = [30.0, 31.0, 29.0, 30.0, 32.0, 28.0, 30.0, 31.0, 29.0, 30.0]


def test_the_machine_is_back_when_it_stays_within_ten_points_of_its_steady_load() -> None:
    s = series(STORM + [30.0] * 10 + TAIL)
    tail_from = s[-len(TAIL)][0]
    # averaged over 1 s, the samples stay within 40 % from t = 3.5 s (the 8th sample) on
    assert back_to_steady(s, 1.0, tail_from) == 3.5 - 0.5 - 1.0
    # sample by sample, from the 7th (31 %)
    assert back_to_steady(s, 1.0, tail_from, average=1) == 3.0 - 0.5 - 1.0


def test_one_sample_over_is_not_a_load_two_in_a_row_are() -> None:
    blip = STORM + [30.0] * 6 + [46.0] + [30.0] * 3 + TAIL
    tail_from = series(blip)[-len(TAIL)][0]
    assert back_to_steady(series(blip), 1.0, tail_from) == 2.0       # the blip averages to 38
    # sample by sample, from the one after the blip (t = 8.5 s)
    assert back_to_steady(series(blip), 1.0, tail_from, average=1) == 8.5 - 0.5 - 1.0
    bump = STORM + [30.0] * 6 + [55.0, 55.0] + [30.0] * 2 + TAIL
    tail_from = series(bump)[-len(TAIL)][0]
    got = back_to_steady(series(bump), 1.0, tail_from)
    assert got is not None and got > 2.0                               # after the bump


def test_no_steady_load_to_come_back_to_says_none() -> None:
    saturated = series(STORM + [99.0] * 20)
    assert back_to_steady(saturated, 1.0, saturated[-10][0]) is None
    # a tail still falling (the storm's starts still running at the end of the hold): the
    # median of a falling tail would call the machine back at once
    falling = series(STORM + [100.0] * 10 + [99.0, 95.0, 90.0, 86.0, 82.0, 78.0, 72.0, 67.0,
                                            63.0, 60.0])
    assert back_to_steady(falling, 1.0, falling[-10][0]) is None
