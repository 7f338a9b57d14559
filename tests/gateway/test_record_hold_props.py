"""When a gateway writes its ``gateways/<id>`` record after a registry change
(``etcd_side.record_hold``), driven tick by tick over random registry changes: every state
the gateway reaches is written within three poll intervals of its apply (two unless changes
land just before its ticks); no record is written less than ``SETTLE`` after an apply when its
tick could wait; a record whose only change is the generation is never written at two ticks
in a row (the changes between go in one write); nothing is held while no record is written
on the lease; any other change waits only ``SETTLE`` after an apply, one tick at most."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from awide_cluster.contract.records import GatewayRecord
from awide_gateway_cluster.etcd_side import SETTLE, record_hold

BASE = GatewayRecord(id="gw-1", host="h", pod="p", namespace="ns-1", placement="dialog",
                     fingerprint="L1", generation=1, engine=None, version="0.1")

# a registry change: after how many intervals since the last one, and whether the gateway's
# record changes in more than its generation (stale, fingerprint)
changes = st.lists(st.tuples(st.floats(min_value=0.01, max_value=3.0), st.booleans()),
                   min_size=1, max_size=30)


def run(interval: float, phase: float, steps: list[tuple[float, bool]]
        ) -> tuple[list[tuple[float, GatewayRecord]], list[tuple[float, GatewayRecord, bool]]]:
    """Ticks every ``interval`` from ``phase``; applies at the given gaps. The applies (time,
    record) and the writes (tick time, record, generation-only)."""
    applies: list[tuple[float, GatewayRecord]] = []
    t, rec = 0.0, BASE
    for gap, other in steps:
        t += gap * interval
        rec = replace(rec, generation=rec.generation + 1,
                      fingerprint=f"L{rec.generation + 1}" if other else rec.fingerprint)
        applies.append((t, rec))
    writes: list[tuple[float, GatewayRecord, bool]] = []
    written, held, k = BASE, 0, 0
    end = t + 3 * interval
    while (now := phase * interval + k * interval) <= end:
        k += 1
        current = [(a, r) for a, r in applies if a <= now]
        if not current:
            continue
        applied_at, record = current[-1]
        hold = record_hold(written, record, now, applied_at, held, interval)
        held = held + 1 if hold else 0
        if not hold and record != written:
            writes.append((now, record,
                           replace(record, generation=written.generation) == written))
            written = record
    return applies, writes


def ticks_between(a: float, b: float, interval: float, phase: float) -> int:
    return sum(1 for k in range(int(b / interval) + 3) if a <= phase * interval + k * interval < b)


@given(st.floats(min_value=0.05, max_value=5.0), st.floats(min_value=0.0, max_value=0.999),
       changes)
def test_every_state_is_written_within_three_intervals_of_its_apply(interval, phase, steps):
    applies, writes = run(interval, phase, steps)
    for a, rec in applies:
        assert any(w >= a - 1e-9 and got.generation >= rec.generation and w <= a + 3 * interval
                   + 1e-6 for w, got, _ in writes), (a, rec.generation, writes)


@given(st.floats(min_value=0.05, max_value=5.0),
       st.floats(min_value=SETTLE + 0.01, max_value=0.99),
       st.lists(st.booleans(), min_size=1, max_size=30))
def test_changes_two_intervals_apart_are_each_written_within_two(interval, phase, others):
    # every tick lands more than SETTLE after the change before it
    applies, writes = run(interval, phase, [(2.0, o) for o in others])
    for a, rec in applies:
        assert any(w >= a - 1e-9 and got.generation >= rec.generation and w <= a + 2 * interval
                   + 1e-6 for w, got, _ in writes), (a, rec.generation, writes)


@given(st.floats(min_value=0.05, max_value=5.0), st.floats(min_value=0.0, max_value=0.999),
       changes)
def test_no_write_within_settle_of_an_apply_when_it_could_wait(interval, phase, steps):
    applies, writes = run(interval, phase, steps)
    before = BASE.generation
    for w, got, _ in writes:
        recent = [a for a, _ in applies if a <= w]
        if recent and w - recent[-1] < SETTLE * interval - 1e-9:
            # written anyway: it had waited since the first change not written yet
            first = min(a for a, r in applies if r.generation > before)
            assert ticks_between(first, w, interval, phase) >= 1, (w, writes)
        before = got.generation


@given(st.floats(min_value=0.05, max_value=5.0), st.floats(min_value=0.0, max_value=0.999),
       changes)
def test_a_generation_only_rewrite_is_never_at_two_ticks_in_a_row(interval, phase, steps):
    _applies, writes = run(interval, phase, steps)
    for (t1, _, _), (t2, _, only) in zip(writes, writes[1:], strict=False):
        if only:
            assert t2 - t1 > 1.5 * interval, writes


def test_changes_within_a_tick_go_in_one_write():
    # five changes a fifth of an interval apart, generation only: two writes at most, not five
    _applies, writes = run(1.0, 0.5, [(0.2, False)] * 5)
    assert 1 <= len(writes) <= 2
    assert writes[-1][1].generation == BASE.generation + 5


def test_nothing_is_held_without_a_record_on_the_lease_or_after_a_hold():
    rec = replace(BASE, generation=2)
    assert record_hold(None, rec, 10.0, 10.0, 0, 1.0) is False
    assert record_hold(BASE, rec, 10.0, 9.0, 0, 1.0) is True           # generation only
    assert record_hold(BASE, rec, 10.0, 9.0, 1, 1.0) is False          # held the tick before
    assert record_hold(BASE, rec, 10.0, 10.0 - SETTLE / 2, 1, 1.0) is True   # a later apply
    assert record_hold(BASE, rec, 10.0, 10.0 - SETTLE / 2, 2, 1.0) is False  # two at most
    other = replace(rec, stale=True)
    assert record_hold(BASE, other, 10.0, 10.0 - SETTLE / 2, 0, 1.0) is True
    assert record_hold(BASE, other, 10.0, 10.0 - SETTLE / 2, 1, 1.0) is False
    assert record_hold(BASE, other, 10.0, 10.0 - 2 * SETTLE, 0, 1.0) is False
    assert record_hold(BASE, BASE, 10.0, 10.0, 0, 1.0) is False
