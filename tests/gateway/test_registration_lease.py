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


class CountedCalls:
    """The real store, every call a tick can make through it counted."""

    def __init__(self, inner: EtcdStore) -> None:
        self.inner = inner
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name not in ("grant", "keepalive", "put"):
            return attr

        async def counted(*args: Any, **kw: Any) -> Any:
            self.calls += 1
            return await attr(*args, **kw)
        return counted


async def test_a_tick_is_quiet_exactly_when_it_sends_nothing(etcd, store, cluster_name) -> None:
    """``quiet`` (the etcd side then sets no bound for the tick) says beforehand whether a
    tick sends anything: the grant, a keepalive due, a changed record not held back."""
    counted = CountedCalls(store)
    reg = Registration(cast(Store, counted), "gw-quiet", ttl=30, call_timeout=bound(1.0),
                       rng=random.Random(5))
    a = GatewayRecord(id="gw-quiet", host="gpu1", pod="p1", namespace="ns",
                      placement="dialog", fingerprint="f", generation=1, engine=None,
                      version="t")
    b = GatewayRecord(id="gw-quiet", host="gpu1", pod="p1", namespace="ns",
                      placement="dialog", fingerprint="f", generation=2, engine=None,
                      version="t")
    t0 = 1000.0
    steps: list[tuple[float, GatewayRecord, bool, bool]] = [
        (t0, a, True, False),            # no lease: granted and written, hold or not
        (t0 + 0.5, a, False, True),      # the same record, no keepalive due
        (t0 + 0.6, b, True, True),       # changed but held back
        (t0 + 0.7, b, False, False),     # changed: written
        (t0 + 0.8, b, False, True),
    ]
    try:
        for now, record, hold, quiet in steps:
            assert reg.quiet(record, now, hold=hold) is quiet, now - t0
            before = counted.calls
            assert await reg.tick(record, now, hold=hold)
            assert (counted.calls == before) is quiet, now - t0
        due = reg.keepalive_due
        for now, quiet in ((due - 0.01, True), (due, False), (due + 0.01, True)):
            assert reg.quiet(b, now) is quiet
            before = counted.calls
            await reg.tick(b, now)
            assert (counted.calls == before) is quiet
        reg.history_reset()              # a new etcd history: written again at once
        assert not reg.quiet(b, due + 1.0, hold=True)
    finally:
        await reg.close()
