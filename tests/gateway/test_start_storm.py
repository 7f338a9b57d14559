"""What a gateway's start costs etcd, against real etcd: one lease, never two, even when a
grant's answer is lost (every grant asks for the same lease ID); a layout read before it is
created, so a start where the layout exists writes no layout; the registration after the
start-up delay."""

from __future__ import annotations

import random
import time
from dataclasses import replace
from typing import Any

import pytest

from awide_cluster.contract import keys
from awide_cluster.contract.records import GatewayRecord, LayoutRecord, decode_gateway
from awide_cluster.store import EtcdStore, StoreConfig
from awide_cluster.store.errors import Timeout
from awide_gateway_cluster import layout as lay
from awide_gateway_cluster.follower import Follower
from awide_gateway_cluster.registration import Registration, check_layout
from awide_harness.fakes import FakeNvmeWorld
from tests.gateway.support import config, gateway
from tests.store.test_read_many import CountingStore
from tests.timing import bound, wait_until

pytestmark = pytest.mark.timeout(60)


class LostGrantAnswers(EtcdStore):
    """The real store, whose first ``lose`` lease grants reach etcd and are applied, and whose
    answers are then lost (the caller sees a deadline that passed after sending)."""

    def __init__(self, config: StoreConfig, lose: int) -> None:
        super().__init__(config)
        self.lose = lose

    async def grant(self, ttl: int, *, lease_id: int = 0, timeout: float | None = None) -> Any:
        lease = await super().grant(ttl, lease_id=lease_id, timeout=timeout)
        if self.lose > 0:
            self.lose -= 1
            raise Timeout(f"lease grant: answer of {lease.id:x} lost", maybe_applied=True)
        return lease


class CountedWrites(EtcdStore):
    """The real store, the writes of each key counted: ``writes`` when asked for, ``written``
    once etcd answered (a key read after ``written`` has it)."""

    def __init__(self, config: StoreConfig) -> None:
        super().__init__(config)
        self.writes: dict[str, int] = {}
        self.written: dict[str, int] = {}

    @staticmethod
    def _count(counts: dict[str, int], key: str) -> None:
        counts[key] = counts.get(key, 0) + 1

    async def create(self, key: str, value: bytes | str, *, lease: int = 0,
                     timeout: float | None = None) -> int:
        self._count(self.writes, key)
        rev = await super().create(key, value, lease=lease, timeout=timeout)
        self._count(self.written, key)
        return rev

    async def put(self, key: str, value: bytes | str, *, lease: int = 0,
                  timeout: float | None = None) -> int:
        self._count(self.writes, key)
        rev = await super().put(key, value, lease=lease, timeout=timeout)
        self._count(self.written, key)
        return rev


async def leases(store: EtcdStore) -> set[int]:
    """Every lease etcd holds (of every client of the cluster)."""
    _, answer = await store.read("/v3/lease/leases", {}, bound(1.0), "lease list")
    return {int(x["ID"]) for x in answer.get("leases", [])}


def store_config(etcd: Any, cluster_name: str) -> StoreConfig:
    return StoreConfig(endpoints=etcd.endpoints, prefix=keys.prefix(cluster_name),
                       call_timeout=bound(1.0))


async def test_a_gateway_whose_grant_answers_are_lost_holds_exactly_one_lease(
        etcd: Any, store: EtcdStore, cluster_name: str) -> None:
    lossy = LostGrantAnswers(store_config(etcd, cluster_name), lose=1)
    reg = Registration(lossy, "gw-1", ttl=30, call_timeout=bound(1.0), rng=random.Random(7))
    record = GatewayRecord(id="gw-1", host="h", pod="p", namespace="ns", placement="dialog",
                           fingerprint="f", generation=1, engine=None, version="t")
    before = await leases(store)
    try:
        assert not await reg.tick(record, 100.0)          # granted, answer lost
        assert reg.lease is None and reg.lease_id in await leases(store)
        assert await reg.tick(record, 101.0)              # the same ID: "already exists", kept
        assert reg.lease == reg.lease_id and reg.grants == 2
        assert await leases(store) - before == {reg.lease_id}
        kv = await store.get(keys.gateway("gw-1"))
        assert kv is not None and kv.lease == reg.lease_id
        assert 25 < await store.time_to_live(reg.lease_id) <= 30
    finally:
        await reg.close()
        await lossy.close()
    assert reg.lease_id not in await leases(store)
    assert await store.get(keys.gateway("gw-1")) is None


