"""The daemon in-process against real etcd: reports, election, registry, hand-over."""

from __future__ import annotations

from awide_cluster.cards.directory import read_label
from awide_cluster.contract import keys
from awide_cluster.contract import report as reportdoc
from awide_cluster.contract.registry import card_id
from awide_cluster.daemon.service import Daemon
from tests.timing import wait_until

from .conftest import make_config, registry, store_of


def cid_of(path) -> str:
    lab = read_label(path)
    return card_id(lab.serial, lab.model, lab.identity)


async def test_three_daemons_elect_one_leader_and_register_cards(etcd_cluster, cluster_name,
                                                                 cards):
    """On both etcd series (3.5 from the wheel, Debian's 3.4 when installed)."""
    etcd = etcd_cluster
    specs = {h: [cards.spec(f"{h}c0")] for h in ("h1", "h2")}
    paths = {h: cards.make(f"{h}c0", f"SN-{h}") for h in ("h1", "h2")}
    daemons = [Daemon(make_config(etcd, cluster_name, h, specs.get(h, []),
                                  role="storage" if h != "w1" else "witness"))
               for h in ("h1", "h2", "w1")]
    store = store_of(etcd, cluster_name)
    try:
        for d in daemons:
            await d.start()
        reg = await wait_until(lambda: _reg_with(store, 2), what="2 cards registered")
        assert {c.host for c in reg.cards} == {"h1", "h2"}
        assert all(c.state == "in" for c in reg.cards)
        assert set(reg.slots.slots[:2]) == {cid_of(paths["h1"]), cid_of(paths["h2"])}
        leaders = [d for d in daemons if d.is_leader]
        assert len(leaders) == 1
        assert reg.leader == leaders[0].config.host
        # every daemon reports, the witness too (its first report may come after start()
        # returned and after the two cards were registered)
        async def reporting() -> set[str]:
            members = await store.range(keys.MEMBERS, prefix=True)
            return {reportdoc.decode(kv.value).host for kv in members.kvs}

        reports = await wait_until(lambda: _all_three(reporting), what="three host reports")
        assert reports == {"h1", "h2", "w1"}
        leader_kv = await store.get(keys.LEADER)
        assert leader_kv.lease == leaders[0].lease.id
        # clean stop of the leader: the lease is revoked, another leads quickly
        old = leaders[0]
        await old.stop()
        assert await store.get(keys.member(old.config.host)) is None
        rest = [d for d in daemons if d is not old]
        await wait_until(lambda: any(d.is_leader for d in rest), timeout=3,
                       what="a new leader after a clean stop")
    finally:
        for d in daemons:
            await d.stop()
        await store.close()


async def _reg_with(store, n):
    r = await registry(store)
    return r if r is not None and len(r.cards) == n else None


async def _all_three(reporting):
    reports = await reporting()
    return reports if reports == {"h1", "h2", "w1"} else None
