"""The leader's pure decision (daemon/reconcile.py), driven cycle by cycle."""

from __future__ import annotations

from awide_cluster.contract import registry as regdoc
from awide_cluster.daemon.reconcile import Intent

from .builders import Leader, card, cid, entry, report

A = cid("SNA")


def test_first_cycle_admits_and_writes_generation_1() -> None:
    L = Leader()
    d = L.step(report("h2", 1, card("card0", "SNA")))
    assert d.write and d.registry.generation == 1
    c = entry(d.registry, A)
    assert (c.state, c.health, c.host, c.name, c.admitted) == ("in", "ok", "h2", "card0", 1)
    assert d.registry.slots.slot_of(A) == 0
    assert any("admitted as in" in line and A in line for line in d.log)
    assert regdoc.decode(regdoc.encode(d.registry)) == d.registry


def test_empty_cluster_writes_an_empty_registry_once() -> None:
    L = Leader()
    assert L.step(report("h1", 1)).write
    assert not L.step(report("h1", 2)).write
    assert L.written.cards == () and L.written.generation == 1


def test_out_after_exactly_n_bad_polls_back_after_one_good() -> None:
    L = Leader(sick_polls=3)
    L.step(report("h2", 1, card("card0", "SNA")))
    sick = card("card0", "SNA", healthy=False, reason="store unit inactive")
    L.step(report("h2", 2, sick))
    assert L.state(A) == "in" and entry(L.registry, A).health == "sick"
    L.step(report("h2", 3, sick))
    assert L.state(A) == "in"
    d = L.step(report("h2", 4, sick))
    assert L.state(A) == "out"
    assert any(f"card {A} (SNA on h2) out: 3 bad polls in a row, last: store unit inactive"
               == line for line in d.log)
    assert entry(L.registry, A).changed_generation == L.written.generation
    assert L.written.slots.slot_of(A) == 0          # an out card keeps its slot
    d = L.step(report("h2", 5, card("card0", "SNA")))
    assert L.state(A) == "in" and entry(L.registry, A).health == "ok"
    assert any("in: healthy again" in line for line in d.log)


def test_one_good_poll_resets_the_count() -> None:
    L = Leader(sick_polls=3)
    L.step(report("h2", 1, card("card0", "SNA")))
    sick = card("card0", "SNA", healthy=False, reason="x")
    seq = 2
    for pattern in ([sick, sick, card("card0", "SNA")] * 3):
        L.step(report("h2", seq, pattern))
        seq += 1
        assert L.state(A) == "in"


def test_report_not_advancing_is_bad() -> None:
    L = Leader(sick_polls=3)
    L.step(report("h2", 1, card("card0", "SNA")))
    L.step(report("h2", 2, card("card0", "SNA")))
    d = L.step(report("h2", 2, card("card0", "SNA")))
    # one stale report counts, but the registry does not show it (polling jitter) ...
    assert not d.write and entry(L.registry, A).health == "ok"
    d = L.step(report("h2", 2, card("card0", "SNA")))
    # ... the second in a row does
    assert d.write and L.state(A) == "in"
    assert "did not advance" in entry(L.registry, A).reason
    L.step(report("h2", 2, card("card0", "SNA")))
    assert L.state(A) == "out"
    # a restarted daemon (new run, seq from 0) is fresh
    L.step(report("h2", 0, card("card0", "SNA"), run="run2"))
    assert L.state(A) == "in"


def test_alternating_stale_reports_never_write() -> None:
    """Two hosts polling at the same phase: 0 or 2 reports between two leader cycles."""
    L = Leader(sick_polls=2)
    L.step(report("h2", 1, card("card0", "SNA")))
    seq = 1
    for i in range(10):
        seq += 2 if i % 2 else 0
        L.step(report("h2", seq, card("card0", "SNA")))
    assert L.writes == 1 and L.state(A) == "in"


def test_missing_report_and_corrupt_report_are_bad() -> None:
    L = Leader(sick_polls=2)
    L.step(report("h2", 1, card("card0", "SNA")))
    L.step()
    assert "no report from h2" in entry(L.registry, A).reason
    L.step(bad={"h2": "host report is not JSON"})
    assert L.state(A) == "out"
    assert "unreadable: host report is not JSON" in entry(L.registry, A).reason


