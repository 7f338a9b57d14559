"""The gateway's loops cannot die of anything a poll raises, and a loop that is not running is
never reported as fresh."""

from __future__ import annotations

from typing import Any

from awide_cluster.contract import keys
from awide_cluster.store import EtcdStore, StoreConfig
from tests.gateway.support import config, gateway, in_service, served
from tests.timing import wait_until


class Exploding:
    """A real store whose registry range raises a non-store error while ``armed`` (what a bug
    in a decoder, or content no check foresaw, would raise inside a poll)."""

    def __init__(self, store: EtcdStore) -> None:
        self.store = store
        self.armed = False
        self.raised = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    async def range(self, key: str, **kw: Any) -> Any:
        if self.armed and key == keys.REGISTRY:
            self.raised += 1
            raise RecursionError("maximum recursion depth exceeded while decoding")
        return await self.store.range(key, **kw)


async def test_poll_survives_any_exception_and_a_dead_poll_is_stale(
        etcd, leader, world, cluster_name):
    a, b = served(world, 2)
    await leader.publish([a])
    cfg = config(cluster_name, etcd.endpoints, world, timing={"poll_interval": 0.4})
    real = EtcdStore(StoreConfig(endpoints=tuple(etcd.endpoints),
                                 prefix=keys.prefix(cluster_name), call_timeout=0.5))
    store = Exploding(real)
    gw = gateway(cfg, world, store=store)
    await gw.start()
    try:
        await wait_until(lambda: in_service(gw, a.id))
        store.armed = True
        await wait_until(lambda: store.raised >= 3 and gw.stats().loop_errors >= 3,
                       what="polls that raised")
        store.armed = False
        # the loop went on: a registry change is still applied
        await leader.publish([a, b])
        await wait_until(lambda: in_service(gw, b.id), what="new card after the errors")
        assert not gw.stats().stale
        # a poll task that is not running: stale by definition, whatever the last poll said
        task = gw.poll_task
        assert task is not None
        task.cancel()
        await wait_until(task.done, what="poll task ended")
        st = gw.stats()
        assert st.stale and "not running" in st.problem
    finally:
        await gw.stop()
        await real.close()
