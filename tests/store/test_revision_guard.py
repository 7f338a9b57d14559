"""The revision guard: an answer below a revision already seen is refused."""

from __future__ import annotations

import pytest

from awide_cluster.store import RevisionWentBack
from awide_harness import EtcdCluster


async def test_fresh_cluster_behind_a_known_revision_is_refused(etcd_binary, tmp_path, make_store):
    old = EtcdCluster(tmp_path / "old", binary=etcd_binary, stop_timeout=0.5).start()
    try:
        store = make_store(old.endpoints)
        for i in range(20):
            await store.put(f"k{i}", b"x")
        high = store.last_revision
        ports = old.ports
    finally:
        old.stop()
    # the same addresses now serve a new, empty cluster (e.g. etcd wiped and re-created)
    with EtcdCluster(tmp_path / "new", binary=etcd_binary, ports=ports, stop_timeout=0.5) as new:
        fresh = make_store(new.endpoints, prefix=store.config.prefix)
        assert (await fresh.range("", prefix=True)).revision < high
        with pytest.raises(RevisionWentBack):
            await store.get("k0")
        with pytest.raises(RevisionWentBack):
            await store.range("", prefix=True, serializable=True)
        with pytest.raises(RevisionWentBack):
            await store.put("k0", b"y")  # NB: applied, but the answer is refused
        assert store.last_revision == high
