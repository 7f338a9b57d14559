"""The campaign's pure parts: schedule, invariant checkers (each shown to fail), report,
gateway line parsing. No processes, no etcd."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from awide_cluster.contract import registry as regdoc
from awide_cluster.contract.records import LeaderRecord
from awide_cluster.contract.registry import CardEntry, Registry
from tests.faults import invariants as inv
from tests.faults import poison as hostile
from tests.faults.campaign_record import (
    AccessObs,
    FaultRecord,
    GatewayTable,
    History,
    KeyEvent,
    LogLine,
    PollObs,
    RunnerWrite,
    SlotObs,
    Truth,
    TruthChange,
    log_around,
)
from tests.faults.gateway_probe import parse_line
from tests.faults.report import build, markdown, summary
from tests.faults.schedule import KINDS, ScheduleError, kinds_missing, make_schedule

B = inv.bounds_for(gateway_poll=0.25, gateway_call=0.2, daemon_poll=0.25, lease_ttl=2,
                   sick_polls=3, slack=0.5, process_start=3.0)
GWS = ("g1", "g2")


# ---------------------------------------------------------------- builders

def card(cid: str, state: regdoc.State = "in") -> CardEntry:
    return CardEntry(id=cid, serial=f"SN-{cid}", model="m", identity=f"label:{cid}", host="s1",
                     name=cid, kind="dir", state=state, health="ok", reason="", admitted=1,
                     changed_generation=1, path=f"/x/{cid}")


def reg_value(gen: int, leader: str, states: dict[str, regdoc.State]) -> bytes:
    cards = tuple(card(c, s) for c, s in states.items())
    return regdoc.encode(regdoc.with_slots(Registry(cluster="c", generation=gen, leader=leader,
                                                    cards=cards)))


def leader_put(rev: int, host: str, t: float = 0.0) -> KeyEvent:
    return KeyEvent(rev, "leader", "put", LeaderRecord(host=host, since="").encode(), rev, 7, t)


def registry_put(rev: int, gen: int, leader: str, states: dict[str, regdoc.State],
                 t: float = 0.0) -> KeyEvent:
    return KeyEvent(rev, "registry", "put", reg_value(gen, leader, states), 2, 0, t)


def table(t: float, gw: str, gen: int, ins: dict[str, bool], device: str | None = None
          ) -> GatewayTable:
    slots = tuple(SlotObs(i, c, ok, device=device) for i, (c, ok) in enumerate(sorted(ins.items())))
    return GatewayTable(t, gw, gen, slots)


def record(*, events=(), tables=None, faults=(), truth=(), polls=(), access=(),
           expected=frozenset({"a", "b"})):
    h = History(GWS, t0=0.0)
    h.expected_in = frozenset(expected)
    for e in events:
        h.add(e)
        if e.key == "registry" and e.kind == "put":
            h.add(inv.registry_rev(e.value, e.revision, e.t))
    for rows in (tables or {}).values():
        for r in rows:
            h.add(r)
    for x in (*faults, *truth, *polls, *access):
        h.add(x)
    return h.frozen()


BOTH: dict[str, regdoc.State] = {"a": "in", "b": "in"}


# ---------------------------------------------------------------- schedule

def test_schedule_is_a_function_of_the_seed_and_covers_every_kind():
    a = make_schedule(7, 40)
    assert a == make_schedule(7, 40)
    assert a != make_schedule(8, 40)
    assert len(a) == 40 and not kinds_missing(a)
    assert [f.index for f in a] == list(range(40))
    quick = make_schedule(7, 1, quick=True)
    assert sorted(f.kind for f in quick) == sorted(KINDS)
    assert all(f.hold == max(f.hold, 0) for f in quick)
    assert kinds_missing(make_schedule(7, 3)) != []


def test_schedule_refuses_nonsense():
    with pytest.raises(ScheduleError, match="unknown fault kind"):
        make_schedule(1, 5, kinds=("nope",))
    with pytest.raises(ScheduleError, match="at least 1"):
        make_schedule(1, 0)


# ---------------------------------------------------------------- 1 fencing, 7 registry

def test_fencing_holds_when_the_registry_names_the_leader_key_holder():
    rec = record(events=[leader_put(2, "s1"), registry_put(3, 1, "s1", BOTH),
                         leader_put(5, "s2"), registry_put(6, 2, "s2", BOTH)])
    res = inv.check_fencing(rec.key_events)
    assert res.checks["fencing"] == 2 and not res.violations


def test_fencing_fails_for_a_write_by_a_deposed_leader_or_without_a_leader():
    deposed = inv.check_fencing(record(events=[
        leader_put(2, "s1"), KeyEvent(4, "leader", "delete", b"", 0, 0),
        leader_put(5, "s2"), registry_put(6, 2, "s1", BOTH)]).key_events)
    assert [v.invariant for v in deposed.violations] == ["fencing"]
    assert "held by 's2'" in deposed.violations[0].what
    nobody = inv.check_fencing(record(events=[registry_put(3, 1, "s1", BOTH)]).key_events)
    assert "nobody held" in nobody.violations[0].what


def test_registry_must_decode_and_never_go_back():
    bad = KeyEvent(7, "registry", "put", b'{"schema": 1, "cluster"', 2, 0)
    res = inv.check_registry(record(events=[
        registry_put(3, 5, "s1", BOTH), registry_put(4, 4, "s1", BOTH), bad,
        KeyEvent(8, "registry", "delete", b"", 0, 0)]).key_events, {})
    whats = " | ".join(v.what for v in res.violations)
    assert "went back from 5 to 4" in whats and "does not decode" in whats
    assert "deleted" in whats and res.checks["registry"] == 4
    gw = inv.check_registry((), {"g1": (table(1, "g1", 3, {}), table(2, "g1", 2, {}))})
    assert "gateway g1 went back" in gw.violations[0].what


# ---------------------------------------------------------------- 2 agreement

def _agreeing(t: float, gen: int) -> dict[str, list[GatewayTable]]:
    return {g: [table(t, g, gen, {"a": True, "b": True})] for g in GWS}


def test_settled_at_is_the_start_of_the_agreement_the_campaign_moved_on_with():
    events = [leader_put(1, "s1", 0.0), registry_put(2, 1, "s1", BOTH, 0.1),
              registry_put(3, 2, "s1", {"a": "out", "b": "in"}, 5.0),
              registry_put(4, 3, "s1", BOTH, 6.0)]
    tables = {g: [table(0.2, g, 1, {"a": True, "b": True}),
                  table(5.1, g, 2, {"a": False, "b": True}),
                  table(6.5 if g == "g2" else 6.1, g, 3, {"a": True, "b": True})] for g in GWS}
    fault = FaultRecord(0, "store_death", "s1/a", 1.0, t_inject=3.0, t_heal=4.0)
    rec = record(events=events, tables=tables, faults=[fault])
    # agreed at the heal (4.0), then the late effect at 5.0, agreed again at 6.5 (g2 last)
    assert inv.settled_at(rec, 4.0, 10.0) == 6.5
    res = inv.check_agreement(rec, B, end=10.0)
    assert not res.violations and res.heal_times[0] == pytest.approx(2.5)
    # the campaign moved on while a card was still out: a violation
    res = inv.check_agreement(rec, B, end=5.5)
    assert "not healed and agreed" in res.violations[0].what
    # healed, but later than the bound
    slow = FaultRecord(0, "store_death", "s1/a", 1.0, t_inject=-20.0, t_heal=6.5 - B.agree - 1)
    res = inv.check_agreement(record(events=events, tables=tables, faults=[slow]), B, end=10.0)
    assert "bound" in res.violations[0].what


def test_agreement_needs_every_gateway_on_the_registry_and_renamed_devices_new():
    reg = inv.registry_rev(reg_value(4, "s1", BOTH), 9, 1.0)
    tabs = {g: table(1.0, g, 4, {"a": True, "b": True}, device="/dev/nvme3n1") for g in GWS}
    assert inv.agreed(reg, tabs, GWS, frozenset({"a", "b"})) == ""
    assert "generation 3" in inv.agreed(reg, {**tabs, "g2": table(1, "g2", 3, {})}, GWS,
                                        frozenset({"a", "b"}))
    assert "not in ['c']" in inv.agreed(reg, tabs, GWS, frozenset({"a", "b", "c"}))
    assert "new device name" in inv.agreed(reg, tabs, GWS, frozenset({"a", "b"}),
                                           (("g1", "a", "/dev/nvme3n1"),))


# ---------------------------------------------------------------- 3 no partial restore

def _out_case(gw2_rows):
    events = [leader_put(1, "s1", 0), registry_put(2, 1, "s1", BOTH, 0.1),
              registry_put(3, 2, "s1", {"a": "out", "b": "in"}, 10.0),
              registry_put(4, 3, "s1", BOTH, 20.0)]
    tables = {"g1": [table(0.2, "g1", 1, {"a": True, "b": True}),
                     table(10.2, "g1", 2, {"a": False, "b": True}),
                     table(20.1, "g1", 3, {"a": True, "b": True})],
              "g2": gw2_rows}
    return record(events=events, tables=tables)


def test_a_gateway_must_stop_using_a_card_the_registry_took_out():
    ok = _out_case([table(0.2, "g2", 1, {"a": True, "b": True}),
                    table(10.9, "g2", 2, {"a": False, "b": True}),
                    table(19.99, "g2", 3, {"a": True, "b": True})])   # applied the return early
    assert not inv.check_out_bound(ok, B).violations
    late = _out_case([table(0.2, "g2", 1, {"a": True, "b": True}),
                      table(14.0, "g2", 2, {"a": False, "b": True})])
    res = inv.check_out_bound(late, B)
    assert len(res.violations) == 1 and "gateway g2 still had card a" in res.violations[0].what


def test_a_card_is_put_back_only_while_it_is_itself_at_its_place():
    truth = (TruthChange(5.0, "a", False), TruthChange(8.0, "a", True))
    tables = {"g1": [table(1, "g1", 1, {"a": True}), table(5.1, "g1", 1, {"a": False}),
                     table(8.05, "g1", 1, {"a": True})],
              "g2": [table(1, "g2", 1, {"a": True}), table(5.2, "g2", 1, {"a": False}),
                     table(7.0, "g2", 1, {"a": True})]}        # back while another card is there
    rec = record(tables=tables, truth=truth)
    res = inv.check_restore_identity(rec, Truth.of(rec.truth), B)
    assert [v.what.split()[1] for v in res.violations] == ["g2"]


# ---------------------------------------------------------------- 4 identity

def test_no_gateway_uses_a_card_after_another_took_its_place():
    truth = (TruthChange(5.0, "a", False), TruthChange(9.0, "a", True))
    tables = {"g1": [table(1, "g1", 1, {"a": True}), table(5.3, "g1", 1, {"a": False})],
              "g2": [table(1, "g2", 1, {"a": True})]}           # never noticed
    rec = record(tables=tables, truth=truth)
    res = inv.check_identity(rec, Truth.of(rec.truth), B, end=20.0)
    assert len(res.violations) == 1 and "gateway g2 used card a" in res.violations[0].what
    assert res.checks["identity"] == 2


# ---------------------------------------------------------------- 5 bounded

def test_polls_and_accessors_are_bounded():
    rec = record(polls=[PollObs(1, "g1", 0.1, True), PollObs(2, "g2", B.poll + 0.1, False)],
                 access=[AccessObs(1, "g1", 0.001, 0.01, 50), AccessObs(2, "g1", 0.9, 0.9, 3)])
    res = inv.check_bounded(rec, B)
    assert res.checks["bounded"] == 4 and len(res.violations) == 2


# ---------------------------------------------------------------- 6 last known state

def test_no_card_is_dropped_during_quorum_loss():
    f = FaultRecord(0, "etcd_quorum_loss", "etcd0+etcd1", 2.0, t_inject=10.0, t_heal=12.0,
                    t_restored=12.5)
    tables = {"g1": [table(1, "g1", 1, {"a": True, "b": True})],
              "g2": [table(1, "g2", 1, {"a": True, "b": True}),
                     table(11, "g2", 1, {"a": True, "b": False})]}
    rec = record(tables=tables, faults=[f])
    res = inv.check_last_known(rec, Truth.of(()))
    assert res.checks["last_known_state"] == 2
    assert len(res.violations) == 1 and "g2 dropped ['b']" in res.violations[0].what


# ---------------------------------------------------------------- 8 detection

def test_a_dead_store_is_detected_and_the_leader_can_write():
    events = [leader_put(1, "s1", 0), registry_put(2, 1, "s1", BOTH, 0.1)]
    f = FaultRecord(0, "store_death", "s1/a", 3.5, t_inject=1.0, t_heal=4.5, cards=("a",),
                    leader_ok=False)
    tables = {g: [table(0.2, g, 1, {"a": True, "b": True})] for g in GWS}
    res = inv.check_detection(record(events=events, tables=tables, faults=[f]), B)
    whats = " | ".join(v.what for v in res.violations)
    assert "did not take card a out" in whats and "not leading" in whats
    events.append(registry_put(3, 2, "s1", {"a": "out", "b": "in"}, 2.0))
    tables["g1"].append(table(2.1, "g1", 2, {"a": False, "b": True}))
    f.leader_ok = True
    res = inv.check_detection(record(events=events, tables=tables, faults=[f]), B)
    assert [v.what.split(": ")[1].split()[1] for v in res.violations] == ["g2"]


# ---------------------------------------------------------------- 9 write outage

def test_no_card_goes_out_during_or_right_after_a_write_outage():
    f = FaultRecord(0, "etcd_refuses_writes", "etcd", 2.0, t_inject=10.0, t_heal=12.0)
    events = [leader_put(1, "s1", 0), registry_put(2, 1, "s1", BOTH, 0.1)]
    tables = {g: [table(0.2, g, 1, {"a": True, "b": True})] for g in GWS}
    res = inv.check_write_outage(record(events=events, tables=tables, faults=[f]), B, end=30.0)
    assert res.checks["write_outage"] == 3 and not res.violations
    # the leader's first write after the outage carries its stale counts: a card goes out
    late = 12.0 + B.detect / 2
    events.append(registry_put(3, 2, "s1", {"a": "out", "b": "in"}, late))
    tables["g2"].append(table(late + 0.1, "g2", 2, {"a": False, "b": True}))
    res = inv.check_write_outage(record(events=events, tables=tables, faults=[f]), B, end=30.0)
    whats = [v.what for v in res.violations]
    assert len(whats) == 2 and "generation 2 took ['a'] out" in whats[0]
    assert "gateway g2 took ['a'] out of service" in whats[1]
    # a card going out well after the outage is not this invariant's business
    f2 = FaultRecord(0, "etcd_refuses_writes", "etcd", 2.0, t_inject=10.0,
                     t_heal=late - B.detect - 0.5)
    res = inv.check_write_outage(record(events=events, tables=tables, faults=[f2]), B, end=30.0)
    assert not res.violations


# ---------------------------------------------------------------- all, report

def test_check_all_attributes_violations_to_faults_and_the_report_shows_them():
    events = [leader_put(1, "s1", 0), registry_put(2, 1, "s2", BOTH, 5.0)]   # fencing broken
    f = FaultRecord(0, "daemon_kill", "s2", 1.0, t_inject=4.0, t_heal=5.0)
    tables = _agreeing(5.1, 1)
    h_rec = record(events=events, tables=tables, faults=[f],
                   polls=[PollObs(5.2, "g1", 0.01, True)])
    from dataclasses import replace
    rec = replace(h_rec, log=(LogLine(4.9, "etcd", "registry gen 1"),))
    res = inv.check_all(rec, B, end=9.0)
    assert set(res.checks) == set(inv.INVARIANTS)
    assert [(v.invariant, v.fault) for v in res.violations] == [("fencing", 0)]
    report = build(seed=5, requested=1, quick=False, mode="loopback", mode_note="test",
                   rec=rec, result=res, bounds=B, timing={}, started=0.0, ended=9.0,
                   topology={}, replay="make faults SEED=5 FAULTS=1")
    assert report["violations_total"] == 1 and report["kinds"]["daemon_kill"]["injected"] == 1
    v = report["violations"][0]
    assert v["seed"] == 5 and v["fault_kind"] == "daemon_kill" and "registry gen 1" in v["log"][0]
    json.dumps(report)
    assert "| daemon_kill | 1 |" in markdown(report)
    assert "VIOLATION fencing" in summary(report) and "1 violation(s)" in summary(report)


def test_log_around_keeps_the_lines_nearest_the_moment():
    lines = tuple(LogLine(float(i), "x", f"line {i}") for i in range(100))
    got = log_around(lines, 50.0, before=10, after=10, limit=5)
    assert [g.split()[-1] for g in got] == ["48", "49", "50", "51", "52"]


# ---------------------------------------------------------------- gateway lines

def test_gateway_lines_parse_into_records():
    t = parse_line(json.dumps({"type": "table", "t": 3.5, "gateway": "g1", "generation": 4,
                               "slots": [{"slot": 2, "card": "a", "in": True, "serial": "S",
                                          "model": "M", "device": "/dev/nvme1n1", "why": ""}]}))
    assert isinstance(t, GatewayTable) and t.in_service == {"a"} and t.table[2] == "a"
    p = parse_line(b'{"type": "poll", "t": 1, "gateway": "g1", "dur": 0.01, "ok": false}')
    assert p == PollObs(1.0, "g1", 0.01, False)
    a = parse_line('{"type": "access", "t": 1, "gateway": "g1", "accessor_max": 0.001, '
                   '"loop_lag_max": 0.02, "calls": 40}')
    assert isinstance(a, AccessObs) and a.calls == 40
    assert parse_line("not json") is None
    assert parse_line('{"type": "started", "t": 1, "gateway": "g1"}') is None
    assert parse_line('{"type": "table", "t": 1}') is None


def test_a_gateway_ahead_of_the_runners_watch_is_compared_with_that_revision():
    old = inv.registry_rev(reg_value(4, "s1", BOTH), 9, 1.0)
    new = inv.registry_rev(reg_value(5, "s1", BOTH), 10, 2.0)   # the runner sees it at 2.0
    tabs = {"g1": table(1.5, "g1", 5, {"a": True, "b": True}),
            "g2": table(1.6, "g2", 5, {"a": True, "b": True})}
    expected = frozenset({"a", "b"})
    assert "generation 5, registry 4" in inv.agreed(old, tabs, GWS, expected)
    assert inv.agreed(old, tabs, GWS, expected, ahead={4: old, 5: new}) == ""
    tabs["g2"] = table(1.6, "g2", 4, {"a": True, "b": True})
    assert "generation 4, registry 5" in inv.agreed(old, tabs, GWS, expected,
                                                     ahead={4: old, 5: new})


# ---------------------------------------------------------------- written by hand (poison)

def hand(rev: int, key: str, kind: str = "put", forged: tuple[str, ...] = (),
         t: float = 0.0) -> RunnerWrite:
    return RunnerWrite(t, rev, key, kind, 0, f"test {kind}", forged)


def moved_value(gen: int, leader: str) -> bytes:
    """``BOTH`` with its two cards in each other's slots."""
    reg = regdoc.decode(reg_value(gen, leader, BOTH))
    slots = list(reg.slots.slots)
    slots[0], slots[1] = slots[1], slots[0]
    return regdoc.encode(replace(reg, slots=replace(reg.slots, slots=tuple(slots))))


