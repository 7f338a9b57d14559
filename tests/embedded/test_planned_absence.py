"""A planned absence on a whole embedded cluster: a daemon stopped cleanly (SIGTERM, as
``systemctl stop``) for many polls and started again takes none of its cards out on any
gateway, and no registry generation marks one out; the leader's daemon too (its report held by
the next leader). A follower's daemon SIGKILLed loses its cards within today's bound.
"""

from __future__ import annotations

import time

import pytest

from awide_cluster.contract import keys
from awide_cluster.contract import report as reportdoc
from awide_cluster.contract.report import HostReport
from awide_harness.cluster import EmbeddedCluster
from awide_harness.spec import ClusterSpec, Timing, bounds
from awide_harness.views import GatewayView, cards_in, cards_out
from awide_harness.waits import wait_until_sync

from .support import etcd_or_skip

GRACE = 20                                   # s: far longer than the absences below
TIMING = Timing(poll_interval=0.25, lease_ttl=2, sick_polls=3, healthy_polls=1,
                call_timeout=0.2, restart_grace=GRACE)
BOUNDS = bounds(TIMING)
ABSENT_POLLS = 12                            # the leader's polls a stopped daemon stays away
BOUND = 60.0                                 # generous deadline of every wait

pytestmark = pytest.mark.timeout(300)


def wait(pred, what: str, bound: float = BOUND):
    return wait_until_sync(pred, bound, what, poll=0.05)


def report_of(c: EmbeddedCluster, host: str) -> HostReport | None:
    kv = c.read_key(keys.member(host))
    return reportdoc.decode(kv.value) if kv is not None else None


def seq_of(c: EmbeddedCluster, host: str) -> int:
    r = report_of(c, host)
    return r.seq if r is not None and r.restarting is None else -1


def out_views(c: EmbeddedCluster, ids: list[str], since: float) -> list[GatewayView]:
    """Every gateway view seen since ``since`` in which one of ``ids`` was not in service."""
    return [v for gid in c.gateway_ids for v in c.history(gid)
            if v.seen_at >= since and not all(v.card_in(i) for i in ids)]


def absent_for_a_while(c: EmbeddedCluster, host: str, watcher: str) -> None:
    """Stop ``host``'s daemon cleanly, wait until its report says restarting and the
    ``watcher`` host reported ABSENT_POLLS more times, start it again and wait until it
    reports as a new process."""
    run = report_of(c, host)
    assert run is not None and run.restarting is None
    c.stop_daemon(host)
    marked = report_of(c, host)
    assert marked is not None and marked.restarting is not None, "no restarting report"
    assert marked.restarting.grace == GRACE and marked.run == run.run
    start = seq_of(c, watcher)
    wait(lambda: seq_of(c, watcher) >= start + ABSENT_POLLS,
         f"{ABSENT_POLLS} polls of {watcher} while {host} is away")
    assert report_of(c, host) == marked         # still held, nothing else wrote it
    c.start_daemon(host)
    wait(lambda: (r := report_of(c, host)) is not None and r.run != run.run
         and r.restarting is None, f"{host} reports again as a new process")


def test_a_clean_restart_takes_no_card_out_a_crash_does(tmp_path) -> None:
    spec = ClusterSpec(cluster="absence1", storage_hosts=2, cards_per_host=2, witness_hosts=1,
                       gateways=2, timing=TIMING, etcd_binary=etcd_or_skip(),
                       first_leader="s1")
    with EmbeddedCluster(tmp_path, spec) as c:
        s1 = [c.card_id(k) for k in c.cards_of("s1")]
        s2 = [c.card_id(k) for k in c.cards_of("s2")]
        everything = s1 + s2
        assert all(t is not None for t in c.wait_until(cards_in(everything), BOUND).values())
        reg = c.registry()
        assert reg is not None
        first = reg.generation

        # a follower restarted cleanly
        t0 = time.monotonic()
        absent_for_a_while(c, "s2", watcher="s1")
        # the leader restarted cleanly: another host leads and holds s1's report
        absent_for_a_while(c, "s1", watcher="s2")
        assert c.leader_host() is not None
        assert all(t is not None for t in c.wait_until(cards_in(everything), BOUND).values())
        assert out_views(c, everything, t0) == []
        reg = c.registry()
        assert reg is not None
        assert [c2.state for c2 in reg.cards] == ["in"] * len(everything)
        assert all(c2.changed_generation <= first for c2 in reg.cards), \
            "a card changed state during the planned absences"

        # a follower SIGKILLed: no restarting report, its cards out within today's bound
        # (its report stops advancing)
        leader = c.leader_host()
        victim = "s2" if leader != "s2" else "s1"
        lost = s2 if victim == "s2" else s1
        t_kill = c.kill_daemon(victim)
        kv = c.read_key(keys.member(victim))
        assert kv is None or reportdoc.decode(kv.value).restarting is None
        seen = c.wait_until(cards_out(lost), BOUNDS.detection, since=t_kill)
        assert all(t is not None for t in seen.values()), \
            f"{victim}'s cards not out on every gateway within {BOUNDS.detection:.1f} s: {seen}"
