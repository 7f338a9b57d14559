"""The revision guard: an answer below a revision already seen, or of another cluster, is refused
while it is one member's; a whole cluster in a new history (restored, rebuilt) is adopted."""

from __future__ import annotations

import pytest

from awide_cluster.store import RevisionWentBack, TimelineChanged, Unavailable
from awide_harness import EtcdCluster


async def test_a_cluster_rebuilt_behind_a_known_revision_is_adopted(etcd_binary, tmp_path,
                                                                    make_store):
    old = EtcdCluster(tmp_path / "old", binary=etcd_binary, stop_timeout=0.5).start()
    try:
        store = make_store(old.endpoints)
        for i in range(20):
            await store.put(f"k{i}", b"x")
        high, old_id = store.last_revision, store.timeline.cluster_id
        watch = store.watch("k0")
        await watch.open()
        ports = old.ports
    finally:
        old.stop()
    # the same addresses now serve a new, empty cluster (etcd wiped and re-created)
    with EtcdCluster(tmp_path / "new", binary=etcd_binary, ports=ports, stop_timeout=0.5) as new:
        fresh = make_store(new.endpoints, prefix=store.config.prefix)
        assert (await fresh.range("", prefix=True)).revision < high
        # every member answers the new history: adopted at the first refused answer, and the
        # read asked again within its deadline
        assert await store.get("k0") is None
        assert store.timeline_epoch == 1
        assert store.timeline.cluster_id != old_id and store.last_revision < high
        assert "restored or rebuilt" in store.timeline_note
        await store.put("k0", b"y")
        assert (await store.get("k0")).value == b"y"
        with pytest.raises(TimelineChanged):     # a watch of the old history is over
            await watch.__anext__()
        await watch.close()


async def test_one_member_of_another_history_is_refused_not_adopted(etcd_binary, tmp_path,
                                                                    make_store):
    """Two members of the followed cluster down, the third endpoint a stranger that answers:
    one member is not a quorum; its answers are refused until the cluster is back."""
    with EtcdCluster(tmp_path / "main", binary=etcd_binary, stop_timeout=0.5) as main, \
            EtcdCluster(tmp_path / "other", size=1, binary=etcd_binary,
                        stop_timeout=0.5) as other:
        store = make_store((*main.endpoints[:2], other.endpoints[0]), call_timeout=1.0)
        await store.put("k", b"v")
        followed = store.timeline
        main.kill(0)
        main.kill(1)
        store.session.census_gap = 0.0      # a census at each refusal, not once a gap
        for _ in range(3):
            with pytest.raises((RevisionWentBack, Unavailable)):
                await store.get("k")
        assert store.timeline == followed and store.timeline_epoch == 0
        main.restart(0, wait=False)
        main.restart(1, wait=False)
        main.wait_healthy()
        assert (await store.get("k")).value == b"v"
        assert store.timeline.cluster_id == followed.cluster_id
