"""Fixtures of the operator tests (imported by name: the folder is not a package, as
``operator`` would shadow the standard library). One real 3-member etcd per module for the
status scenarios (each test writes its own cluster prefix, so they do not see each other);
destructive tests use the per-test ``etcd3``."""

from __future__ import annotations

import itertools

import pytest

from awide_harness import EtcdCluster

_names = itertools.count(1)


@pytest.fixture(scope="module")
def shared_etcd(etcd_binaries, tmp_path_factory):
    binary = next(iter(etcd_binaries.values()))
    with EtcdCluster(tmp_path_factory.mktemp("op-etcd"), binary=binary,
                     stop_timeout=0.5) as cluster:
        yield cluster


@pytest.fixture
def cluster_name() -> str:
    return f"op{next(_names)}"
