"""The leader cycle against real etcd, driven turn by turn (``Daemon.turn`` without its loop)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from awide_cluster.cards.directory import read_label
from awide_cluster.contract import keys
from awide_cluster.contract import registry as regdoc
from awide_cluster.contract.records import IntentRecord
from awide_cluster.contract.registry import card_id
from awide_cluster.daemon.leader import CycleOutcome
from awide_cluster.daemon.service import Daemon
from awide_cluster.store import EtcdStore
from awide_cluster.store.build import store_config
from tests.timing import wait_until

from .conftest import TURN_CALL, TURNS, FakeClock, make_config, metrics_text, registry, store_of
from .stores import HeldTxn, Severable


def cid_of(path) -> str:
    lab = read_label(path)
    return card_id(lab.serial, lab.model, lab.identity)


def daemon(etcd, cluster, host, specs, **kw) -> Daemon:
    """A daemon driven turn by turn (``TURNS`` timing, ``TURN_CALL`` bound)."""
    kw.setdefault("timing", TURNS)
    kw.setdefault("call", TURN_CALL)
    return Daemon(make_config(etcd, cluster, host, specs, **kw), serve_api=False)


@contextlib.asynccontextmanager
async def driven(etcd, cluster, host, specs, **kw) -> AsyncIterator[tuple[Daemon, EtcdStore]]:
    """``daemon(...)`` and the test's store; the daemon stopped and the store closed after."""
    d = daemon(etcd, cluster, host, specs, **kw)
    store = store_of(etcd, cluster)
    try:
        yield d, store
    finally:
        await d.stop()
        await store.close()


async def test_out_after_exactly_n_bad_polls_and_back_after_one(etcd, cluster_name, cards):
    p = cards.make("c0", "SN1")
    A = cid_of(p)
    async with driven(etcd, cluster_name, "h1", [cards.spec("c0")]) as (d, store):
        await d.turn()
        assert d.is_leader and d.outcomes[-1] is CycleOutcome.WROTE
        reg = await registry(store)
        assert reg.card(A).state == "in" and reg.slots.slot_of(A) == 0
        cards.set_healthy("c0", False)
        states = []
        for _ in range(3):
            await d.turn()
            states.append((await registry(store)).card(A).state)
        assert states == ["in", "in", "out"]
        reg = await registry(store)
        assert "store" in reg.card(A).reason and reg.slots.slot_of(A) == 0
        cards.set_healthy("c0", True)
        await d.turn()
        assert (await registry(store)).card(A).state == "in"


async def test_registry_written_only_on_change(etcd, cluster_name, cards):
    cards.make("c0", "SN1")
    async with driven(etcd, cluster_name, "h1", [cards.spec("c0")]) as (d, store):
        await d.turn()
        first = await store.get(keys.REGISTRY)
        for _ in range(5):
            await d.turn()
        again = await store.get(keys.REGISTRY)
        assert again.mod_revision == first.mod_revision
        assert d.outcomes[-5:] == [CycleOutcome.UNCHANGED] * 5
        # its own report kept advancing meanwhile
        assert d.seq == 6
        # the unchanged registry was decoded once for those 5 cycles, and each report once
        # (the members/ watch is not running here: each cycle read a new report)
        decodes = d.leader_loop.registry_decodes
        assert decodes <= 2
        await store.put(keys.REGISTRY, b"{not a registry")          # changed: read afresh
        await d.turn()
        assert d.leader_loop.registry_decodes == decodes + 1
        assert regdoc.decode((await store.get(keys.REGISTRY)).value).generation > 0  # repaired


async def test_an_out_of_turn_cycle_names_its_occasion(etcd, cluster_name, cards, caplog):
    """A cycle out of turn (a report's arrival, a term just won: ``trigger="report"``) logs
    each decision line with what started it."""
    caplog.set_level(logging.INFO, logger="awide_cluster.leader")
    A = cid_of(cards.make("c0", "SN1"))
    d = daemon(etcd, cluster_name, "h1", [cards.spec("c0")])
    store = store_of(etcd, cluster_name)
    term = "the first of a term won on the leader-key watch"
    try:
        await d.turn()
        assert d.is_leader
        await store.put(keys.intent(A), IntentRecord("drain", by="test").encode())
        # a cycle whose etcd read misses its 0.3 s bound (a loaded machine) skips, counting
        # nothing: the next one writes
        async def wrote() -> bool:
            return await d.leader_loop.cycle(trigger="report", occasion=term) is CycleOutcome.WROTE

        assert await wait_until(wrote, 10.0, what="an out-of-turn cycle writes the drain")
        assert (await registry(store)).card(A).state == "drained"
        # the leader's lines (the card's host logs the history's words as it follows too)
        said = [r.getMessage() for r in caplog.records
                if r.name == "awide_cluster.leader" and f"card {A}" in r.getMessage()]
        assert said and said[-1].endswith(f"({term})"), said
    finally:
        await d.stop()
        await store.close()


