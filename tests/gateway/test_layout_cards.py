"""The card set and storage format of a namespace's layout record, against real etcd: a
gateway that lacks a recorded card (forgotten) is refused until the namespace is re-seeded
(a card going out changes nothing, a card admitted grows the record); a newer storage format
starts the namespace cold, an older one is refused."""

from __future__ import annotations

import asyncio
import json

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from awide_cluster.contract import keys
from awide_gateway_cluster import layout as lay
from awide_gateway_cluster.metrics import GatewayCollector
from tests.gateway.support import config, gateway, in_service, served, with_state
from tests.timing import wait_until

pytestmark = pytest.mark.timeout(60)


async def test_a_forgotten_card_refuses_new_gateways_until_the_namespace_is_reseeded(
        etcd, leader, store, world, world_b, cluster_name):
    a, b = served(world, 2)
    for c in (a, b):
        world_b.add_target(c.target.subnqn, serial=c.serial, model=c.model,
                           traddr=c.target.traddr, trsvcid=c.target.trsvcid,
                           nguid=c.identity.removeprefix("nguid:"))
    await leader.publish([a])
    g1 = gateway(config(cluster_name, etcd.endpoints, world, pod="a"), world)
    await g1.start()
    started = [g1]
    try:
        key = keys.layout(g1.namespace)
        rec = json.loads((await store.get(key)).value)
        assert rec["cards"] == [a.id] and rec["format"] == 1
        # a card admitted (a cluster's bring-up): the next gateway records the grown set
        await leader.publish([a, b])
        g0 = gateway(config(cluster_name, etcd.endpoints, world_b, pod="a2"), world_b)
        await g0.start()
        started.append(g0)
        assert g0.snapshot().layout_ok
        rec = json.loads((await store.get(key)).value)
        assert sorted(rec["cards"]) == sorted([a.id, b.id]) and rec["created_by"] == g0.id
        # a card going out does not change the set
        await leader.publish([a, with_state(b, "out")])
        g2 = gateway(config(cluster_name, etcd.endpoints, world_b, pod="b"), world_b)
        await g2.start()
        started.append(g2)
        assert g2.snapshot().layout_ok
        # forgotten: the set changed; a new gateway is refused, naming the card
        await leader.publish([a])
        await wait_until(lambda: g1.snapshot().card(b.id) is None)
        g3 = gateway(config(cluster_name, etcd.endpoints, world_b, pod="c"), world_b)
        with pytest.raises(lay.CardSetMismatch) as err:
            await g3.start()
        assert b.id in str(err.value) and "re-seed" in str(err.value)
        assert in_service(g1, a.id)             # the running gateways keep serving
        # the operator re-seeds: the next gateway records the cards it uses
        await store.delete(key)
        g4 = gateway(config(cluster_name, etcd.endpoints, world_b, pod="d"), world_b)
        await g4.start()
        started.append(g4)
        assert g4.snapshot().layout_ok
        assert json.loads((await store.get(key)).value)["cards"] == [a.id]
    finally:
        for g in started:
            await g.stop()


async def test_a_newer_storage_format_starts_cold_and_an_older_gateway_is_refused(
        etcd, leader, store, world, world_b, cluster_name):
    [a] = served(world, 1)
    world_b.add_target(a.target.subnqn, serial=a.serial, model=a.model,
                       traddr=a.target.traddr, trsvcid=a.target.trsvcid,
                       nguid=a.identity.removeprefix("nguid:"))
    await leader.publish([a])
    old = gateway(config(cluster_name, etcd.endpoints, world, pod="a"), world)
    await old.start()
    started = [old]
    try:
        ns = old.namespace
        await wait_until(lambda: in_service(old, a.id))
        assert old.placement.dialog("t").data_key.startswith(ns + "/")
        new = gateway(config(cluster_name, etcd.endpoints, world_b, pod="b"), world_b,
                      storage_format=2)
        await new.start()
        started.append(new)
        rec = json.loads((await store.get(keys.layout(ns))).value)
        assert rec["format"] == 2 and rec["created_by"] == new.id
        await wait_until(lambda: in_service(new, a.id))
        assert new.snapshot().namespace == f"{ns}.f2"
        assert new.placement.dialog("t").data_key.startswith(f"{ns}.f2/")
        # the running gateway of format 1 keeps its own keys; a new one is refused
        assert old.placement.dialog("t").data_key.startswith(ns + "/")
        again = gateway(config(cluster_name, etcd.endpoints, world, pod="c"), world)
        with pytest.raises(lay.FormatTooNew) as err:
            await again.start()
        assert "format 2" in str(err.value) and "format 1" in str(err.value)
        # refused, it left no card worker running (its first read had started one per card;
        # left to the event loop's close, one caught starting nvme-cli hung that close)
        assert not [t.get_name() for t in asyncio.all_tasks()
                    if t.get_name().startswith(f"awide-card-{again.id}-")]
    finally:
        for g in started:
            await g.stop()


async def test_an_undecodable_layout_record_refuses_the_start_and_is_counted(
        etcd, leader, store, world, cluster_name):
    a, = served(world, 1)
    await leader.publish([a])
    g = gateway(config(cluster_name, etcd.endpoints, world, pod="a"), world)
    key = keys.layout(g.namespace)
    await store.put(key, b'{"schema": 1, "namespace": 7}')
    with pytest.raises(lay.LayoutUnreadable) as err:
        await g.start()
    assert key in str(err.value) and "does not decode" in str(err.value)
    assert g.stats().layout_records_refused == 1
    registry = CollectorRegistry()
    registry.register(GatewayCollector(g))
    text = generate_latest(registry).decode()
    assert "awide_gateway_layout_records_refused_total 1.0" in text
    assert (await store.get(key)).value == b'{"schema": 1, "namespace": 7}'   # not overwritten
