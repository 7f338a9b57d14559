"""A daemon driven turn by turn through a rebuild of its etcd from nothing (its own 3-member
cluster, rebuilt on the same addresses with a new cluster id): it follows the new history, waits
for the gateways' records, then republishes the registry it holds above their generation, with
no slot moved and the same lineage."""

from __future__ import annotations

import json

from awide_cluster.contract import keys
from awide_cluster.contract import report as reportdoc
from awide_cluster.daemon.leader import CycleOutcome
from awide_cluster.daemon.service import Daemon
from awide_harness import EtcdCluster

from .conftest import TURN_CALL, TURNS, FakeClock, make_config, metric_value, registry, store_of


async def test_leader_republishes_after_etcd_was_rebuilt_from_nothing(etcd_binaries, tmp_path,
                                                                      cluster_name, cards):
    for i in range(3):
        cards.make(f"c{i}", f"SN{i}")
    clock = FakeClock()
    binary = next(iter(etcd_binaries.values()))
    with EtcdCluster(tmp_path / "etcd", binary=binary, stop_timeout=0.5) as etcd:
        d = Daemon(make_config(etcd, cluster_name, "h1", [cards.spec(f"c{i}") for i in range(3)],
                               timing=TURNS, call=TURN_CALL), serve_api=False, clock=clock)
        store = store_of(etcd, cluster_name)
        try:
            await d.turn()
            await d.turn()
            good = await registry(store)
            assert d.is_leader and good is not None and len(good.cards) == 3

            etcd.rebuild(None, new_token=True)

            await d.turn()                  # notices, campaigns again, holds the republish
            assert d.history_resets == 1 and metric_value(d.metrics.etcd_history_resets) == 1
            assert d.view()["etcd_history_reset"]["count"] == 1
            assert d.is_leader and d.outcomes[-1] is CycleOutcome.UNCHANGED
            assert await registry(store) is None
            # a gateway records the generation it applied meanwhile (above the daemon's)
            rec = {"schema": 1, "id": "gw1", "host": "gpu1", "pod": "p", "namespace": "n",
                   "placement": "dialog", "fingerprint": "L0",
                   "generation": good.generation + 3, "engine": None, "version": "0.1.0",
                   "stale": False}
            await store.put(keys.gateway("gw1"), json.dumps(rec).encode())
            clock.advance(d.config.timing.lease_ttl + 2 * d.config.timing.poll_interval)
            await d.turn()
            fixed = await registry(store)
            assert fixed is not None and fixed.slots == good.slots
            assert fixed.lineage == good.lineage
            assert fixed.generation == good.generation + 4
            await d.turn()                  # once: nothing more to say
            assert d.history_resets == 1
            # its report says so too, which is what `awide-cluster status` shows
            kv = await store.get(keys.member("h1"))
            assert kv is not None
            report = reportdoc.decode(kv.value)
            assert report.history_resets == 1 and report.history_note == d.history_note != ""
        finally:
            await d.stop()
            await store.close()
