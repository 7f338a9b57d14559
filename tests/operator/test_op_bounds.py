"""Status reads the cluster prefix in bounded pages: one big or unknown key hides nothing
else, it shows as a ``value_too_large`` problem naming the key."""

from __future__ import annotations

from awide_cluster.api.metrics import DaemonMetrics
from awide_cluster.contract import bounds, keys
from awide_cluster.daemon.etcd_members import count_prefix_keys
from awide_cluster.operator.freshness import Observations, record_read
from awide_cluster.operator.gather import StatusReader
from awide_cluster.operator.snapshot import RawSnapshot, StatusPolicy
from awide_cluster.operator.status import build_status
from awide_cluster.store import EtcdStore, StoreConfig
from awide_cluster.store.types import KeyValue, Put, Refusal
from tests.operator import op_state as state
from tests.operator.op_fixtures import cluster_name, shared_etcd  # noqa: F401

NEAR_LIMIT = 1536 * 1024 - 8 * 1024       # just under etcd's default --max-request-bytes


def gauge(metrics: DaemonMetrics, name: str) -> float:
    """The value of the unlabelled gauge ``name`` (but for ``cluster``) as exposed."""
    for line in metrics.exposition().decode().splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not exposed")


def problems(st, code):
    return {p.subject: p.message for p in st.problems if p.code == code}


# values near 1.5 MiB cost etcd tens of ms each to serve (more on a busy test machine): the
# writes and the status reader get a generous call bound (sizes are under test, not times)
SLOW = 5.0


def slow_store(etcd, cluster) -> EtcdStore:
    return EtcdStore(StoreConfig(endpoints=tuple(etcd.endpoints), call_timeout=SLOW,
                                 prefix=keys.prefix(cluster)))


async def write_big(etcd, cluster, kvs):
    async with slow_store(etcd, cluster) as s:
        for k, v in kvs.items():
            await s.put(k, v)


async def test_big_keys_are_named_and_hide_nothing_else(shared_etcd, cluster_name):
    await state.awrite(shared_etcd.endpoints, cluster_name, state.healthy_state(cluster_name))
    big = {keys.member("h9"): b"x" * NEAR_LIMIT, keys.intent("c0000000000a"): b"y" * NEAR_LIMIT,
           keys.gateway("g9"): b"z" * NEAR_LIMIT, "zzz/unknown": b"u" * NEAR_LIMIT,
           keys.gateway("g8"): b"w" * (bounds.RECORD_MAX_BYTES + 1)}  # read, over its bound
    await write_big(shared_etcd, cluster_name, big)
    store = slow_store(shared_etcd, cluster_name)
    try:
        reader = StatusReader(store, cluster=cluster_name, endpoints=shared_etcd.endpoints,
                              call_timeout=SLOW)
        _, st = await reader.sample(0)
        too_large = problems(st, "value_too_large")
        assert set(too_large) == set(big), (st.read_error, st.problems)
        assert too_large[keys.member("h9")].startswith(
            f"key members/h9: value over {bounds.REPORT_MAX_BYTES} bytes")
        assert f"value over {bounds.RECORD_MAX_BYTES} bytes ({bounds.RECORD_MAX_BYTES + 1} " \
               "bytes)" in too_large[keys.gateway("g8")]
        # everything else as in the healthy state
        assert st.read_error == "" and st.leader.host == "h1" and st.registry.generation == 5
        assert [(h.host, h.error[:10]) for h in st.hosts] == [
            ("h1", ""), ("h2", ""), ("h9", "value over"), ("w1", "")]
        assert [c.state for c in st.cards] == ["in", "in", "in"]
        assert [(g.id, g.lag) for g in st.gateways if not g.error] == [("g1", 0), ("g2", 0)]
        assert {g.id for g in st.gateways if g.error} == {"g8", "g9"}
        assert [(i.card_id, i.error[:10]) for i in st.intents] == [("c0000000000a", "value over")]
        others = {p.code for p in st.problems} - {"value_too_large"}
        assert others == set(), st.problems
        # a second read does not fetch the unchanged big values again
        before = store.transport.bytes_read
        await reader.snapshot()
        assert store.transport.bytes_read - before < 256 * 1024
    finally:
        await store.close()


async def test_a_registry_over_its_bound_is_named_not_missing(shared_etcd, cluster_name):
    await state.awrite(shared_etcd.endpoints, cluster_name, state.healthy_state(cluster_name))
    await write_big(shared_etcd, cluster_name, {keys.REGISTRY: b"{" * NEAR_LIMIT})
    store = slow_store(shared_etcd, cluster_name)
    try:
        _, st = await StatusReader(store, cluster=cluster_name, endpoints=shared_etcd.endpoints,
                                   call_timeout=SLOW).sample(0)
    finally:
        await store.close()
    assert set(problems(st, "value_too_large")) == {"registry"}
    assert "registry_missing" not in {p.code for p in st.problems}
    assert st.registry.generation is None and st.registry.error.startswith(
        f"value over {bounds.REGISTRY_MAX_BYTES} bytes")
    assert [h.host for h in st.hosts] == ["h1", "h2", "w1"] and st.leader.host == "h1"