async def test_a_stop_revokes_a_lease_whose_grant_answer_was_lost(
        etcd: Any, store: EtcdStore, cluster_name: str) -> None:
    lossy = LostGrantAnswers(store_config(etcd, cluster_name), lose=1)
    reg = Registration(lossy, "gw-2", ttl=30, call_timeout=bound(1.0), rng=random.Random(8))
    record = GatewayRecord(id="gw-2", host="h", pod="p", namespace="ns", placement="dialog",
                           fingerprint="f", generation=1, engine=None, version="t")
    try:
        assert not await reg.tick(record, 100.0)
        assert reg.lease_id in await leases(store)        # granted, the gateway never knew
    finally:
        await reg.close()
        await lossy.close()
    assert reg.lease_id not in await leases(store)


async def test_the_layout_is_read_first_and_created_only_when_absent(
        etcd: Any, cluster_name: str) -> None:
    counted = CountedWrites(store_config(etcd, cluster_name))
    mine = LayoutRecord("ns-1", "dialog", created_by="gw-a", cards=("c1",))
    key = keys.layout("ns-1")
    try:
        assert await check_layout(counted, mine, timeout=bound(1.0), create=False) == "absent"
        assert counted.writes == {}
        # no registry read yet (no card set): nothing recorded
        assert await check_layout(counted, replace(mine, cards=None),
                                  timeout=bound(1.0)) == "wait"
        assert counted.writes == {}
        assert await check_layout(counted, mine, timeout=bound(1.0)) == "ok"
        assert counted.writes == {key: 1}
        other = LayoutRecord("ns-1", "dialog", created_by="gw-b", cards=("c1",))
        for _ in range(3):
            assert await check_layout(counted, other, timeout=bound(1.0)) == "ok"
        assert counted.writes == {key: 1}
        stripe = LayoutRecord("ns-1", "stripe", created_by="gw-c", cards=("c1",))
        assert isinstance(await check_layout(counted, stripe, timeout=bound(1.0)),
                          lay.LayoutMismatch)
        assert counted.writes == {key: 1}
    finally:
        await counted.close()


async def test_a_start_with_an_existing_layout_writes_no_layout(
        etcd: Any, leader: Any, cluster_name: str, world: FakeNvmeWorld,
        world_b: FakeNvmeWorld) -> None:
    await leader.publish([])        # a registry to take the card set from (none: no record)
    first_store = CountedWrites(store_config(etcd, cluster_name))
    first = gateway(config(cluster_name, etcd.endpoints, world), world, store=first_store)
    await first.start()
    try:
        layout_key = keys.layout(first.namespace)
        assert first_store.writes == {layout_key: 1}        # the namespace's first: recorded
        assert first.snapshot().layout_ok
        second_store = CountedWrites(store_config(etcd, cluster_name))
        second = gateway(config(cluster_name, etcd.endpoints, world_b), world_b,
                         store=second_store)
        await second.start()
        try:
            assert second.snapshot().layout_ok               # read at start: known at once
            own = keys.gateway(second.id)
            await wait_until(lambda: second_store.writes.get(own, 0) >= 1)
            assert layout_key not in second_store.writes
        finally:
            await second.stop()
            await second_store.close()
    finally:
        await first.stop()
        await first_store.close()


async def test_the_first_record_waits_for_a_fresh_view_and_is_written_once(
        etcd: Any, leader: Any, cluster_name: str, world: FakeNvmeWorld) -> None:
    # no registry yet: the view is stale from the start (a poll interval of 1 s: the wait
    # lasts 3 s, and the poll asked right after the publish lands well within it)
    counted = CountedWrites(store_config(etcd, cluster_name))
    gw = gateway(config(cluster_name, etcd.endpoints, world, timing={"poll_interval": 1.0}),
                 world, store=counted)
    own = keys.gateway(gw.id)
    await gw.start()
    try:
        await wait_until(lambda: gw._side.first_waits >= 1)
        assert own not in counted.writes            # a stale view: nothing registered yet
        reg = await leader.publish([])
        gw._poll_now.set()                          # read it now, not at the next turn
        await wait_until(lambda: counted.written.get(own, 0) >= 1)
        kv = await counted.get(own, timeout=bound(1.0))
        assert kv is not None
        record = decode_gateway(kv.value, key=own)
        assert not record.stale and record.generation == reg.generation
        assert counted.writes[own] == 1             # its first record is already fresh
    finally:
        await gw.stop()
        await counted.close()


