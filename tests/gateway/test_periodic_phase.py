"""Gateways started together (a rollout restarts every inference pod) do not do their
periodic etcd work in step for ever after: each keeps its lease alive every ttl/3 from a
first keepalive at a random share of that, and sends its linearizable poll at a random turn
of its cycle. Leases against real etcd, counted in requests on the tick clock passed in (no
waiting); the poll's turns counted without I/O."""

from __future__ import annotations

import collections
import random
from typing import cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from awide_cluster.contract.records import GatewayRecord
from awide_cluster.store import EtcdStore
from awide_cluster.store.port import Store
from awide_gateway_cluster.follower import Follower, StoreReader
from awide_gateway_cluster.registration import Registration
from tests.gateway.test_registration_lease import CountedKeepalives
from tests.timing import bound

pytestmark = pytest.mark.timeout(60)

CALL = 0.5
TTL = 30
GATEWAYS = 60
STEP = 0.5          # the gateways' ticks, every half second of the tick clock
RECORD = GatewayRecord(id="gw", host="h", pod="p", namespace="ns", placement="dialog",
                       fingerprint="f", generation=1, engine=None, version="t")


async def test_leases_granted_together_are_kept_alive_out_of_step(store: EtcdStore) -> None:
    counted = CountedKeepalives(store)
    regs = [Registration(cast(Store, counted), f"gw-{i}", ttl=TTL, call_timeout=bound(1.0),
                         rng=random.Random(i)) for i in range(GATEWAYS)]
    sent: dict[int, list[float]] = collections.defaultdict(list)   # gateway -> keepalive times
    try:
        t = 0.0
        while t <= 3 * TTL:
            for i, reg in enumerate(regs):
                before = counted.keepalives
                assert await reg.tick(RECORD, t)
                if counted.keepalives > before:
                    sent[i].append(t)
            t += STEP
        assert len({r.lease for r in regs}) == GATEWAYS and all(r.failures == 0 for r in regs)
    finally:
        for reg in regs:
            await reg.close()
    for i in range(GATEWAYS):
        # never a lease at risk: the first keepalive within ttl/3 of the grant (at t = 0),
        # then every ttl/3 (to the tick)
        times = [0.0, *sent[i]]
        gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
        assert gaps and max(gaps) <= TTL / 3 + STEP, (i, times)
        assert sent[i][0] >= TTL / 30 - STEP, (i, times)
    # out of step: the 60 first keepalives fall over most of the 10 s, no second holds a
    # quarter of them (in step, as before, all 60 fell in one tick at ttl/3)
    firsts = [sent[i][0] for i in range(GATEWAYS)]
    assert max(firsts) - min(firsts) >= 0.6 * (0.9 * TTL / 3)
    per_second = collections.Counter(int(x) for xs in sent.values() for x in xs)
    assert max(per_second.values()) < GATEWAYS / 4, per_second.most_common(3)


async def test_without_jitter_the_first_keepalive_comes_a_full_third_of_the_ttl_late(
        store: EtcdStore) -> None:
    class Low(random.Random):       # every random share at its low end (figure 9's naive arm)
        def uniform(self, a: float, b: float) -> float:
            return a

    reg = Registration(cast(Store, store), "gw-low", ttl=TTL, call_timeout=bound(1.0),
                       rng=Low(1))
    try:
        assert await reg.tick(RECORD, 0.0)
        assert reg.keepalive_due == pytest.approx(TTL / 3)
    finally:
        await reg.close()


def _follower(every: int, phase: int) -> Follower:
    return Follower(cast(StoreReader, object()), cluster="c1", call_timeout=CALL,
                    clock=lambda: 0.0, linearizable_every=every, phase=phase)


@given(st.integers(min_value=1, max_value=20), st.data())
def test_a_phase_moves_the_linearizable_turns_and_keeps_their_rate(every: int,
                                                                   data: st.DataObject) -> None:
    phase = data.draw(st.integers(min_value=0, max_value=every - 1))
    f = _follower(every, phase)
    linear = []
    for turn in range(6 * every + 1):
        if not f.serializable_next():
            linear.append(turn)
        f.skip()           # a turn passes (the poll left out: no I/O)
    assert linear[0] == 0                       # the start's poll is linearizable
    periodic = [t for t in linear if t > 0]
    assert periodic == [t for t in range(1, 6 * every + 1) if (t + phase) % every == 0]
    assert periodic[0] == every - phase         # the first periodic one within a cycle
    assert all(b - a == every for a, b in zip(periodic, periodic[1:], strict=False))


def test_a_phase_outside_the_cycle_is_refused() -> None:
    for every, phase in ((10, 10), (10, -1), (1, 1)):
        with pytest.raises(ValueError, match="phase"):
            _follower(every, phase)
