"""The leader repairs the registry it owns, with no slot moved and a generation that grows.

Poison is written straight into a real etcd (3 members) between two turns of a real daemon:
a corrupt value, a schema that is no version, a deleted key, a well-formed forged registry.
After its next turn the leader has rewritten the registry from its last good one: the same
cards in the same slots, the same lineage, a generation above everything seen (the forged one,
the gateways'), and a card that fails meanwhile still goes out after ``sick_polls`` polls.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from awide_cluster.contract import keys
from awide_cluster.contract import registry as regdoc
from awide_cluster.contract.registry import CardEntry, with_slots
from awide_cluster.daemon.service import Daemon
from awide_cluster.store.types import KeyRead

from .conftest import FakeClock, make_config, metrics_text, registry, store_of
from .test_leader_etcd import cid_of, driven


def forged_card(cid: str, host: str, slot_hint: str) -> CardEntry:
    from awide_cluster.contract.target import NvmeTarget
    return CardEntry(
        id=cid, serial=f"FORGED-{slot_hint}", model="evil", identity="uuid:forged", host=host,
        name=f"x{slot_hint}", kind="nvme", state="in", health="ok", reason="", admitted=1,
        changed_generation=1,
        target=NvmeTarget.parse({"transport": "tcp", "traddr": "10.66.6.6", "trsvcid": 4420,
                                 "subnqn": "nqn.2024-01.io.evil:x"}))


def _forged(reg: regdoc.Registry) -> bytes:
    """A well-formed registry: the real cards moved around, two forged cards in front (one on
    a host of the cluster that does not report it, one on a host that is not the cluster's),
    and a generation far ahead."""
    cards = (forged_card("c00000000000", "h2", "a"), forged_card("c00000000001", "evil", "b"),
             *(replace(c, admitted=c.admitted + 10) for c in reg.cards))
    fake = with_slots(replace(reg, cards=cards, generation=reg.generation + 1000,
                              slots=regdoc.slotfn.EMPTY))
    return regdoc.encode(fake)


POISON = {
    "corrupt": lambda reg: b'{"schema": 1, "cluster": ' + b"[" * 2000,
    "not-json": lambda reg: b"\xff\xfe garbage",
    # a schema that is no version at all (a newer one is kept as it is: test below)
    "unknown-schema": lambda reg: json.dumps({"schema": 0, "cluster": reg.cluster}).encode(),
    "huge-generation": lambda reg: regdoc.encode(replace(reg, generation=10**30)),
    "forged": _forged,
    "deleted": None,
}


@pytest.mark.parametrize("kind", sorted(POISON))
async def test_leader_repairs_poisoned_registry_without_moving_a_slot(
        etcd, cluster_name, cards, kind):
    paths = [cards.make(f"c{i}", f"SN{i}") for i in range(3)]
    ids = [cid_of(p) for p in paths]
    specs = [cards.spec(f"c{i}") for i in range(3)]
    async with driven(etcd, cluster_name, "h1", specs) as (d, store):
        await d.turn()
        good = await registry(store)
        assert good is not None and good.lineage and set(good.by_id) == set(ids)
        poison = POISON[kind]
        if poison is None:
            await store.delete(keys.REGISTRY)
        else:
            await store.put(keys.REGISTRY, poison(good))
        seen = await store.get(keys.REGISTRY)
        poisoned_gen = 0
        if seen is not None:
            try:
                poisoned_gen = regdoc.decode(seen.value).generation
            except regdoc.RegistryError:
                pass
        # a card fails while the registry is poisoned: detection is not off
        cards.set_healthy("c1", False)
        await d.turn()
        fixed = await registry(store)
        assert fixed is not None, "the leader did not rewrite the registry"
        assert fixed.lineage == good.lineage
        assert fixed.generation > max(good.generation, poisoned_gen)
        assert fixed.slots.slots == good.slots.slots, "a slot moved"
        assert set(fixed.by_id) == set(ids), "forged cards were admitted"
        assert d.leader_loop.repairs == 1
        text = metrics_text(d)
        assert "awide_registry_repairs_total" in text
        for _ in range(3):
            await d.turn()
        out = await registry(store)
        assert out.card(ids[1]).state == "out" and out.slots.slots == good.slots.slots
        assert out.card(ids[0]).state == "in" and out.card(ids[2]).state == "in"


async def test_repaired_generation_is_above_every_gateway(etcd, cluster_name, cards):
    cards.make("c0", "SN0")
    async with driven(etcd, cluster_name, "h1", [cards.spec("c0")]) as (d, store):
        await d.turn()
        good = await registry(store)
        rec = {"schema": 1, "id": "gw1", "host": "gpu1", "pod": "p", "namespace": "n",
               "placement": "dialog", "fingerprint": "L0", "generation": 57, "engine": None,
               "version": "0.1.0", "stale": False}
        await store.put(keys.gateway("gw1"), json.dumps(rec).encode())
        await store.put(keys.gateway("gw2"), b"[" * 3000)      # refused, says nothing
        await store.delete(keys.REGISTRY)
        await d.turn()
        fixed = await registry(store)
        assert fixed.generation == 58 and fixed.slots == good.slots
        assert fixed.lineage == good.lineage


async def test_new_leader_repairs_from_the_registry_it_followed(etcd, cluster_name, cards):
    """The leader crashes, the registry is deleted, another daemon takes over: it rebuilds the
    registry from the copy it followed, so no slot moves although it never wrote one."""
    for i in range(3):
        cards.make(f"c{i}", f"SN{i}")
    clock = FakeClock()
    a = Daemon(make_config(etcd, cluster_name, "h1", [cards.spec("c0"), cards.spec("c1")]),
               serve_api=False, clock=clock)
    b = Daemon(make_config(etcd, cluster_name, "h2", [cards.spec("c2")]), serve_api=False,
               clock=clock)
    store = store_of(etcd, cluster_name)
    try:
        await a.turn()
        await b.turn()
        await a.turn()                      # admits h2's card
        await b.turn()                      # follows the registry with all three cards
        good = await registry(store)
        assert a.is_leader and len(good.cards) == 3 and b.registry == good
        await a.abort()                     # a crash: its lease runs out in etcd
        await store.delete(keys.REGISTRY)
        await store.delete(keys.LEADER)     # as if its lease had expired
        await b.turn()
        assert b.is_leader
        fixed = await registry(store)
        assert fixed is not None and fixed.slots == good.slots
        assert fixed.generation > good.generation and fixed.lineage == good.lineage
    finally:
        await b.stop()
        await store.close()


async def test_report_from_a_host_outside_the_cluster_is_never_admitted(
        etcd, cluster_name, cards):
    from awide_cluster.contract import report as reportdoc
    cards.make("c0", "SN0")
    async with driven(etcd, cluster_name, "h1", [cards.spec("c0")]) as (d, store):
        await d.turn()
        mine = reportdoc.decode((await store.get(keys.member("h1"))).value)
        # a well-formed report of another host, listing a card nobody configured
        evil = replace(mine, host="intruder", run="r-evil", cards=tuple(
            replace(c, name="x0", serial="EVIL", identity="uuid:evil") for c in mine.cards))
        await store.put(keys.member("intruder"), reportdoc.encode(evil))
        for _ in range(3):
            await d.turn()
        reg = await registry(store)
        assert [c.serial for c in reg.cards] == ["SN0"]
        assert "members/intruder" in d.leader_loop.refusals
        assert reg.hosts == ("h1", "h2", "h3")


async def test_leader_rewrites_its_tampered_key(etcd, cluster_name):
    async with driven(etcd, cluster_name, "h1", []) as (d, store):
        await d.turn()
        before = await store.get(keys.LEADER)
        assert d.is_leader and before.lease == d.lease.id
        # a forged record, and the key taken off the leader's lease (it would never expire)
        await store.put(keys.LEADER, b'{"host":"w9","since":1e300}')
        await d.turn()
        after = await store.get(keys.LEADER)
        assert d.is_leader and after.create_revision == before.create_revision
        assert after.lease == d.lease.id and after.value == before.value


async def test_a_leader_key_on_no_lease_is_cleared_after_a_ttl(etcd, cluster_name):
    clock = FakeClock()
    cfg = make_config(etcd, cluster_name, "h1", [])
    d = Daemon(cfg, serve_api=False, clock=clock)
    store = store_of(etcd, cluster_name)
    try:
        await store.put(keys.LEADER, b'{"host":"ghost","since":"2026-01-01T00:00:00+00:00"}')
        await d.turn()
        await d.turn()
        assert not d.is_leader, "a lease-less key must be given its TTL before it is cleared"
        clock.advance(cfg.timing.lease_ttl + 0.1)
        await d.turn()
        assert d.is_leader
        kv = await store.get(keys.LEADER)
        assert kv.lease == d.lease.id
    finally:
        await d.stop()
        await store.close()


class _Exploding:
    """A real store whose reads of the leader key raise a non-store error while ``armed`` (a
    decoder's bug, content nothing foresaw)."""

    def __init__(self, store) -> None:
        self.store, self.armed, self.raised = store, False, 0

    def __getattr__(self, name):
        return getattr(self.store, name)

    async def get(self, key, **kw):
        if self.armed and key == keys.LEADER:
            self.raised += 1
            raise OverflowError("timestamp out of range for platform time_t")
        return await self.store.get(key, **kw)

    async def read_many(self, reads, **kw):
        reads = list(reads)             # the leader cycle reads the leader key here
        if self.armed and any(isinstance(r, KeyRead) and r.key == keys.LEADER for r in reads):
            self.raised += 1
            raise OverflowError("timestamp out of range for platform time_t")
        return await self.store.read_many(reads, **kw)


async def test_the_main_loop_survives_any_exception_of_a_turn(etcd, cluster_name, cards):
    from tests.timing import wait_until
    cards.make("c0", "SN0")
    real = store_of(etcd, cluster_name)
    store = _Exploding(real)
    d = Daemon(make_config(etcd, cluster_name, "h1", [cards.spec("c0")]), store=store,
               serve_api=False)
    await d.start()
    try:
        await wait_until(lambda: d.is_leader, what="leading")
        store.armed = True
        await wait_until(lambda: d.turn_errors >= 3, what="turns that raised")
        assert d.exit_code is None and d.running
        store.armed = False
        turns = d.turns
        cards.set_healthy("c0", False)           # and it still takes a card out
        await wait_until(lambda: d.turns > turns + 4, what="turns after the errors")
        reg = await registry(real)
        await wait_until(lambda: d.registry is not None and d.registry.cards[0].state == "out",
                       what="card out after the errors")
        assert reg is not None
        text = metrics_text(d)
        assert 'awide_loop_errors_total{error="OverflowError"}' in text
    finally:
        await d.stop()
        await real.close()


@pytest.mark.parametrize("newer", ["major", "minor"])
async def test_a_registry_of_a_newer_schema_is_kept_as_it_is(etcd, cluster_name, cards, newer):
    """A registry written by a newer release (a newer major, or a newer minor this release
    does not fully read) is never rewritten: the leader decides nothing, says so once, and
    leads again once the registry is of a schema it reads (docs/versions.md)."""
    paths = [cards.make(f"c{i}", f"SN{i}") for i in range(2)]
    ids = [cid_of(p) for p in paths]
    specs = [cards.spec(f"c{i}") for i in range(2)]
    async with driven(etcd, cluster_name, "h1", specs) as (d, store):
        await d.turn()
        good = await registry(store)
        assert good is not None
        doc = json.loads(regdoc.encode(good))
        top = "2.0" if newer == "major" else "1.7"
        doc.update({"schema": 2, "schema_minor": 0} if newer == "major"
                   else {"schema_minor": 7, "more": [1]},
                   generation=good.generation + 1,
                   versions={"read": {"registry": f"1.0-{top}"},
                             "write": {"registry": f"1.0-{top}"}})
        raw = json.dumps(doc).encode()
        await store.put(keys.REGISTRY, raw)
        cards.set_healthy("c1", False)          # would go out after 3 polls: nothing decides
        for _ in range(5):
            await d.turn()
        kept = await store.get(keys.REGISTRY)
        assert kept is not None and kept.value == raw, "the newer registry was rewritten"
        assert "keeps the registry as it is" in d.leader_loop.schema_hold
        assert d.leader_loop.repairs == 0
        # the registry becomes one this release reads (a leader of the newer release wrote it
        # for the live readers): this leader leads again, and the card goes out
        await store.put(keys.REGISTRY, regdoc.encode(replace(
            good, generation=good.generation + 2)))
        for _ in range(4):
            await d.turn()
        assert d.leader_loop.schema_hold == ""
        out = await registry(store)
        assert out.card(ids[1]).state == "out" and out.slots.slots == good.slots.slots