def test_every_poison_value_is_refused_by_the_checkers_decoders_with_their_typed_error():
    reg = regdoc.decode(reg_value(5, "s1", BOTH))
    values = [hostile.poison(p, cluster="c", hosts=("s1", "s2", "w1"), leader="s1",
                             card_ids=("a", "b"), generation=5) for p in range(8 * 12)]
    assert {v.key.split("/")[0] for v in values} >= {"registry", "members", "leader", "intents",
                                                      "gateways", "layouts", "zzz"}
    assert max(len(v.value) for v in values) >= hostile.BIG
    for p in values:
        assert "\n" not in p.note and "POISON" not in p.note
        rev = inv.registry_rev(p.value, 3, 1.0)         # never raises, whatever the value
        assert rev.generation is None and rev.error
        rev.error.encode("utf-8")                        # printable in any log or report
        held = LeaderRecord.decode(p.value)             # never raises either
        if p.key == "leader":
            assert held is None or held.host != "s1"    # forged: not the holder
    value, forged = hostile.forged_registry(reg, 3, ("s1", "s2", "w1"), pick=1)
    fake = regdoc.decode(value)
    assert fake.generation == 5 + hostile.AHEAD and set(forged) <= set(fake.by_id)
    assert {c.host for c in fake.cards if c.id in forged} == {"s2", "s9"}
    assert all(fake.by_id[c].target.traddr.startswith("127.") for c in forged)
    assert set(fake.slots.slots[:2]) == set(forged)    # the real cards moved behind them
    for pick in (0, 1):
        p = hostile.stranger_report(pick, 4, reg)
        assert p.key.startswith("members/") and p.key.split("/")[1] in hostile.STRANGERS
        assert b"127.66.6.7" in p.value and b"10." not in p.value and p.forged_cards


