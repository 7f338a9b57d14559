"""The gateway applies what the registry watch delivers, against real etcd (3 members).

The gateway's store is a real ``EtcdStore`` that records the body of every range request it
sends on the registry key (``ReadCountingStore``), so the tests count the gateway's registry
reads and see what each one asks. A gateway whose polls come late (its random phase drawn at
the end of a long interval) gets a registry change only through its watch.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import random
from collections.abc import AsyncIterator
from typing import Any

import pytest

from awide_cluster.contract import bounds, keys
from awide_cluster.store import EtcdStore, StoreConfig
from awide_cluster.store.codec import b64
from awide_gateway_cluster import ClusterGateway
from awide_harness import EtcdCluster
from awide_harness.registry_writer import RegistryWriter
from tests.gateway.support import (
    config,
    gateway,
    in_service,
    serve,
    served,
)
from tests.timing import bound, wait_until

pytestmark = pytest.mark.timeout(90)

BIG = b"{" * (bounds.REGISTRY_MAX_BYTES + 1)          # over the bound, within a watch message
HUGE = b"{" * (1536 * 1024 - 8 * 1024)               # over a watch message's bound too


class ReadCountingStore(EtcdStore):
    """A real store; every range request body on ``registry`` is recorded before it is sent
    (``registry_reads``), and whether etcd answered it (``answered``, same index). The
    start's read (a read-only transaction of the registry and the layout record) counts as
    the range on ``registry`` it holds."""

    def __init__(self, config: StoreConfig) -> None:
        super().__init__(config)
        self.registry_reads: list[dict[str, Any]] = []
        self.answered: list[bool | None] = []

    async def read(self, path: str, body: dict[str, Any], timeout: float | None, what: str,
                   *, max_bytes: int | None = None) -> tuple[str, dict[str, Any]]:
        key = b64(self.codec.key(keys.REGISTRY))
        ranges = ([op.get("request_range", {}) for op in body.get("success", [])]
                  if path == "/v3/kv/txn" else [body] if path == "/v3/kv/range" else [])
        asked = [r for r in ranges if r.get("key") == key]
        if not asked:
            return await super().read(path, body, timeout, what, max_bytes=max_bytes)
        i = len(self.registry_reads)
        self.registry_reads.append(dict(asked[0]))
        self.answered.append(None)
        try:
            answer = await super().read(path, body, timeout, what, max_bytes=max_bytes)
        except BaseException:
            self.answered[i] = False
            raise
        self.answered[i] = True
        return answer


class LatePhase(random.Random):
    """Every random phase at the end of its interval: the poll loop's first poll comes one
    whole ``poll_interval`` after start."""

    def uniform(self, a: float, b: float) -> float:
        return b


class SecondTurn(random.Random):
    """A random source whose draws in [0, 1) are all 0.4: a cycle of three polls gets its
    linearizable one at the second turn of each cycle (phase 1: turns 2, 5, 8, ...)."""

    def random(self) -> float:
        return 0.4

    def getrandbits(self, k: int) -> int:
        # integers stay random (a lease ID of its own): ``randrange`` draws them here
        return super().getrandbits(k)


@contextlib.asynccontextmanager
async def counted_gateway(etcd: Any, leader: RegistryWriter, world: Any, cluster_name: str
                          ) -> AsyncIterator[tuple[ClusterGateway, ReadCountingStore, Any]]:
    """One served card published; a gateway on a read-counting store, every third poll
    linearizable, started; (gateway, store, card); both stopped after."""
    [a] = served(world, 1)
    await leader.publish([a])
    store = counting_store(etcd, cluster_name)
    gw = gateway(config(cluster_name, etcd.endpoints, world, timing={"linearizable_every": 3}),
                 world, store=store, rng=SecondTurn())
    await gw.start()
    try:
        yield gw, store, a
    finally:
        await gw.stop()
        await store.close()


def counting_store(etcd: Any, cluster_name: str) -> ReadCountingStore:
    return ReadCountingStore(StoreConfig(endpoints=etcd.endpoints, call_timeout=0.3,
                                         hedge_after=0.05, prefix=keys.prefix(cluster_name)))


def watching_gateway(etcd: Any, world: Any, cluster_name: str,
                     store: EtcdStore) -> ClusterGateway:
    """Watch on, polls one minute apart (the start's poll, then none during a test)."""
    cfg = config(cluster_name, etcd.endpoints, world, watch=True,
                 timing={"poll_interval": 60.0, "lease_ttl": 70})
    return gateway(cfg, world, store=store, rng=LatePhase())


async def test_a_registry_change_reaches_the_gateway_through_the_watch_without_a_read(
        etcd, leader, world, cluster_name):
    a, b = served(world, 2)
    await leader.publish([a])
    store = counting_store(etcd, cluster_name)
    gw = watching_gateway(etcd, world, cluster_name, store)
    await gw.start()
    try:
        await wait_until(lambda: in_service(gw, a.id), what="a in")
        reads, st = len(store.registry_reads), gw.stats()
        assert reads == 1 and st.polls == 1 and st.generation == 1     # the start's poll
        for n in (2, 3):
            reg = await leader.publish([a, b] if n == 2 else [b])
            await wait_until(lambda reg=reg: gw.snapshot().generation == reg.generation,
                           what=f"generation {reg.generation} applied")
        # two changes applied, not one registry read for them (a watch event used to wake
        # one poll each: two reads)
        st = gw.stats()
        assert len(store.registry_reads) == reads and st.polls == 1
        assert st.watch_events == 2 and st.registries_rejected == 0 and not st.stale
        await wait_until(lambda: in_service(gw, b.id) and gw.snapshot().card(a.id) is None,
                       what="b in, a forgotten")
    finally:
        await gw.stop()
        await store.close()


async def test_a_hostile_registry_through_the_watch_is_refused_like_a_polled_one(
        etcd, leader, world, world_b, cluster_name):
    [a] = served(world, 1)
    serve(world_b, a)
    await leader.publish([a])
    store = counting_store(etcd, cluster_name)
    watched = watching_gateway(etcd, world, cluster_name, store)
    polled = gateway(config(cluster_name, etcd.endpoints, world_b, watch=False), world_b)
    await watched.start()
    await polled.start()
    try:
        for g in (watched, polled):
            await wait_until(lambda g=g: in_service(g, a.id), what="a in")
        reads = len(store.registry_reads)
        other = leader.doc([a])
        other["cluster"] = "elsewhere"
        hostile = [(b'{"schema": 1, "generation": ', "corrupt registry"),
                   (json.dumps(other).encode(), "names cluster 'elsewhere'"),
                   (BIG, f"value over {bounds.REGISTRY_MAX_BYTES} bytes")]
        for n, (raw, why) in enumerate(hostile, 1):
            await leader.put_raw(raw)
            await wait_until(lambda n=n: watched.stats().registries_rejected == n
                           and polled.stats().registries_rejected == n, what=f"{why} refused")
            w, p = watched.stats(), polled.stats()
            assert why in w.problem and w.problem == p.problem      # the same refusal
            assert w.stale and p.stale and w.generation == p.generation == 1
            assert in_service(watched, a.id) and in_service(polled, a.id)
        # all three came through the watch: not one read
        assert len(store.registry_reads) == reads and watched.stats().polls == 1
        assert watched.stats().watch_events == 3
        # a value over a watch message's bound is refused unparsed; one bounded poll refuses it
        await leader.put_raw(HUGE)
        await wait_until(lambda: watched.stats().registries_rejected == 4
                       and polled.stats().registries_rejected == 4, what="huge refused")
        assert watched.stats().polls == 2 and watched.stats().problem == polled.stats().problem
        assert in_service(watched, a.id)
        reg = await leader.publish([a])
        for g in (watched, polled):
            await wait_until(lambda g=g: g.snapshot().generation == reg.generation
                           and not g.stats().stale, what="a good registry again")
        assert watched.stats().polls == 2
    finally:
        await polled.stop()
        await watched.stop()
        await store.close()


async def test_the_gateway_polls_serializable_but_every_nth_poll(etcd, leader, world,
                                                                  cluster_name):
    async with counted_gateway(etcd, leader, world, cluster_name) as (gw, store, a):
        await wait_until(lambda: len(store.registry_reads) >= 8, what="8 polls")
        sent = store.registry_reads[:7]
        flags = [bool(r.get("serializable")) for r in sent]
        # the first is linearizable, then every third at the gateway's own phase (drawn from
        # its random source: 1 here, turns 2 and 5), and any one after a linearizable poll
        # that etcd did not answer (a loaded machine may time one out)
        expected = [i != 0 and (i + 1) % 3 != 0
                    and not (i and not flags[i - 1] and not store.answered[i - 1])
                    for i in range(7)]
        assert flags == expected and sum(flags) >= 2
        # each one asks only for a newer value than the one it has
        assert all(int(r["min_mod_revision"]) >= 1 for r in sent[1:])
        assert gw.stats().generation == 1 and not gw.stats().stale



async def test_without_quorum_every_poll_is_linearizable_and_the_view_stays_stale(
        etcd, leader, world, cluster_name):
    """Two members frozen: the third still answers serializable reads, but not the
    linearizable one; from that failure on every poll is linearizable, so the view stays
    stale until a quorum answers again."""
    async with counted_gateway(etcd, leader, world, cluster_name) as (gw, store, a):
        await wait_until(lambda: len(store.registry_reads) >= 2 and not gw.stats().stale,
                       what="polls answered")
        etcd.freeze(0)
        etcd.freeze(1)
        await wait_until(lambda: gw.stats().stale, what="stale without quorum")
        first = len(store.registry_reads)
        failed = gw.stats().failed_polls
        await wait_until(lambda: gw.stats().failed_polls >= failed + 3, what="3 more polls")
        after = store.registry_reads[first:]
        assert len(after) >= 3 and not any(r.get("serializable") for r in after)
        assert gw.stats().stale and "registry not read" in gw.stats().problem
        assert in_service(gw, a.id) and gw.stats().generation == 1
        etcd.thaw(0)
        etcd.thaw(1)
        await wait_until(lambda: not gw.stats().stale, timeout=20.0, what="fresh with quorum")
        back = len(store.registry_reads)
        await wait_until(lambda: len(store.registry_reads) >= back + 3, what="3 more polls")
        assert any(r.get("serializable") for r in store.registry_reads[back:])


async def test_progress_notifications_stand_in_for_the_serializable_polls(etcd, leader, world,
                                                                          cluster_name):
    """etcd (the fixtures' members, at the deploy's 1.4 s) notifies a synced watch: each
    notification proves the view fresh for 1.5 polls as a serializable poll would, so those
    polls are left out; the
    linearizable poll of every third turn is still made, and the view stays fresh."""
    [a] = served(world, 1)
    await leader.publish([a])
    store = counting_store(etcd, cluster_name)
    cfg = config(cluster_name, etcd.endpoints, world, watch=True,
                 timing={"poll_interval": 1.0, "linearizable_every": 3, "lease_ttl": 10})
    gw = gateway(cfg, world, store=store)
    await gw.start()
    try:
        await wait_until(lambda: gw.stats().polls_skipped >= 2, timeout=20.0,
                       what="two polls left out")
        st = gw.stats()
        assert st.watch_progress >= 1 and not st.stale and st.problem == ""
        assert st.staleness is not None and st.staleness < bound(2.5)
        linearizable = sum(not r.get("serializable") for r in store.registry_reads)
        await wait_until(lambda: sum(not r.get("serializable") for r in store.registry_reads)
                       > linearizable, timeout=20.0, what="the next linearizable poll")
        st = gw.stats()
        # the left-out polls were not made: every read is a poll counted (one may be out)
        assert st.polls <= len(store.registry_reads) <= st.polls + 1
        assert st.polls_skipped >= 2
        assert not st.stale and st.generation == 1
    finally:
        await gw.stop()
        await store.close()


@contextlib.asynccontextmanager
async def quiet_members(etcd_binaries: Any, tmp_path: Any, cluster_name: str
                        ) -> AsyncIterator[tuple[EtcdCluster, EtcdStore]]:
    """A 3-member etcd whose members notify a watch a minute apart (etcd's own default is ten
    minutes), and a store on it for the cluster's keys."""
    binary = next(iter(etcd_binaries.values()))
    with EtcdCluster(tmp_path / "etcd", binary=binary, stop_timeout=0.5,
                     progress_notify_interval=60) as quiet:
        boot = EtcdStore(StoreConfig(endpoints=quiet.endpoints, call_timeout=2.0,
                                     prefix=keys.prefix(cluster_name)))
        try:
            yield quiet, boot
        finally:
            await boot.close()


async def test_without_progress_notifications_every_turn_polls(etcd_binaries, tmp_path, world,
                                                                cluster_name):
    """Members that notify a minute apart (etcd's own default is ten minutes): no proof
    comes but the start's own read (for the proof window after it), so every turn's poll after
    that window is made, serializable but every third, as without a watch."""
    async with quiet_members(etcd_binaries, tmp_path, cluster_name) as (quiet, boot):
        [a] = served(world, 1)
        await RegistryWriter(boot, cluster_name).publish([a])
        store = counting_store(quiet, cluster_name)
        cfg = config(cluster_name, quiet.endpoints, world, watch=True,
                     timing={"poll_interval": 0.4, "linearizable_every": 3})
        gw = gateway(cfg, world, store=store)
        await gw.start()
        try:
            await wait_until(lambda: len(store.registry_reads) >= 7, what="7 polls")
            st = gw.stats()
            # the start's read proved the view fresh for the window: the turns within it
            # (the first comes one interval after the start) may be left out, no later one
            within = math.ceil(gw._registry_watch.window / cfg.timing.poll_interval)
            assert st.polls_skipped <= within and st.watch_progress == 0 and not st.stale
            assert sum(bool(r.get("serializable")) for r in store.registry_reads[:7]) >= 2
        finally:
            await gw.stop()
            await store.close()


async def test_while_the_registry_changes_its_messages_stand_in_for_the_notifications(
        etcd_binaries, tmp_path, world, cluster_name):
    """etcd sends no progress notification to a watch that had an event in its interval (and
    these members notify a minute apart): while the registry changes, each watch message
    whose event is at its own header revision proves the view fresh instead, so serializable
    polls are left out without any notification, and the view stays fresh."""
    async with quiet_members(etcd_binaries, tmp_path, cluster_name) as (quiet, boot):
        [a] = served(world, 1)
        writer = RegistryWriter(boot, cluster_name)
        await writer.publish([a])
        store = counting_store(quiet, cluster_name)
        cfg = config(cluster_name, quiet.endpoints, world, watch=True,
                     timing={"poll_interval": 0.4, "linearizable_every": 3})
        gw = gateway(cfg, world, store=store)
        stop = asyncio.Event()

        async def changes() -> None:        # the leader: a new generation every 0.2 s
            while not stop.is_set():
                await writer.publish([a])
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(0.2):    # pacing, not a wait for a condition
                        await stop.wait()
        await gw.start()
        task = asyncio.create_task(changes())
        try:
            await wait_until(lambda: gw.stats().polls_skipped >= 2, timeout=20.0,
                             what="two polls left out")
            st = gw.stats()
            assert st.watch_progress == 0 and not st.stale and st.problem == ""
            assert st.generation >= 2 and st.watch_events >= 1
        finally:
            stop.set()
            await task
            await gw.stop()
            await store.close()


async def test_a_watch_on_a_frozen_member_moves_to_another_within_the_proof_window(
        etcd, leader, world, cluster_name):
    """A frozen member keeps its socket open and says nothing: the gateway's watch, silent for
    its proof window (1.75 s: the members' 1.4 s notify interval with its margin), moves to
    the next member at once, and a change made after the freeze comes through the watch."""
    a, b = served(world, 2)
    await leader.publish([a])
    cfg = config(cluster_name, etcd.endpoints, world, watch=True,
                 timing={"poll_interval": 1.0, "lease_ttl": 10})
    gw = gateway(cfg, world)
    await gw.start()
    try:
        member = await wait_until(lambda: gw.stats().watch_progress >= 1
                                  and gw.stats().watch_member, what="the watch streaming")
        etcd.freeze(etcd.endpoints.index(member))
        # silent for at most the window after the freeze, then one stream opened on the next
        await wait_until(lambda: gw.stats().watch_member not in (None, member),
                         timeout=1.75 + 1.0, what=f"the watch moved off frozen {member}")
        events = gw.stats().watch_events
        reg = await leader.publish([a, b])
        await wait_until(lambda: gw.stats().watch_events > events
                         and gw.snapshot().generation == reg.generation,
                         what="the change through the moved watch")
        st = gw.stats()
        assert st.watch_moves >= 1 and st.watch_member != member and not st.stale
    finally:
        await gw.stop()
