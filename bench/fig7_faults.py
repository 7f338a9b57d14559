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
import gc
import threading
import time
import uuid
from dataclasses import dataclass, field
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


@dataclass
class HotPath:
    """The caller's calls of one window: wall and thread CPU time of each, and the cyclic GC
    passes the interpreter ran in the caller's thread meanwhile (a pass runs in whichever
    thread allocates when the counts cross a threshold, and a full one walks the whole
    process's heap): (generation, seconds, index of the call it ran in, -1: between calls)."""

    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    gc_passes: list[tuple[int, float, int]] = field(default_factory=list)
    view: Any = None

    def in_calls(self) -> set[int]:
        return {i for _, _, i in self.gc_passes if i >= 0}

    def summary(self) -> dict[str, Any]:
        """What the GC passes did to the window (the row's extra)."""
        hit = self.in_calls()
        clean = [w for i, w in enumerate(self.wall) if i not in hit]
        slowest = max(range(len(self.wall)), key=self.wall.__getitem__, default=-1)
        during = [(g, s) for g, s, i in self.gc_passes if i == slowest]
        return {
            "gc_passes": len(self.gc_passes),
            "gc_full_passes": sum(1 for g, _, _ in self.gc_passes if g == 2),
            "gc_longest_ms": ms(max((s for _, s, _ in self.gc_passes), default=0.0)),
            "calls_with_gc": len(hit),
            "max_without_gc_ms": ms(max(clean, default=0.0)),
            "slowest_call_gc": [{"generation": g, "ms": ms(s)} for g, s in during],
        }


def _hot_path(gw: ThreadedClusterGateway, seconds: float) -> HotPath:
    """snapshot() + placement.dialog() from this thread for ``seconds``: the wall time and the
    thread CPU time of each call, the GC passes run in this thread, and the last view."""
    out = HotPath()
    me = threading.get_ident()
    began: list[float] = []
    in_call = [-1]

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if threading.get_ident() != me:
            return
        if phase == "start":
            began[:] = [time.perf_counter()]
        elif began:
            out.gc_passes.append((int(info["generation"]), time.perf_counter() - began[0],
                                  in_call[0]))

    t_end = time.monotonic() + seconds
    n = 0
    out.view = gw.snapshot()
    gc.callbacks.append(on_gc)
    try:
        while time.monotonic() < t_end:
            c = time.thread_time()
            in_call[0] = n
            t = time.perf_counter()
            out.view = gw.snapshot()
            gw.placement.dialog(f"conversation-{n}")
            out.wall.append(time.perf_counter() - t)
            in_call[0] = -1
            out.cpu.append(time.thread_time() - c)
            n += 1
            if n % 16 == 0:
                time.sleep(0.001)       # not a wait: yields the GIL to the gateway's thread
    finally:
        gc.callbacks.remove(on_gc)
    return out


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
        healthy = _hot_path(gw, frozen_s).wall            # the same calls, etcd healthy
        for i in range(etcd.size):
            etcd.freeze(i)
        try:
            hot = _hot_path(gw, frozen_s)
            durations, cpu = hot.wall, hot.cpu
            during = len(hot.view.in_service)
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
                           f"gateway {'reported stale' if stale else 'not yet stale'}; "
                           + _gc_note(hot.summary()),
                      **hot.summary(), in_service_before=before, in_service_frozen=during,
                      stale=stale,
                      p999_ms=ms(pct(durations, 99.9)),
                      max_thread_cpu_ms=ms(max(cpu, default=0.0)),
                      healthy_calls=len(healthy), healthy_p99_ms=ms(pct(healthy, 99)))
    row.baseline = ms(max(healthy, default=0.0))
    if row.baseline and row.max is not None:
        row.ratio, row.ratio_of = round(row.max / row.baseline, 2), "frozen max / healthy max"
    row.met = bool(durations) and max(durations) < 0.001 and during == before
    return row


def _gc_note(g: dict[str, Any]) -> str:
    slowest = ", ".join(f"a generation-{p['generation']} pass of {p['ms']} ms"
                        for p in g["slowest_call_gc"]) or "no GC pass"
    return (f"cyclic GC passes in the caller's thread {g['gc_passes']} ({g['gc_full_passes']} "
            f"full, longest {g['gc_longest_ms']} ms), within {g['calls_with_gc']} calls; max of "
            f"the calls without one {g['max_without_gc_ms']} ms; the slowest call ran {slowest}")


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
