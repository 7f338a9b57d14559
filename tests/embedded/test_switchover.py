"""Leader switchover on a whole embedded cluster: leadership moves to the host named (and,
unnamed, to another live one), no card leaves service on any gateway, and the old leader
writes nothing after its hand-over (every history entry after it is the new leader's). A
target that is not a live candidate (unknown, the leader itself, a daemon restarting) is
refused with nothing written."""

from __future__ import annotations

import asyncio
import time

import pytest

from awide_cluster.contract import history_ring as histdoc
from awide_cluster.contract import keys
from awide_cluster.contract import report as reportdoc
from awide_cluster.daemon.clock import SystemClock
from awide_cluster.daemon.switchover import Moved, SwitchoverError, submit
from awide_cluster.store.etcd import EtcdStore
from awide_harness.cluster import EmbeddedCluster
from awide_harness.spec import ClusterSpec, Timing
from awide_harness.views import cards_in
from awide_harness.waits import wait_until_sync

from .support import etcd_or_skip

TIMING = Timing(poll_interval=0.25, lease_ttl=2, sick_polls=3, healthy_polls=1,
                call_timeout=0.2)
BOUND = 30.0

pytestmark = pytest.mark.timeout(180)


def switchover(c: EmbeddedCluster, to: str = "") -> Moved:
    async def go() -> Moved:
        store = EtcdStore(c.store_config())
        try:
            return await submit(store, to=to, hosts=c.hosts, clock=SystemClock(), wait=10.0,
                                poll=0.05, call_timeout=0.5, reason="test")
        finally:
            await store.close()
    return asyncio.run(go())


def restarting(c: EmbeddedCluster, host: str) -> bool | None:
    """Whether ``host``'s report is marked restarting (None: no report)."""
    kv = c.read_key(keys.member(host))
    return reportdoc.decode(kv.value).restarting is not None if kv is not None else None


def ring(c: EmbeddedCluster) -> histdoc.History:
    kv = c.read_key(keys.HISTORY)
    assert kv is not None, "no history"
    return histdoc.decode(kv.value)


def test_switchover_moves_leadership_fenced_with_no_card_out(tmp_path) -> None:
    spec = ClusterSpec(cluster="switch1", storage_hosts=2, cards_per_host=1, witness_hosts=1,
                       gateways=2, timing=TIMING, etcd_binary=etcd_or_skip(),
                       first_leader="s1")
    with EmbeddedCluster(tmp_path, spec) as c:
        cards = [c.card_id(k) for k in c.cards]
        assert all(t is not None for t in c.wait_until(cards_in(cards), BOUND).values())
        assert c.leader_host() == "s1"

        # not a live candidate: refused, nothing written
        for bad, why in (("nosuch", "not a host of this cluster"), ("s1", "already leads")):
            with pytest.raises(SwitchoverError, match=why):
                switchover(c, bad)
            assert c.read_key(keys.SWITCHOVER) is None
        # a daemon stopped cleanly (its report marked restarting) is no candidate either
        c.stop_daemon("s2")
        assert restarting(c, "s2") is True
        with pytest.raises(SwitchoverError, match="s2 is not a live candidate: its daemon is "
                                                  "restarting"):
            switchover(c, "s2")
        c.start_daemon("s2")
        wait_until_sync(lambda: restarting(c, "s2") is False, BOUND, "s2 reports again",
                        poll=0.05)
        assert all(t is not None for t in c.wait_until(cards_in(cards), BOUND).values())

        t0 = time.monotonic()
        moved = switchover(c, "s2")
        assert (moved.before, moved.after) == ("s1", "s2")
        assert c.leader_host() == "s2"
        print(f"switchover s1 -> s2 in {moved.seconds * 1000:.0f} ms")
        # unnamed: to another live daemon
        moved = switchover(c)
        assert moved.before == "s2" and moved.after in ("s1", "w1")
        # no card left service on any gateway
        outs = [(gid, v.generation) for gid in c.gateway_ids for v in c.history(gid)
                if v.seen_at >= t0 and not all(v.card_in(i) for i in cards)]
        assert outs == []
        # fenced: nothing the old leader wrote after its hand-over
        entries = ring(c).entries
        handed = [i for i, e in enumerate(entries) if e.kind == "leader"
                  and e.reason.startswith("s1 hands leadership over to s2")]
        assert handed, [e.line() for e in entries]
        after = entries[handed[-1] + 1:]
        first_s2 = [e for e in after if e.leader == "s2"]
        assert first_s2 and first_s2[0].kind == "leader", [e.line() for e in after]
        upto = after[:next(i for i, e in enumerate(after) if e.reason.startswith("s2 hands"))]
        assert all(e.leader == "s2" for e in upto), [e.line() for e in upto]
