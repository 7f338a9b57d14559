"""Status when etcd refuses writes: the NOSPACE alarm is named (``etcd_alarm_nospace``), the
daemons' refused writes are a problem of their own (``writes_refused``), and an alarm list
that could not be read is never taken for "no alarm". Pure: built from known snapshots."""

from __future__ import annotations

from awide_cluster.operator.freshness import Observations, record_read
from awide_cluster.operator.render import render
from awide_cluster.operator.snapshot import EndpointAnswer, RawSnapshot, StatusPolicy
from awide_cluster.operator.status import build_status
from awide_cluster.store.types import Alarm, EndpointStatus, KeyValue, Member
from tests.operator import op_state as state

MEMBERS = tuple(Member(id=i, name=f"etcd{i}", client_urls=(f"http://127.0.0.1:{2379 + i}",),
                       peer_urls=()) for i in (1, 2, 3))
ANSWERS = tuple(EndpointAnswer(m.client_urls[0], EndpointStatus(
    m.client_urls[0], m.id, 2, 4, 100, "3.5.1", 16_000_000)) for m in MEMBERS)


def kvs(revs: dict[str, int]) -> tuple[KeyValue, ...]:
    return tuple(KeyValue(key=k, value=v, create_revision=1, mod_revision=revs.get(k, 1),
                          version=1) for k, v in state.healthy_state().items())


DEFAULT_POLICY = StatusPolicy()


def status(alarms=(), *, alarms_error="", reads=((0.0, {}),), policy=DEFAULT_POLICY):
    """``reads``: (monotonic time, {key: mod_revision}) of each read, the last one shown."""
    seen = Observations()
    for t, revs in reads:
        seen = record_read(seen, kvs(revs), t)
    t, revs = reads[-1]
    raw = RawSnapshot(cluster="c1", endpoints=tuple(m.client_urls[0] for m in MEMBERS),
                      answers=ANSWERS, members=MEMBERS, members_error="", kvs=kvs(revs),
                      read_error="", revision=10, wall=1_800_000_000.0, mono=t,
                      alarms=alarms, alarms_error=alarms_error)
    return build_status(raw, seen, policy)


def codes(st) -> set[str]:
    return {p.code for p in st.problems}


def test_the_nospace_alarm_is_named_and_makes_status_unhealthy():
    st = status((Alarm(2, "NOSPACE"),))
    assert not st.healthy
    assert {"etcd_alarm_nospace", "writes_refused"} <= codes(st)
    p = next(p for p in st.problems if p.code == "etcd_alarm_nospace")
    assert p.severity == "error" and "etcd2" in p.message and "disarm" in p.message
    assert [(a.alarm, a.member) for a in st.etcd.alarms] == [("NOSPACE", "etcd2")]
    doc = st.to_dict()
    assert doc["etcd"]["alarms"] == [{"alarm": "NOSPACE", "member": "etcd2"}]
    assert "ALARMS  NOSPACE (raised by etcd2)" in render(st, "table")


def test_no_alarm_is_healthy_and_other_alarms_are_named():
    assert status(()).healthy and not st_codes_with_alarm(status(()))
    st = status((Alarm(3, "CORRUPT"), Alarm(9, "NONE")))
    assert "etcd_alarm" in codes(st) and "writes_refused" not in codes(st)
    assert next(p for p in st.problems if p.code == "etcd_alarm").subject == "CORRUPT"


def st_codes_with_alarm(st) -> set[str]:
    return {c for c in codes(st) if c.startswith("etcd_alarm") or c == "writes_refused"}


def test_an_unread_alarm_list_is_a_warning_not_no_alarm():
    st = status(None, alarms_error="Denied: etcd: permission denied")
    p = next(p for p in st.problems if p.code == "etcd_alarms_unread")
    assert p.severity == "warning" and "permission denied" in p.message
    assert st.etcd.alarms_error == "Denied: etcd: permission denied"
    assert st.healthy                                 # a warning only


def test_reports_that_stop_changing_together_are_refused_writes():
    """No alarm (e.g. the daemons' role lost its write permission): the reports of most hosts
    have not changed for --stale-after together."""
    keys = [k for k in state.healthy_state() if k.startswith("members/")]
    first = (0.0, {k: 5 for k in keys})
    st = status(reads=(first, (4.0, {k: 5 for k in keys})))
    p = next(p for p in st.problems if p.code == "writes_refused")
    assert "3 of 3 hosts" in p.message and p.severity == "error"
    # one stale report is that host's own problem, not refused writes
    moved = {k: 5 for k in keys} | {"members/h1": 9, "members/w1": 9}
    st = status(reads=(first, (4.0, moved)))
    assert "writes_refused" not in codes(st) and "report_stale" in codes(st)
    # a one-shot status that sampled less than --stale-after sees nothing yet
    st = status(reads=(first, (1.0, {k: 5 for k in keys})))
    assert "writes_refused" not in codes(st)
