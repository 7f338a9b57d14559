"""Leases: grant, keepalive, time-to-live, expiry and revoke make bound keys vanish."""

from __future__ import annotations

import asyncio

import pytest

from awide_cluster.store import LeaseExpired
from awide_harness import waits


async def test_grant_keepalive_ttl_revoke(store):
    lease = await store.grant(5)
    assert lease.id > 0 and lease.ttl == 5
    assert 0 < await store.time_to_live(lease.id) <= 5
    assert await store.keepalive(lease.id) == 5
    await store.put("members/h1", b"report", lease=lease.id)
    assert (await store.get("members/h1")).lease == lease.id

    await store.revoke(lease.id)
    assert await store.get("members/h1") is None
    with pytest.raises(LeaseExpired):
        await store.keepalive(lease.id)
    with pytest.raises(LeaseExpired):
        await store.time_to_live(lease.id)
    with pytest.raises(LeaseExpired):
        await store.put("members/h1", b"late", lease=lease.id)
    await store.revoke(lease.id)  # already gone: not an error


async def test_expiry_removes_key_and_keepalive_then_fails(store):
    lease = await store.grant(1)
    await store.create("leader", b"me", lease=lease.id)
    async def gone() -> bool:
        return await store.get("leader") is None

    await waits.wait_until(gone, 10, "the leased key gone after its TTL", poll=0.1)
    with pytest.raises(LeaseExpired):
        await store.keepalive(lease.id)


async def test_keepalive_keeps_key(store):
    lease = await store.grant(1)
    await store.put("gateways/g1", b"x", lease=lease.id)
    for _ in range(8):  # 2 s, twice the TTL
        assert await store.keepalive(lease.id) >= 1
        await asyncio.sleep(0.25)   # time passing is the test: kept alive past its TTL
    assert (await store.get("gateways/g1")) is not None
