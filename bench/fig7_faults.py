"""Figure 7: bounded under faults.

One etcd member frozen (SIGSTOP): simulated gateways (``bench.pollers``, the library's own
``Follower.poll()``) that all list the frozen member first keep polling at 1 Hz; p99 and max
poll time over the frozen window. Two cases: a follower member frozen, and the raft leader
frozen (its polls wait for a new etcd leader; the etcd timers are the embedded cluster's).

All members frozen: a real ``ThreadedClusterGateway`` with 8 cards in service; the caller's
thread calls ``snapshot()`` and ``placement.dialog(tag)`` in a loop while etcd answers nothing;
max time of one call (goal < 1 ms), and whether the cards stayed in service ("unreachable is
not empty").
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from awide_gateway_cluster import ThreadedClusterGateway
from awide_harness.registry_writer import RegistryWriter
from awide_harness.waits import WaitTimeout, wait_until_sync
from bench.common import (
    WRITTEN_AT,
    Context,
    Row,
    etcd_cpu,
    etcd_settings,
    latency_row,
    make_dir_cards,
    ms,
    pct,
    start_etcd,
    store_for,
)
from bench.fleet import gateway_config
from bench.loadset import LoadSet, sleep_until


async def _publish(endpoints: tuple[str, ...], cluster: str, ctx: Context) -> None:
    store = store_for(endpoints, cluster)
    try:
        await RegistryWriter(store, cluster, make_dir_cards(ctx.work / "cards7", 8),
                             written_at=WRITTEN_AT).publish()
    finally:
        await store.close()


async def _raft_leader(endpoints: tuple[str, ...]) -> int | None:
    """Index of the member that is the raft leader (None if no member says)."""
    store = store_for(endpoints, "probe")
    try:
        st = await store.statuses(timeout=1.0)
    finally:
        await store.close()
    ids = {ep: s.member_id for ep, s in st.items() if not isinstance(s, Exception)}
    leaders = {s.leader for s in st.values() if not isinstance(s, Exception) and s.leader}
    for i, ep in enumerate(endpoints):
        if ids.get(ep) in leaders:
            return i
    return None


def _one_frozen(ctx: Context, etcd: Any, cluster: str, *, which: str, count: int,
                frozen_s: float) -> Row:
    leader = asyncio.run(_raft_leader(etcd.endpoints))
    if leader is None:
        return Row(7, f"one member frozen ({which})", None, "ms", 0,
                   note="not measured: no raft leader reported")
    victim = leader if which == "raft leader" else (leader + 1) % etcd.size
    eps = etcd.endpoints[victim:] + etcd.endpoints[:victim]   # every gateway lists it first
    load = LoadSet(eps, cluster, procs=2, log_dir=ctx.work / "logs", name=f"poll7{victim}-",
                   rotate=False)
    try:
        load.set(count, "follower")
        time.sleep(2.5)             # not a wait: the load runs a while before the window
        t0 = time.monotonic()
        c0, e0 = load.cpu(), etcd_cpu(etcd)
        etcd.freeze(victim)
        try:
            sleep_until(t0 + frozen_s)
        finally:
            t1 = time.monotonic()
            e1 = etcd_cpu(etcd)
            etcd.thaw(victim)
        win = load.window(t0, t1, c0)
    finally:
        load.close()
    etcd.wait_healthy()
    time.sleep(1.0)                 # not a wait: a quiet second between measurements
    lat = win.seconds
    p99, mx = pct(lat, 99), (max(lat) if lat else None)
    row = latency_row(7, f"one etcd member frozen ({which}, listed first): poll time", lat,
                      goal="p99 <= 100 ms and max <= 250 ms",
                      note=f"{count} pollers over {frozen_s:g} s; {win.failed} polls failed "
                           f"(kept the last good registry), {win.over} over 0.5 s",
                      pollers=count, frozen_s=frozen_s, failed=win.failed, over_bound=win.over,
                      frozen_member=victim, raft_leader=leader,
                      polls_made_of_due=round(win.polls / (count * (t1 - t0)), 3),
                      load_cpu_cores=round(win.load_cpu_s / (t1 - t0), 3),
                      etcd_cpu_cores=round((e1 - e0) / (t1 - t0), 3))
    row.met = p99 is not None and mx is not None and p99 <= 0.100 and mx <= 0.250
    return row


def _hot_path(gw: ThreadedClusterGateway, seconds: float
              ) -> tuple[list[float], list[float], Any]:
    """snapshot() + placement.dialog() from this thread for ``seconds``: the wall time and the
    thread CPU time of each call, and the last view."""
    wall: list[float] = []
    cpu: list[float] = []
    t_end = time.monotonic() + seconds
    n = 0
    view = gw.snapshot()
    while time.monotonic() < t_end:
        c = time.thread_time()
        t = time.perf_counter()
        view = gw.snapshot()
        gw.placement.dialog(f"conversation-{n}")
        wall.append(time.perf_counter() - t)
        cpu.append(time.thread_time() - c)
        n += 1
        if n % 16 == 0:
            time.sleep(0.001)       # not a wait: yields the GIL to the gateway's thread
    return wall, cpu, view


def _all_frozen(ctx: Context, etcd: Any, cluster: str, frozen_s: float) -> Row:
    cfg = gateway_config({"endpoints": list(etcd.endpoints), "cluster": cluster,
                          "watch": True, "poll_interval": 1.0, "call_timeout": 0.5}, 0)
    gw = ThreadedClusterGateway(cfg)
    gw.start()
    try:
        try:
            wait_until_sync(lambda: len(gw.snapshot().in_service) >= 8, 15.0,
                            "8 cards in service", poll=0.05)
        except WaitTimeout:
            pass                        # measured with what is in service (``before``)
        before = len(gw.snapshot().in_service)
        time.sleep(1.0)             # not a wait: a quiet second before measuring
        healthy, _, _ = _hot_path(gw, frozen_s)           # the same calls, etcd healthy
        for i in range(etcd.size):
            etcd.freeze(i)
        try:
            durations, cpu, view = _hot_path(gw, frozen_s)
            during = len(view.in_service)
            stale = gw.gateway.stats().stale
        finally:
            for i in range(etcd.size):
                etcd.thaw(i)
        etcd.wait_healthy()
    finally:
        gw.stop()
    row = latency_row(7, "all etcd members frozen: one snapshot()+placement call", durations,
                      stat="max", goal="max < 1 ms", goal_s=0.001,
                      note=f"{len(durations)} calls from the caller's thread over {frozen_s:g} s; "
                           f"max thread CPU of one call {ms(max(cpu, default=0.0))} ms; "
                           f"cards in service {before} before, {during} while frozen; "
                           f"gateway {'reported stale' if stale else 'not yet stale'}",
                      in_service_before=before, in_service_frozen=during, stale=stale,
                      p999_ms=ms(pct(durations, 99.9)),
                      max_thread_cpu_ms=ms(max(cpu, default=0.0)),
                      healthy_calls=len(healthy), healthy_p99_ms=ms(pct(healthy, 99)))
    row.baseline = ms(max(healthy, default=0.0))
    if row.baseline and row.max is not None:
        row.ratio, row.ratio_of = round(row.max / row.baseline, 2), "frozen max / healthy max"
    row.met = bool(durations) and max(durations) < 0.001 and during == before
    return row


def run(ctx: Context) -> list[Row]:
    count, frozen_s = (100, 2.0) if ctx.quick else (300, 8.0)
    etcd = start_etcd(ctx, "etcd7")
    cluster = f"flt{uuid.uuid4().hex[:6]}"
    rows: list[Row] = []
    try:
        asyncio.run(_publish(etcd.endpoints, cluster, ctx))
        for which in ("a follower", "raft leader"):
            rows.append(_one_frozen(ctx, etcd, cluster, which=which, count=count,
                                    frozen_s=frozen_s))
            ctx.say(f"  {rows[-1].name}: p99 {rows[-1].p99} ms max {rows[-1].max} ms; "
                    f"{rows[-1].note}")
        rows.append(_all_frozen(ctx, etcd, cluster, frozen_s))
        ctx.say(f"  {rows[-1].name}: max {rows[-1].max} ms; {rows[-1].note}")
        for r in rows:
            r.extra.setdefault("etcd", etcd_settings(etcd))
    finally:
        etcd.stop()
    return rows
