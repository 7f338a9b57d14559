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


async def test_an_idle_leader_watch_outlives_slow_progress_notifications_and_a_reload_retunes_it(
        slow_etcd, cluster_name):
    """One scenario for both (each needs a control watching over 9 s): follower h2 told the
    members' interval never re-opens; the control h3 told 1 s re-opens every 3 s; h4, told
    1 s, re-opens at the 3 s bound, then a reload (SIGHUP) that says the members' interval
    stretches the bound of the watch already open: at most the wait under way when it came
    still ends in a re-opening. Then h1's clean stop hands the key to h2 on its watch."""
    a = Daemon(make_config(slow_etcd, cluster_name, "h1",
                           timing=dict(FAST, etcd_progress_notify=NOTIFY)))
    b = Daemon(make_config(slow_etcd, cluster_name, "h2",
                           timing=dict(SLOW_POLL, etcd_progress_notify=NOTIFY)))
    control = Daemon(make_config(slow_etcd, cluster_name, "h3",
                                 timing=dict(SLOW_POLL, etcd_progress_notify=1.0)))
    d = Daemon(make_config(slow_etcd, cluster_name, "h4",
                           timing=dict(FAST, etcd_progress_notify=1.0)))
    assert b.config.timing.leader_watch_stall == 3 * NOTIFY
    assert control.config.timing.leader_watch_stall == 3.0 < NOTIFY
    assert d.config.timing.leader_watch_stall == 3.0
    stopped = []
    try:
        await a.start()
        await wait_until(lambda: a.is_leader, what="h1 leads")
        for f in (b, control, d):
            await f.start()
            await wait_until(lambda f=f: f.turns >= 1 and f.lease.valid(),
                             what=f"{f.config.host} made its first turn")
            assert not f.leadership.has_key
        await wait_until(lambda: d.leader_watch_reopens >= 1, timeout=NOTIFY + 3,
                         what="h4 re-opened its leader watch at the 3 s bound")
        d.request_reload(make_config(slow_etcd, cluster_name, "h4",
                                     timing=dict(FAST, etcd_progress_notify=NOTIFY)))
        await wait_until(lambda: d.config.timing.etcd_progress_notify == NOTIFY,
                         what="h4 applied the reload")
        assert d.leader_watch.watch is not None and d.leader_watch.watch.stall_after == 3 * NOTIFY
        d_reopens, seen = d.leader_watch_reopens, control.leader_watch_reopens
        # the control's watch, silent for 3 s each time before etcd's first notification
        # at 4 s, is re-opened again and again: three times (after the reload) is over 9 s
        # of watching, at least two of the members' notifications
        await wait_until(lambda: control.leader_watch_reopens >= seen + 3,
                         timeout=3 * NOTIFY + 3,
                         what="the control re-opened its leader watch three more times")
        assert control.leader_watch_reopens >= 3
        assert d.leader_watch_reopens <= d_reopens + 1
        assert b.leader_watch_reopens == 0
        assert a.leader_watch_reopens == 0
        # the leader's members/ watch, fed by every report, keeps its 1 s bound and its stream
        assert a.config.timing.reports_watch_stall == 1.0 and a.reports_watch_reopens == 0
        assert reopened(b, "leader") == 0 and reopened(control, "leader") >= 3
        assert reopened(a, "members") == 0
        assert not d.leadership.has_key and not control.leadership.has_key
        for f in (control, d):          # h4 polls every 0.1 s: it would race h2 for the key
            await f.stop()
            stopped.append(f)
        # the watch kept open hands the key over on a clean stop, not at b's next poll
        a.request_stop()                    # SIGTERM: the turn ends, the lease is revoked
        await a.stop()
        stopped.append(a)
        await wait_until(lambda: b.is_leader, timeout=1.0, what="h2 leads after h1's stop")
        assert bound(1.0) < SLOW_POLL["poll_interval"]
        assert b.key_wins == 1              # won on the watch event
        assert b.leader_watch_reopens == 0
    finally:
        for x in (a, b, control, d):
            if x not in stopped:
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
        # created, not only being opened: a first open on a frozen member waits the whole
        # call timeout (a start storm must not multiply its opens) and is no stall
        member = await wait_until(lambda: d.is_leader and d.reports_watch.watch is not None
                                  and d.reports_watch.watch.streaming
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
