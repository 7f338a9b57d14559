"""What a leader cycle adds to the history (daemon/history_entries.py): a pure function of the
registry before and after, the decision's lines and the consumed intents; driven both by generated
registries and by ``decide`` itself."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from awide_cluster.contract import history_ring as histdoc
from awide_cluster.contract.registry import Registry, with_slots
from awide_cluster.daemon.history_entries import entries
from awide_cluster.daemon.reconcile import Intent
from tests.contract.strategies import registries, states
from tests.daemon.builders import Leader, card, cid, report


@settings(max_examples=150, deadline=None)
@given(reg=registries())
def test_a_registry_that_did_not_change_adds_nothing(reg: Registry) -> None:
    assert entries(reg, reg) == ()
    assert entries(reg, reg, at="2026-12-01T00:00:00+00:00") == ()


@st.composite
def changes(draw):
    """A registry and the one after it: some cards left, some states changed, some joined
    (taken from another generated registry), the slot table recomputed."""
    before = draw(registries(max_cards=8))
    extra = draw(registries(max_cards=4))
    keep = [c for c in before.cards if draw(st.booleans()) or len(before.cards) < 2]
    changed = [replace(c, state=draw(states)) if draw(st.booleans()) else c for c in keep]
    joined = [c for c in extra.cards if c.id not in before.by_id
              and c.serial not in {k.serial for k in before.cards}]
    after = with_slots(replace(before, generation=before.generation + 1,
                               cards=tuple(changed + joined), leader=draw(st.sampled_from(
                                   ["h1", "h2"]))))
    return before, after


@settings(max_examples=200, deadline=None)
@given(pair=changes(), new_term=st.booleans())
def test_every_change_is_one_entry_of_its_kind(pair, new_term: bool) -> None:
    before, after = pair
    got = entries(before, after, new_term=new_term, at="2026-12-01T00:00:00+00:00")
    assert got == entries(before, after, new_term=new_term, at="2026-12-01T00:00:00+00:00")
    assert all(e.generation == after.generation and e.leader == after.leader for e in got)
    assert all(e.reason for e in got)
    by_card: dict[str, list[str]] = {}
    for e in got:
        by_card.setdefault(e.card, []).append(e.kind)
    assert by_card.pop("", []) == (["leader"] if new_term else [])
    for c in before.cards:
        kinds = by_card.get(c.id, [])
        n = after.card(c.id)
        if n is None:
            assert kinds == ["dropped"]             # no forget intent: it left otherwise
            continue
        state_kinds = [k for k in kinds if k in ("in", "out", "drained", "undrained")]
        if n.state == c.state:
            assert state_kinds == []
        elif n.state == "drained":
            assert state_kinds == ["drained"]
        elif c.state == "drained":
            assert state_kinds == ["undrained"]
        else:
            assert state_kinds == [n.state]
        moved = before.slots.slot_of(c.id) != after.slots.slot_of(c.id)
        assert kinds.count("moved") == (1 if moved else 0)
    for c in after.cards:
        if c.id not in before.by_id:
            assert by_card[c.id][0] == "joined"
    # what the leader writes is what any reader accepts
    ring = histdoc.append(histdoc.EMPTY, got, ring="r1")
    assert histdoc.decode(histdoc.encode(ring)) == ring


def _leader_with_cards() -> tuple[Leader, list]:
    ld = Leader("h1")
    cards = [card("card0", "SN0"), card("card1", "SN1")]
    ld.step(report("h1", 1, *cards))
    return ld, cards


def test_a_card_taken_out_is_recorded_with_the_decisions_reason() -> None:
    ld, _ = _leader_with_cards()
    sick = card("card0", "SN0", healthy=False, reason="unit awide-store@card0.service is failed")
    seq = 2
    before = ld.written
    while ld.state(cid("SN0")) != "out":
        prev = ld.written
        d = ld.step(report("h1", seq, sick, card("card1", "SN1")))
        seq += 1
        assert seq < 10
    got = entries(prev, d.registry, lines=d.log, at="t")
    out = [e for e in got if e.kind == "out"]
    assert len(out) == 1 and out[0].card == cid("SN0")
    assert out[0].reason == "3 bad polls in a row, last: unit awide-store@card0.service is failed"
    assert (out[0].name, out[0].host) == ("card0", "h1")
    assert before.generation < d.registry.generation == out[0].generation


def test_operator_actions_carry_who_and_why() -> None:
    ld, cards = _leader_with_cards()
    reg = ld.written
    drain = Intent(card_id=cid("SN1"), action="drain", mod_revision=5, by="ops@laptop",
                   reason="replace the fan")
    d = ld.step(report("h1", 2, *cards), intents=[drain])
    got = entries(reg, d.registry, lines=d.log, intents=[drain])
    assert [(e.kind, e.card, e.by, e.why) for e in got] == [
        ("drained", cid("SN1"), "ops@laptop", "replace the fan")]
    # a second drain changes nothing: still recorded, as an intent, with who and why
    again = replace(drain, mod_revision=6, reason="twice")
    reg = ld.written
    d = ld.step(report("h1", 3, *cards), intents=[again])
    assert not d.write and d.consumed
    got = entries(reg, d.registry, lines=d.log, intents=[again])
    assert [(e.kind, e.reason, e.why) for e in got] == [
        ("intent", "drain changed nothing: already drained", "twice")]
    undrain = Intent(card_id=cid("SN1"), action="undrain", mod_revision=7, by="ops@laptop",
                     reason="fan replaced")
    d = ld.step(report("h1", 4, *cards), intents=[undrain])
    got = entries(reg, d.registry, lines=d.log, intents=[undrain])
    assert [(e.kind, e.reason, e.why) for e in got] == [
        ("undrained", "undrained: in", "fan replaced")]
    # forget: the card leaves (its host still reports it: said), and is admitted again later
    reg = ld.written
    forget = Intent(card_id=cid("SN0"), action="forget", mod_revision=8, by="ops@laptop",
                    reason="RMA 1")
    d = ld.step(report("h1", 5, *cards), intents=[forget])
    got = entries(reg, d.registry, lines=d.log, intents=[forget])
    kinds = [(e.kind, e.card) for e in got]
    assert ("forgotten", cid("SN0")) in kinds
    gone = next(e for e in got if e.kind == "forgotten")
    assert gone.why == "RMA 1" and "its host still reports it" in gone.reason
    # an intent for a card the registry does not hold
    stray = Intent(card_id="cffffffffff0", action="drain", mod_revision=9)
    reg = ld.written
    d = ld.step(report("h1", 6, *cards), intents=[stray])
    got = entries(reg, d.registry, lines=d.log, intents=[stray])
    assert any(e.kind == "intent" and "not in the registry" in e.reason for e in got)
    got = entries(reg, reg, refused_intents={"intents/x": "field action: bad"})
    assert [(e.kind, e.reason) for e in got] == [
        ("intent", "intent intents/x ignored and deleted: field action: bad")]


def test_a_new_term_and_a_repair_are_recorded() -> None:
    ld, cards = _leader_with_cards()
    reg = ld.written
    got = entries(reg, replace(reg, leader="h2"), new_term=True)
    assert [(e.kind, e.host, e.reason) for e in got] == [
        ("leader", "h2", "h2 leads (the registry was written by h1)")]
    # nothing written yet in the new term: the registry still names the old leader
    got = entries(reg, reg, leader="h2", new_term=True)
    assert [(e.kind, e.host, e.leader, e.reason) for e in got] == [
        ("leader", "h2", "h2", "h2 leads (the registry was written by h1)")]
    got = entries(reg, reg, new_term=True)
    assert [e.reason for e in got] == ["h1 leads (a new term)"]
    got = entries(None, reg, new_term=True, repair="registry corrupt: field cards[0]")
    assert [e.kind for e in got][:2] == ["leader", "repaired"]
    assert sum(e.kind == "joined" for e in got) == 2
