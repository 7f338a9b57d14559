"""The leader-key watch on real etcd whose members notify watch progress every 4 s (slower than
the daemon's 3 s floor, as a site that raises the deploy's 1.4 s would). A follower configured
with that interval (``timing.etcd_progress_notify``) keeps its idle watch open across
notifications; one told 1 s re-opens it every 3 s (the control: it shows the
etcd notifies slowly and that the time watched spans several notifications). The watch kept
open still hands the key over at once on a clean stop (SIGTERM), well inside the follower's
5 s poll."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from awide_cluster.daemon.service import Daemon
from awide_harness import EtcdCluster
from awide_harness.presets import FAST
from tests.timing import bound, wait_until

from .conftest import make_config

NOTIFY = 4.0            # the members' --experimental-watch-progress-notify-interval, seconds
SLOW_POLL = {"poll_interval": 5.0, "lease_ttl": 6, "sick_polls": 3, "healthy_polls": 1}


def reopened(d: Daemon, watch: str) -> float:
    """``awide_watch_reopened_total{watch=...}`` as the daemon's /metrics shows it."""
    for fam in text_string_to_metric_families(d.metrics.exposition().decode()):
        for s in fam.samples:
            if s.name == "awide_watch_reopened_total" and s.labels.get("watch") == watch:
                return s.value
    raise AssertionError(f"no awide_watch_reopened_total{{watch={watch!r}}}")


@pytest.fixture(scope="module")
def slow_etcd(etcd_binaries, tmp_path_factory):
    binary = next(iter(etcd_binaries.values()))
    with EtcdCluster(tmp_path_factory.mktemp("etcd-notify4"), binary=binary, stop_timeout=0.5,
                     progress_notify_interval=NOTIFY) as c:
        yield c


async def test_an_idle_leader_watch_outlives_slow_progress_notifications(slow_etcd,
                                                                         cluster_name):
    a = Daemon(make_config(slow_etcd, cluster_name, "h1",
                           timing=dict(FAST, etcd_progress_notify=NOTIFY)))
    b = Daemon(make_config(slow_etcd, cluster_name, "h2",
                           timing=dict(SLOW_POLL, etcd_progress_notify=NOTIFY)))
    control = Daemon(make_config(slow_etcd, cluster_name, "h3",
                                 timing=dict(SLOW_POLL, etcd_progress_notify=1.0)))
    assert b.config.timing.leader_watch_stall == 3 * NOTIFY
    assert control.config.timing.leader_watch_stall == 3.0 < NOTIFY
    stopped = []
    try:
        await a.start()
        await wait_until(lambda: a.is_leader, what="h1 leads")
        for d in (b, control):
            await d.start()
            await wait_until(lambda d=d: d.turns >= 1 and d.lease.valid(),
                           what=f"{d.config.host} made its first turn")
            assert not d.leadership.has_key
        # the control's watch, silent for 3 s each time before etcd's first notification
        # at 4 s, is re-opened again and again: three times is over 9 s of watching, at
        # least two of the members' notifications
        await wait_until(lambda: control.leader_watch_reopens >= 3, timeout=3 * NOTIFY + 3,
                       what="the control re-opened its leader watch three times")
        assert b.leader_watch_reopens == 0
        assert a.leader_watch_reopens == 0
        # the leader's members/ watch, fed by every report, keeps its 1 s bound and its stream
        assert a.config.timing.reports_watch_stall == 1.0 and a.reports_watch_reopens == 0
        assert reopened(b, "leader") == 0 and reopened(control, "leader") >= 3
        assert reopened(a, "members") == 0
        await control.stop()
        stopped.append(control)
        # the watch kept open hands the key over on a clean stop, not at b's next poll
        a.request_stop()                    # SIGTERM: the turn ends, the lease is revoked
        await a.stop()
        stopped.append(a)
        await wait_until(lambda: b.is_leader, timeout=1.0, what="h2 leads after h1's stop")
        assert bound(1.0) < SLOW_POLL["poll_interval"]
        assert b.key_wins == 1              # won on the watch event
        assert b.leader_watch_reopens == 0
    finally:
        for d in (a, b, control):
            if d not in stopped:
                await d.stop()


async def test_a_reload_of_the_interval_retunes_the_open_leader_watch(slow_etcd, cluster_name):
    """A follower told 1 s re-opens its watch every 3 s; a reload (SIGHUP) that
    says the members' interval stretches the bound of the watch already open: at most the
    wait under way when it came still ends in a re-opening."""
    a = Daemon(make_config(slow_etcd, cluster_name, "h1",
                           timing=dict(FAST, etcd_progress_notify=NOTIFY)))
    told_1s = dict(FAST, etcd_progress_notify=1.0)
    d = Daemon(make_config(slow_etcd, cluster_name, "h2", timing=told_1s))
    control = Daemon(make_config(slow_etcd, cluster_name, "h3", timing=told_1s))
    try:
        await a.start()
        await wait_until(lambda: a.is_leader, what="h1 leads")
        for f in (d, control):
            await f.start()
        await wait_until(lambda: d.leader_watch_reopens >= 1, timeout=NOTIFY + 3,
                       what="h2 re-opened its leader watch at the 3 s bound")
        d.request_reload(make_config(slow_etcd, cluster_name, "h2",
                                     timing=dict(FAST, etcd_progress_notify=NOTIFY)))
        await wait_until(lambda: d.config.timing.etcd_progress_notify == NOTIFY,
                       what="h2 applied the reload")
        assert d.leader_watch.watch is not None and d.leader_watch.watch.stall_after == 3 * NOTIFY
        reopened, seen = d.leader_watch_reopens, control.leader_watch_reopens
        await wait_until(lambda: control.leader_watch_reopens >= seen + 3,
                       timeout=3 * NOTIFY + 3,
                       what="the control re-opened its leader watch three more times")
        assert d.leader_watch_reopens <= reopened + 1
        assert not d.leadership.has_key and not control.leadership.has_key
    finally:
        for x in (a, d, control):
            await x.stop()


async def test_the_leaders_members_watch_leaves_a_frozen_member_within_its_bound(
        etcd, cluster_name):
    """A frozen member keeps the stream open and says nothing: the leader's ``members/``
    watch, fed by its own report each poll, is re-opened on another member after
    ``reports_watch_stall`` of silence (1 s here; 1.5 s at the default timing, under the 2 s
    after a fault at which a sick card's third report is due), not after the 3 s it took
    before, when the decisive report waited for the leader's next poll cycle."""
    d = Daemon(make_config(etcd, cluster_name, "h1", timing=FAST), serve_api=False)
    frozen: int | None = None
    try:
        await d.start()
        member = await wait_until(lambda: d.is_leader and d.reports_watch.watch is not None
                                  and d.reports_watch.watch.endpoint,
                                  what="the leader's members/ watch streaming")
        stall = d.config.timing.reports_watch_stall
        assert stall == 1.0
        before = d.reports_watch_reopens
        frozen = etcd.endpoints.index(member)
        etcd.freeze(frozen)

        def moved() -> bool:
            w = d.reports_watch.watch
            return (d.reports_watch_reopens > before and w is not None
                    and w.endpoint not in (None, member))
        await wait_until(moved, timeout=stall + 0.25,
                         what=f"the members/ watch moved off frozen {member}")
    finally:
        if frozen is not None:
            etcd.thaw(frozen)
        await d.stop()
        if frozen is not None:
            etcd.wait_healthy()
