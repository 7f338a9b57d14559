"""The gateway's vouching state (awide_gateway_cluster/vouching.py), pure: what it uses of a
registry before and after the hosts' reports are read, and what it counts."""

from __future__ import annotations

from dataclasses import replace

from awide_cluster.contract.registry import CardEntry, Registry
from awide_cluster.contract.report import HostReport, ReportedCard
from awide_cluster.contract.vouch import parse_networks
from awide_gateway_cluster.vouching import Vouching
from tests.gateway.support import make_card


def reg(*cards: CardEntry, generation: int = 1, leader: str = "s1") -> Registry:
    return Registry(cluster="c1", generation=generation, leader=leader, cards=cards)


def reports(**hosts: list[CardEntry]) -> dict[str, HostReport]:
    return {h: HostReport(host=h, role="storage", version="t", api="", run="r", seq=1,
                          cards=tuple(ReportedCard(
                              name=c.name, kind=c.kind, found=True, serial=c.serial,
                              model=c.model, identity=c.identity, device="nvme0n1",
                              controller_state="live", healthy=True, reason="",
                              target=c.target) for c in cs))
            for h, cs in hosts.items()}


def test_new_entries_wait_for_the_reports_and_then_are_taken() -> None:
    v = Vouching(None)
    a = make_card(1)
    assert v.pending(reg(a))
    assert v.use(reg(a), None).cards == ()             # held: not judged, not counted
    assert v.refused == 0
    assert v.use(reg(a), reports(s1=[a])).cards == (a,)
    assert not v.pending(reg(a))


def test_state_changes_of_an_accepted_entry_need_no_read() -> None:
    v = Vouching(None)
    a = make_card(1)
    v.use(reg(a), reports(s1=[a]))
    out = replace(a, state="out", health="sick")
    assert not v.pending(reg(out))
    assert v.use(reg(out, generation=2), None).cards == (out,)


def test_a_refused_change_keeps_the_entry_last_accepted_and_is_counted_once() -> None:
    v = Vouching({"s1": parse_networks(["10.200.0.0/24"])})
    a = make_card(1)
    v.use(reg(a), reports(s1=[a]))
    assert a.target is not None
    moved = replace(a, target=replace(a.target, traddr="10.66.6.6"))
    for gen in (2, 3):
        used = v.use(reg(moved, generation=gen, leader="s2"), reports(s1=[a]))
        assert used.cards == (a,)
    assert v.refused == 1
    assert [line for line in v.problems() if "traddr" in line and a.id in line]
    assert not v.pending(reg(moved))                   # judged at this place already
    assert v.use(reg(a, generation=4), None).cards == (a,)
    assert v.problems() == ()


def test_a_forgotten_card_must_be_vouched_for_again() -> None:
    v = Vouching(None)
    a = make_card(1)
    v.use(reg(a), reports(s1=[a]))
    v.use(reg(generation=2), None)
    assert v.pending(reg(a))
    assert v.use(reg(a, generation=3), reports()).cards == ()
    assert v.refused == 1
