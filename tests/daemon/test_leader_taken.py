"""A leader whose key is deleted while its lease lives knows it was taken, and says by whom as
the new key says (pure: the Leadership's view of the key, no etcd)."""

from __future__ import annotations

from typing import Any, cast

from awide_cluster.contract.records import LeaderRecord
from awide_cluster.daemon.lease import HostLease, Leadership
from awide_cluster.store.types import KeyValue
from tests.daemon.conftest import FakeClock


def leading(clock: FakeClock) -> tuple[HostLease, Leadership]:
    lease = HostLease(cast(Any, None), clock, ttl=5, call_timeout=0.5)
    lease.id, lease.confirmed_at = 0x51, clock.monotonic()
    ld = Leadership(cast(Any, None), lease, clock, host="s1", run="r1", call_timeout=0.5)
    ld.revision = 10
    ld.record = ld.holder = LeaderRecord(host="s1", since="t", run="r1")
    return lease, ld


def key(host: str, rev: int, lease: int) -> KeyValue:
    return KeyValue("leader", LeaderRecord(host=host, since="t").encode(), rev, rev, 1, lease)


def test_a_key_deleted_while_the_lease_lives_is_taken_and_its_new_holder_named() -> None:
    clock = FakeClock()
    _, ld = leading(clock)
    ld.observe_key(None)                    # the watch's read after the delete
    assert not ld.has_key and ld.taken is not None
    assert "now held by not seen yet" in ld.taken_note
    ld.seen_holder(key("s2", 14, 0x99))     # the campaign's read: someone else's key
    assert "now held by s2 (the key's value), lease 99, key revision 14" in ld.taken_note
    assert "revision 10 deleted while the lease of s1 lived" in ld.taken_note


def test_the_note_names_the_holder_now_when_the_key_changes_hands() -> None:
    """A daemon campaigned between a taker's delete and its create, then the taker deleted
    that key and created its own: the note names the key as it is now, not the first seen."""
    clock = FakeClock()
    _, ld = leading(clock)
    ld.observe_key(None)
    ld.seen_holder(key("s3", 14, 0x55))
    assert "now held by s3" in ld.taken_note
    ld.seen_holder(key("s3", 14, 0x55))     # the same key read again: unchanged
    ld.seen_holder(key("s2", 16, 0x99))
    assert "now held by s2 (the key's value), lease 99, key revision 16" in ld.taken_note
    assert "s3" not in ld.taken_note and ld.takings == 1


def test_another_key_seen_at_once_is_taken_too() -> None:
    clock = FakeClock()
    _, ld = leading(clock)
    ld.observe_key(key("w1", 12, 0x77))
    assert "now held by w1" in ld.taken_note and ld.takings == 1


def test_a_key_gone_with_the_lease_expired_is_no_taking() -> None:
    clock = FakeClock()
    _, ld = leading(clock)
    clock.advance(10)                       # the lease is past TTL - margin: it may be gone
    ld.observe_key(None)
    assert not ld.has_key and ld.taken is None and ld.taken_note == ""


def test_our_own_key_is_no_taking() -> None:
    clock = FakeClock()
    lease, ld = leading(clock)
    ld.observe_key(KeyValue("leader", LeaderRecord(host="s1", since="t", run="r1").encode(),
                            10, 11, 2, lease.id or 0))
    assert ld.has_key and ld.taken is None


def test_the_taking_goes_into_the_history_and_status() -> None:
    from awide_cluster.contract import report as reportdoc
    from awide_cluster.contract.records import GatewayRecord
    from awide_cluster.contract.registry import Registry
    from awide_cluster.contract.report import HostReport
    from awide_cluster.daemon.history_entries import entries
    from awide_cluster.operator.judge.daemons import judge_report
    from awide_cluster.operator.judge.gateways import refusals
    from awide_cluster.operator.snapshot import StatusPolicy

    note = "leadership taken at t: ...; now held by s2 (the key's value), lease 99"
    reg = Registry(cluster="c", generation=3, leader="w1", cards=())
    (e,) = [e for e in entries(reg, reg, leader="w1", taken={"s1": note}) if e.host == "s1"]
    assert e.kind == "leader" and e.reason == f"s1: {note}"
    report = HostReport(host="s1", role="storage", version="v", api="", run="r", seq=1,
                        leader_note=note)
    kv = KeyValue("members/s1", reportdoc.encode(report), 1, 1, 1)
    _, _, problems = judge_report("s1", kv, None, "w1", StatusPolicy())
    (p,) = [p for p in problems if p.code == "leader_taken"]
    assert note in p.message and not p.holds
    g = GatewayRecord(id="g1", host="h", pod="p", namespace="n", placement="dialog",
                      fingerprint="f", generation=3, engine=None, version="v", refused=3,
                      refusing=1, last_refusal="registry generation 3 written by s2: card x")
    now = refusals(g)
    assert now.code == "registry_forged" and now.holds and "written by s2" in now.message
    from dataclasses import replace
    past = refusals(replace(g, refusing=0))
    assert past.code == "entries_refused" and not past.holds
    from awide_cluster.contract.records import decode_gateway
    assert decode_gateway(g.encode(), "g1") == g