async def test_a_gateway_still_stale_registers_after_the_wait(
        etcd: Any, cluster_name: str, world: FakeNvmeWorld) -> None:
    counted = CountedWrites(store_config(etcd, cluster_name))
    gw = gateway(config(cluster_name, etcd.endpoints, world), world, store=counted)
    own = keys.gateway(gw.id)
    await gw.start()
    try:
        await wait_until(lambda: counted.written.get(own, 0) >= 1)     # etcd answered it
        waited = gw._side.first_waits
        assert waited >= 1                          # it did wait, and then registered
        kv = await counted.get(own, timeout=bound(1.0))
        assert kv is not None and decode_gateway(kv.value, key=own).stale
    finally:
        await gw.stop()
        await counted.close()


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_with_the_watch_the_first_poll_after_a_good_start_comes_an_interval_later(
        etcd: Any, leader: Any, cluster_name: str, world: FakeNvmeWorld, seed: int) -> None:
    # the start's read answered and the watch follows from its revision: the poll loop's first
    # turn (its backstop) comes no earlier than one interval after the start, not at a random
    # phase within the first interval
    await leader.publish([])
    cfg = config(cluster_name, etcd.endpoints, world, watch=True)
    gw = gateway(cfg, world, rng=random.Random(seed))
    await gw.start()
    started = time.monotonic()
    try:
        follower = gw._follower
        assert follower is not None and follower.turns == 1        # the start's own read
        turn = await wait_until(lambda: follower.turns >= 2 and time.monotonic())
        assert turn - started >= cfg.timing.poll_interval
    finally:
        await gw.stop()


async def test_the_start_read_proves_the_view_fresh_for_the_window_only(
        store: EtcdStore, leader: Any, cluster_name: str) -> None:
    # on a clock of the test's own: the start's answered read leaves out the serializable
    # polls of the proof window after its answer, not one after it; a later poll proves nothing
    await leader.publish([])
    now = [100.0]
    follower = Follower(store, cluster=cluster_name, call_timeout=bound(1.0),
                        clock=lambda: now[0], linearizable_every=10, phase=0)
    window = 1.75
    assert (await follower.poll()).outcome == "applied"
    now[0] += 1.0
    assert not follower.skips(window)               # no notification yet: it would poll
    follower.proved_at_start()
    assert follower.state.last_progress == 100.0 and follower.skips(window)
    now[0] = 100.0 + window + 0.01
    assert not follower.skips(window)               # the window ended: it polls
    assert (await follower.poll()).outcome == "unchanged"
    follower.proved_at_start()                      # not the start's read: no proof
    assert follower.state.last_progress == 100.0


async def test_a_start_read_that_found_no_registry_proves_nothing(
        store: EtcdStore, cluster_name: str) -> None:
    now = [100.0]
    follower = Follower(store, cluster=cluster_name, call_timeout=bound(1.0),
                        clock=lambda: now[0], linearizable_every=10, phase=0)
    await follower.poll()                           # answered: the registry is absent
    follower.proved_at_start()
    assert follower.state.problem and follower.state.last_progress is None
    assert not follower.skips(1.75)


@pytest.mark.parametrize("watch", [True, False])
async def test_a_started_gateway_takes_its_start_read_as_proof_only_with_the_watch(
        etcd: Any, leader: Any, cluster_name: str, world: FakeNvmeWorld, watch: bool) -> None:
    await leader.publish([])
    gw = gateway(config(cluster_name, etcd.endpoints, world, watch=watch), world)
    await gw.start()
    try:
        st = gw._follower.state if gw._follower is not None else None
        assert st is not None and st.last_ok is not None
        assert st.last_progress == (st.last_ok if watch else None)
    finally:
        await gw.stop()


@pytest.mark.parametrize("recorded", [False, True])
async def test_a_start_reads_its_registry_and_layout_in_one_request(
        etcd: Any, leader: Any, cluster_name: str, world: FakeNvmeWorld,
        world_b: FakeNvmeWorld, recorded: bool) -> None:
    reg = await leader.publish([])
    if recorded:        # the namespace's layout recorded by a gateway started before
        first = gateway(config(cluster_name, etcd.endpoints, world_b), world_b)
        await first.start()
        await first.stop()
    counted = CountingStore(store_config(etcd, cluster_name))
    gw = gateway(config(cluster_name, etcd.endpoints, world), world, store=counted)
    await gw.start()
    try:
        # every read of the start: one read-only transaction, the registry applied and the
        # layout verified (recorded by this one when it was absent)
        assert counted.paths == ["/v3/kv/txn"]
        view = gw.snapshot()
        assert view.generation == reg.generation and view.layout_ok
        assert await counted.get(keys.layout(gw.namespace), timeout=bound(1.0)) is not None
    finally:
        await gw.stop()
        await counted.close()
