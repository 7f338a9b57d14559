"""Keys: range/get/put/create/txn/delete against a real 3-member cluster (3.5 and 3.4)."""

from __future__ import annotations

import pytest

from awide_cluster.store import (
    Compare,
    Conflict,
    Delete,
    Get,
    InvalidRequest,
    Put,
    RangeResult,
)


async def test_put_get_range_relative_to_prefix(store):
    rev = await store.put("a", b"1")
    assert rev > 0 and store.last_revision >= rev
    kv = await store.get("a")
    assert kv is not None
    got = (kv.key, kv.value, kv.mod_revision, kv.create_revision, kv.version)
    assert got == ("a", b"1", rev, rev, 1)
    assert await store.get("missing") is None

    await store.put("dir/x", "text is utf-8")
    await store.put("dir/y", b"\x00\xff")
    await store.put("dirz", b"not under dir/")
    result = await store.range("dir/", prefix=True)
    assert isinstance(result, RangeResult)
    assert [(k.key, k.value) for k in result.kvs] == [("dir/x", b"text is utf-8"),
                                                      ("dir/y", b"\x00\xff")]
    assert result.count == 2 and result.revision >= rev
    assert result.endpoint in store.config.endpoints

    everything = await store.range("", prefix=True)
    assert [k.key for k in everything.kvs] == ["a", "dir/x", "dir/y", "dirz"]
    keys = await store.range("", prefix=True, keys_only=True, limit=2)
    assert [(k.key, k.value) for k in keys.kvs] == [("a", b""), ("dir/x", b"")]
    assert keys.count == 4
    serial = await store.range("a", serializable=True)
    assert serial.kvs[0].value == b"1"


async def test_prefix_isolation(cluster, make_store):
    one = make_store(cluster.endpoints, prefix="/iso/one/")
    two = make_store(cluster.endpoints, prefix="/iso/one-two/")
    await one.delete("", prefix=True)
    await two.delete("", prefix=True)
    await one.put("k", b"1")
    await two.put("k", b"2")
    assert [k.key for k in (await one.range("", prefix=True)).kvs] == ["k"]
    assert (await two.get("k")).value == b"2"


async def test_min_mod_revision_detects_change(store):
    rev = await store.put("registry", b"v1")
    unchanged = await store.range("registry", min_mod_revision=rev + 1)
    assert unchanged.kvs == () and unchanged.revision >= rev
    rev2 = await store.put("registry", b"v2")
    changed = await store.range("registry", min_mod_revision=rev + 1)
    assert [(k.value, k.mod_revision) for k in changed.kvs] == [(b"v2", rev2)]


async def test_create_is_put_if_absent(store):
    rev = await store.create("leader", b"me")
    assert (await store.get("leader")).create_revision == rev
    with pytest.raises(Conflict):
        await store.create("leader", b"someone else")
    assert (await store.get("leader")).value == b"me"


async def test_txn_branches_and_get_responses(store):
    rev = await store.put("leader", b"me")
    ok = await store.txn(
        [Compare("leader", "mod", "equal", rev), Compare("leader", "value", "equal", b"me")],
        [Put("registry", b"gen1"), Get("leader"), Delete("old", prefix=True)],
        [Get("leader")])
    assert ok.succeeded and ok.revision > rev
    assert ok.responses[0] is None and ok.responses[2] is None
    assert ok.responses[1].kvs[0].value == b"me"

    await store.put("leader", b"other")
    fenced = await store.txn([Compare("leader", "value", "equal", b"me")],
                             [Put("registry", b"gen2")], [Get("leader"), Get("registry")])
    assert not fenced.succeeded
    assert [r.kvs[0].value for r in fenced.responses] == [b"other", b"gen1"]
    assert (await store.get("registry")).value == b"gen1"

    for target, result, value, expect in [("version", "greater", 1, True),
                                          ("create", "less", 0, False),
                                          ("lease", "equal", 0, True),
                                          ("mod", "not_equal", 0, True)]:
        r = await store.txn([Compare("leader", target, result, value)], [], [])
        assert r.succeeded is expect, (target, result, value)


async def test_delete_counts_and_prefix(store):
    for k in ("cards/a", "cards/b", "cardsX"):
        await store.put(k, b"1")
    assert await store.delete("nothing") == 0
    assert await store.delete("cards/", prefix=True) == 2
    assert [k.key for k in (await store.range("", prefix=True)).kvs] == ["cardsX"]
    assert await store.delete("cardsX") == 1


async def test_invalid_request_is_typed(store):
    # the same key twice in one txn is refused by etcd itself
    with pytest.raises(InvalidRequest):
        await store.txn([], [Put("k", b"1"), Put("k", b"2")])


async def test_credentials_on_a_cluster_without_auth_are_not_needed(cluster, make_store):
    store = make_store(cluster.endpoints, username="someone", password="pw")
    assert await store.put("k", b"v") > 0
    assert (await store.get("k")).value == b"v"
    assert store.transport.token is None