def test_card_missing_from_its_hosts_report_and_not_found() -> None:
    L = Leader(sick_polls=2)
    L.step(report("h2", 1, card("card0", "SNA")))
    L.step(report("h2", 2))
    assert entry(L.registry, A).reason == "not in the report of h2"
    L.step(report("h2", 3, card("card0", "SNA", found=False, reason="no label")))
    assert L.state(A) == "out"
    assert entry(L.registry, A).reason == "not found on h2: no label"


def test_registry_written_only_on_change() -> None:
    L = Leader()
    for seq in range(1, 8):
        L.step(report("h2", seq, card("card0", "SNA"), card("card1", "SNB")))
    assert L.writes == 1 and L.written.generation == 1
    sick = card("card1", "SNB", healthy=False, reason="probe failed")
    for seq in range(8, 14):          # health flips once, state once: two writes
        L.step(report("h2", seq, card("card0", "SNA"), sick))
    assert L.writes == 3 and L.written.generation == 3


def test_new_leader_counts_no_bad_observation_in_its_first_cycle() -> None:
    L = Leader(sick_polls=1)
    L.step(report("h2", 1, card("card0", "SNA")))
    L.new_leader()
    d = L.step(report("h2", 1, card("card0", "SNA")))    # same (run, seq) as before
    assert L.state(A) == "in" and not d.write
    d = L.step(report("h2", 1, card("card0", "SNA")))    # now it did not advance: bad
    assert L.state(A) == "out"


def test_new_leader_puts_a_healthy_card_back_in_first_cycle() -> None:
    L = Leader(sick_polls=1)
    L.step(report("h2", 1, card("card0", "SNA")))
    L.step(report("h2", 2, card("card0", "SNA", healthy=False, reason="x")))
    assert L.state(A) == "out"
    L.new_leader()
    L.step(report("h2", 3, card("card0", "SNA")))
    assert L.state(A) == "in"


def test_new_leader_first_cycle_missing_card_counts_nothing() -> None:
    L = Leader(sick_polls=1)
    L.step(report("h2", 1, card("card0", "SNA")))
    L.new_leader()
    L.step()
    assert L.state(A) == "in"
    L.step()
    assert L.state(A) == "out"


def test_swapped_label_is_a_new_card_and_the_old_one_goes_out() -> None:
    L = Leader(sick_polls=2)
    L.step(report("h2", 1, card("card0", "SNA")))
    swapped = card("card0", "SNZ")
    Z = cid("SNZ")
    d = L.step(report("h2", 2, swapped))
    assert L.state(Z) == "in" and L.written.slots.slot_of(Z) == 1
    assert "now holds another card (serial SNZ)" in entry(L.registry, A).reason
    L.step(report("h2", 3, swapped))
    assert L.state(A) == "out" and L.written.slots.slot_of(A) == 0
    assert any(Z in line and "admitted" in line for line in d.log)


def test_same_serial_new_identity_is_a_conflict_never_merged() -> None:
    L = Leader()
    L.step(report("h2", 1, card("card0", "SNA")))
    other = card("card1", "SNA", identity="another-uuid")
    B = cid("SNA", "another-uuid")
    d = L.step(report("h2", 2, card("card0", "SNA")), report("h3", 1, other))
    a, b = entry(L.registry, A), entry(L.registry, B)
    assert a.conflict and B in a.conflict and "h3" in a.conflict
    assert b.conflict and A in b.conflict and "h2" in b.conflict
    assert not a.usable and not b.usable
    assert L.written.slots.slot_of(A) == 0          # it keeps the slot it held
    assert L.written.slots.slot_of(B) is None       # a conflicted newcomer gets none
    assert any(B == u for u, _ in L.written.slots.unplaced)
    assert sum("in conflict" in line for line in d.log) == 2
    # forgetting one resolves the conflict of the other
    d = L.step(report("h2", 3, card("card0", "SNA")),
               intents=[Intent(B, "forget", 10)])
    assert entry(L.registry, A).conflict is None and L.written.card(B) is None
    assert any("conflict resolved" in line for line in d.log)