def test_fencing_leaves_out_exactly_the_runners_writes():
    forged_leader = KeyEvent(4, "leader", "put", LeaderRecord(host="w9", since="").encode(), 2, 0)
    events = [leader_put(2, "s1"), registry_put(3, 1, "s1", BOTH), forged_leader,
              registry_put(5, 2, "s1", BOTH), leader_put(6, "s1"), registry_put(7, 3, "s1", BOTH)]
    rec = record(events=events)
    broken = inv.check_fencing(rec.key_events)
    assert ["held by 'w9'" in v.what for v in broken.violations] == [True]
    ok = inv.check_fencing(rec.key_events, (hand(4, "leader"),))
    assert ok.checks["fencing"] == 3 and not ok.violations
    # a registry the runner wrote is not checked; one the cluster wrote while nobody held
    # the key still fails
    forged = KeyEvent(8, "registry", "put", reg_value(9, "w9", BOTH), 2, 0)
    res = inv.check_fencing((*rec.key_events, forged), (hand(4, "leader"), hand(8, "registry")))
    assert not res.violations and res.checks["fencing"] == 3
    alone = inv.check_fencing((KeyEvent(2, "leader", "put", b"x", 2, 0),
                               registry_put(3, 1, "s1", BOTH)), (hand(2, "leader"),))
    assert "nobody held" in alone.violations[0].what


