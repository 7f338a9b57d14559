"""The leader builds what a card is and where it is served from its host's report only, and
never follows a card outside its host's allowed addresses (pure decision, no etcd)."""

from __future__ import annotations

from dataclasses import replace

from awide_cluster.contract.registry import CardEntry, Registry, slot_table
from awide_cluster.contract.report import HostReport, ReportedCard
from awide_cluster.contract.slots import EMPTY
from awide_cluster.contract.vouch import parse_networks
from awide_cluster.daemon.reconcile import ClusterSnapshot, LeaderMemory, Policy, decide
from tests.gateway.support import make_card

EVIL = "10.66.6.6"
ALLOWED = {"s1": parse_networks(["10.200.0.0/24"]), "s2": parse_networks(["10.200.2.0/24"])}
POLICY = Policy(cluster="c1", leader="s1", sick_polls=2, hosts=frozenset({"s1", "s2"}),
                allowed=ALLOWED)


def reported(c: CardEntry) -> ReportedCard:
    return ReportedCard(name=c.name, kind=c.kind, found=True, serial=c.serial, model=c.model,
                        identity=c.identity, device="nvme0n1", controller_state="live",
                        healthy=True, reason="", target=c.target, path=c.path)


def report(host: str, seq: int, *cs: CardEntry) -> HostReport:
    return HostReport(host=host, role="storage", version="v", api="", run="r", seq=seq,
                      cards=tuple(reported(c) for c in cs))


def registry(*cs: CardEntry, generation: int = 4) -> Registry:
    return Registry(cluster="c1", generation=generation, leader="s2", cards=cs,
                    slots=slot_table(cs, EMPTY))


def cycles(reg: Registry, reports: dict[str, list[CardEntry]], n: int = 3) -> Registry:
    """``n`` leader cycles over the same hosts, each report advancing."""
    memory = LeaderMemory()
    for i in range(n):
        snap = ClusterSnapshot(reports={h: report(h, i + 2, *cs) for h, cs in reports.items()},
                               bad_reports={}, registry=reg)
        d = decide(snap, memory, POLICY, now="t")
        memory = d.memory
        assert d.registry is not None
        reg = d.registry
    return reg


def test_a_forged_registry_is_rebuilt_from_the_reports() -> None:
    a = make_card(1, host="s1", traddr="10.200.0.11")
    b = make_card(2, host="s2", traddr="10.200.2.12")
    assert a.target is not None and b.target is not None
    forged = registry(replace(a, host="s2", name="x", kind="dir",
                              target=replace(a.target, traddr=EVIL)),
                      replace(b, target=replace(b.target, traddr=EVIL)))
    reg = cycles(forged, {"s1": [a], "s2": [b]})
    for want in (a, b):
        got = reg.card(want.id)
        assert got is not None
        assert (got.host, got.name, got.kind, got.target, got.path) == (
            want.host, want.name, want.kind, want.target, want.path)
        assert got.state == "in"


def test_a_card_reported_outside_its_hosts_addresses_is_neither_followed_nor_admitted() -> None:
    a = make_card(1, host="s1", traddr="10.200.0.11")
    b = make_card(2, host="s2", traddr="10.200.2.12")
    assert b.target is not None
    moved = replace(b, target=replace(b.target, traddr=EVIL))
    newcomer = make_card(3, host="s2", traddr=EVIL)
    reg = cycles(registry(a, b), {"s1": [a], "s2": [moved, newcomer]})
    got = reg.card(b.id)
    assert got is not None and got.target == b.target     # not followed there
    assert got.state == "out" and "outside the allowed addresses of s2" in got.reason
    assert reg.card(newcomer.id) is None                   # never admitted
    kept = reg.card(a.id)
    assert kept is not None and kept.state == "in"


def test_without_addresses_a_host_may_move_its_own_card() -> None:
    b = make_card(2, host="s2", traddr="10.200.2.12")
    assert b.target is not None
    moved = replace(b, target=replace(b.target, traddr=EVIL))
    memory = LeaderMemory()
    snap = ClusterSnapshot(reports={"s2": report("s2", 2, moved)}, bad_reports={},
                           registry=registry(b))
    d = decide(snap, memory, replace(POLICY, allowed=None), now="t")
    assert d.registry is not None
    got = d.registry.card(b.id)
    assert got is not None and got.target == moved.target