def test_ninth_card_is_recorded_without_a_slot() -> None:
    L = Leader()
    cards = [card(f"card{i}", f"SN{i}") for i in range(9)]
    L.step(report("h2", 1, *cards[:4]), report("h3", 1, *cards[4:8]))
    d = L.step(report("h2", 2, *cards[:4]), report("h3", 2, *cards[4:]))
    ninth = cid("SN8")
    assert entry(L.registry, ninth).state == "in"
    assert L.written.slots.slot_of(ninth) is None
    assert dict(L.written.slots.unplaced)[ninth].startswith("no free slot")
    assert any(ninth in line and "gets no slot" in line for line in d.log)


def test_drain_undrain_and_forget_intents() -> None:
    L = Leader(sick_polls=1)
    B = cid("SNB")
    both = (card("card0", "SNA"), card("card1", "SNB"))
    L.step(report("h2", 1, *both))
    d = L.step(report("h2", 2, *both), intents=[Intent(A, "drain", 7, by="op@x")])
    assert L.state(A) == "drained" and d.consumed == (("intents/" + A, 7),)
    assert any("drained by intent from op@x (was in)" in line for line in d.log)
    # drained stays drained whatever the health
    L.step(report("h2", 3, card("card0", "SNA", healthy=False, reason="x"), both[1]))
    assert L.state(A) == "drained"
    d = L.step(report("h2", 4, *both), intents=[Intent(A, "undrain", 9)])
    assert L.state(A) == "in"
    # undrain of a sick drained card puts it out, not in
    L.step(report("h2", 5, *both), intents=[Intent(A, "drain", 11)])
    sick = card("card0", "SNA", healthy=False, reason="x")
    L.step(report("h2", 6, sick, both[1]), intents=[Intent(A, "undrain", 12)])
    assert L.state(A) == "out"
    # forget frees the slot; the move is logged
    d = L.step(report("h2", 7, both[1]), intents=[Intent(A, "forget", 13)])
    assert L.written.card(A) is None and L.written.slots.slot_of(B) == 1
    assert L.written.slots.slots[0] is None
    assert any(A in line and "slot 0 -> no slot" in line for line in d.log)
    assert [m.card_id for m in d.moves] == [A]


def test_intent_for_unknown_card_and_bad_intent_are_consumed() -> None:
    L = Leader()
    L.step(report("h2", 1, card("card0", "SNA")))
    d = L.step(report("h2", 2, card("card0", "SNA")), intents=[Intent("cdeadbeef000", "drain", 3)],
               bad_intents={"intents/junk": (4, "not JSON")})
    assert set(d.consumed) == {("intents/cdeadbeef000", 3), ("intents/junk", 4)}
    assert not d.write
    assert any("not in the registry" in line for line in d.log)


def test_forget_of_a_still_reported_card_readmits_it_next_cycle() -> None:
    L = Leader()
    L.step(report("h2", 1, card("card0", "SNA")))
    d = L.step(report("h2", 2, card("card0", "SNA")), intents=[Intent(A, "forget", 5)])
    assert L.written.card(A) is None and any("admitted again" in line for line in d.log)
    L.step(report("h2", 3, card("card0", "SNA")))
    assert entry(L.registry, A).admitted == 3


def test_card_moved_to_another_host_follows_it() -> None:
    L = Leader()
    L.step(report("h2", 1, card("card0", "SNA")))
    d = L.step(report("h2", 2), report("h3", 1, card("cardX", "SNA")))
    c = entry(L.registry, A)
    assert (c.host, c.name, c.state) == ("h3", "cardX", "in")
    assert L.written.slots.slot_of(A) == 0
    assert any("now reported as h3/cardX" in line for line in d.log)


def test_unhealthy_new_card_is_admitted_out() -> None:
    L = Leader()
    L.step(report("h2", 1, card("card0", "SNA", healthy=False, reason="not writable")))
    c = entry(L.registry, A)
    assert (c.state, c.health, c.reason) == ("out", "sick", "not writable")
    L.step(report("h2", 2, card("card0", "SNA")))
    assert L.state(A) == "in"
