"""Figure 9: a start storm of real gateway instances (``bench.storm``), as a rollout that
restarts every inference pod makes one.

Against a 3-member etcd with a registry of 8 directory cards: 50 gateways started calmly (over
5 s) and running, then 400 more started within 2 s, each at its own moment and in a task of its
own, spread over four processes (100 per process; the instances' own Python CPU, many per
process, is this box's first limit). Then a hold (20 s after the last start). ``--quick``:
20 running, 100 started within 2 s, a 12 s hold.
Reported, for the gateways as built and for the naive alternative side by side (the same
storm with the retry budget and every jitter off, on a fresh key prefix of the same etcd).
Full run: three storms of each arm, the arms alternately (built, naive, built, ...), since one
storm's etcd CPU per start moves by more than a change to the start does: a count the goals
ask to be 0 of every storm (and the time back to steady) is read at the arm's worst storm;
etcd CPU per start at its median storm, each storm's beside it; the arm's other figures are
its median storm's own (``combine``). ``--quick``: one storm of each.

- failed registrations: the gateways without a ``gateways/<id>`` record at the end of the hold;
- gateways not fresh 5 s after their start (fresh: a registry applied, every card in service,
  the view not stale);
- key reads of the 50 running gateways over 500 ms (or failed) from the storm's first start to
  the end of the hold;
- extra hedged reads (requests beyond each read's first, every gateway);
- leases granted per gateway (etcd's lease list before and after) and layout writes per
  gateway (counted by each gateway's store);
- etcd CPU per start: the three members' CPU over the storm window (its first start to 8 s
  after its last) net of what the 50 running gateways cost before the storm (over 10 s) and
  of the new gateways' own steady cost once started (their rate in the hold's last 10 s, a
  whole cycle of linearizable polls, for the part of the window each ran), per start; the
  upper bound (the new gateways' running cost left in) beside it;
- the load generator: the gateway processes' own CPU in the same window, beside etcd's (on
  this box the instances' Python CPU, many per process, saturates the machine first: the
  bench must say whether it measured the system or its generator), and the requests each new
  gateway sent in its first 5 s, by kind (range linearizable/serializable, lease grant, put,
  keepalive, watch open; hedges included);
- the time from the last start until the machine's CPU busy stays within 10 points of its
  steady load (the median of the hold's last 5 s); none when the machine is still saturated
  (>= 95 %) at the end of the hold.

Full run only: a warm-up storm first (the naive kind, an 18 s hold), reported only by its etcd
CPU per start: the first storm on a fresh etcd costs it more per start than the ones after,
so neither arm pays for it. Full run only: the same with 1,000 gateways started within 5 s
(built only). Both runs:
etcd alone under the start mix, the C generator (``bench/leanload.c``) starting 2,000
simulated gateways over 10 s, each at its own moment as the storm's (5 every 25 ms;
``--quick``: 300 in 2 s): when all were started, and etcd's CPU per start net of idle and of
the started ones' steady cost (a simulated start as the library's: a connection, one
linearizable read-only transaction of the registry and the layout record, the lease grant,
the record put on the lease, the registry watch). Beside it (full run), the same starts in
20 batches of 100: etcd amortises a batch's requests (its raft proposals and reads), so a
batched replay costs it less per start than the same starts spread, and would flatter the
figure.

Calibration in the same run: etcd idle CPU (no client), and etcd CPU with the 50 running;
from the built storm, the box's cores, the load generator's CPU per start net of the running
gateways' share and per running gateway-second, and etcd's per running gateway-second (in
each row's ``extra.storm_calibration``: the bench's run calibration takes
``extra.calibration``). From these, one row per storm says how long the box needs for its
starts beside the running load, against the spread + 5 s the goals allow, and whether the
running load leaves room (under 90 % of the cores): when not, the goals are not expected to
hold on this box whatever the library does, and a miss measures its load generator's
saturation (on 2 cores the 1,000-in-5 s storm: 1,050 real gateways in Python, many per
process, need about the whole box just to run). It is an estimate, from costs measured at
the lighter load of the storm of 400: a storm near the line can still meet every goal (one
estimated at 10.8 s of the 10 did).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import threading
import time
import uuid
from typing import Any

from awide_cluster.contract import keys
from awide_harness.registry_writer import RegistryWriter
from bench import cgen
from bench.common import (
    WRITTEN_AT,
    Context,
    Row,
    cpu_seconds,
    cpu_ticks,
    etcd_cpu,
    etcd_idle_cores,
    etcd_settings,
    make_dir_cards,
    registry_revision,
    start_etcd,
    store_for,
)
from bench.loadset import LoadSet, sleep_until
from bench.proc import Worker, close_all

RUNNING, STORM, SPREAD, PROCS = 50, 400, 2.0, 4
PAIRS = 3                               # storms of each arm, alternately (full run)
BIG, BIG_SPREAD = 1000, 5.0             # the second storm (full run only)
REPLAY, REPLAY_SPREAD = 2000, 10.0      # etcd alone: the C generator's starts
# the replay's starts arrive as the storm's do, each at its own moment: this many a step (a
# step every 25 ms for 2,000 in 10 s); the batched replay beside it (full run) starts them in
# 20 batches of 100, which etcd's raft and its gRPC serving amortise (a lower cost per start
# than the same starts spread: the arrival shape is part of what a start costs etcd)
REPLAY_PER_STEP, REPLAY_BATCHES = 5, 20
FRESH_GOAL = 5.0
POLL_BOUND = 0.5
CPU_GOAL_MS = 5.0
STEADY_WITHIN_S = 10.0
# the running gateways' steady rates (etcd's, the generator's) are read over the hold's last
# this many seconds: a whole cycle of linearizable polls at the default interval (1 s, every
# 10th), so a storm whose gateways poll linearizably in step (the naive arm's, no phase) has
# each of them once in it, not once or not at all as in a shorter tail
RATE_TAIL = 10.0
WINDOW_AFTER = 8.0          # the storm window ends this long after the last start
# the warm-up storm's hold (full run only): its window, then its steady rates' tail
WARMUP_HOLD = WINDOW_AFTER + RATE_TAIL


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
    """Machine CPU busy, etcd CPU and the load generator's CPU (the gateway processes in
    ``pids``), sampled every 0.5 s in a thread of its own."""

    def __init__(self, etcd: Any) -> None:
        self.etcd = etcd
        self.pids: list[int] = []           # the generator's processes (added as spawned)
        # (t, machine busy %, etcd s, generator s by pid)
        self.samples: list[tuple[float, float, float, dict[int, float]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="fig9-sampler")
        self._thread.start()

    def _gen(self) -> dict[int, float]:
        out: dict[int, float] = {}
        for pid in list(self.pids):
            try:
                out[pid] = cpu_seconds(pid)
            except OSError:
                pass
        return out

    def _run(self) -> None:
        b0, t0 = cpu_ticks()
        while not self._stop.wait(0.5):
            b1, t1 = cpu_ticks()
            busy = 100.0 * (b1 - b0) / (t1 - t0) if t1 > t0 else 0.0
            self.samples.append((time.monotonic(), busy, etcd_cpu(self.etcd), self._gen()))
            b0, t0 = b1, t1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5.0)

    def _at(self, t: float) -> tuple[float, float, float, dict[int, float]]:
        return min(self.samples, key=lambda s: abs(s[0] - t))

    def etcd_at(self, t: float) -> float:
        return self._at(t)[2]

    def generator_between(self, t0: float, t1: float) -> float:
        """CPU seconds the generator's processes spent between two sample times."""
        a, b = self._at(t0)[3], self._at(t1)[3]
        return sum(b[pid] - a.get(pid, b[pid]) for pid in b)


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
    w.send({"cmd": "report", "t0": t0, "t1": t1, "span": FRESH_GOAL})
    return w.expect("report", 60.0)


