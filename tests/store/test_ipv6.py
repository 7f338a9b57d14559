"""IPv6 loopback endpoints."""

from __future__ import annotations

from awide_harness import EtcdCluster


async def test_store_over_ipv6(etcd_binary, tmp_path, make_store):
    with EtcdCluster(tmp_path / "etcd", binary=etcd_binary, host="::1", stop_timeout=0.5) as c:
        assert all(ep.startswith("http://[::1]:") for ep in c.endpoints)
        store = make_store(c.endpoints)
        rev = await store.put("k", b"v6")
        assert (await store.get("k")).mod_revision == rev
        assert {m.client_urls[0] for m in await store.members()} == set(c.endpoints)
