"""Bounded reads against a real 3-member cluster (3.5 and 3.4): answer bound, value bound,
paging, refusals by name, more keys than the bound, watch messages over the bound."""

from __future__ import annotations

import asyncio

import pytest

from awide_cluster.store import (
    Refusal,
    TooLarge,
    TooManyKeys,
    ValueTooLarge,
    WatchMessageTooLarge,
)
from awide_cluster.store.bounded import refused_kv_head

KIB = 1024
# near etcd's default --max-request-bytes (1.5 MiB): the largest value a default etcd accepts
NEAR_LIMIT = 1536 * KIB - 8 * KIB


def big(size: int, fill: bytes = b"x") -> bytes:
    return fill * size


@pytest.fixture
def store(cluster, make_store):
    # set-up writes of 1.5 MiB values fsync that much on 3 members of a shared test machine:
    # a generous call bound (the bounds tested here are sizes, not times)
    return make_store(cluster.endpoints, call_timeout=10.0)


async def test_an_answer_over_the_bound_is_too_large_naming_the_request(cluster, make_store):
    store = make_store(cluster.endpoints, max_answer_bytes=64 * KIB, call_timeout=10.0)
    await store.put("small", b"ok")
    huge_rev = await store.put("huge", big(NEAR_LIMIT))
    assert (await store.get("small")).value == b"ok"
    before = store.transport.bytes_read
    with pytest.raises(TooLarge) as info:
        await store.range("huge")
    assert "'huge'" in str(info.value) and str(64 * KIB) in str(info.value)
    assert info.value.limit == 64 * KIB and info.value.what == "range 'huge'"
    # refused while streaming: far less than the 2 MiB answer was read
    assert store.transport.bytes_read - before < 512 * KIB
    # its first bytes name the value's mod_revision (etcd's field order): no second read
    rev, mod = refused_kv_head(info.value.head, store.codec.key("huge"))
    assert mod == huge_rev and rev >= huge_rev
    assert refused_kv_head(info.value.head, store.codec.key("other")) is None
    assert refused_kv_head(b'{"header":{}}', store.codec.key("huge")) is None
    with pytest.raises(TooLarge):
        await store.range("", prefix=True)
    # the store is still fine for the rest
    assert (await store.get("small")).value == b"ok"


async def test_a_call_may_ask_for_less_never_more(cluster, make_store):
    store = make_store(cluster.endpoints, max_answer_bytes=64 * KIB)
    assert store.transport.cap(None) == 64 * KIB
    assert store.transport.cap(10 * KIB) == 10 * KIB
    assert store.transport.cap(10 * 1024 * KIB) == 64 * KIB
    with pytest.raises(ValueError):
        make_store(cluster.endpoints, max_answer_bytes=100)


@pytest.mark.parametrize("folder", ["members/", "intents/", "gateways/", "unknown/"])
async def test_one_value_near_the_request_limit_is_refused_by_name(store, folder):
    for name in ("a", "b", "c", "d"):
        await store.put(f"{folder}{name}", f"value of {name}")
    rev = await store.put(f"{folder}b", big(NEAR_LIMIT))
    await store.put(f"{folder}c2", big(70 * KIB))          # over the bound, under the page's
    got = await store.read_prefix(folder, max_keys=16, max_value_bytes=64 * KIB)
    assert [kv.key for kv in got.kvs] == [f"{folder}a", f"{folder}c", f"{folder}d"]
    assert [kv.value for kv in got.kvs] == [b"value of a", b"value of c", b"value of d"]
    assert set(got.refused) == {f"{folder}b", f"{folder}c2"}
    huge = got.refused[f"{folder}b"]
    assert huge.mod_revision == rev and huge.why.startswith(f"value over {64 * KIB} bytes")
    assert got.refused[f"{folder}c2"].why.startswith(f"value over {64 * KIB} bytes")
    assert (got.count, got.more) == (5, False) and got.revision >= rev
    assert got.complete() is got


async def test_a_value_just_over_the_bound_is_measured_not_decoded(store):
    await store.put("m/a", b"1")
    rev = await store.put("m/b", big(70 * KIB))
    got = await store.read_prefix("m/", max_keys=4, max_value_bytes=64 * KIB)
    assert [kv.key for kv in got.kvs] == ["m/a"]
    assert got.refused == {"m/b": Refusal("m/b", rev, 70 * KIB, 64 * KIB)}
    assert got.refused["m/b"].why == f"value over {64 * KIB} bytes ({70 * KIB} bytes)"


async def test_a_refused_value_is_not_read_again_until_it_changes(store):
    await store.put("members/h1", b"report 1")
    await store.put("members/h2", big(NEAR_LIMIT))
    await store.put("members/h3", b"report 3")
    first = await store.read_prefix("members/", max_keys=8, max_value_bytes=64 * KIB)
    assert set(first.refused) == {"members/h2"}
    before = store.transport.bytes_read
    again = await store.read_prefix("members/", max_keys=8, max_value_bytes=64 * KIB)
    assert [kv.key for kv in again.kvs] == ["members/h1", "members/h3"]
    assert again.refused == first.refused
    assert store.transport.bytes_read - before < 8 * KIB        # not the 2 MiB again
    await store.put("members/h2", b"report 2")                 # changed: read again
    fixed = await store.read_prefix("members/", max_keys=8, max_value_bytes=64 * KIB)
    assert [kv.value for kv in fixed.kvs] == [b"report 1", b"report 2", b"report 3"]
    assert fixed.refused == {} and len(store.refusals) == 0
    await store.put("members/h2", big(NEAR_LIMIT))             # big again: refused again
    assert set((await store.read_prefix("members/", max_keys=8,
                                        max_value_bytes=64 * KIB)).refused) == {"members/h2"}
    await store.delete("members/h2")                           # gone: forgotten
    gone = await store.read_prefix("members/", max_keys=8, max_value_bytes=64 * KIB)
    assert (gone.refused, gone.count) == ({}, 2) and len(store.refusals) == 0


