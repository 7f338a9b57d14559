"""Leader switchover, the pure parts: which host may lead next, who defers, the record."""

from __future__ import annotations

from dataclasses import replace

import pytest

from awide_cluster.contract import records
from awide_cluster.contract.records import SwitchoverRecord
from awide_cluster.contract.report import Restarting
from awide_cluster.daemon.switchover import choose, defers

from .builders import report

REPORTS = {"s1": report("s1", 1), "s2": report("s2", 1), "w1": report("w1", 1)}
HOSTS = frozenset({"s1", "s2", "w1", "s3"})


def test_a_named_live_host_is_chosen_and_unnamed_the_first_other() -> None:
    assert choose(SwitchoverRecord(to="w1"), REPORTS, "s1", HOSTS) == ("w1", "")
    assert choose(SwitchoverRecord(), REPORTS, "s1", HOSTS) == ("s2", "")
    assert choose(SwitchoverRecord(), REPORTS, "s2", HOSTS) == ("s1", "")


@pytest.mark.parametrize(("to", "why"), [
    ("s1", "s1 already leads"),
    ("nosuch", "not a host of this cluster"),
    ("s3", "no report"),
    ("s2", "its daemon is restarting"),
])
def test_a_target_that_is_not_a_live_candidate_is_refused(to: str, why: str) -> None:
    reports = {**REPORTS, "s2": replace(REPORTS["s2"], restarting=Restarting(grace=60, until=""))}
    target, said = choose(SwitchoverRecord(to=to), reports, "s1", HOSTS)
    assert target is None and why in said
    if to != "s1":
        assert "live candidates: w1" in said


def test_no_other_live_daemon_is_refused() -> None:
    assert choose(SwitchoverRecord(), {"s1": REPORTS["s1"]}, "s1", HOSTS)[0] is None


def test_only_a_granted_record_naming_another_host_defers() -> None:
    granted = SwitchoverRecord(to="s2", granted_by="s1")
    assert defers(granted, "w1") and defers(granted, "s1") and not defers(granted, "s2")
    assert not defers(SwitchoverRecord(to="s2"), "w1") and not defers(None, "w1")


def test_the_record_round_trips_and_refuses_bad_fields() -> None:
    rec = SwitchoverRecord(to="s2", by="op@x", at="t", reason="why", granted_by="s1")
    assert records.decode_switchover(rec.encode()) == rec
    assert records.decode_switchover(SwitchoverRecord().encode()) == SwitchoverRecord()
    for bad in (b'{"action":"drain"}', b'{"action":"switchover","to":"a b"}',
                b'{"action":"switchover","granted_by":"s1"}', b"[1]"):
        with pytest.raises(records.SwitchoverRecordError):
            records.decode_switchover(bad)


def test_status_shows_a_switchover_as_pending_not_as_a_corrupt_intent() -> None:
    from awide_cluster.contract import keys
    from awide_cluster.operator.judge.gateways import switchover_view
    from awide_cluster.store.types import KeyValue

    def kv(rec: SwitchoverRecord) -> KeyValue:
        return KeyValue(keys.SWITCHOVER, rec.encode(), 5, 5, 1)

    view, problem = switchover_view(kv(SwitchoverRecord(to="s2", by="op@x")), None)
    assert view.action == "switchover" and problem.code == "intent_pending"
    assert "switchover to s2 by op@x: not answered yet" in problem.message
    _, problem = switchover_view(kv(SwitchoverRecord(to="s2", granted_by="s1")), None)
    assert "handed over by s1 to s2" in problem.message
    _, problem = switchover_view(KeyValue(keys.SWITCHOVER, b"{}", 5, 5, 1), None)
    assert problem.code == "intent_corrupt"
