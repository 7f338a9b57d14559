"""The registration lease at the gateway's defaults, against real etcd: ``gateways/<id>`` on a
lease of ``lease_ttl`` (30 s) that the gateway keeps alive every ``lease_ttl``/3 of its own
clock (10 s; the first after a random share of that), and revokes at a clean stop. The clock
is passed in: no waiting."""

from __future__ import annotations

import random
from typing import Any, cast

import pytest

from awide_cluster.contract import keys
from awide_cluster.contract.records import GatewayRecord
from awide_cluster.store import EtcdStore
from awide_cluster.store.port import Store
from awide_gateway_cluster.config import parse_config
from awide_gateway_cluster.registration import Registration
from tests.timing import bound

pytestmark = pytest.mark.timeout(60)


class CountedKeepalives:
    """The real store, the keepalives sent through it counted."""

    def __init__(self, inner: EtcdStore) -> None:
        self.inner = inner
        self.keepalives = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def keepalive(self, lease_id: int, *, timeout: float | None = None) -> int:
        self.keepalives += 1
        return await self.inner.keepalive(lease_id, timeout=timeout)


async def test_the_default_lease_is_kept_alive_every_third_of_its_ttl(etcd, store,
                                                                       cluster_name) -> None:
    cfg = parse_config({"mode": "cluster", "cluster": cluster_name, "host": "gpu1",
                        "pod": "p1", "etcd": {"endpoints": list(etcd.endpoints)},
                        "model": {"name": "m/x"}})
    ttl = cfg.timing.registration_ttl
    assert ttl == 30
    counted = CountedKeepalives(store)
    reg = Registration(cast(Store, counted), cfg.id, ttl=ttl, call_timeout=bound(1.0),
                       rng=random.Random(3))
    record = GatewayRecord(id=cfg.id, host="gpu1", pod="p1", namespace="ns", placement="dialog",
                           fingerprint="f", generation=1, engine=None, version="t")
    t0 = 1000.0
    try:
        await reg.tick(record, t0)                              # granted, written
        kv = await store.get(keys.gateway(cfg.id))
        assert kv is not None and reg.lease is not None and kv.lease == reg.lease
        assert ttl - 5 < await store.time_to_live(reg.lease) <= ttl
        # the first keepalive at a random share of ttl/3 after the grant, then every ttl/3
        first = reg.keepalive_due - t0
        assert ttl / 30 - 1e-9 <= first <= ttl / 3
        for now, sent in ((t0 + first - 0.01, 0), (t0 + first, 1), (t0 + first + 5.0, 1),
                          (t0 + first + ttl / 3 - 0.01, 1), (t0 + first + ttl / 3, 2),
                          (t0 + first + 2 * ttl / 3, 3)):
            await reg.tick(record, now)
            assert counted.keepalives == sent, now - t0
        assert ttl - 5 < await store.time_to_live(reg.lease) <= ttl
        assert reg.failures == 0
    finally:
        await reg.close()
    assert await store.get(keys.gateway(cfg.id)) is None       # revoked at a clean stop