def _storm(ctx: Context, etcd: Any, *, naive: bool, hold: float, running_n: int,
           storm_n: int, spread: float = SPREAD, procs: int = PROCS) -> dict[str, Any]:
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
        sampler.pids.append(running.pid)
        _go([running], 0.5)
        got = running.expect("started", 90.0)
        ctx.say(f"  [{arm}] {running_n} running: {sum(f is not None for f in got['fresh'])} "
                "fresh")
        time.sleep(3.0)             # not a wait: the running gateways settle
        e0, m0 = etcd_cpu(etcd), time.monotonic()
        time.sleep(RATE_TAIL)       # not a wait: the 50 gateways' steady etcd CPU window
        rate50 = (etcd_cpu(etcd) - e0) / (time.monotonic() - m0)
        before = _report(running, 0.0, 0.0)
        per = [storm_n // procs + (1 if k < storm_n % procs else 0) for k in range(procs)]
        storm: list[Worker] = []
        first = 0
        for k, n in enumerate(per):
            storm.append(_spawn(ctx, etcd, cluster, count=n, first=first, total=storm_n,
                                spread=spread, naive=naive, cards=cards,
                                name=f"storm9-{arm}-{k}", id_base=running_n))
            first += n
        workers.extend(storm)
        sampler.pids.extend(w.pid for w in storm)
        start_at = _go(storm, 1.0)
        last = start_at + spread * (storm_n - 1) / storm_n
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
    w_end = last + WINDOW_AFTER
    span = w_end - start_at
    spent = sampler.etcd_at(w_end) - sampler.etcd_at(start_at)
    upper_ms = max(0.0, spent - rate50 * span) / storm_n * 1000.0
    tail = [s for s in samples if s[0] >= end - 5.0]
    # the steady rates over the hold's last RATE_TAIL seconds (never within the window)
    steady = [s for s in samples if s[0] >= max(w_end, end - RATE_TAIL)]
    rate450 = ((steady[-1][2] - steady[0][2]) / (steady[-1][0] - steady[0][0])
               if len(steady) >= 2 else None)
    # net of the new gateways' own steady cost in the window too (their polls, watches and
    # keepalives once started, at the rate the hold's last RATE_TAIL s show per gateway):
    # what the starts themselves cost etcd
    per_new = max(0.0, (rate450 or rate50) - rate50) / storm_n
    running_new = per_new * sum(max(0.0, w_end - s) for s in sched)
    cpu_per_start_ms = max(0.0, spent - rate50 * span - running_new) / storm_n * 1000.0
    # the load generator: the gateway processes' own CPU over the same window
    gen_s = sampler.generator_between(start_at, w_end)
    # its steady rate per running gateway (as etcd's), and what the starts cost it net of
    # that (the running gateways' share of the window taken out, as for etcd)
    gen_each = (sampler.generator_between(steady[0][0], steady[-1][0])
                / (steady[-1][0] - steady[0][0]) / (running_n + storm_n)
                ) if len(steady) >= 2 else 0.0
    gen_run_s = gen_each * (running_n * span + sum(max(0.0, w_end - s) for s in sched))
    gen_start_ms = max(0.0, gen_s - gen_run_s) / storm_n * 1000.0
    storm_busy = [s[1] for s in samples if start_at <= s[0] <= last + 5.0]
    mix: dict[str, int] = {}
    for r in reports:
        for kind, n in r["start_mix"].items():
            mix[kind] = mix.get(kind, 0) + n
    steady_busy = statistics.median([s[1] for s in tail] or [100.0])
    series = [(s[0], s[1]) for s in samples]
    back = back_to_steady(series, last, end - 5.0)
    back_raw = back_to_steady(series, last, end - 5.0, average=1)
    extra_running = after["extra"] - before["extra"]
    return {
        "storm_n": storm_n,
        "failed_registrations": running_n + storm_n - records,
        "failed_starts": sum(r["failed_starts"] for r in starts),
        "not_fresh_5s": not_fresh,
        "fresh_p99_s": round(sorted(fresh_after)[int(0.99 * (len(fresh_after) - 1))], 3)
        if fresh_after else None,
        "running_reads": after["reads"], "running_reads_over_500ms": after["over"],
        "running_reads_failed": after["failed"],
        "extra_hedged_reads": extra_running + sum(r["extra"] for r in reports),
        "hedges_refused": sum(r["refused"] for r in reports),
        "hedges_deferred_client_late": sum(r["deferred"] for r in reports),
        "reads_called": sum(r["calls"] for r in reports),
        "leases_per_gateway": round((leases1 - leases0) / (running_n + storm_n), 3),
        "grants_per_gateway": round(sum(r["grants"] for r in reports) / storm_n, 3),
        "layout_writes_per_gateway": round(sum(r["layout_writes"] for r in reports) / storm_n, 3),
        "registration_failures": sum(r["registration_failures"] for r in reports),
        "stale_at_end": sum(r["stale"] for r in reports) + after["stale"],
        "etcd_cpu_per_start_ms": round(cpu_per_start_ms, 2),
        "etcd_cpu_per_start_upper_ms": round(upper_ms, 2),
        "window_s": round(span, 2),
        "etcd_cores_in_window": round(spent / span, 3),
        "generator_cores_in_window": round(gen_s / span, 3),
        "generator_cpu_per_start_ms": round(gen_s / storm_n * 1000.0, 2),
        "generator_start_cpu_ms": round(gen_start_ms, 2),
        "generator_ms_per_gateway_second": round(gen_each * 1000.0, 3),
        "etcd_ms_per_gateway_second": None if rate450 is None else round(
            max(0.0, rate450 - rate50) / storm_n * 1000.0, 3),
        "cores": os.cpu_count(),
        "machine_busy_storm_median_pct": round(statistics.median(storm_busy), 1)
        if storm_busy else None,
        "requests_per_start_first_5s": {k: round(v / storm_n, 3) for k, v in sorted(mix.items())},
        "watch_restarts": sum(r["watch_restarts"] for r in reports),
        "etcd_rate_50_cores": round(rate50, 4),
        "etcd_rate_450_cores": None if rate450 is None else round(rate450, 4),
        "steady_busy_pct": round(steady_busy, 1),
        "back_to_steady_s": None if back is None else round(back, 1),
        "back_to_steady_single_samples_s": None if back_raw is None else round(back_raw, 1),
        "busy_timeline_pct": [round(s[1], 1) for s in samples if s[0] >= start_at - 1.0],
    }


def back_to_steady(series: list[tuple[float, float]], last: float, tail_from: float, *,
                   average: int = 2, within: float = 10.0, period: float = 0.5) -> float | None:
    """Seconds from ``last`` (the last start) until the machine's busy share (``series``:
    (time, % busy) every ``period`` s) stays within ``within`` points of its steady load for
    good: the median from ``tail_from`` on (the hold's last 5 s), each sample averaged with
    the ``average - 1`` before it (1 s by default: one 0.5 s sample of a garbage collection
    or a timer is not a load). None when the machine never came back, or had no steady load
    to come back to: still saturated at the end (>= 95 %), or the tail itself not steady
    (its averaged samples over 20 points apart: the storm's starts still running). Pure."""
    smooth = [(t, sum(b for _, b in series[max(0, i - average + 1):i + 1])
               / len(series[max(0, i - average + 1):i + 1])) for i, (t, _) in enumerate(series)]
    tail = [b for t, b in smooth if t >= tail_from]
    if not tail:
        return None
    steady = statistics.median(tail)
    if steady >= 95.0 or max(tail) - min(tail) > 2 * within:
        return None
    after = [(t, b) for t, b in smooth if t >= last]
    for i, (t, _) in enumerate(after):
        if all(b <= steady + within for _, b in after[i:]):
            return max(0.0, t - period - last)
    return None


# an arm's reading over several storms (the same arm, the same etcd, one after another):
# what each goal asks of every storm is read at its worst storm; the rest is the median
# storm's own (the one whose etcd CPU per start is the median), so every other figure of
# the arm is one storm's, never a mix of several
WORST = ("failed_registrations", "failed_starts", "not_fresh_5s", "fresh_p99_s",
         "running_reads_over_500ms", "running_reads_failed", "leases_per_gateway",
         "grants_per_gateway", "layout_writes_per_gateway", "registration_failures",
         "stale_at_end", "watch_restarts", "back_to_steady_s",
         "back_to_steady_single_samples_s")
# where a storm's value None means "never" (back to steady), the worst is None
NONE_IS_WORST = ("back_to_steady_s", "back_to_steady_single_samples_s")


def combine(storms: list[dict[str, Any]]) -> dict[str, Any]:
    """One arm's reading from its storms (at least one): the median storm (by etcd CPU per
    start; the lower middle one of an even count) with each ``WORST`` key at its worst over
    all the storms, and each storm's etcd CPU per start, in order, under
    ``etcd_cpu_per_start_each_ms``. Pure."""
    if not storms:
        raise ValueError("combine: no storm")
    order = sorted(range(len(storms)), key=lambda i: storms[i]["etcd_cpu_per_start_ms"])
    out = dict(storms[order[(len(storms) - 1) // 2]])
    for key in WORST:
        got = [s[key] for s in storms]
        if key in NONE_IS_WORST and any(v is None for v in got):
            out[key] = None
        else:
            vals = [v for v in got if v is not None]
            out[key] = max(vals) if vals else None
    out["storms"] = len(storms)
    out["etcd_cpu_per_start_each_ms"] = [s["etcd_cpu_per_start_ms"] for s in storms]
    return out


def _replay(ctx: Context, etcd: Any, idle: float, *, starts: int, spread: float,
            steps: int, hold: float = 5.0) -> dict[str, Any]:
    """etcd alone under the start mix: the C generator (``bench/leanload.c``) starts
    ``starts`` simulated gateways in ``steps`` equal batches over ``spread`` seconds (each
    start as the library's: a connection, a linearizable read of the registry and a
    serializable one in the layout read's stead, a lease grant, the gateway record put on
    the lease, the registry watch opened, then the registry polls and keepalives of the
    mix), then ``hold`` seconds.
    The Python generator (no C compiler) ignores ``record_prefix``: its starts are a grant
    and a watch."""
    cluster = f"s9c{uuid.uuid4().hex[:6]}"
    asyncio.run(_publish(etcd.endpoints, cluster, ctx))
    rev = asyncio.run(registry_revision(etcd.endpoints, cluster))
    gen = cgen.choose(ctx.work / "cgen")
    load = LoadSet(etcd.endpoints, cluster, procs=2, log_dir=ctx.work / "logs",
                   name="replay9-", module="bench.leanload", seed=ctx.seed,
                   extra={**cgen.spec(cluster, rev),
                          "record_prefix": keys.prefix(cluster) + keys.GATEWAYS},
                   program=gen.program)
    try:
        load.mark()
        cpu0 = load.cpu()
        t0 = time.monotonic() + 0.5
        e0 = etcd_cpu(etcd)
        set_at: list[tuple[float, int]] = []
        for i in range(1, steps + 1):
            sleep_until(t0 + (i - 1) * spread / steps)
            before = load.count
            load.set(starts * i // steps, "mix")
            set_at.append((time.monotonic(), load.count - before))
        done = time.monotonic()
        e_done = etcd_cpu(etcd)
        sleep_until(done + hold)
        e1, t1 = etcd_cpu(etcd), time.monotonic()
        win = load.window(t0, t1, cpu0)
    finally:
        load.close()
    steady = (e1 - e_done) / (t1 - done)        # the started gateways' steady rate, + idle
    per_gw = max(0.0, steady - idle) / starts
    running = per_gw * sum(n * max(0.0, done - t) for t, n in set_at)
    start_cost = max(0.0, (e_done - e0) - idle * (done - t0) - running)
    return {"starts": starts, "spread_s": spread, "generator": gen.name,
            "all_started_after_s": round(done - t0, 2),
            "etcd_cpu_per_start_ms": round(start_cost / starts * 1000.0, 3),
            "etcd_cores_while_starting": round((e_done - e0) / (done - t0), 3),
            "etcd_steady_cores_after": round(steady, 3),
            "polls": win.polls, "polls_failed": win.failed, "polls_over_500ms": win.over,
            "generator_cores": round(win.load_cpu_s / (t1 - t0), 3)}


def run(ctx: Context) -> list[Row]:
    hold = 12.0 if ctx.quick else 20.0
    running_n, storm_n = (20, 100) if ctx.quick else (RUNNING, STORM)
    etcd = start_etcd(ctx, "etcd9")
    try:
        idle = etcd_idle_cores(etcd)
        ctx.say(f"  etcd idle {idle:.4f} cores")
        warmup: dict[str, Any] | None = None
        if not ctx.quick:
            # the first storm on a fresh etcd costs it more per start than the ones after
            # (measured with the arms in both orders: bench/HISTORY.md); a storm first, not
            # reported but for its etcd CPU per start, so that neither arm pays for it
            warmup = _storm(ctx, etcd, naive=True, hold=WARMUP_HOLD, running_n=running_n,
                            storm_n=storm_n)
            ctx.say(f"  warm-up storm: etcd CPU per start {warmup['etcd_cpu_per_start_ms']} ms")
        # the arms alternately, a storm each in turn: one storm's etcd CPU per start moves
        # by more than a change to the start does (bench/HISTORY.md)
        built_each: list[dict[str, Any]] = []
        naive_each: list[dict[str, Any]] = []
        for k in range(1 if ctx.quick else PAIRS):
            built_each.append(_storm(ctx, etcd, naive=False, hold=hold, running_n=running_n,
                                     storm_n=storm_n))
            ctx.say(f"  built {k + 1}: {built_each[-1]}")
            naive_each.append(_storm(ctx, etcd, naive=True, hold=hold, running_n=running_n,
                                     storm_n=storm_n))
            ctx.say(f"  naive {k + 1}: {naive_each[-1]}")
        built, naive = combine(built_each), combine(naive_each)
        big: dict[str, Any] | None = None
        if not ctx.quick:       # 1,000 within 5 s beside the same running ones (built only)
            big = _storm(ctx, etcd, naive=False, hold=hold, running_n=running_n,
                         storm_n=BIG, spread=BIG_SPREAD, procs=PROCS)
            ctx.say(f"  built, {BIG} in {BIG_SPREAD:g} s: {big}")
        r_starts, r_spread = (300, 2.0) if ctx.quick else (REPLAY, REPLAY_SPREAD)
        replay = _replay(ctx, etcd, idle, starts=r_starts, spread=r_spread,
                         steps=r_starts // REPLAY_PER_STEP)
        ctx.say(f"  C generator start-mix replay, each start at its own moment: {replay}")
        batched: dict[str, Any] | None = None
        if not ctx.quick:
            batched = _replay(ctx, etcd, idle, starts=r_starts, spread=r_spread,
                              steps=REPLAY_BATCHES)
            ctx.say(f"  C generator start-mix replay, {REPLAY_BATCHES} batches: {batched}")
        settings = etcd_settings(etcd)
    finally:
        etcd.stop()
    calib = {"etcd_idle_cores": round(idle, 4), "etcd": settings, "running": running_n,
             "storm": storm_n, "spread_s": SPREAD, "processes": PROCS, "hold_s": hold,
             "warmup_storm": None if warmup is None else {
                 k: warmup[k] for k in ("etcd_cpu_per_start_ms", "etcd_cpu_per_start_upper_ms",
                                        "machine_busy_storm_median_pct", "not_fresh_5s")},
             **generator_calibration(built, idle, running_n, replay)}

    pairs = built["storms"]

    def row(name: str, key: str, unit: str, goal: str = "",
            ok: Any = None, note: str = "") -> Row:
        v, b = built[key], naive[key]
        stat = "value" if pairs == 1 else "max" if key in WORST else "median"
        each = {} if key != "etcd_cpu_per_start_ms" else {
            "median": v, "max": max(built["etcd_cpu_per_start_each_ms"])}
        storms = {} if key != "etcd_cpu_per_start_ms" else {
            "built_storms": built_each, "naive_storms": naive_each}
        return Row(figure=9, name=name, value=v, unit=unit, runs=pairs, stat=stat,
                   baseline=b, ratio=round(v / b, 3) if isinstance(v, (int, float)) and b
                   else None, ratio_of="built / naive (same storms, budget and jitter off)",
                   goal=goal, met=None if ok is None else bool(ok(v)), note=note,
                   extra={"calibration": calib, "storm_calibration": calib, "built": built,
                          "naive": naive, **storms}, **each)

    rows = [
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
            lambda v: v <= CPU_GOAL_MS,
            note=f"net of the running gateways' steady cost, the new ones' included; upper "
                 f"bound (new ones' steady cost left in) {built['etcd_cpu_per_start_upper_ms']}"
                 f" ms; etcd idle {idle:.4f} cores"
                 + f"; each storm's: built {built['etcd_cpu_per_start_each_ms']}, naive "
                 f"{naive['etcd_cpu_per_start_each_ms']} ms, the arms alternately"
                 + ("" if warmup is None else "; after a warm-up storm on the same etcd "
                    f"(its own: {warmup['etcd_cpu_per_start_ms']} ms)")),
        row("storm: load generator (gateway processes) CPU in the storm window",
            "generator_cores_in_window", "cores",
            note=f"etcd {built['etcd_cores_in_window']} cores in the same "
                 f"{built['window_s']} s; machine busy median "
                 f"{built['machine_busy_storm_median_pct']} %; the generator's CPU per start "
                 f"{built['generator_cpu_per_start_ms']} ms"),
        row("storm: back to steady load after the last start", "back_to_steady_s", "s",
            "<= 10 s", lambda v: v is not None and v <= STEADY_WITHIN_S,
            note=f"steady busy {built['steady_busy_pct']} % (naive "
                 f"{naive['steady_busy_pct']} %)"),
    ]
    rows.append(_demand_row(calib, running_n, storm_n, SPREAD, {"calibration": calib,
                                                                "storm_calibration": calib}))
    rep = {"calibration": calib, "storm_calibration": calib, "replay": replay,
           "replay_batched": batched}
    rows.append(Row(
        figure=9, name=f"storm, etcd alone (C generator): {replay['starts']} starts, all "
        "started after", value=replay["all_started_after_s"], unit="s", runs=1, stat="value",
        baseline=replay["spread_s"], ratio=round(replay["all_started_after_s"]
                                                 / replay["spread_s"], 3),
        ratio_of="time taken / time asked", goal=f"<= {replay['spread_s']:g} s (+ 10 %)",
        met=replay["all_started_after_s"] <= 1.1 * replay["spread_s"]
        and replay["polls_failed"] == 0,
        note=f"{replay['generator']} generator; polls failed {replay['polls_failed']}, over "
             f"500 ms {replay['polls_over_500ms']} of {replay['polls']}", extra=rep))
    b_ms = batched["etcd_cpu_per_start_ms"] if batched is not None else None
    rows.append(Row(
        figure=9, name="storm, etcd alone (C generator): etcd CPU per start",
        value=replay["etcd_cpu_per_start_ms"], unit="ms", runs=1, stat="value",
        baseline=b_ms, ratio=round(replay["etcd_cpu_per_start_ms"] / b_ms, 3) if b_ms else None,
        ratio_of=f"starts at their own moments / the same starts in {REPLAY_BATCHES} batches",
        goal="<= 5 ms", met=replay["etcd_cpu_per_start_ms"] <= CPU_GOAL_MS,
        note=f"{REPLAY_PER_STEP} starts every {r_spread / (r_starts // REPLAY_PER_STEP) * 1000:g} "
             "ms (batched beside it: "
             f"{'-' if b_ms is None else b_ms} ms); a start: connection, a linearizable and a "
             "serializable read, lease grant, record put, watch opened; net of idle and of the "
             "started gateways' steady cost", extra=rep))
    if big is not None:
        big_calib = {**calib, "storm": BIG, "spread_s": BIG_SPREAD}
        ext = {"calibration": big_calib, "storm_calibration": big_calib, "built": big}
        rows.append(_demand_row(calib, running_n, BIG, BIG_SPREAD, ext))
        for name, key, unit, goal, ok in (
                ("failed registrations", "failed_registrations", "gateways", "0",
                 lambda v: v == 0),
                ("not fresh 5 s after start", "not_fresh_5s", "gateways", "0",
                 lambda v: v == 0),
                ("running gateways' reads over 500 ms or failed",
                 "running_reads_over_500ms", "reads", "0",
                 lambda v: v == 0 and big["running_reads_failed"] == 0),
                ("back to steady load after the last start", "back_to_steady_s", "s",
                 "<= 10 s", lambda v: v is not None and v <= STEADY_WITHIN_S)):
            rows.append(Row(
                figure=9, name=f"storm {BIG} in {BIG_SPREAD:g} s: {name}", value=big[key],
                unit=unit, runs=1, stat="value", goal=goal, met=bool(ok(big[key])),
                note=f"load generator {big['generator_cores_in_window']} cores, etcd "
                     f"{big['etcd_cores_in_window']} cores in the storm window; "
                     f"{_demand_note(calib, running_n, BIG, BIG_SPREAD)}",
                extra=ext))
    return rows


def generator_calibration(built: dict[str, Any], idle: float, running: int,
                          replay: dict[str, Any] | None = None) -> dict[str, Any]:
    """What the box gives and what a real gateway costs on it: the cores; from the built
    storm, the load generator's (the storm processes') CPU per start net of the running
    gateways' cost, and per running gateway-second, and etcd's per running gateway-second;
    etcd's CPU per start from the C generator's replay of the start mix (``replay``), what a
    start asks of etcd when its client keeps up. Not the storm's own etcd CPU per start: that
    is an outcome of the storm (a saturated storm's clients time out and send again), and a
    calibration taken from it would call the box too small for exactly the storms the
    library handles worst. Without a replay, the storm's own figure."""
    storm_etcd = built["etcd_cpu_per_start_ms"]
    etcd_start = replay["etcd_cpu_per_start_ms"] if replay is not None else storm_etcd
    return {"cores": os.cpu_count(), "etcd_idle_cores": round(idle, 4),
            "generator_start_cpu_ms": built["generator_start_cpu_ms"],
            "generator_ms_per_gateway_second": built["generator_ms_per_gateway_second"],
            "etcd_ms_per_gateway_second": built["etcd_ms_per_gateway_second"] or 0.0,
            "etcd_cpu_per_start_ms": etcd_start,
            "etcd_cpu_per_start_from": "the C replay of the start mix" if replay is not None
            else "the built storm",
            "storm_etcd_cpu_per_start_ms": storm_etcd,
            "calibrated_on": f"{running} running + {built.get('storm_n', '?')} started",
            # a hold that kept the machine saturated did less than its steady work: the
            # costs above are then lower bounds
            "calibration_saturated": built["steady_busy_pct"] >= 95.0}


def demand(cal: dict[str, Any], running: int, n: int) -> tuple[float, float, float | None]:
    """At the calibrated costs: (the core-seconds the ``n`` starts cost, generator and etcd;
    the cores every gateway needs once all run, etcd's idle included; the seconds of the
    whole box the starts take beside that running load, None when it leaves no core spare).
    The goals ask every start fresh within ``FRESH_GOAL`` of it: when the box needs longer
    than the spread and that for the starts, the goals are not expected to hold on it,
    whatever the library does (an estimate: near the line the storm can still meet them)."""
    each = (cal["generator_ms_per_gateway_second"] + cal["etcd_ms_per_gateway_second"]) / 1000
    hold = cal["etcd_idle_cores"] + (running + n) * each
    work = n * (cal["generator_start_cpu_ms"] + cal["etcd_cpu_per_start_ms"]) / 1000
    spare = (cal["cores"] or 0) - hold
    return work, hold, (work / spare if spare > 0.05 else None)


def _feasible(cal: dict[str, Any], running: int, n: int, spread: float) -> bool:
    _, hold, absorb = demand(cal, running, n)
    return absorb is not None and absorb <= spread + FRESH_GOAL and hold < 0.9 * (cal["cores"]
                                                                                 or 0)


def _demand_note(cal: dict[str, Any], running: int, n: int, spread: float) -> str:
    work, hold, absorb = demand(cal, running, n)
    verdict = ("within this box" if _feasible(cal, running, n, spread) else
               "more than this box has, by this estimate: the goals are not expected to hold "
               "here, whatever the library does, and a miss measures its load generator's "
               "saturation")
    took = "never (no core spare)" if absorb is None else f"{absorb:.1f} s"
    return (f"calibration: generator {cal['generator_start_cpu_ms']} ms per start and "
            f"{cal['generator_ms_per_gateway_second']} ms per gateway-second, etcd "
            f"{cal['etcd_cpu_per_start_ms']} ms per start "
            f"({cal.get('etcd_cpu_per_start_from', 'the built storm')}) and "
            f"{cal['etcd_ms_per_gateway_second']} ms per gateway-second, {cal['cores']} "
            f"cores: the {n} starts cost {work:.1f} core-s, the {running + n} gateways need "
            f"{hold:.2f} cores once running, the starts take {took} of the box beside them "
            f"(goal: within the {spread:g} s spread + {FRESH_GOAL:g} s): {verdict}"
            + ("; the calibrating storm's hold was itself saturated: these costs are lower "
               "bounds" if cal.get("calibration_saturated") else "")
            + ("; the generator's start cost is not separable from its running cost (the "
               "storm window was saturated: it did less than the running gateways' steady "
               "work), counted as 0" if not cal["generator_start_cpu_ms"] else ""))


def _demand_row(cal: dict[str, Any], running: int, n: int, spread: float,
                extra: dict[str, Any]) -> Row:
    _, hold, absorb = demand(cal, running, n)
    return Row(figure=9, name=f"storm {n} in {spread:g} s: time the box needs for its starts "
               "(calibration)", value=None if absorb is None else round(absorb, 2), unit="s",
               runs=1, stat="value", baseline=spread + FRESH_GOAL,
               ratio=None if absorb is None else round(absorb / (spread + FRESH_GOAL), 3),
               ratio_of="seconds the starts take beside the running load / spread + 5 s",
               goal=f"<= {spread + FRESH_GOAL:g} s and the running load < 90 % of the cores "
                    "(else the goals are not expected to hold on this box)",
               met=_feasible(cal, running, n, spread),
               note=_demand_note(cal, running, n, spread) + f"; running load {hold:.2f} cores",
               extra=extra)
