"""The gateway's registry poll is bounded: a registry near etcd's request limit (1.5 MiB by
default) is refused by name like a corrupt one, the last good cards keep serving, and the
same revision is not fetched again."""

from __future__ import annotations

import pytest

from awide_cluster.contract import bounds, keys
from awide_cluster.contract import registry as regdoc
from awide_cluster.store import EtcdStore, StoreConfig, ValueTooLarge
from awide_gateway_cluster.follower import FollowState, step
from tests.gateway.support import in_service, make_card, serving_gateway
from tests.gateway.test_pure import _reg, _rr
from tests.timing import wait_until

pytestmark = pytest.mark.timeout(60)

NEAR_LIMIT = 1536 * 1024 - 8 * 1024


def test_follow_step_refuses_a_registry_over_its_bound_and_remembers_its_revision():
    reg = _reg([make_card(1)])
    st, d = step(FollowState(), _rr(regdoc.encode(reg)), 10.0, cluster="c1")
    assert d.outcome == "applied"
    big = ValueTooLarge("'registry': value over 524288 bytes", key="registry", limit=524288,
                        size=524289, mod_revision=9)
    st2, d = step(st, big, 11.0, cluster="c1")
    assert d.outcome == "rejected" and st2.registry == reg and st2.seen_revision == 9
    assert st2.rejected == 1 and st2.failures == 0 and st2.last_ok == 11.0
    assert "value over 524288 bytes" in st2.problem and "keeping generation 1" in st2.problem
    st3, d = step(st2, _rr(None, mod=9), 12.0, cluster="c1")
    assert d.outcome == "unchanged" and st3.problem and st3.rejected == 1


async def test_a_huge_registry_is_refused_and_not_fetched_again(etcd, leader, world,
                                                                cluster_name):
    async with serving_gateway(etcd, leader, world, cluster_name) as (gw, a):
        good = gw.snapshot().generation
        async with EtcdStore(StoreConfig(endpoints=etcd.endpoints, call_timeout=10.0,
                                         prefix=keys.prefix(cluster_name))) as s:
            await s.put(keys.REGISTRY, b"{" * NEAR_LIMIT)
        await wait_until(lambda: gw.stats().registries_rejected == 1, what="refused")
        assert f"value over {bounds.REGISTRY_MAX_BYTES} bytes" in gw.stats().problem
        assert gw.snapshot().generation == good and in_service(gw, a.id)
        polls = gw.stats().polls
        before = gw.store.transport.bytes_read
        await wait_until(lambda: gw.stats().polls >= polls + 3, what="3 more polls")
        assert gw.stats().registries_rejected == 1 and in_service(gw, a.id)
        assert gw.store.transport.bytes_read - before < 64 * 1024   # not the 2 MiB again
        reg = await leader.publish([a])
        await wait_until(lambda: gw.snapshot().generation == reg.generation
                       and not gw.stats().stale, what="a good registry again")