def test_after_a_hand_write_the_cluster_repairs_the_registry_with_no_slot_moved():
    bad = KeyEvent(4, "registry", "put", b"\xff\xfe garbage", 2, 0)
    forged = KeyEvent(4, "registry", "put", reg_value(500, "s1", {**BOTH, "x": "in"}), 2, 0)
    gone = KeyEvent(4, "registry", "delete", b"", 0, 0)
    for hit, kind in ((bad, "put"), (forged, "put"), (gone, "delete")):
        good = [registry_put(3, 5, "s1", BOTH), hit, registry_put(5, 501, "s1", BOTH)]
        res = inv.check_registry(tuple(good), {}, (hand(4, "registry", kind, ("x",)),))
        assert not res.violations, res.violations
        assert res.checks["registry"] == 2 + 1 + 1      # 2 revisions, the repair, no forged
        # without the record, the runner's write is the cluster's: corrupt or deleted
        assert bool(inv.check_registry(tuple(good), {}).violations) == (hit is not forged)
    low = [registry_put(3, 5, "s1", BOTH), forged, registry_put(5, 6, "s1", BOTH)]
    res = inv.check_registry(tuple(low), {}, (hand(4, "registry", "put", ("x",)),))
    assert "generation not above 500" in res.violations[0].what
    moved = [registry_put(3, 5, "s1", BOTH), bad,
             KeyEvent(5, "registry", "put", moved_value(6, "s1"), 2, 0)]
    res = inv.check_registry(tuple(moved), {}, (hand(4, "registry"),))
    assert "repaired, but slots moved" in res.violations[0].what
    kept = [registry_put(3, 5, "s1", BOTH), forged,
            registry_put(5, 501, "s1", {**BOTH, "x": "out"})]
    res = inv.check_registry(tuple(kept), {}, (hand(4, "registry", "put", ("x",)),))
    assert "forged card(s) ['x']" in " ".join(v.what for v in res.violations)
    # a forged card from a report under another key counts too
    res = inv.check_registry((registry_put(3, 5, "s1", BOTH),
                              registry_put(5, 6, "s1", {**BOTH, "x": "in"})), {},
                             (hand(4, "members/intruder", "put", ("x",)),))
    assert "forged card(s) ['x']" in res.violations[0].what


