"""Flap damping on a whole embedded cluster: a card whose store goes away and comes back
every ~2 s (its store service killed and started again, paced by the host's own reports)
goes out and in on each gateway only a few times, and each hold it gets is in the history.
A steady card beside it never leaves service."""

from __future__ import annotations

import time

import pytest

from awide_cluster.contract import history_ring as histdoc
from awide_cluster.contract import keys
from awide_cluster.contract import report as reportdoc
from awide_harness.cluster import EmbeddedCluster
from awide_harness.spec import ClusterSpec, Timing
from awide_harness.views import cards_in
from awide_harness.waits import wait_until_sync

from .support import etcd_or_skip

TIMING = Timing(poll_interval=0.25, lease_ttl=2, sick_polls=3, healthy_polls=1,
                call_timeout=0.2)
DAMPING = {"outs": 3, "window": 60.0, "first_hold": 2.0, "max_hold": 8.0}
# store down 4 polls, up 4 polls: ~2 s a flap. Damped, flaps 1-3 go out, the return of the
# 3rd starts hold 1 (2 s: it spans flap 4), flap 5's return starts hold 2 (4 s): 7 flaps
# reach hold 2 with one flap to spare; undamped they would be 7 outs per gateway
FLAPS = 7
HALF = 4                    # polls of the host per half flap
BOUND = 30.0

pytestmark = pytest.mark.timeout(180)


def seq_of(c: EmbeddedCluster, host: str) -> int:
    kv = c.read_key(keys.member(host))
    return reportdoc.decode(kv.value).seq if kv is not None else -1


def polls_of(c: EmbeddedCluster, host: str, n: int) -> None:
    """Until ``host`` reported ``n`` more times (the flap's pace is the host's own polls)."""
    start = seq_of(c, host)
    wait_until_sync(lambda: seq_of(c, host) >= start + n, BOUND, f"{n} polls of {host}",
                    poll=0.05)


def transitions(states: list[bool]) -> int:
    """in -> out changes in a sequence of in-service states."""
    return sum(1 for a, b in zip(states, states[1:], strict=False) if a and not b)


def test_a_flapping_card_goes_out_a_few_times_each_hold_in_the_history(tmp_path) -> None:
    spec = ClusterSpec(cluster="flap1", storage_hosts=1, cards_per_host=2, witness_hosts=1,
                       gateways=2, timing=TIMING, etcd_binary=etcd_or_skip(),
                       first_leader="s1", daemon_extra={"damping": DAMPING})
    with EmbeddedCluster(tmp_path, spec) as c:
        flapping, steady = c.cards_of("s1")
        fid, sid = c.card_id(flapping), c.card_id(steady)
        assert all(t is not None for t in c.wait_until(cards_in([fid, sid]), BOUND).values())
        t0 = time.monotonic()
        for _ in range(FLAPS):
            c.card_store_kill(flapping)
            polls_of(c, "s1", HALF)
            c.card_store_start(flapping)
            polls_of(c, "s1", HALF)
        flapped_for = time.monotonic() - t0
        # the last hold (at most max_hold) ends with the store up: back in everywhere
        seen = c.wait_until(cards_in([fid, sid]), BOUND)
        assert all(t is not None for t in seen.values()), f"not back in: {seen}"

        outs = {}
        for gid in c.gateway_ids:
            views = [v for v in c.history(gid) if v.seen_at >= t0]
            assert all(v.card_in(sid) for v in views), f"{gid}: the steady card left service"
            outs[gid] = transitions([v.card_in(fid) for v in views])
        kv = c.read_key(keys.HISTORY)
        assert kv is not None, "no history"
        ring = histdoc.decode(kv.value)
        mine = [e for e in ring.entries if e.card == fid]
        held = [e for e in mine if e.kind == "out" and e.reason.startswith("held out")]
        went_out = [e for e in mine if e.kind == "out" and not e.reason.startswith("held out")]
        print(f"flapped {FLAPS} times in {flapped_for:.1f} s; gateway outs {outs}; registry "
              f"outs {len(went_out)}, holds {[e.reason for e in held]}")
        # undamped, every flap is one out per gateway (FLAPS); damped: 3 outs, then one per
        # hold (2, 4 s) at most
        assert all(1 <= n <= 5 for n in outs.values()), outs
        # each out a gateway saw is a registry out in the history; each hold is there too
        assert all(n <= len(went_out) for n in outs.values()), (outs, len(went_out))
        assert len(held) >= 2, [e.reason for e in mine]
        reg = c.registry()
        assert reg is not None
        hold = reg.by_id[fid].hold
        assert hold is not None and hold.level >= 2 and not hold.active
