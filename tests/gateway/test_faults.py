"""Faults: etcd frozen, bad registry documents, hostile targets. Unreachable is never empty."""

from __future__ import annotations

import json
import time

import pytest

from awide_cluster.contract import keys
from awide_cluster.contract.health import Hysteresis
from awide_cluster.contract.target import NvmeTarget
from awide_cluster.nvme.cli import NvmeCli
from awide_cluster.nvme.runner import Runner
from awide_cluster.nvme.sysfs import Sysfs
from awide_cluster.store import EtcdStore, StoreConfig
from awide_gateway_cluster.connector import Connector
from awide_gateway_cluster.view import CardPath
from awide_harness.registry_writer import RegistryWriter
from tests.gateway.support import (
    argv_text,
    config,
    gateway,
    in_service,
    make_card,
    served,
    serving_gateway,
)
from tests.timing import bound, wait_until

pytestmark = pytest.mark.timeout(60)


async def test_etcd_frozen_calls_stay_bounded_and_cards_keep_serving(
        etcd, leader, world, cluster_name):
    a, b = served(world, 2)
    await leader.publish([a, b])
    cfg = config(cluster_name, etcd.endpoints, world, watch=True)
    gw = gateway(cfg, world)
    sub = gw.subscribe()
    await gw.start()
    try:
        await wait_until(lambda: in_service(gw, a.id) and in_service(gw, b.id))
        before = gw.snapshot()
        for i in range(3):
            etcd.freeze(i)
        try:
            # one poll, timed from outside: bounded by the call bound (generous margin).
            # Through _poll_once (as the loop polls), so that whichever poll sees the first
            # failure publishes the stale event.
            t0 = time.monotonic()
            await gw.poll_once()
            assert time.monotonic() - t0 < bound(cfg.etcd.call_timeout + 0.5)
            failed = gw.stats().failed_polls
            await wait_until(lambda: gw.stats().failed_polls >= failed + 3,
                           what="polls keep running, each one bounded")
            t0 = time.monotonic()
            for _ in range(10000):
                view = gw.snapshot()
                gw.placement.dialog("conversation-1")
            assert time.monotonic() - t0 < bound(1.0)
            assert view.table == before.table and view.generation == before.generation
            assert in_service(gw, a.id) and in_service(gw, b.id)
            st = gw.stats()
            assert st.stale and st.staleness is not None and st.staleness > 0.3
            assert "registry not read" in st.problem
        finally:
            for i in range(3):
                etcd.thaw(i)
        await wait_until(lambda: not gw.stats().stale, what="fresh after thaw")
        kinds = []
        while (e := sub.get_nowait()) is not None:
            kinds.append(e.kind)
        assert "stale" in kinds and "fresh" in kinds
        assert "out" not in kinds
        assert not any(c[0] == "disconnect" for c in world.calls())
    finally:
        t0 = time.monotonic()
        await gw.stop()
        assert time.monotonic() - t0 < bound(5.0)


async def test_etcd_frozen_during_stop_returns_within_bound(etcd, leader, world, cluster_name):
    [a] = served(world, 1)
    await leader.publish([a])
    gw = gateway(config(cluster_name, etcd.endpoints, world, watch=True), world)
    await gw.start()
    await wait_until(lambda: in_service(gw, a.id))
    for i in range(3):
        etcd.freeze(i)
    try:
        t0 = time.monotonic()
        await gw.stop()
        assert time.monotonic() - t0 < bound(3.0)
    finally:
        for i in range(3):
            etcd.thaw(i)


async def test_one_member_frozen_changes_still_arrive(etcd, leader, world, cluster_name):
    a, b = served(world, 2)
    await leader.publish([a])
    gw = gateway(config(cluster_name, etcd.endpoints, world), world)
    await gw.start()
    try:
        await wait_until(lambda: in_service(gw, a.id))
        etcd.freeze(0)
        # the test's "leader" writes through the members that still answer (writes are never
        # retried on another member); the gateway keeps all three endpoints
        async with EtcdStore(StoreConfig(endpoints=etcd.endpoints[1:],
                                         prefix=keys.prefix(cluster_name))) as s:
            reg = await RegistryWriter(s, cluster_name, after=leader.reg).publish([a, b])
        try:
            await wait_until(lambda: gw.snapshot().generation == reg.generation
                           and in_service(gw, b.id), what="change through two members")
        finally:
            etcd.thaw(0)
    finally:
        await gw.stop()


