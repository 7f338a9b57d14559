"""Figure 9: a start storm of real gateway instances (``bench.storm``), as a rollout that
restarts every inference pod makes one.

Against a 3-member etcd with a registry of 8 directory cards: 50 gateways started calmly (over
5 s) and running, then 400 more started within 2 s, each at its own moment and in a task of its
own, spread over four processes (100 per process; the instances' own Python CPU, many per
process, is this box's first limit). Then a hold (20 s after the last start). ``--quick``:
20 running, 100 started within 2 s, a 12 s hold.
Reported, for the gateways as built and for the naive alternative side by side (the same
storm with the retry budget and every jitter off, on a fresh key prefix of the same etcd):

- failed registrations: the gateways without a ``gateways/<id>`` record at the end of the hold;
- gateways not fresh 5 s after their start (fresh: a registry applied, every card in service,
  the view not stale);
- key reads of the 50 running gateways over 500 ms (or failed) from the storm's first start to
  the end of the hold;
- extra hedged reads (requests beyond each read's first, every gateway);
- leases granted per gateway (etcd's lease list before and after) and layout writes per
  gateway (counted by each gateway's store);
- etcd CPU per start: the three members' CPU over the storm window (its first start to 8 s
  after its last) net of what the 50 running gateways cost before the storm, per start (an
  upper bound: the new gateways' own polls and watches in the window are in it);
- the time from the last start until the machine's CPU busy stays within 10 points of its
  steady load (the median of the hold's last 5 s); none when the machine is still saturated
  (>= 95 %) at the end of the hold.

Calibration in the same run: etcd idle CPU (no client), and etcd CPU with the 50 running.
"""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
import uuid
from typing import Any

from awide_cluster.contract import keys
from awide_harness.registry_writer import RegistryWriter
from bench.common import (
    WRITTEN_AT,
    Context,
    Row,
    cpu_ticks,
    etcd_cpu,
    etcd_settings,
    make_dir_cards,
    start_etcd,
    store_for,
)
from bench.proc import Worker, close_all

RUNNING, STORM, SPREAD, PROCS = 50, 400, 2.0, 4
FRESH_GOAL = 5.0
POLL_BOUND = 0.5
CPU_GOAL_MS = 5.0
STEADY_WITHIN_S = 10.0


async def _publish(endpoints: tuple[str, ...], cluster: str, ctx: Context) -> int:
    store = store_for(endpoints, cluster)
    try:
        w = RegistryWriter(store, cluster, make_dir_cards(ctx.work / "cards9", 8),
                           written_at=WRITTEN_AT)
        await w.publish()
        return len(w.cards)
    finally:
        await store.close()


async def _count(endpoints: tuple[str, ...], cluster: str) -> tuple[int, int]:
    """(gateway records of ``cluster``, leases etcd holds)."""
    store = store_for(endpoints, cluster, call_timeout=5.0)
    try:
        got = await store.range(keys.GATEWAYS, prefix=True, keys_only=True)
        _, answer = await store.read("/v3/lease/leases", {}, 5.0, "lease list")
        return len(got.kvs), len(answer.get("leases", []))
    finally:
        await store.close()


class Sampler:
    """Machine CPU busy and etcd CPU, sampled every 0.5 s in a thread of its own."""

    def __init__(self, etcd: Any) -> None:
        self.etcd = etcd
        self.samples: list[tuple[float, float, float]] = []   # (t, machine busy %, etcd s)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="fig9-sampler")
        self._thread.start()

    def _run(self) -> None:
        b0, t0 = cpu_ticks()
        while not self._stop.wait(0.5):
            b1, t1 = cpu_ticks()
            busy = 100.0 * (b1 - b0) / (t1 - t0) if t1 > t0 else 0.0
            self.samples.append((time.monotonic(), busy, etcd_cpu(self.etcd)))
            b0, t0 = b1, t1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5.0)

    def etcd_at(self, t: float) -> float:
        return min(self.samples, key=lambda s: abs(s[0] - t))[2]


def _spawn(ctx: Context, etcd: Any, cluster: str, *, count: int, first: int, total: int,
           spread: float, naive: bool, cards: int, name: str, id_base: int = 0) -> Worker:
    spec = {"id_base": id_base, "endpoints": list(etcd.endpoints), "cluster": cluster,
            "count": count,
            "first": first, "total": total, "spread": spread, "naive": naive,
            "watch": True, "poll_interval": 1.0, "call_timeout": 0.5, "expect_in": cards,
            "fresh_bound": 30.0}
    return Worker("bench.storm", spec, log_dir=ctx.work / "logs", name=name)


