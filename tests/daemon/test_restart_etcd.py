"""A planned absence against real etcd, driven turn by turn: a daemon stopped cleanly leaves
its report marked restarting on a lease of its grace, the leader holds its card (no registry
write) and the daemon started again reports over it; a daemon that crashes leaves no such
report and its card goes out after ``sick_polls`` turns."""

from __future__ import annotations

from awide_cluster.contract import keys
from awide_cluster.contract import report as reportdoc
from awide_cluster.daemon.service import Daemon

from .conftest import TURNS, registry, store_of
from .test_leader_etcd import cid_of, daemon

GRACE = 30


def with_grace(etcd, cluster, host, specs) -> Daemon:
    return daemon(etcd, cluster, host, specs, timing=dict(TURNS, restart_grace=GRACE))


async def test_a_clean_stop_holds_the_card_a_crash_does_not(etcd, cluster_name, cards):
    p = cards.make("b0", "SN-B")
    B = cid_of(p)
    a = with_grace(etcd, cluster_name, "h1", [])
    b = with_grace(etcd, cluster_name, "h2", [cards.spec("b0")])
    store = store_of(etcd, cluster_name)
    try:
        await a.turn()
        await b.turn()
        await a.turn()
        assert a.is_leader and (await registry(store)).card(B).state == "in"
        written = (await store.get(keys.REGISTRY)).mod_revision
        last = b.report
        await b.stop()
        kv = await store.get(keys.member("h2"))
        assert kv is not None and kv.lease != 0
        held = reportdoc.decode(kv.value)
        assert held.restarting is not None and held.restarting.grace == GRACE
        assert (held.run, held.seq, held.cards) == (last.run, last.seq + 1, last.cards)
        assert 0 < await store.time_to_live(kv.lease) <= GRACE
        for _ in range(3 * TURNS["sick_polls"]):
            await a.turn()
        assert (await store.get(keys.REGISTRY)).mod_revision == written
        assert (await registry(store)).card(B).state == "in"
        # started again: a normal report over the restarting one, still nothing written
        b = with_grace(etcd, cluster_name, "h2", [cards.spec("b0")])
        await b.turn()
        back = reportdoc.decode((await store.get(keys.member("h2"))).value)
        assert back.restarting is None and back.run != last.run
        await a.turn()
        assert (await store.get(keys.REGISTRY)).mod_revision == written
        # a crash: no restarting report, the card out after sick_polls turns
        await b.turn()
        await a.turn()
        await b.abort()
        b = a                               # nothing left to stop but a
        crashed = reportdoc.decode((await store.get(keys.member("h2"))).value)
        assert crashed.restarting is None
        states = []
        for _ in range(TURNS["sick_polls"]):
            await a.turn()
            states.append((await registry(store)).card(B).state)
        assert states == ["in"] * (TURNS["sick_polls"] - 1) + ["out"]
    finally:
        for d in {id(a): a, id(b): b}.values():
            await d.stop()
        await store.close()


async def test_a_stopping_leader_hands_over_in_the_revision_that_marks_its_report(
        etcd, cluster_name):
    a = with_grace(etcd, cluster_name, "h1", [])
    store = store_of(etcd, cluster_name)
    stopped = False
    try:
        await a.turn()
        assert a.is_leader
        await a.stop()
        stopped = True
        kv = await store.get(keys.member("h1"))
        assert kv is not None and reportdoc.decode(kv.value).restarting is not None
        # one transaction: the leader key held until the revision that marks the report
        assert (await store.range(keys.LEADER, revision=kv.mod_revision - 1)).kvs
        assert not (await store.range(keys.LEADER, revision=kv.mod_revision)).kvs
    finally:
        if not stopped:
            await a.stop()
        await store.close()