async def test_corrupt_unknown_and_skewed_registries_are_kept_out(
        etcd, leader, world, cluster_name):
    a, b = served(world, 2)
    good = await leader.publish([a])
    gw = gateway(config(cluster_name, etcd.endpoints, world), world)
    sub = gw.subscribe()
    await gw.start()
    try:
        await wait_until(lambda: in_service(gw, a.id))
        bad_docs = []
        bad_docs.append(b"{not json")
        doc = leader.doc([a, b])
        doc["schema"] = 99
        bad_docs.append(json.dumps(doc).encode())
        doc = leader.doc([a, b])
        doc["cluster"] = "another-cluster"
        bad_docs.append(json.dumps(doc).encode())
        doc = leader.doc([a, b])
        doc["slots"] = [a.id] + [None] * 7       # b left unplaced while a slot is free: skew
        doc["unplaced"] = []
        bad_docs.append(json.dumps(doc).encode())
        doc = leader.doc([a, b])
        doc["cards"][1]["state"] = "sideways"
        bad_docs.append(json.dumps(doc).encode())
        for n, raw in enumerate(bad_docs, 1):
            await leader.put_raw(raw)
            await wait_until(lambda n=n: gw.stats().registries_rejected == n, what=f"doc {n}")
            view = gw.snapshot()
            assert view.generation == good.generation and in_service(gw, a.id)
            assert view.card(b.id) is None
        st = gw.stats()
        assert st.version_skew == 1 and st.stale
        polls = gw.stats().polls
        await wait_until(lambda: gw.stats().polls >= polls + 2, what="two more polls")
        assert gw.stats().registries_rejected == len(bad_docs)   # unchanged: not decoded again
        reg = await leader.publish([a, b])
        await wait_until(lambda: gw.snapshot().generation == reg.generation
                         and in_service(gw, b.id))
        assert not gw.stats().stale
        details = []
        while (e := sub.get_nowait()) is not None:
            if e.kind == "stale":
                details.append(e.detail)
        assert any("unknown schema" in d for d in details)
        assert any("corrupt registry" in d for d in details)
        assert any("version skew" in d for d in details)
        assert any("another-cluster" in d for d in details)
    finally:
        await gw.stop()


@pytest.mark.parametrize("field,value", [
    ("traddr", "10.200.0.11,hostnqn=nqn.2024-01.evil:x"),
    ("traddr", "--help"),
    ("subnqn", "nqn.2024-01.io.awide:card1,ctrl_loss_tmo=0"),
    ("subnqn", "$(touch /tmp/evil)"),
    ("transport", "loop"),
    ("trsvcid", "4420; reboot"),
])
async def test_hostile_registry_targets_never_reach_the_subprocess(
        etcd, leader, world, cluster_name, field, value):
    async with serving_gateway(etcd, leader, world, cluster_name) as (gw, a):
        evil = make_card(2, admitted=2)
        doc = leader.doc([a, evil])
        for c in doc["cards"]:
            if c["id"] == evil.id:
                c["target"][field] = value
        await leader.put_raw(json.dumps(doc).encode())
        await wait_until(lambda: gw.stats().registries_rejected == 1)
        polls = gw.stats().polls                  # and it stays refused at the next polls
        await wait_until(lambda: gw.stats().polls >= polls + 2, what="two more polls")
        assert gw.snapshot().card(evil.id) is None and in_service(gw, a.id)
        assert field in gw.stats().problem
        assert value not in argv_text(world)
        assert "evil" not in argv_text(world) and "reboot" not in argv_text(world)


async def test_connector_refuses_a_forged_target_before_any_subprocess(world):
    """A target that skipped validation (built around NvmeTarget's checks) is refused again."""
    forged = object.__new__(NvmeTarget)
    for k, v in (("transport", "tcp"), ("traddr", "1.2.3.4 --hostnqn=x"), ("trsvcid", 4420),
                 ("subnqn", "nqn.2024-01.io.awide:card1")):
        object.__setattr__(forged, k, v)
    from dataclasses import replace
    card = replace(make_card(1), target=forged)
    conn = Connector(NvmeCli(Runner(env=world.env())), Sysfs(world.sysfs_root))
    probe = await conn.probe(card, CardPath(card.id, health=Hysteresis()))
    assert probe.hostile and "traddr" in probe.refused
    assert world.calls() == []
