"""Helpers for the daemon tests: one real 3-member etcd per module, directory cards with
labels, command store probes flipped by a file, configs with short timings."""

from __future__ import annotations

import asyncio
import itertools
import math
import re
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pytest

from awide_cluster.config import daemon as daemon_config
from awide_cluster.contract import keys
from awide_cluster.contract import registry as regdoc
from awide_cluster.store import EtcdStore, StoreConfig
from awide_harness import EtcdCluster, presets
from awide_harness.presets import FAST, DirCards
from tests.timing import bound

if TYPE_CHECKING:
    from awide_cluster.daemon.service import Daemon

_names = itertools.count()
# tests that drive Daemon.turn without its loop wait on nothing but their own turns: their
# etcd calls get a bound scaled like the waits (a turn whose read a loaded machine answered
# late would count nothing, and the test would see a registry it did not expect), and a
# lease that outlives them
TURN_CALL = bound(0.5)
TURNS = dict(FAST, lease_ttl=math.ceil(FAST["poll_interval"] + 2 * TURN_CALL) + 1)


@pytest.fixture(scope="session")
def etcd(etcd_binaries, tmp_path_factory):
    binary = next(iter(etcd_binaries.values()))
    with EtcdCluster(tmp_path_factory.mktemp("etcd"), binary=binary, stop_timeout=0.5) as c:
        yield c


@pytest.fixture
def cluster_name() -> str:
    """A fresh cluster name (key prefix) per test, so tests share one etcd."""
    return f"t{next(_names)}-{int(time.time() * 1000) % 100000}"


@pytest.fixture
def cards(tmp_path) -> DirCards:
    return DirCards(tmp_path / "cards")


TEST_HOSTS = ("h1", "h2", "h3")


def config_dict(etcd: EtcdCluster, cluster: str, host: str, cards: Sequence[dict] = (),
                **kw: Any) -> dict[str, Any]:
    """``presets.config_dict`` on the test etcd; the cluster's hosts: h1..h3 and ``host``."""
    return presets.config_dict(etcd.client_urls, cluster, host, cards, hosts=TEST_HOSTS, **kw)


def make_config(*args, **kwargs) -> daemon_config.DaemonConfig:
    return daemon_config.parse(config_dict(*args, **kwargs), "<test>")


def store_of(etcd: EtcdCluster, cluster: str) -> EtcdStore:
    """The test's own reader and writer: its calls are bounded like the waits (a read that
    a loaded machine answers in over a second is not what a test checks)."""
    return EtcdStore(StoreConfig(endpoints=tuple(etcd.client_urls), prefix=keys.prefix(cluster),
                                 call_timeout=bound(1.0)))


async def registry(store: EtcdStore) -> regdoc.Registry | None:
    kv = await store.get(keys.REGISTRY)
    return regdoc.decode(kv.value) if kv else None


async def card_state(store: EtcdStore, card_id: str) -> str | None:
    r = await registry(store)
    c = r.card(card_id) if r else None
    return c.state if c else None


class FakeClock:
    """A monotonic clock moved by hand (``advance``); ``sleep`` advances it."""

    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def monotonic(self) -> float:
        return self.t

    def wall(self) -> str:
        return f"2026-01-01T00:00:{int(self.t) % 60:02d}+00:00"

    async def sleep(self, seconds: float) -> None:
        self.t += max(0.0, seconds)
        await asyncio.sleep(0)

    def advance(self, seconds: float) -> None:
        self.t += seconds


def metrics_text(d: Daemon) -> str:
    """The daemon's /metrics text without its constant ``cluster`` label (the tests match the
    other labels exactly; tests/embedded/test_metrics_labels.py checks the cluster label)."""
    text = d.metrics.exposition().decode()
    text = re.sub(r'\{cluster="[^"]*"\}', "", text)
    return re.sub(r',?cluster="[^"]*",?', lambda m: "," if m.group(0).startswith(",") and
                  m.group(0).endswith(",") else "", text)


def metric_value(metric: Any) -> float:
    """A label-less prometheus metric's value, read through its public ``collect()``."""
    return next(s.value for s in metric.collect()[0].samples if not s.name.endswith("_created"))
