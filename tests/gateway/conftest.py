"""Fixtures of the gateway tests: one real 3-member etcd cluster per module (each test uses
its own cluster name, hence its own key prefix), a fake NVMe world per gateway host, and a
registry writer that plays the leader (it writes ``registry`` documents directly)."""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from awide_cluster.contract import keys
from awide_cluster.store import EtcdStore, StoreConfig
from awide_harness.etcd_cluster import EtcdCluster
from awide_harness.fakes import FakeNvmeWorld
from awide_harness.registry_writer import RegistryWriter
from tests.timing import bound

_names = itertools.count()


@pytest.fixture(scope="module")
def etcd_members(etcd_binaries: dict[str, str],
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    """One cluster of the newest etcd per module (a fresh ``etcd3`` per test would cost a
    second each); tests use distinct cluster names, so distinct key prefixes."""
    binary = next(iter(etcd_binaries.values()))
    with EtcdCluster(tmp_path_factory.mktemp("gw-etcd"), binary=binary,
                     stop_timeout=0.5) as cluster:
        yield cluster


@pytest.fixture
def etcd(etcd_members: EtcdCluster) -> Iterator[EtcdCluster]:
    """The module's cluster, healed after each test (a test may freeze or kill members)."""
    yield etcd_members
    etcd_members.heal()


@pytest.fixture
def cluster_name() -> str:
    return f"gw{os.getpid()}-{next(_names)}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
async def store(etcd: EtcdCluster, cluster_name: str) -> AsyncIterator[EtcdStore]:
    # the test's own reader and writer, bounded like the waits (scaled by the time factor)
    s = EtcdStore(StoreConfig(endpoints=etcd.endpoints, prefix=keys.prefix(cluster_name),
                              call_timeout=bound(1.0)))
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
async def leader(store: EtcdStore, cluster_name: str) -> RegistryWriter:
    return RegistryWriter(store, cluster_name)


@pytest.fixture
def world(tmp_path: Path) -> FakeNvmeWorld:
    return FakeNvmeWorld(tmp_path / "host-a")


@pytest.fixture
def world_b(tmp_path: Path) -> FakeNvmeWorld:
    return FakeNvmeWorld(tmp_path / "host-b")