def test_no_gateway_uses_a_forged_card_past_the_bound():
    forged = KeyEvent(4, "registry", "put", reg_value(500, "s1", {**BOTH, "x": "in"}), 2, 0, 1.0)
    w = hand(4, "registry", "put", ("x",), t=0.9)
    tables = {"g1": [table(1.1, "g1", 500, {"a": True, "b": True, "x": True}),
                     table(1.0 + B.forged - 0.1, "g1", 501, {"a": True, "b": True})],
              "g2": [table(1.1, "g2", 500, {"a": True, "b": True, "x": True}),
                     table(1.0 + B.forged + 0.2, "g2", 501, {"a": True, "b": True})]}
    rec = record(events=[registry_put(3, 5, "s1", BOTH), forged], tables=tables)
    res = inv.check_forged_unused(replace(rec, writes=(w,)), B)
    assert res.checks["registry"] == 2
    assert [v.what.split()[1] for v in res.violations] == ["g2"]
    assert B.forged > B.out


def test_history_and_report_survive_hostile_values():
    h = History(GWS)
    h.add(hand(4, "zzz/\udcff", "put"))
    h.add(LogLine(1.0, "runner", "key zzz/\udcff"))
    assert h.frozen().writes[0].key == "zzz/\udcff"
    assert h.key_events_since("registry", 0.0) == []


def test_the_recorder_takes_poison_at_its_keys_without_raising():
    from awide_cluster.store import StoreConfig
    from tests.faults.recorder import RECORDER_ANSWER_BYTES, Recorder

    got: list[object] = []
    r = Recorder(StoreConfig(endpoints=("http://127.0.0.1:9",), prefix="/awide/c/"), got.append,
                 dict)
    try:
        assert r.config.max_answer_bytes == RECORDER_ANSWER_BYTES
        values = {hostile.poison(p, cluster="c", hosts=("s1", "s2", "w1"), leader="s1",
                                 card_ids=("a",), generation=5).value for p in range(8 * 12)}
        for i, value in enumerate(sorted(values), start=2):
            for key in ("registry", "leader"):
                r.take(KeyEvent(i, key, "put", value, 1, 0, float(i)))
            r.take(KeyEvent(i, "registry", "delete", b"", 0, 0, float(i)))
    finally:
        r.stop()
    lines = [x for x in got if isinstance(x, LogLine)]
    assert len(lines) == 3 * len(values) and r.last == {"registry": i, "leader": i}
    assert all("DOES NOT DECODE" in x.text for x in lines if x.text.startswith("registry rev"))
    for x in lines:
        x.render().encode("utf-8")          # every line is printable as it is
