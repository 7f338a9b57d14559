"""Liveness / readiness verdicts, with a clock the test moves."""

from __future__ import annotations

from awide_cluster.api.health import DaemonHealth


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_liveness_follows_the_loop_beats():
    clock = Clock()
    h = DaemonHealth(loop_stale_after=3.0, report_stale_after=3.0, clock=clock)
    assert h.liveness().ok                       # starting, within the bound
    clock.t += 3.5
    v = h.liveness()
    assert not v.ok and "not turned once" in v.reason
    h.beat()
    assert h.liveness().ok
    clock.t += 2.9
    assert h.liveness().ok
    clock.t += 0.2
    v = h.liveness()
    assert not v.ok and "stalled" in v.reason


def test_readiness_needs_etcd_and_a_current_report():
    clock = Clock()
    h = DaemonHealth(loop_stale_after=3.0, report_stale_after=3.0, clock=clock)
    assert "etcd not reached" in h.readiness().reason
    h.etcd_ok()
    assert "not written yet" in h.readiness().reason
    h.report_written()
    assert h.readiness().ok
    h.etcd_failed("Timeout: no member answered within 0.5 s")
    v = h.readiness()
    assert not v.ok and "Timeout" in v.reason
    h.etcd_ok()
    assert h.readiness().ok
    clock.t += 3.1
    h.etcd_ok()
    v = h.readiness()
    assert not v.ok and "not current" in v.reason
    h.report_written()
    assert h.readiness().ok


def test_bounds_from_timing():
    h = DaemonHealth.for_timing(1.0, 0.5)
    assert h.loop_stale_after == 5.0 and h.report_stale_after == 4.0


def test_readiness_says_when_etcd_refuses_the_report_write():
    clock = Clock()
    h = DaemonHealth(loop_stale_after=3.0, report_stale_after=3.0, clock=clock)
    h.report_written()
    h.write_refused("nospace: etcd: etcdserver: mvcc: database space exceeded (code 8)")
    h.etcd_failed("host report: etcd: database space exceeded")
    v = h.readiness()
    assert not v.ok and v.reason.startswith("writes fail: host report not written (nospace")
    h.report_written()                              # written again: ready
    assert h.readiness().ok
