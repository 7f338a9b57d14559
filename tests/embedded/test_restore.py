"""A disaster restore of etcd with every daemon and gateway kept running.

A whole embedded cluster (3 etcd members, 2 storage hosts with 2 cards each and a witness, each
with its daemon process, 1 gateway process) serves; then etcd is rebuilt on the same addresses:

- from a snapshot taken earlier (``awide-cluster backup``'s snapshot, restored by etcd's own
  tool on every member; the cluster id kept: only the revisions go back), so the registry it
  brings back is older than the one the gateway applied;
- from nothing (every member lost; a new empty cluster with a new cluster id).

Without a restart of any process, every gateway then serves every card in the slot it had,
at a generation above the one it applied before; the registry in etcd is that one (same
lineage); every daemon says it followed a new etcd history (``/v1/status``).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from awide_cluster.operator.backup import take_snapshot
from awide_cluster.store import EtcdStore, StoreConfig
from awide_harness.cluster import EmbeddedCluster
from awide_harness.spec import ClusterSpec, Timing
from awide_harness.views import GatewayView, card_in, card_out
from tests.timing import bound

from .support import etcd_or_skip

SPEC = ClusterSpec(cluster="restore", storage_hosts=2, cards_per_host=2, witness_hosts=1,
                   gateways=1, timing=Timing.quick())


async def _snapshot(cfg: StoreConfig, out: Path) -> None:
    store = EtcdStore(cfg)
    try:
        await take_snapshot(store, out)
    finally:
        await store.close()


async def _filler(cfg: StoreConfig, n: int) -> None:
    """``n`` writes outside the cluster's keys: the history goes on after the snapshot."""
    store = EtcdStore(StoreConfig(endpoints=cfg.endpoints, prefix="/filler/",
                                  call_timeout=cfg.call_timeout))
    try:
        for i in range(n):
            await store.put(f"k{i % 7}", b"x" * 64)
    finally:
        await store.close()


def _bounce(c: EmbeddedCluster, key: str) -> None:
    """A card out then in again on every gateway: the registry moves two generations on."""
    cid = c.card_id(key)
    t0 = c.card_store_kill(key)
    assert all(c.wait_until(card_out(cid), bound(15.0), since=t0).values())
    t1 = c.card_store_start(key)
    assert all(c.wait_until(card_in(cid), bound(15.0), since=t1).values())


def _processes(c: EmbeddedCluster) -> dict[str, int]:
    out: dict[str, int] = {}
    for host in c.hosts:
        p = c.daemon_proc(host)
        assert p is not None and p.alive(), f"daemon {host} not running"
        out[host] = p.pid
    for gid in c.gateway_ids:
        p = c.gateway_proc(gid)
        assert p is not None and p.alive(), f"gateway {gid} not running"
        out[gid] = p.pid
    return out


def _rebuild_and_check(c: EmbeddedCluster, snapshot: Path | None, *, new_token: bool) -> None:
    before = c.registry()
    assert before is not None and len(before.cards) == 4
    cards = {c.card_id(k) for k in c.cards}
    views = c.gateway_views()
    applied = max(v.generation for v in views.values() if v is not None)
    slots = before.slots.slots
    pids = _processes(c)

    c.etcd.rebuild(snapshot, new_token=new_token)

    def resumed(v: GatewayView) -> bool:
        return (v.generation > applied and v.slots == slots
                and all(v.card_in(cid) for cid in cards))

    seen = c.wait_until(resumed, bound(30.0))
    assert all(t is not None for t in seen.values()), (
        f"gateways did not resume (applied {applied}, slots {slots}): {c.gateway_views()}\n"
        + "\n".join(c.log_tail(h) for h in c.hosts))
    after = c.registry()
    assert after is not None and after.slots.slots == slots, (slots, after)
    assert after.generation > applied and after.lineage == before.lineage
    assert {x.id for x in after.cards} == cards
    assert _processes(c) == pids, "a daemon or gateway was restarted"
    for host in c.hosts:
        status = c.daemon_status(host, bound=bound(2.0))
        assert status is not None and status.get("etcd_history_reset"), (host, status)
        assert status["etcd_history_reset"]["count"] >= 1


def test_restore_from_a_snapshot_with_everything_running(tmp_path: Path) -> None:
    etcd_or_skip()
    with EmbeddedCluster(tmp_path / "work", SPEC) as c:
        snap = tmp_path / "etcd.snapshot"
        asyncio.run(_snapshot(c.store_config(), snap))
        # the history goes on: the registry two generations on, many revisions after it
        _bounce(c, c.cards[0])
        asyncio.run(_filler(c.store_config(), 300))
        _rebuild_and_check(c, snap, new_token=False)


def test_rebuild_from_nothing_with_everything_running(tmp_path: Path) -> None:
    etcd_or_skip()
    with EmbeddedCluster(tmp_path / "work", SPEC) as c:
        _bounce(c, c.cards[0])
        _rebuild_and_check(c, None, new_token=True)
