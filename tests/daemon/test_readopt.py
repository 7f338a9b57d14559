"""Regression (found by the fault campaign): a leader that stepped down because its
lease went unconfirmed (etcd without quorum for longer than TTL - margin) while etcd kept the
lease and the leader key, must lead again once it renews the lease. Before the fix it kept the
key alive with its keepalives but never campaigned (the key was "held"), so the cluster had no
leader at all: the registry froze and no card was ever taken out again."""

from __future__ import annotations

from awide_cluster.contract import keys
from awide_cluster.daemon.leader import CycleOutcome
from awide_cluster.daemon.service import Daemon

from .conftest import FakeClock, card_state, make_config, store_of
from .test_leader_etcd import cid_of


async def test_leader_that_stepped_down_on_its_own_live_key_leads_again(
        etcd, cluster_name, cards):
    clock = FakeClock()
    cards.make("c0", "SN1")
    cfg = make_config(etcd, cluster_name, "h1", [cards.spec("c0")])
    d = Daemon(cfg, serve_api=False, clock=clock)
    store = store_of(etcd, cluster_name)
    try:
        await d.turn()
        assert d.is_leader
        key = await store.get(keys.LEADER)
        # no keepalive confirmed for TTL - margin (as during a quorum loss): it steps down,
        # while etcd still has its lease and its leader key
        clock.advance(cfg.timing.lease_ttl - cfg.etcd.call_timeout + 0.01)
        assert await d.leader_loop.cycle() is CycleOutcome.DEPOSED
        assert not d.leadership.has_key
        assert (await store.get(keys.LEADER)).create_revision == key.create_revision
        # etcd answers again: the lease is renewed, the key is still ours -> it leads again
        await d.turn()
        assert d.is_leader, "the daemon holds the leader key but does not lead"
        assert d.leadership.revision == key.create_revision     # same fencing token
        # and it writes: a sick card goes out after sick_polls bad polls
        cards.set_healthy("c0", False)
        for _ in range(cfg.timing.sick_polls + 1):
            await d.turn()
        assert await card_state(store, cid_of(cards.root / "c0")) == "out"
    finally:
        await d.stop()
        await store.close()


async def test_a_key_on_another_lease_is_not_adopted(etcd, cluster_name):
    clock = FakeClock()
    a = Daemon(make_config(etcd, cluster_name, "h1", []), serve_api=False, clock=clock)
    b = Daemon(make_config(etcd, cluster_name, "h2", []), serve_api=False, clock=clock)
    try:
        await a.turn()
        await b.turn()
        assert a.is_leader and not b.is_leader
        await b.turn()
        assert not b.is_leader and b.leadership.holder.host == "h1"
    finally:
        await a.stop()
        await b.stop()
