"""``read_many`` against a real cluster: several keys and prefixes in one read-only
transaction, each answered as ``get``/``read_prefix`` answer it alone; what is not plain (a
value over its bound, a remembered refusal, a full page, an answer over the store's bound) is
read alone, with the same answer."""

from __future__ import annotations

from typing import Any

import pytest

from awide_cluster.store import EtcdStore, StoreConfig, ValueTooLarge
from awide_cluster.store.types import (
    FolderRead,
    KeyRead,
    KeyValue,
    ManyRead,
    PrefixRead,
    RangeResult,
)

KIB = 1024


class CountingStore(EtcdStore):
    """A real store that records the path of every read request it sends."""

    def __init__(self, config: StoreConfig) -> None:
        super().__init__(config)
        self.paths: list[str] = []

    async def read(self, path: str, body: dict[str, Any], timeout: float | None, what: str,
                   *, max_bytes: int | None = None) -> tuple[str, dict[str, Any]]:
        self.paths.append(path)
        return await super().read(path, body, timeout, what, max_bytes=max_bytes)


@pytest.fixture
async def counting(cluster, make_store):
    plain = make_store(cluster.endpoints, call_timeout=10.0)
    store = CountingStore(StoreConfig(endpoints=tuple(cluster.endpoints), prefix=plain.codec.prefix,
                                      call_timeout=10.0))
    yield store, plain
    await store.close()


def same_kv(a: KeyValue | None, b: KeyValue | None) -> bool:
    if a is None or b is None:
        return a is b
    return (a.key, a.value, a.mod_revision, a.create_revision) == \
        (b.key, b.value, b.mod_revision, b.create_revision)


def same_folder(a: PrefixRead, b: PrefixRead) -> bool:
    return (len(a.kvs) == len(b.kvs)
            and all(same_kv(x, y) for x, y in zip(a.kvs, b.kvs, strict=True))
            and set(a.refused) == set(b.refused)
            and (a.count, a.more, a.max_keys, a.prefix) == (b.count, b.more, b.max_keys,
                                                            b.prefix))


async def alone(store: EtcdStore, r: ManyRead) -> Any:
    if isinstance(r, FolderRead):
        return await store.read_prefix(r.prefix, max_keys=r.max_keys,
                                       max_value_bytes=r.max_value_bytes)
    try:
        return await store.get(r.key, max_value_bytes=r.max_value_bytes)
    except ValueTooLarge as e:
        return e


async def check_same(store: EtcdStore, reads: list[ManyRead], got: list[Any]) -> None:
    assert len(got) == len(reads)
    for r, g in zip(reads, got, strict=True):
        a = await alone(store, r)
        if isinstance(r, FolderRead):
            assert isinstance(g, PrefixRead) and same_folder(g, a), (r, g, a)
        elif isinstance(a, ValueTooLarge):
            assert isinstance(g, ValueTooLarge) and (g.key, g.mod_revision) == \
                (a.key, a.mod_revision)
        else:
            assert same_kv(g, a), (r, g, a)


async def test_plain_reads_are_one_request_with_the_answers_of_each(counting):
    store, plain = counting
    for h in ("h1", "h2", "h3"):
        await plain.put(f"members/{h}", f"report of {h}".encode())
    await plain.put("registry", b"{}")
    await plain.put("leader", b"x" * (10 * KIB))      # no value bound: read whatever its size
    reads: list[ManyRead] = [
        FolderRead("members/", 128, 64 * KIB), KeyRead("registry", 64 * KIB),
        FolderRead("intents/", 64, KIB), KeyRead("leader"), KeyRead("windows", KIB)]
    got = await store.read_many(reads)
    assert store.paths == ["/v3/kv/txn"]
    members = got[0]
    assert isinstance(members, PrefixRead)
    assert [kv.value for kv in members.kvs] == [b"report of h1", b"report of h2", b"report of h3"]
    assert got[2] == PrefixRead("intents/", members.revision, (), {}, 0, False, 64)
    assert got[4] is None
    await check_same(plain, reads, got)