def _go(workers: list[Worker], lead: float) -> float:
    for w in workers:
        w.expect("built", 120.0)
    start_at = time.monotonic() + lead
    for w in workers:
        w.send({"cmd": "go", "start_at": start_at})
    return start_at


def _report(w: Worker, t0: float, t1: float) -> dict[str, Any]:
    w.send({"cmd": "report", "t0": t0, "t1": t1})
    return w.expect("report", 30.0)


def _storm(ctx: Context, etcd: Any, *, naive: bool, hold: float, running_n: int,
           storm_n: int) -> dict[str, Any]:
    cluster = f"s9{'n' if naive else 'b'}{uuid.uuid4().hex[:6]}"
    cards = asyncio.run(_publish(etcd.endpoints, cluster, ctx))
    _, leases0 = asyncio.run(_count(etcd.endpoints, cluster))
    arm = "naive" if naive else "built"
    workers: list[Worker] = []
    sampler = Sampler(etcd)
    try:
        running = _spawn(ctx, etcd, cluster, count=running_n, first=0, total=running_n, spread=5.0,
                         naive=naive, cards=cards, name=f"storm9-{arm}-run")
        workers.append(running)
        _go([running], 0.5)
        got = running.expect("started", 90.0)
        ctx.say(f"  [{arm}] {running_n} running: {sum(f is not None for f in got['fresh'])} "
                "fresh")
        time.sleep(3.0)             # not a wait: the running gateways settle
        e0, m0 = etcd_cpu(etcd), time.monotonic()
        time.sleep(4.0)             # not a wait: the 50 gateways' steady etcd CPU window
        rate50 = (etcd_cpu(etcd) - e0) / (time.monotonic() - m0)
        before = _report(running, 0.0, 0.0)
        per = [storm_n // PROCS + (1 if k < storm_n % PROCS else 0) for k in range(PROCS)]
        storm: list[Worker] = []
        first = 0
        for k, n in enumerate(per):
            storm.append(_spawn(ctx, etcd, cluster, count=n, first=first, total=storm_n,
                                spread=SPREAD, naive=naive, cards=cards,
                                name=f"storm9-{arm}-{k}", id_base=running_n))
            first += n
        workers.extend(storm)
        start_at = _go(storm, 1.0)
        last = start_at + SPREAD * (storm_n - 1) / storm_n
        starts = [w.expect("started", 120.0) for w in storm]
        end = last + hold
        time.sleep(max(0.0, end - time.monotonic()))    # not a wait: the hold
        after = _report(running, start_at, end)
        reports = [_report(w, 0.0, 0.0) for w in storm]
        records, leases1 = asyncio.run(_count(etcd.endpoints, cluster))
    finally:
        sampler.stop()
        close_all(workers, bound=20.0)
    sched = [s for r in starts for s in r["sched"]]
    fresh = [f for r in starts for f in r["fresh"]]
    not_fresh = sum(1 for s, f in zip(sched, fresh, strict=True)
                    if f is None or f - s > FRESH_GOAL)
    fresh_after = [f - s for s, f in zip(sched, fresh, strict=True) if f is not None]
    # etcd CPU of the starts: the storm window net of the running gateways' steady cost
    # before it; the new gateways' own running cost in the window is left in (an upper bound)
    samples = sampler.samples
    w_end = last + 8.0
    spent = sampler.etcd_at(w_end) - sampler.etcd_at(start_at)
    cpu_per_start_ms = max(0.0, spent - rate50 * (w_end - start_at)) / storm_n * 1000.0
    tail = [s for s in samples if s[0] >= end - 5.0]
    rate450 = ((tail[-1][2] - tail[0][2]) / (tail[-1][0] - tail[0][0])
               if len(tail) >= 2 else None)
    steady_busy = statistics.median([s[1] for s in tail] or [100.0])
    # back to steady: the machine's busy share stays within 10 points of the hold's last 5 s
    # from then on; a machine still saturated at the end (>= 95 %) never came back
    back = None
    if steady_busy < 95.0:
        after_last = [s for s in samples if s[0] >= last]
        for i, s in enumerate(after_last):
            if all(x[1] <= steady_busy + 10.0 for x in after_last[i:]):
                back = max(0.0, s[0] - 0.5 - last)
                break
    extra_running = after["extra"] - before["extra"]
    return {
        "failed_registrations": running_n + storm_n - records,
        "failed_starts": sum(r["failed_starts"] for r in starts),
        "not_fresh_5s": not_fresh,
        "fresh_p99_s": round(sorted(fresh_after)[int(0.99 * (len(fresh_after) - 1))], 3)
        if fresh_after else None,
        "running_reads": after["reads"], "running_reads_over_500ms": after["over"],
        "running_reads_failed": after["failed"],
        "extra_hedged_reads": extra_running + sum(r["extra"] for r in reports),
        "hedges_refused": sum(r["refused"] for r in reports),
        "reads_called": sum(r["calls"] for r in reports),
        "leases_per_gateway": round((leases1 - leases0) / (running_n + storm_n), 3),
        "grants_per_gateway": round(sum(r["grants"] for r in reports) / storm_n, 3),
        "layout_writes_per_gateway": round(sum(r["layout_writes"] for r in reports) / storm_n, 3),
        "registration_failures": sum(r["registration_failures"] for r in reports),
        "stale_at_end": sum(r["stale"] for r in reports) + after["stale"],
        "etcd_cpu_per_start_ms": round(cpu_per_start_ms, 2),
        "etcd_rate_50_cores": round(rate50, 4),
        "etcd_rate_450_cores": None if rate450 is None else round(rate450, 4),
        "steady_busy_pct": round(steady_busy, 1),
        "back_to_steady_s": None if back is None else round(back, 1),
        "busy_timeline_pct": [round(s[1], 1) for s in samples if s[0] >= start_at - 1.0],
    }


def run(ctx: Context) -> list[Row]:
    hold = 12.0 if ctx.quick else 20.0
    running_n, storm_n = (20, 100) if ctx.quick else (RUNNING, STORM)
    etcd = start_etcd(ctx, "etcd9")
    try:
        time.sleep(2.0)             # not a wait: a settled etcd before its idle window
        e0, t0 = etcd_cpu(etcd), time.monotonic()
        time.sleep(3.0)             # not a wait: etcd's idle CPU window
        idle = (etcd_cpu(etcd) - e0) / (time.monotonic() - t0)
        ctx.say(f"  etcd idle {idle:.4f} cores")
        built = _storm(ctx, etcd, naive=False, hold=hold, running_n=running_n,
                       storm_n=storm_n)
        ctx.say(f"  built: {built}")
        naive = _storm(ctx, etcd, naive=True, hold=hold, running_n=running_n,
                       storm_n=storm_n)
        ctx.say(f"  naive: {naive}")
        settings = etcd_settings(etcd)
    finally:
        etcd.stop()
    calib = {"etcd_idle_cores": round(idle, 4), "etcd": settings, "running": running_n,
             "storm": storm_n, "spread_s": SPREAD, "processes": PROCS, "hold_s": hold}

    def row(name: str, key: str, unit: str, goal: str = "",
            ok: Any = None, note: str = "") -> Row:
        v, b = built[key], naive[key]
        return Row(figure=9, name=name, value=v, unit=unit, runs=1, stat="value",
                   baseline=b, ratio=round(v / b, 3) if isinstance(v, (int, float)) and b
                   else None, ratio_of="built / naive (same storm, budget and jitter off)",
                   goal=goal, met=None if ok is None else bool(ok(v)), note=note,
                   extra={"calibration": calib, "built": built, "naive": naive})

    return [
        row("storm: failed registrations", "failed_registrations", "gateways", "0",
            lambda v: v == 0),
        row("storm: not fresh 5 s after start", "not_fresh_5s", "gateways", "0",
            lambda v: v == 0),
        row("storm: running gateways' reads over 500 ms or failed", "running_reads_over_500ms",
            "reads", "0", lambda v: v == 0 and built["running_reads_failed"] == 0,
            note=f"failed: {built['running_reads_failed']} (naive "
                 f"{naive['running_reads_failed']})"),
        row("storm: extra hedged reads", "extra_hedged_reads", "requests"),
        row("storm: leases granted per gateway", "leases_per_gateway", "leases", "1",
            lambda v: v <= 1.0),
        row("storm: layout writes per gateway", "layout_writes_per_gateway", "writes"),
        row("storm: etcd CPU per start", "etcd_cpu_per_start_ms", "ms", "<= 5 ms",
            lambda v: v <= CPU_GOAL_MS, note=f"etcd idle {idle:.4f} cores"),
        row("storm: back to steady load after the last start", "back_to_steady_s", "s",
            "<= 10 s", lambda v: v is not None and v <= STEADY_WITHIN_S,
            note=f"steady busy {built['steady_busy_pct']} % (naive "
                 f"{naive['steady_busy_pct']} %)"),
    ]
