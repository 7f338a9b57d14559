"""Fixtures of the store tests: a healthy module cluster, stores with a private prefix."""

from __future__ import annotations

import uuid

import pytest

from awide_cluster.store import EtcdStore, StoreConfig


@pytest.fixture
def cluster(etcd_cluster):
    """The module's cluster, healed (thawed, restarted, healthy) after the test."""
    yield etcd_cluster
    etcd_cluster.heal()


@pytest.fixture
async def make_store():
    """``make_store(endpoints, **config)``: an EtcdStore with a fresh prefix, closed after."""
    stores: list[EtcdStore] = []

    def make(endpoints, **kw) -> EtcdStore:
        kw.setdefault("prefix", f"/test/{uuid.uuid4().hex[:8]}/")
        store = EtcdStore(StoreConfig(endpoints=tuple(endpoints), **kw))
        stores.append(store)
        return store

    yield make
    for s in stores:
        await s.close()


@pytest.fixture
async def store(cluster, make_store):
    return make_store(cluster.endpoints)