async def test_what_is_not_plain_is_read_alone_with_the_same_answer(counting):
    store, plain = counting
    big_rev = await plain.put("registry", b"r" * (5 * KIB))       # over its bound of 4 KiB
    for i in range(70):                                          # over a page of 64 keys
        await plain.put(f"gateways/g{i:02d}", b"{}")
    for i in range(7):                                           # over max_keys 5
        await plain.put(f"intents/c{i}", b"{}")
    await plain.put("members/h1", b"ok")
    await plain.put("members/h2", b"m" * (3 * KIB))              # over its bound of 2 KiB
    reads: list[ManyRead] = [
        KeyRead("registry", 4 * KIB), FolderRead("gateways/", 2048, KIB),
        FolderRead("intents/", 5, KIB), FolderRead("members/", 8, 2 * KIB), KeyRead("leader")]
    got = await store.read_many(reads)
    assert isinstance(got[0], ValueTooLarge) and got[0].mod_revision == big_rev
    assert isinstance(got[1], PrefixRead) and len(got[1].kvs) == 70 and not got[1].more
    assert isinstance(got[2], PrefixRead) and got[2].more and got[2].count == 7
    assert isinstance(got[3], PrefixRead) and [kv.key for kv in got[3].kvs] == ["members/h1"]
    assert list(got[3].refused) == ["members/h2"]
    assert got[4] is None
    await check_same(plain, reads, got)
    # the refusals are remembered: those two are asked alone at once next time, and stay
    # refused; the rest is still one transaction
    store.paths.clear()
    again = await store.read_many(reads)
    assert isinstance(again[0], ValueTooLarge) and list(again[3].refused) == ["members/h2"]
    assert store.paths.count("/v3/kv/txn") == 1
    # changed within the bound: read alone once more (the refusal is remembered), then
    # forgotten, and in the transaction again
    await plain.put("registry", b"{}")
    await plain.put("members/h2", b"ok 2")
    for _ in range(2):
        fixed = await store.read_many([reads[0], reads[3]])
        assert isinstance(fixed[0], KeyValue) and fixed[0].value == b"{}"
        assert isinstance(fixed[1], PrefixRead) and not fixed[1].refused
        assert [kv.value for kv in fixed[1].kvs] == [b"ok", b"ok 2"]
        assert len(store.refusals) == 0
        store.paths.clear()
    fixed = await store.read_many([reads[0], reads[3]])
    assert store.paths == ["/v3/kv/txn"]


async def test_a_ranged_key_is_answered_as_range_answers_it(counting):
    # in the transaction and alone: the answer's revision and count with the value, an
    # absent key as a count of 0 (never mistaken for "not read"), a value over its bound
    # refused by name
    store, plain = counting
    rev = await plain.put("registry", b"{}")
    reads: list[ManyRead] = [KeyRead("registry", 4 * KIB, ranged=True),
                             KeyRead("layouts/ns", ranged=True)]
    got = await store.read_many(reads)
    assert store.paths == ["/v3/kv/txn"]
    reg, layout = got
    assert isinstance(reg, RangeResult) and isinstance(layout, RangeResult)
    alone_reg = await plain.range("registry", max_value_bytes=4 * KIB)
    assert reg.revision >= rev and reg.revision == layout.revision
    assert reg.count == 1 and same_kv(reg.kvs[0], alone_reg.kvs[0])
    assert layout.count == 0 and layout.kvs == ()
    big = await plain.put("registry", b"r" * (5 * KIB))
    store.paths.clear()
    got = await store.read_many(reads)
    assert isinstance(got[0], ValueTooLarge) and got[0].mod_revision == big
    assert isinstance(got[1], RangeResult) and got[1].count == 0
    store.paths.clear()
    got = await store.read_many(reads)          # remembered: the registry is ranged alone
    assert isinstance(got[0], ValueTooLarge) and "/v3/kv/range" in store.paths
    await plain.put("registry", b"{}")
    got = await store.read_many(reads)          # alone, within its bound again: a RangeResult
    assert isinstance(got[0], RangeResult) and got[0].kvs[0].value == b"{}"


async def test_an_answer_over_the_stores_bound_is_read_again_key_by_key(cluster, make_store):
    plain = make_store(cluster.endpoints, call_timeout=10.0)
    store = CountingStore(StoreConfig(endpoints=tuple(cluster.endpoints),
                                      prefix=plain.codec.prefix, call_timeout=10.0,
                                      max_answer_bytes=64 * KIB))
    try:
        await plain.put("a", b"a" * (30 * KIB))
        await plain.put("b", b"b" * (30 * KIB))
        await plain.put("c", b"c" * (30 * KIB))
        reads: list[ManyRead] = [KeyRead("a", 40 * KIB), KeyRead("b", 40 * KIB),
                                 KeyRead("c", 40 * KIB)]
        got = await store.read_many(reads)
        assert store.paths[0] == "/v3/kv/txn" and store.paths[1:] == ["/v3/kv/range"] * 3
        assert [g.value if isinstance(g, KeyValue) else g for g in got] == \
            [b"a" * (30 * KIB), b"b" * (30 * KIB), b"c" * (30 * KIB)]
        await check_same(plain, reads, got)
    finally:
        await store.close()
