"""Key layout sharing, registration, one engine, no wipe — against real etcd."""

from __future__ import annotations

import json

import pytest

from awide_cluster.contract import keys
from awide_cluster.contract.records import decode_gateway
from awide_gateway_cluster import EngineRefused, LayoutMismatch, WipeRefused
from awide_gateway_cluster.layout import namespace
from tests.gateway.support import config, gateway, in_service, served
from tests.timing import wait_until

pytestmark = pytest.mark.timeout(60)


async def test_placement_mismatch_refused_naming_both(etcd, leader, store, world, world_b,
                                                     cluster_name):
    await leader.publish([])
    g1 = gateway(config(cluster_name, etcd.endpoints, world, pod="a"), world)
    await g1.start()
    try:
        kv = await store.get(keys.layout(g1.namespace))
        rec = json.loads(kv.value)
        assert rec["placement"] == "dialog" and rec["created_by"] == g1.id
        g2 = gateway(config(cluster_name, etcd.endpoints, world_b, pod="b",
                            key_placement="stripe"), world_b)
        with pytest.raises(LayoutMismatch) as err:
            await g2.start()
        msg = str(err.value)
        assert "placement=dialog" in msg and "placement=stripe" in msg and g1.id in msg
        # same placement, another model: its own namespace, its own record, starts fine
        g3 = gateway(config(cluster_name, etcd.endpoints, world_b, pod="c",
                            key_placement="stripe", model={"name": "other/model"}), world_b)
        await g3.start()
        assert g3.namespace != g1.namespace
        await g3.stop()
        # same layout: starts
        g4 = gateway(config(cluster_name, etcd.endpoints, world_b, pod="d"), world_b)
        await g4.start()
        assert g4.snapshot().layout_ok
        await g4.stop()
    finally:
        await g1.stop()


async def test_registration_on_lease_with_engine_and_generation(etcd, leader, store, world,
                                                                cluster_name):
    [a] = served(world, 1)
    reg = await leader.publish([a])
    gw = gateway(config(cluster_name, etcd.endpoints, world, pod="p1"), world)
    await gw.start()
    try:
        gw.attach_engine("vllm")
        with pytest.raises(EngineRefused) as err:
            gw.attach_engine("sglang")
        assert "vllm" in str(err.value) and "sglang" in str(err.value)
        assert gw.engine == "vllm"

        async def record():
            kv = await store.get(keys.gateway(gw.id))
            return (decode_gateway(kv.value), kv.lease) if kv else (None, 0)

        async def registered():
            rec, _ = await record()
            return rec is not None and rec.engine == "vllm" and rec.generation == reg.generation

        await wait_until(registered, what="the gateway's record registered")
        rec, lease = await record()
        assert lease != 0
        assert (rec.host, rec.pod, rec.namespace, rec.placement) == (
            "gpu1", "p1", namespace(gw.config.model), "dialog")
        assert rec.fingerprint == gw.snapshot().fingerprint
    finally:
        await gw.stop()
    assert await store.get(keys.gateway(gw.id)) is None        # lease revoked at stop


async def test_wipe_refused_at_start_and_on_request(etcd, leader, world, cluster_name):
    await leader.publish([])
    gw = gateway(config(cluster_name, etcd.endpoints, world, wipe_on_start=True), world)
    with pytest.raises(WipeRefused) as err:
        await gw.start()
    assert "shared" in str(err.value) and "at start" in str(err.value)
    gw = gateway(config(cluster_name, etcd.endpoints, world), world)
    sub = gw.subscribe()
    await gw.start()
    try:
        with pytest.raises(WipeRefused) as err:
            gw.request_wipe()
        assert "on request" in str(err.value)
        kinds = []
        while (e := sub.get_nowait()) is not None:
            kinds.append(e.kind)
        assert "refused" in kinds
    finally:
        await gw.stop()


async def test_start_with_etcd_down_serves_nothing_then_catches_up(etcd, leader, world,
                                                                  cluster_name):
    [a] = served(world, 1)
    await leader.publish([a])
    for i in range(3):
        etcd.freeze(i)
    gw = gateway(config(cluster_name, etcd.endpoints, world), world)
    try:
        await gw.start()                       # bounded, no registry, layout unverified
        choice = gw.placement.dialog("t")
        assert not choice.available and gw.snapshot().generation == 0
    finally:
        for i in range(3):
            etcd.thaw(i)
    try:
        await wait_until(lambda: in_service(gw, a.id), what="registry and layout after thaw")
        assert gw.snapshot().layout_ok and gw.placement.dialog("t").available
    finally:
        await gw.stop()