async def test_deposed_leader_write_is_refused_by_etcd(etcd, cluster_name, cards):
    """A leader frozen between its reads and its write: another took over meanwhile; etcd
    refuses the old leader's transaction (fencing on the leader key's create_revision)."""
    cards.make("c0", "SN1")
    cfg_a = make_config(etcd, cluster_name, "h1", [cards.spec("c0")])
    held = HeldTxn(store_config(cfg_a.etcd, cluster_name))     # the old leader "freezes"
    a = Daemon(cfg_a, store=held, serve_api=False)             # before its write
    b = daemon(etcd, cluster_name, "h2", [])
    store = store_of(etcd, cluster_name)
    try:
        await a.turn()
        assert a.is_leader
        gen = (await registry(store)).generation
        cards.make("c1", "SN2")
        a.request_reload(make_config(etcd, cluster_name, "h1",
                                     [cards.spec("c0"), cards.spec("c1")]))
        held.hold = True
        cycle = asyncio.ensure_future(a.turn())
        await asyncio.wait_for(held.reached.wait(), 5)
        # meanwhile: a's lease is revoked (as if it expired) and b takes the leader key
        await store.revoke(a.lease.id)
        await b.turn()
        assert b.is_leader
        assert a.lease.valid() and a.leadership.has_key          # a still believes it leads
        held.gate.set()
        await asyncio.wait_for(cycle, 5)
        # a had decided to admit c1 (generation gen + 1): etcd refused the transaction
        assert a.outcomes[-1] is CycleOutcome.DEPOSED and not a.leadership.has_key
        assert 'awide_registry_writes_total{result="conflict"} 1.0' in \
            metrics_text(a)
        after = await registry(store)
        assert after.generation == gen and len(after.cards) == 1
    finally:
        held.gate.set()
        await a.stop()
        await b.stop()
        await held.close()
        await store.close()


async def test_leader_steps_down_when_its_lease_is_not_confirmed(etcd, cluster_name, cards):
    clock = FakeClock()
    cfg = make_config(etcd, cluster_name, "h1", [])
    d = Daemon(cfg, serve_api=False, clock=clock)
    store = store_of(etcd, cluster_name)
    try:
        await d.turn()
        assert d.is_leader
        # no keepalive confirmed for TTL - margin: it stops writing, whatever etcd thinks
        clock.advance(cfg.timing.lease_ttl - cfg.etcd.call_timeout + 0.01)
        assert not d.is_leader
        assert await d.leader_loop.cycle() is CycleOutcome.DEPOSED
        assert not d.leadership.has_key
    finally:
        await d.stop()
        await store.close()


async def test_failed_reads_count_nothing(etcd, cluster_name, cards):
    cards.make("c0", "SN1")
    cfg = make_config(etcd, cluster_name, "h1", [cards.spec("c0")], timing={
        "poll_interval": 0.2, "lease_ttl": 1, "sick_polls": 2, "healthy_polls": 1})
    severable = Severable(store_config(cfg.etcd, cluster_name))
    d = Daemon(cfg, store=severable, serve_api=False)
    try:
        await d.turn()
        cards.set_healthy("c0", False)
        await d.turn()                          # bad 1 of 2
        memory = d.leader_loop.memory
        severable.severed = True                # its reads fail for a while
        for _ in range(3):
            assert await d.leader_loop.cycle() is CycleOutcome.SKIPPED
        assert d.leader_loop.memory is memory   # nothing counted
        text = metrics_text(d)
        assert 'awide_etcd_call_errors_total{error="Unavailable",op="read_many"}' in text or \
            'awide_etcd_call_errors_total{error="Timeout",op="read_many"}' in text
        severable.severed = False
        assert (await registry(d.store)).card(cid_of(cards.root / "c0")).state == "in"
        await d.turn()                          # bad 2 of 2
        assert (await registry(d.store)).card(cid_of(cards.root / "c0")).state == "out"
    finally:
        await d.stop()
        await severable.close()


