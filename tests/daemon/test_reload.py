"""Reload (SIGHUP) keeps leadership: new cards and timing, even a new lease TTL."""

from __future__ import annotations

import aiohttp

from awide_cluster.contract import keys
from awide_cluster.daemon.leader import CycleOutcome
from awide_cluster.daemon.service import Daemon
from awide_harness.presets import FAST

from .conftest import make_config, registry, store_of


async def test_reload_keeps_leadership_across_a_lease_ttl_change(etcd, cluster_name, cards):
    cards.make("c0", "SN0")
    cards.make("c1", "SN1")
    d = Daemon(make_config(etcd, cluster_name, "h1", [cards.spec("c0")]), serve_api=False)
    store = store_of(etcd, cluster_name)
    try:
        await d.turn()
        assert d.is_leader
        token = (await store.get(keys.LEADER)).create_revision
        old_lease = d.lease.id
        timing = dict(FAST, lease_ttl=2, sick_polls=4)
        d.request_reload(make_config(etcd, cluster_name, "h1",
                                     [cards.spec("c0"), cards.spec("c1")], timing=timing))
        await d.turn()
        leader = await store.get(keys.LEADER)
        assert d.is_leader and leader.create_revision == token       # same term
        assert leader.lease == d.lease.id != old_lease and d.lease.ttl == 2
        assert (await store.get(keys.member("h1"))).lease == d.lease.id
        assert d.outcomes[-1] is CycleOutcome.WROTE and len((await registry(store)).cards) == 2
        assert d.leader_loop.policy.sick_polls == 4
        # a reload that changes what needs a restart is refused as a whole
        d.request_reload(make_config(etcd, "other", "h1", []))
        await d.turn()
        assert d.config.cluster == cluster_name and len(d.config.cards) == 2
    finally:
        await d.stop()
        await store.close()


async def test_reload_of_a_bad_file_keeps_running(etcd, cluster_name, tmp_path):
    d = Daemon(make_config(etcd, cluster_name, "h1", []), serve_api=False)
    bad = tmp_path / "bad.yaml"
    bad.write_text("cluster: [")
    try:
        await d.turn()
        d.request_reload(bad)
        await d.turn()
        assert d.is_leader and d.config.cluster == cluster_name
    finally:
        await d.stop()


async def test_status_api_shows_the_host_view(etcd, cluster_name, cards):
    cards.make("c0", "SN0")
    d = Daemon(make_config(etcd, cluster_name, "h1", [cards.spec("c0")]))
    try:
        await d.start()
        from tests.timing import wait_until
        await wait_until(lambda: d.registry is not None and d.registry.cards, 10, "registry")
        async with aiohttp.ClientSession() as s:
            async with s.get(d.api.url + "/v1/status") as r:
                view = await r.json()
            async with s.get(d.api.url + "/readyz") as r:
                assert r.status == 200
        assert view["host"] == "h1" and view["is_leader"] is True and view["leader"] == "h1"
        assert view["registry_cards"][0]["serial"] == "SN0"
        assert view["report"]["cards"][0]["healthy"] is True
        assert view["dev_cluster"] is False and view["etcd_members"] == 3
        leader = await d.store.get(keys.LEADER)
        assert d.api.url in leader.value.decode()       # the leader record names its API
    finally:
        await d.stop()
