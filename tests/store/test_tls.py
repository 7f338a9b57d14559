"""TLS with client certificates: members demand a certificate signed by the test CA."""

from __future__ import annotations

import asyncio
import time

import pytest

from awide_cluster.store import TlsConfig, Unavailable
from awide_harness import ClusterTls, EtcdCluster, make_test_pki
from tests.timing import bound, wait_until


@pytest.fixture(scope="module")
def tls_cluster(etcd_binary, tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("tls")
    pki = make_test_pki(tmp_path / "pki")
    tls = ClusterTls(ca_file=pki.ca_file, cert_file=pki.server_cert, key_file=pki.server_key)
    with EtcdCluster(tmp_path / "etcd", binary=etcd_binary, tls=tls, stop_timeout=0.5) as cluster:
        yield cluster, pki


async def test_store_with_client_certificate(tls_cluster, make_store):
    cluster, pki = tls_cluster
    assert all(ep.startswith("https://") for ep in cluster.endpoints)
    store = make_store(cluster.endpoints,
                       tls=TlsConfig(pki.ca_file, pki.client_cert, pki.client_key))
    async with store.watch("k") as watch:
        first = asyncio.ensure_future(watch.__anext__())
        await wait_until(lambda: watch.revision > 0, 5, "the watch stream created")
        rev = await store.put("k", b"secret")
        batch = await asyncio.wait_for(first, 5)
    assert batch.events[0].kv.mod_revision == rev
    assert (await store.get("k")).value == b"secret"
    lease = await store.grant(5)
    assert await store.keepalive(lease.id) == 5
    assert len(await store.members()) == 3


async def test_no_client_certificate_is_refused(tls_cluster, make_store):
    cluster, pki = tls_cluster
    store = make_store(cluster.endpoints, tls=TlsConfig(pki.ca_file))
    t0 = time.monotonic()
    with pytest.raises(Unavailable):
        await store.get("k")
    assert time.monotonic() - t0 < bound(1.5)


async def test_unknown_server_ca_is_refused(tls_cluster, make_store, tmp_path):
    cluster, _ = tls_cluster
    other = make_test_pki(tmp_path / "other")
    store = make_store(cluster.endpoints,
                       tls=TlsConfig(other.ca_file, other.client_cert, other.client_key))
    with pytest.raises(Unavailable, match="(?i)certificate"):
        await store.get("k")