async def test_corrupt_host_report_is_ignored_and_counted(etcd, cluster_name, cards):
    p = cards.make("c0", "SN1")
    async with driven(etcd, cluster_name, "h1", [cards.spec("c0")]) as (d, store):
        await d.turn()
        await store.put(keys.member("h2"), b"{not json")
        await store.put(keys.member("h3"), b'{"schema": 1, "host": "h3", "role": "storage"}')
        await store.put(keys.member("hz"), b'{"schema": 99}')      # not a host of the cluster
        for _ in range(3):
            await d.turn()
        assert d.outcomes[-3:] == [CycleOutcome.UNCHANGED] * 3
        assert d.leader_loop.refused_reports == {"h2": 3, "h3": 3}
        text = metrics_text(d)
        assert 'awide_reports_rejected_total{host="h2"} 3.0' in text
        assert 'awide_etcd_values_refused_total{problem="report_corrupt"} 6.0' in text
        assert 'awide_etcd_values_refused_total{problem="report_unknown_host"} 3.0' in text
        assert 'host="hz"' not in text          # no label from a key nobody configured
        reg = await registry(store)
        assert [c.id for c in reg.cards] == [cid_of(p)] and reg.card(cid_of(p)).state == "in"


async def test_swapped_directory_label_is_not_the_old_card(etcd, cluster_name, cards):
    p = cards.make("c0", "SN1")
    old = cid_of(p)
    async with driven(etcd, cluster_name, "h1", [cards.spec("c0")]) as (d, store):
        await d.turn()
        cards.relabel("c0", "SN9")               # other storage mounted in its place
        new = cid_of(p)
        assert new != old
        for _ in range(3):
            await d.turn()
        reg = await registry(store)
        o, n = reg.card(old), reg.card(new)
        assert o.state == "out" and "now holds another card (serial SN9)" in o.reason
        # the newcomer is a different card: admitted, but not in service while this host
        # has seen another identity under that name
        assert n is not None and n.serial == "SN9" and n.state == "out"
        assert "identity changed" in n.reason
        assert reg.slots.slot_of(old) == 0 and reg.slots.slot_of(new) == 1
        # an operator reload accepts the cards as they are now: the new card goes in
        d.request_reload(d.config)
        await d.turn()
        reg = await registry(store)
        assert reg.card(new).state == "in" and reg.card(old).state == "out"


async def test_ninth_card_is_kept_without_a_slot(etcd, cluster_name, cards):
    paths = [cards.make(f"c{i}", f"SN{i}") for i in range(9)]
    specs = [cards.spec(f"c{i}") for i in range(9)]
    async with driven(etcd, cluster_name, "h1", specs[:8]) as (d, store):
        await d.turn()
        before = (await registry(store)).slots
        d.request_reload(make_config(etcd, cluster_name, "h1", specs, timing=TURNS,
                                     call=TURN_CALL))
        await d.turn()
        reg = await registry(store)
        ninth = cid_of(paths[8])
        assert reg.card(ninth).state == "in" and reg.slots.slot_of(ninth) is None
        assert dict(reg.slots.unplaced)[ninth].startswith("no free slot")
        assert reg.slots.slots == before.slots          # nobody moved
        assert regdoc.check_slots(reg) is None


async def test_duplicate_serial_on_two_hosts_is_a_conflict(etcd, cluster_name, cards):
    pa = cards.make("a0", "SAME")
    pb = cards.make("b0", "SAME")                # same serial, another label uuid
    a = daemon(etcd, cluster_name, "h1", [cards.spec("a0")])
    b = daemon(etcd, cluster_name, "h2", [cards.spec("b0")])
    store = store_of(etcd, cluster_name)
    try:
        await a.turn()
        await b.turn()
        await a.turn()
        reg = await registry(store)
        ca, cb = reg.card(cid_of(pa)), reg.card(cid_of(pb))
        assert ca and cb and ca.id != cb.id               # never merged
        assert cb.id in ca.conflict and "h2" in ca.conflict
        assert ca.id in cb.conflict and "h1" in cb.conflict
        assert reg.slots.slot_of(ca.id) == 0 and reg.slots.slot_of(cb.id) is None
        assert not ca.usable and not cb.usable
    finally:
        await a.stop()
        await b.stop()
        await store.close()
