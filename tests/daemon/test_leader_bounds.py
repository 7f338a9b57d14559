"""The leader and the follower daemons read bounded: one value near etcd's request limit
(1.5 MiB by default) is refused by name, every other report and intent is still read."""

from __future__ import annotations

import json

from awide_cluster.contract import bounds, keys
from awide_cluster.daemon.leader import CycleOutcome
from awide_cluster.daemon.service import Daemon
from awide_cluster.store import EtcdStore, StoreConfig, StoreError
from awide_harness.presets import FAST

from .conftest import TURN_CALL, make_config, metrics_text, registry
from .test_leader_etcd import cid_of

NEAR_LIMIT = 1536 * 1024 - 8 * 1024     # just under etcd's default --max-request-bytes
# leases that outlive the set-up writes of 1.5 MiB values on a busy test machine
SLOW_LEASE = dict(FAST, lease_ttl=10)


async def read_until_ok(loop, attempts: int = 10):
    """The leader's read; the first ones may pass the call bound while etcd serves the big
    values once (each read remembers what it refused: the next ones skip it)."""
    for i in range(attempts):
        try:
            return await loop.read()
        except StoreError:
            if i == attempts - 1:
                raise


def big_store(etcd, cluster) -> EtcdStore:
    # set-up writes of 1.5 MiB: a generous bound (sizes are under test here, not times)
    return EtcdStore(StoreConfig(endpoints=tuple(etcd.client_urls), prefix=keys.prefix(cluster),
                                 call_timeout=10.0))


async def test_a_huge_report_and_intent_are_refused_by_name_the_rest_is_read(
        etcd, cluster_name, cards):
    cards.make("c0", "SN1")
    cards.make("c1", "SN2")
    d1 = Daemon(make_config(etcd, cluster_name, "h1", [cards.spec("c0")],
                            timing=SLOW_LEASE, call=TURN_CALL), serve_api=False)
    d2 = Daemon(make_config(etcd, cluster_name, "h2", [cards.spec("c1")], timing=SLOW_LEASE,
                            call=TURN_CALL), serve_api=False)
    store = big_store(etcd, cluster_name)
    try:
        await d1.turn()
        await d2.turn()
        await d1.turn()
        assert d1.is_leader
        reg = await registry(store)
        assert {c.host for c in reg.cards} == {"h1", "h2"}
        await store.put(keys.member("h3"), b"x" * NEAR_LIMIT)     # a host of the cluster
        await store.put(keys.member("h9"), b"x" * NEAR_LIMIT)     # and one that is not
        big_intent = keys.intent("c0000000000a")
        intent_rev = await store.put(big_intent, b"y" * NEAR_LIMIT)
        await store.put(keys.gateway("g9"), b"z" * NEAR_LIMIT)
        await store.put("zzz-unknown", b"u" * NEAR_LIMIT)
        small_intent = keys.intent(cid_of(cards.root / "c1"))
        await store.put(small_intent, json.dumps({"action": "drain", "by": "test"}))

        await d2.turn()                          # its report, rewritten after the set-up
        got = await read_until_ok(d1.leader_loop)
        snap = got.snapshot
        assert sorted(snap.reports) == ["h1", "h2"]
        assert snap.bad_reports["h3"].startswith(f"value over {bounds.REPORT_MAX_BYTES} bytes")
        assert "h9" in snap.strangers and "h9" not in snap.bad_reports
        assert snap.bad_intents[big_intent][0] == intent_rev
        assert snap.bad_intents[big_intent][1].startswith(
            f"value over {bounds.RECORD_MAX_BYTES} bytes")
        assert [i.card_id for i in snap.intents] == [cid_of(cards.root / "c1")]
        # the next read does not fetch the unchanged big values again
        before = d1.store.inner.transport.bytes_read
        again = (await d1.leader_loop.read()).snapshot
        assert again.bad_reports == snap.bad_reports and sorted(again.reports) == ["h1", "h2"]
        assert d1.store.inner.transport.bytes_read - before < 256 * 1024

        # the cycle goes on: the good intent applied, the refused one deleted with it
        await d1.turn()
        assert d1.outcomes[-1] is CycleOutcome.WROTE
        reg = await registry(store)
        assert reg.card(cid_of(cards.root / "c1")).state == "drained"
        assert await store.get(big_intent) is None and await store.get(small_intent) is None
        refused = d1.leader_loop.refused_reports
        assert refused["h3"] >= 1 and "h9" not in refused
    finally:
        await d1.stop()
        await d2.stop()
        await store.close()


async def test_a_registry_over_its_bound_is_refused_unread_and_repaired(etcd, cluster_name, cards):
    cards.make("c0", "SN1")
    d1 = Daemon(make_config(etcd, cluster_name, "h1", [cards.spec("c0")], timing=SLOW_LEASE),
                serve_api=False)
    d2 = Daemon(make_config(etcd, cluster_name, "w1", [], role="witness", timing=SLOW_LEASE),
                serve_api=False)
    store = big_store(etcd, cluster_name)
    try:
        await d1.turn()
        await d2.turn()
        assert d1.is_leader and not d2.is_leader
        good = d2.registry
        assert good is not None and len(good.cards) == 1
        rev = await store.put(keys.REGISTRY, b"{" * (bounds.REGISTRY_MAX_BYTES + 1))
        # the follower keeps its last good registry and does not fetch that revision again
        await d2.turn()
        assert d2.registry == good and d2.follow.revision == rev
        before = d2.store.inner.transport.bytes_read
        await d2.turn()
        assert d2.registry == good
        assert d2.store.inner.transport.bytes_read - before < 64 * 1024
        assert 'awide_registry_rejected_total{reason="too_large"} 1.0' in \
            metrics_text(d2)
        # the leader refuses it unread and repairs it: same slots, a higher generation
        await d1.turn()
        assert d1.outcomes[-1] is CycleOutcome.WROTE
        fixed = await registry(store)
        assert fixed.slots == good.slots and fixed.generation > good.generation
        assert fixed.lineage == good.lineage
        text = metrics_text(d1)
        assert 'awide_registry_rejected_total{reason="too_large"} 1.0' in text
        assert 'awide_registry_repairs_total{found="too_large"} 1.0' in text
        await d2.turn()
        assert d2.registry == fixed
    finally:
        await d1.stop()
        await d2.stop()
        await store.close()
