"""A gateway uses a registry entry only as its owning host's report vouches for it (real etcd,
fake NVMe initiator that logs every argv): whatever a registry writer puts in the registry, no
gateway runs ``nvme connect`` to an address no host vouched for, healthy cards stay in
service, and a card moved by its host is connected at its new target and let go at the old."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from awide_cluster.contract import keys
from awide_cluster.contract import report as reportdoc
from awide_cluster.contract.registry import CardEntry, card_id
from awide_cluster.contract.report import HostReport, ReportedCard
from awide_cluster.store import EtcdStore
from awide_gateway_cluster import ClusterGateway
from awide_harness.fakes import FakeNvmeWorld
from awide_harness.registry_writer import RegistryWriter
from tests.gateway.support import config, gateway, in_service, make_card, serve
from tests.timing import wait_until

EVIL = "10.66.6.6"
ALLOWED = {"s1": ["10.200.0.0/24"], "s2": ["10.200.2.0/24"]}


def as_reported(c: CardEntry) -> ReportedCard:
    return ReportedCard(name=c.name, kind=c.kind, found=True, serial=c.serial, model=c.model,
                        identity=c.identity, device="nvme0n1", controller_state="live",
                        healthy=True, reason="", target=c.target, path=c.path)


async def report(store: EtcdStore, host: str, cards: Sequence[CardEntry], seq: int = 1) -> None:
    """Play host ``host``'s daemon: its report lists ``cards``."""
    r = HostReport(host=host, role="storage", version="t", api="", run="r", seq=seq,
                   cards=tuple(as_reported(c) for c in cards))
    await store.put(keys.member(host), reportdoc.encode(r))


def connects_to(world: FakeNvmeWorld, traddr: str) -> list[list[str]]:
    return [argv for argv in world.calls()
            if "connect" in argv and any(traddr in a for a in argv)]


def at(world: FakeNvmeWorld, traddr: str) -> list[str]:
    """The controllers the fake initiator holds connected to ``traddr``."""
    fs = world.sysfs
    return [n for n in fs.controller_names() if f"traddr={traddr}," in (fs.attr(n, "address")
                                                                      or "") + ","]


async def refused_reaches(gw: ClusterGateway, n: int) -> None:
    await wait_until(lambda: gw.stats().entries_refused >= n,
                     what=f"the gateway refused {n} entries")


async def a_probe_round_later(gw: ClusterGateway) -> None:
    polls = gw.stats().polls
    await wait_until(lambda: gw.stats().polls >= polls + 2, what="two more polls")


async def test_no_connect_to_an_address_no_host_vouched_for(
        etcd: Any, store: EtcdStore, leader: RegistryWriter, world: FakeNvmeWorld,
        cluster_name: str) -> None:
    a = make_card(1, host="s1", traddr="10.200.0.11")
    b = make_card(2, host="s2", traddr="10.200.2.12")
    serve(world, a)
    serve(world, b)
    await report(store, "s1", [a])
    await report(store, "s2", [b])
    await leader.publish([a, b])
    gw = gateway(config(cluster_name, etcd.endpoints, world, vouch=True, hosts=ALLOWED), world)
    await gw.start()
    try:
        await wait_until(lambda: in_service(gw, a.id) and in_service(gw, b.id),
                         what="both cards in service")
        assert gw.stats().entries_refused == 0
        assert a.target is not None and b.target is not None

        # (a) s1's card, serial kept, its address changed
        await leader.publish([replace(a, target=replace(a.target, traddr=EVIL)), b])
        await refused_reaches(gw, 1)
        assert any("traddr" in line and a.id in line for line in gw.stats().refusals)

        # (b) a new entry with a made-up id, and one whose id is derived but no host reports
        made_up = replace(make_card(3, host="s2", traddr=EVIL), id="c000000000ab")
        unreported = make_card(4, host="s2", traddr="10.200.2.14")
        await leader.publish([a, b, made_up, unreported])
        await refused_reaches(gw, 3)
        assert gw.snapshot().card(made_up.id) is None
        assert gw.snapshot().card(unreported.id) is None

        # (c) s2 reports its own card at an address outside its allowed ones
        b_out = replace(b, target=replace(b.target, traddr=EVIL))
        await report(store, "s2", [b_out], seq=2)
        await leader.publish([a, b_out])
        await refused_reaches(gw, 4)
        assert any("traddr" in line and "allowed" in line for line in gw.stats().refusals)

        # (d) a whole self-consistent registry written as another leader: every target moved
        forged = RegistryWriter(store, cluster_name, after=leader.reg, leader="s2")
        evil_new = make_card(5, host="s2", traddr=EVIL)
        await forged.publish([replace(a, target=replace(a.target, traddr=EVIL), host="s2"),
                              b_out, evil_new])
        await refused_reaches(gw, 6)
        await a_probe_round_later(gw)
        assert in_service(gw, a.id) and in_service(gw, b.id), gw.snapshot()
        assert connects_to(world, EVIL) == []

        # repair: the hosts report what they have, the leader writes the genuine registry
        await report(store, "s2", [b], seq=3)
        repaired = RegistryWriter(store, cluster_name, after=forged.reg, leader="s1")
        await repaired.publish([a, b])
        await wait_until(lambda: not gw.stats().refusals, what="no refusal in force")
        await a_probe_round_later(gw)
        assert in_service(gw, a.id) and in_service(gw, b.id)
        assert connects_to(world, EVIL) == []
        assert at(world, EVIL) == []
    finally:
        await gw.stop()


async def test_a_card_its_host_moved_is_connected_there_and_let_go_at_the_old_target(
        etcd: Any, store: EtcdStore, leader: RegistryWriter, world: FakeNvmeWorld,
        cluster_name: str) -> None:
    a = make_card(1, host="s1", traddr="10.200.0.11")
    serve(world, a)
    await report(store, "s1", [a])
    await leader.publish([a])
    gw = gateway(config(cluster_name, etcd.endpoints, world, vouch=True, hosts=ALLOWED), world)
    await gw.start()
    try:
        await wait_until(lambda: in_service(gw, a.id), what="the card in service")
        assert at(world, "10.200.0.11")
        assert a.target is not None
        moved = replace(a, target=replace(a.target, traddr="10.200.0.21"))
        world.update_target(a.target.subnqn, traddr="10.200.0.21")
        await report(store, "s1", [moved], seq=2)
        await leader.publish([moved])
        await wait_until(lambda: bool(at(world, "10.200.0.21")) and not at(world, "10.200.0.11"),
                         what="connected at the new target, the old controller let go")
        await wait_until(lambda: in_service(gw, a.id), what="the card in service again")
        assert gw.stats().entries_refused == 0
        await leader.publish([])                        # forgotten: its controller let go
        await wait_until(lambda: not at(world, "10.200.0.21"),
                         what="the forgotten card's controller disconnected")
        assert card_id(a.serial, a.model, a.identity) == a.id
    finally:
        await gw.stop()