def _raw(kvs, refused=(), key_count=None):
    return RawSnapshot(cluster="c1", endpoints=(), answers=(), members=None, members_error="",
                       kvs=tuple(kvs), read_error="", revision=10, wall=1_800_000_000.0,
                       mono=100.0, refused=tuple(refused), key_count=key_count)


def test_refusals_and_values_over_their_folder_bound_are_problems():
    kvs = [KeyValue(keys.LEADER, state.leader("h1"), 1, 2, 1),
           KeyValue(keys.gateway("g1"), b"{" * (bounds.RECORD_MAX_BYTES + 1), 1, 3, 1),
           KeyValue(keys.member("h1"), b"{}", 1, 4, 1)]
    refused = [Refusal(keys.member("h2"), 5, 10**6, bounds.REGISTRY_MAX_BYTES),
               Refusal(keys.LEADER + "x" * 600, 6, 606, 512, kind="key")]
    raw = _raw(kvs, refused)
    st = build_status(raw, record_read(Observations(), raw.kvs, raw.mono), StatusPolicy())
    too_large = problems(st, "value_too_large")
    assert too_large[keys.member("h2")] == (
        f"key members/h2: value over {bounds.REPORT_MAX_BYTES} bytes (1000000 bytes), not read "
        "(everything else is shown; rewrite or delete it)")
    assert keys.gateway("g1") in too_large
    (long_key,) = (k for k in too_large if k.startswith("'leader"))
    assert long_key.endswith("(606 chars)") and "key of 606 bytes" in too_large[long_key]
    assert {h.host: h.error for h in st.hosts}[("h2")].startswith("value over")
    assert [g.id for g in st.gateways] == ["g1"] and st.gateways[0].error
    assert st.leader.host == "h1"


def test_more_keys_than_the_bound_is_a_problem():
    raw = _raw([], key_count=bounds.CLUSTER_MAX_KEYS + 5)
    st = build_status(raw, Observations(), StatusPolicy())
    (msg,) = problems(st, "too_many_keys").values()
    assert f"{bounds.CLUSTER_MAX_KEYS + 5} keys" in msg and "only the first" in msg


async def test_a_key_flood_hides_no_fixed_key_and_is_named(shared_etcd, cluster_name):
    """3,000 extra keys under intents/ (the operator role may write intents): the first 2,048
    keys of the prefix in key order are nearly all intents, yet the leader, the registry and
    every host report are read by name, and the flood is named with its folder; the daemon's
    count (``awide_prefix_keys``, ``awide_prefix_key_flood``) says it too."""
    await state.awrite(shared_etcd.endpoints, cluster_name, state.healthy_state(cluster_name))
    flood = 3000
    metrics = DaemonMetrics(host="h1", role="storage", version="x", cluster=cluster_name)
    async with slow_store(shared_etcd, cluster_name) as s:
        healthy = await count_prefix_keys(s, metrics, timeout=SLOW)
        assert 0 < healthy < bounds.CLUSTER_MAX_KEYS
        assert gauge(metrics, "awide_prefix_key_flood") == 0
        names = [f"{keys.INTENTS}flood-{i:04d}" for i in range(flood)]
        for at in range(0, flood, 100):
            await s.txn([], [Put(k, b"{}") for k in names[at:at + 100]])
        assert await count_prefix_keys(s, metrics, timeout=SLOW) == healthy + flood
    assert gauge(metrics, "awide_prefix_keys") == healthy + flood
    assert gauge(metrics, "awide_prefix_key_flood") == 1
    store = slow_store(shared_etcd, cluster_name)
    try:
        reader = StatusReader(store, cluster=cluster_name, endpoints=shared_etcd.endpoints,
                              call_timeout=SLOW)
        _, st = await reader.sample(0)
    finally:
        await store.close()
    codes = {p.code for p in st.problems}
    assert "no_leader" not in codes and "registry_missing" not in codes, st.problems
    assert st.read_error == "" and st.leader.host == "h1" and st.registry.generation == 5
    assert [h.host for h in st.hosts] == ["h1", "h2", "w1"]
    assert [c.state for c in st.cards] == ["in", "in", "in"]
    (msg,) = problems(st, "too_many_keys").values()
    assert msg.startswith("key flood: ") and f"{flood} under {keys.INTENTS}" in msg, msg