async def test_more_keys_than_the_bound_is_said_not_cut_silently(store):
    for i in range(7):
        await store.put(f"intents/c{i}", b"{}")
    got = await store.read_prefix("intents/", max_keys=5, max_value_bytes=KIB, page_keys=2)
    assert got.more and got.count == 7 and got.max_keys == 5
    assert [kv.key for kv in got.kvs] == [f"intents/c{i}" for i in range(5)]
    with pytest.raises(TooManyKeys) as info:
        got.complete()
    assert (info.value.count, info.value.limit, info.value.prefix) == (7, 5, "intents/")
    exact = await store.read_prefix("intents/", max_keys=7, max_value_bytes=KIB)
    assert not exact.more and exact.count == 7


@pytest.mark.parametrize("page_keys", [1, 2, 3, 64])
async def test_pages_continue_after_the_last_key(store, page_keys):
    # keys that are prefixes of each other and neighbours in byte order
    names = ["a", "a\x00", "a\x00b", "a\x01", "ab", "b", "b/c", "\u00ff", "\u00ff\u00ff"]
    for n in names:
        await store.put(f"p/{n}", n.encode())
    await store.put("p0", b"after the prefix")
    await store.put("p/b/big", big(100 * KIB))                 # splits the pages once remembered
    for _ in range(2):                                         # second time: remembered refusal
        got = await store.read_prefix("p/", max_keys=64, max_value_bytes=64 * KIB,
                                      page_keys=page_keys)
        assert [kv.key for kv in got.kvs] == sorted(f"p/{n}" for n in names)
        assert [kv.value for kv in got.kvs] == [kv.key[2:].encode() for kv in got.kvs]
        assert list(got.refused) == ["p/b/big"] and got.count == len(names) + 1


async def test_serializable_prefix_read(store):
    await store.put("s/a", b"1")
    await store.put("s/b", big(NEAR_LIMIT))
    got = await store.read_prefix("s/", max_keys=4, max_value_bytes=KIB, serializable=True)
    assert [kv.key for kv in got.kvs] == ["s/a"] and list(got.refused) == ["s/b"]


async def test_one_key_with_a_value_bound(store):
    rev = await store.put("registry", big(NEAR_LIMIT))
    with pytest.raises(ValueTooLarge) as info:
        await store.range("registry", max_value_bytes=64 * KIB)
    e = info.value
    assert (e.key, e.mod_revision, e.limit) == ("registry", rev, 64 * KIB)
    assert "'registry'" in str(e) and f"value over {64 * KIB} bytes" in str(e)
    before = store.transport.bytes_read
    with pytest.raises(ValueTooLarge):                          # remembered: a small answer
        await store.get("registry", max_value_bytes=64 * KIB)
    assert store.transport.bytes_read - before < 4 * KIB
    # a follower asking only for a newer revision: nothing (count 1: present, unchanged)
    unchanged = await store.range("registry", min_mod_revision=rev + 1, max_value_bytes=64 * KIB)
    assert (unchanged.kvs, unchanged.count) == ((), 1)
    rev2 = await store.put("registry", big(65 * KIB))
    with pytest.raises(ValueTooLarge) as info:
        await store.get("registry", max_value_bytes=64 * KIB)
    assert (info.value.mod_revision, info.value.size) == (rev2, 65 * KIB)
    await store.put("registry", b"{}")
    assert (await store.get("registry", max_value_bytes=64 * KIB)).value == b"{}"
    await store.delete("registry")
    absent = await store.range("registry", max_value_bytes=64 * KIB)
    assert (absent.kvs, absent.count) == ((), 0)
    with pytest.raises(ValueError):
        await store.range("registry", prefix=True, max_value_bytes=1)


async def test_a_long_key_is_refused_by_name(store):
    await store.put("k/ok", b"1")
    await store.put("k/" + "x" * 600, b"2")
    got = await store.read_prefix("k/", max_keys=4, max_value_bytes=KIB)
    assert [kv.key for kv in got.kvs] == ["k/ok"]
    (r,) = got.refused.values()
    assert isinstance(r, Refusal) and r.kind == "key" and r.why.startswith("key of 602 bytes")


async def test_a_watch_message_over_the_bound_is_refused_and_the_watch_goes_on(store):
    rev0 = await store.put("registry", b"v0")
    async with store.watch("registry", start_revision=rev0 + 1,
                           max_message_bytes=64 * KIB) as w:
        big_rev = await store.put("registry", big(NEAR_LIMIT))
        with pytest.raises(WatchMessageTooLarge) as info:
            async with asyncio.timeout(10):
                await w.__anext__()
        e = info.value
        assert e.skipped_to >= big_rev and e.limit == 64 * KIB and "'registry'" in str(e)
        assert w.revision == e.skipped_to
        small_rev = await store.put("registry", b"v2")
        async with asyncio.timeout(10):
            batch = await w.__anext__()
            while not batch.events:                             # progress notifications
                batch = await w.__anext__()
        assert [(ev.kv.value, ev.kv.mod_revision) for ev in batch.events] == [(b"v2", small_rev)]
