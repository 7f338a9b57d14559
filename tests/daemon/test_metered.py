"""The daemon's metering wrapper on real etcd: each call timed by its op, a failed call's
error type counted, errors re-raised unchanged, and the wrapper is a ``Store``."""

from __future__ import annotations

import pytest

from awide_cluster.api.metrics import DaemonMetrics
from awide_cluster.daemon.metered import MeteredStore
from awide_cluster.store.config import StoreConfig
from awide_cluster.store.errors import Unavailable
from awide_cluster.store.etcd import EtcdStore
from awide_cluster.store.port import Store

from .conftest import store_of


async def test_metered_store_times_calls_and_counts_errors(etcd, cluster_name):
    m = DaemonMetrics(host="h1", role="storage", version="x")
    live: Store = MeteredStore(store_of(etcd, cluster_name), m)
    dead: Store = MeteredStore(EtcdStore(StoreConfig(endpoints=("http://127.0.0.1:9",),
                                                     prefix="/x/", call_timeout=0.3)), m)
    try:
        await live.put("k", b"v")
        kv = await live.get("k")
        assert kv is not None and kv.value == b"v"
        with pytest.raises(Unavailable):
            await dead.put("k", b"v")
    finally:
        await live.close()
        await dead.close()
    text = m.exposition().decode()
    assert 'awide_etcd_call_duration_seconds_count{op="get"} 1.0' in text
    assert 'awide_etcd_call_duration_seconds_count{op="put"} 2.0' in text
    assert 'awide_etcd_call_errors_total{error="Unavailable",op="put"} 1.0' in text
