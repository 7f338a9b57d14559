"""Property tests of the phases of the leader's decision (daemon/reconcile.py), one by one."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from awide_cluster.contract.health import Hysteresis
from awide_cluster.contract.registry import CardEntry, Registry, slot_table
from awide_cluster.contract.report import HostReport, ReportedCard
from awide_cluster.contract.slots import EMPTY
from awide_cluster.daemon.reconcile import (
    ClusterSnapshot,
    Intent,
    LeaderMemory,
    Ledger,
    Policy,
    Poll,
    Stamp,
    admit,
    apply_drains,
    counted,
    decide,
    judge_card,
    judge_reports,
    mark_conflicts,
    poll_card,
    settle,
    sightings,
    take_intents,
)
from tests.contract.strategies import cards, registries

POLICY = Policy(cluster="c1", leader="h1", sick_polls=2)
STAMP = Stamp(generation=7, at="t")

counters = st.builds(Hysteresis, up=st.booleans(), bad=st.integers(0, 5),
                     good=st.integers(0, 5), reason=st.sampled_from(["", "sick"]))
polls = st.builds(Poll, good=st.sampled_from([True, False, None]),
                  reason=st.sampled_from(["", "sick", "gone"]), stale=st.booleans())


def agreeing(before: Hysteresis, card: CardEntry) -> Hysteresis:
    """Counters as the leader keeps them: up exactly when the card is in (a drained card's
    counters follow its health)."""
    return replace(before, up=card.state == "in" if card.state != "drained" else before.up)


def reported(c: CardEntry, *, healthy: bool = True) -> ReportedCard:
    return ReportedCard(name=c.name, kind="dir", found=True, serial=c.serial, model=c.model,
                        identity=c.identity, device="/d", controller_state="",
                        healthy=healthy, reason="" if healthy else "sick", path=c.path)


def report(host: str, seq: int, *cs: ReportedCard) -> HostReport:
    return HostReport(host=host, role="storage", version="v", api="", run="r", seq=seq,
                      cards=cs)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["h1", "h2", "h3", "h4", "h5"]), min_size=2, max_size=5,
                unique=True),
       st.integers(0, 4), st.integers(1, 20))
def test_one_frozen_host_is_never_a_write_outage(hosts, frozen_at, cycles) -> None:
    """Of two or more reporting hosts, one whose report stops advancing (the others advance)
    never makes a write outage, however long it stays frozen."""
    frozen = hosts[frozen_at % len(hosts)]
    memory = LeaderMemory(cycles=1, seen={h: ("r", 1) for h in hosts},
                          polled={h: ("r", 1) for h in hosts})
    for i in range(cycles):
        snap = ClusterSnapshot(reports={h: report(h, 1 if h == frozen else i + 2) for h in hosts},
                        bad_reports={}, registry=None)
        reading = judge_reports(snap, memory)
        assert reading.outage == "" and reading.stale_counts
        assert set(reading.streaks) == {frozen} and frozen not in reading.fresh
        memory = replace(memory, cycles=memory.cycles + 1,
                         seen={h: r.freshness for h, r in snap.reports.items()},
                         polled={h: r.freshness for h, r in snap.reports.items()},
                         stale_for=reading.streaks, outage=reading.outage)


@settings(max_examples=200, deadline=None)
@given(cards(), counters, st.booleans(), st.sampled_from(["", "nospace"]))
def test_an_outage_never_outs_a_card(card, before, recounted, write_failure) -> None:
    """In a write outage, a card whose host's report did not advance is not observed at all:
    its counters, state and health stay as they were."""
    card = replace(card, kind="dir", target=None, path="/d")
    before = agreeing(before, card)
    memory = LeaderMemory(cycles=3, seen={card.host: ("r", 5)}, polled={card.host: ("r", 5)},
                          outage="earlier")
    snap = ClusterSnapshot(reports={card.host: report(card.host, 5, reported(card))},
                    bad_reports={}, registry=None, write_failure=write_failure)
    reading = replace(judge_reports(snap, memory),
                      recounted=frozenset({card.id}) if recounted else frozenset())
    poll = poll_card(card, snap, sightings(snap.reports), reading)
    assert poll.stale and not reading.stale_counts
    assert counted(poll, card.id, reading).good is None
    step = judge_card(card, before, counted(poll, card.id, reading), POLICY, STAMP)
    assert step.health == before
    assert (step.card.state, step.card.health) == (card.state, card.health)


@settings(max_examples=300, deadline=None)
@given(cards(), counters, polls)
def test_judging_a_card_changes_only_its_health_and_state(card, before, poll) -> None:
    """A poll without a sighting moves no card, never undrains one, and changes nothing but
    its health, reason and state (a state change carries this cycle's stamp)."""
    before = agreeing(before, card)
    step = judge_card(card, before, poll, POLICY, STAMP)
    new = step.card
    assert replace(new, health=card.health, reason=card.reason, state=card.state,
                   changed_generation=card.changed_generation,
                   changed_at=card.changed_at) == card
    if card.state == "drained":
        assert new.state == "drained"
    if new.state != card.state:
        assert (new.changed_generation, new.changed_at) == (STAMP.generation, STAMP.at)
        assert len(step.log) >= 1 and all(card.id in line for line in step.log)
    if poll.good is None:
        assert step.health == before and new.state == card.state


@settings(max_examples=200, deadline=None)
@given(registries(), st.lists(cards(), max_size=4), st.data())
def test_admitting_never_touches_a_registry_card(reg, seen_cards, data) -> None:
    """Admission adds reported cards only: registry cards, and cards forgotten this cycle,
    are left as they are; every admitted card is one the reports list."""
    ledger = Ledger(cards=reg.by_id, health={})
    reports = {"h1": report("h1", 1, *(reported(c) for c in seen_cards))}
    seen = sightings(reports)
    forgotten = frozenset(data.draw(st.sets(st.sampled_from(sorted(seen) or ["-"]))))
    after = admit(ledger, seen, forgotten, STAMP)
    for cid, c in ledger.cards.items():
        assert after.cards[cid] is c
    for cid in set(after.cards) - set(ledger.cards):
        assert cid in seen and cid not in forgotten
        assert after.cards[cid].admitted == STAMP.generation and cid in after.health


@settings(max_examples=200, deadline=None)
@given(registries())
def test_conflicts_change_only_the_conflict_and_mark_both_claimants(reg) -> None:
    after = mark_conflicts(Ledger(cards=reg.by_id, health={}), {})
    assert list(after.cards) == list(reg.by_id)
    for cid, c in after.cards.items():
        assert replace(c, conflict=reg.by_id[cid].conflict) == reg.by_id[cid]
        others = [o for o in after.cards.values() if o.serial == c.serial and o.id != cid]
        assert (c.conflict is not None) == bool(others)


@settings(max_examples=200, deadline=None)
@given(registries(), st.data())
def test_settling_never_moves_a_placed_card(reg, data) -> None:
    """Whatever the earlier phases did to the cards' states, health and conflicts, a card
    that holds a slot keeps it; a ledger equal to the registry is not written."""
    reg = replace(reg, hosts=(), lineage="L1", leader="h1")
    snap = ClusterSnapshot(reports={}, bad_reports={}, registry=reg)
    same = settle(Ledger(cards=reg.by_id, health={}), snap, POLICY, reg.generation, "t")
    assert not same.write and same.registry is reg and same.moves == ()
    changed = {cid: replace(c, state=data.draw(st.sampled_from(["in", "out", "drained"])),
                            conflict=data.draw(st.sampled_from([None, c.conflict, "dup"])))
               for cid, c in reg.by_id.items()}
    settled = settle(Ledger(cards=changed, health={}), snap, POLICY, reg.generation, "t")
    for cid in reg.by_id:
        if reg.slots.slot_of(cid) is not None:
            assert settled.registry.slots.slot_of(cid) == reg.slots.slot_of(cid)
    if settled.write:
        assert settled.registry.generation == reg.generation + 1


@settings(max_examples=100, deadline=None)
@given(registries(max_cards=6), st.lists(st.sampled_from(["drain", "undrain", "forget"]),
                                          max_size=6))
def test_every_intent_is_consumed_and_forget_removes_the_card(reg, actions) -> None:
    its = tuple(Intent(card_id=c.id, action=a, mod_revision=10 + i)
                for i, (c, a) in enumerate(zip(reg.cards, actions, strict=False)))
    snap = ClusterSnapshot(reports={}, bad_reports={}, registry=reg, intents=its,
                    bad_intents={"intents/x": (3, "not JSON")})
    taken = take_intents(Ledger(cards=reg.by_id, health={}), snap, {})
    assert sorted(taken.consumed) == sorted([(f"intents/{i.card_id}", i.mod_revision)
                                             for i in its] + [("intents/x", 3)])
    assert taken.forgotten == {i.card_id for i in its if i.action == "forget"}
    assert not taken.forgotten & set(taken.ledger.cards)
    assert {i.card_id for i in taken.pending} == {i.card_id for i in its
                                                  if i.action != "forget"}
    drained = apply_drains(taken.ledger, taken.pending, STAMP)
    for it in taken.pending:
        assert drained.cards[it.card_id].state == "drained" or it.action == "undrain"


def test_a_drain_intent_for_a_card_dropped_in_the_same_cycle_is_ignored() -> None:
    """A registry card on a host outside the cluster that nobody reports is dropped; a drain
    intent read for it in the same cycle is consumed and logged, and the cycle goes on."""
    stray = CardEntry(id="cid1", serial="SN1", model="m", identity="u1", host="elsewhere",
                      name="c0", kind="dir", state="in", health="ok", reason="",
                      admitted=1, changed_generation=1, path="/d")
    reg = Registry(cluster="c1", generation=4, leader="h1", cards=(stray,),
                   slots=slot_table((stray,), EMPTY))
    snap = ClusterSnapshot(reports={"h1": report("h1", 1)}, bad_reports={}, registry=reg,
                    intents=(Intent(card_id="cid1", action="drain", mod_revision=9),))
    d = decide(snap, LeaderMemory(), replace(POLICY, hosts=frozenset({"h1"})), now="t")
    assert d.consumed == (("intents/cid1", 9),)
    assert d.registry.cards == () and d.write
    assert any("dropped" in line for line in d.log)
    assert any(line.startswith("intent drain for card cid1 ignored") for line in d.log)


def test_the_phase_views_are_built_by_keyword_only() -> None:
    with pytest.raises(TypeError):
        Stamp(7, "t")  # type: ignore[call-arg]
    assert Stamp(generation=7, at="t") == STAMP
