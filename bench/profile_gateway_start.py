"""``python -m bench.profile_gateway_start [--n 50] [--top 25] [--out DIR] [--cards 8]``: where a
start's CPU goes (docs/profile-gateway-start.md).

Figure 9's setting in one process: a 3-member etcd started as the bench starts it, a registry
of 8 directory cards published as figure 9 publishes it, and real ``ClusterGateway`` instances
(figure 9's configuration: cluster mode, registry watch, poll interval 1 s, call timeout 0.5 s,
one shared probe worker) started one after another on one event loop. A start is measured from
the gateway's construction until it is done starting: ``start()`` returned, its view fresh (a
registry applied, the 8 cards in service, not stale), its record written on its lease and its
registry watch open. The start-up delays (a random share of a poll interval before the
registration, the first probe round and the poll loop's phase) are set to zero (``NoDelay``)
so that a start is one short window:
the jitter moves work in time, it does not change how much there is.

Two passes of ``--n`` gateways each, on the same registry (the namespace's layout recorded by
the first gateway of the first pass, as in a storm):

1. unprofiled: the process's CPU (``time.process_time``, every thread) and the event loop
   thread's (``time.thread_time``) per start, split into construction, ``start()`` and the
   rest until done, the earlier ones running beside; then the steady CPU of the ``--n``
   running gateways over ``--steady`` seconds (per gateway-second), which nets the running
   ones' share out of each start window; then a second steady window under ``cProfile``;
2. profiled: ``--n`` more starts under ``cProfile`` (timer ``time.thread_time``: the event
   loop thread's CPU only; the probe worker thread is not profiled), enabled from each
   construction to done, each gateway stopped once measured (no other gateway runs in a
   profiled start window).
Printed for both profiles: the functions by cumulative and by own CPU (with calls per start
or per window), and own CPU summed by package.

Also printed: the cost of one call of figure 9's freshness check (``snapshot()`` and
``stats()``), which figure 9's storm processes run every 20 ms per gateway not yet fresh.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import random
import shutil
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from awide_cluster.cards.worker import ProbeWorker
from awide_cluster.store import EtcdStore
from awide_cluster.store.build import store_from
from awide_gateway_cluster import ClusterGateway
from awide_harness.registry_writer import RegistryWriter
from bench.calibrate import time_python
from bench.common import (
    REPO,
    WRITTEN_AT,
    Context,
    etcd_cpu,
    find_bench_etcd,
    make_dir_cards,
    start_etcd,
    store_for,
)
from bench.fleet import gateway_config

FIG9_CARDS = 8
CARDS = FIG9_CARDS        # this run's (--cards)
DONE_BOUND = 10.0       # a start not done within this is counted as such and left running
CHECK = 0.005           # the done check's period (s)


class NoDelay(random.Random):
    """Every start-up delay and random phase at zero (``uniform(a, b)`` is ``a``); random
    bits (the lease ID) stay random. ``bench.storm.NoJitter`` also makes ``random()`` 0,
    which gives every gateway the same lease ID: not usable here."""

    def uniform(self, a: float, b: float) -> float:
        return a


async def _publish(endpoints: tuple[str, ...], cluster: str, work: Path) -> None:
    store = store_for(endpoints, cluster)
    try:
        await RegistryWriter(store, cluster, make_dir_cards(work / "cards", CARDS),
                             written_at=WRITTEN_AT).publish()
    finally:
        await store.close()


def _done(gw: ClusterGateway) -> bool:
    """Fresh (figure 9's test), registered, watching."""
    v = gw.snapshot()
    reg = gw._registration
    return (v.generation > 0 and len(v.in_service) >= CARDS and not gw.stats().stale
            and reg is not None and reg._written is not None
            and gw._registry_watch.member is not None)


class Pass:
    """One pass: ``n`` gateways started one after another, each measured."""

    def __init__(self, spec: dict[str, Any], worker: ProbeWorker, id_base: int, *,
                 alone: bool = False) -> None:
        # alone: each gateway is stopped once measured, so that none runs beside the next
        self.spec, self.worker, self.id_base, self.alone = spec, worker, id_base, alone
        self.gws: list[ClusterGateway] = []
        self.stores: list[EtcdStore] = []       # passed in: closed here, not by the gateway
        # per start: (construct, start(), rest until done) of the process's CPU, the loop
        # thread's CPU of the whole start, its wall time, the gateways running beside it
        self.rows: list[tuple[float, float, float, float, float, int]] = []
        self.not_done = 0

    async def one(self, k: int, prof: cProfile.Profile | None) -> None:
        running = len(self.gws)
        w0, c0, t0 = time.monotonic(), time.process_time(), time.thread_time()
        if prof is not None:
            prof.enable()
        cfg = gateway_config(self.spec, self.id_base + k)
        store = store_from(cfg.etcd, cfg.cluster)
        gw = ClusterGateway(cfg, store=store, probe_worker=self.worker, rng=NoDelay())
        c1 = time.process_time()
        await gw.start()
        c2 = time.process_time()
        deadline = time.monotonic() + DONE_BOUND
        while not _done(gw):
            if time.monotonic() > deadline:
                self.not_done += 1
                break
            await asyncio.sleep(CHECK)      # not a wait: the done check's period
        if prof is not None:
            prof.disable()
        c3, t3, w3 = time.process_time(), time.thread_time(), time.monotonic()
        self.rows.append((c1 - c0, c2 - c1, c3 - c2, t3 - t0, w3 - w0, running))
        if self.alone:
            await gw.stop()
            await store.close()
        else:
            self.gws.append(gw)
            self.stores.append(store)

    async def run(self, n: int, prof: cProfile.Profile | None) -> None:
        for k in range(n):
            await self.one(k, prof)

    async def stop(self) -> None:
        await asyncio.gather(*(g.stop() for g in self.gws), return_exceptions=True)
        await asyncio.gather(*(s.close() for s in self.stores), return_exceptions=True)


def _ms(x: float) -> str:
    return f"{x * 1000.0:.2f}"


def _stats_cost(gw: ClusterGateway, calls: int = 2000) -> float:
    """Seconds of CPU per call of figure 9's freshness check (``snapshot`` and ``stats``)."""
    c0 = time.process_time()
    for _ in range(calls):
        v = gw.snapshot()
        _ = v.generation > 0 and len(v.in_service) >= CARDS and not gw.stats().stale
    return (time.process_time() - c0) / calls


def _package(filename: str) -> str:
    """The package (or stdlib module) a profiled function's file belongs to."""
    if filename.startswith("~") or filename.startswith("<"):
        return "builtins (C functions: json, select, socket, ...)"
    p = Path(filename)
    try:
        rel = p.resolve().relative_to(REPO)
        return "/".join(rel.parts[:2]) if len(rel.parts) > 2 else str(rel)
    except ValueError:
        pass
    parts = p.parts
    if "site-packages" in parts:
        return parts[parts.index("site-packages") + 1]
    return "stdlib " + (parts[-2] if parts[-2] in ("asyncio", "json", "logging", "http",
                                                    "email", "concurrent") else p.stem)


def _report_profile(prof: cProfile.Profile, total: float, top: int, per: int,
                    what: str) -> None:
    st = pstats.Stats(prof)
    raw: dict[Any, Any] = st.stats  # type: ignore[attr-defined]
    rows = [(func, cc, nc, tt, ct) for func, (cc, nc, tt, ct, _callers) in raw.items()]
    prof_total = sum(r[3] for r in rows)
    print(f"cProfile, {what}: {prof_total:.3f} s of loop-thread CPU profiled (the profiler's "
          f"overhead included; the same work unprofiled in pass 1: {total:.3f} s). Columns: "
          f"share, CPU, calls per {'start' if per > 1 else 'window'} (of {per})")

    def name(func: tuple[str, int, str]) -> str:
        f, line, fn = func
        if f == "~":
            return fn
        try:
            f = str(Path(f).resolve().relative_to(REPO))
        except ValueError:
            f = "/".join(Path(f).parts[-2:])
        return f"{f}:{line}({fn})"

    print(f"\ntop {top} by cumulative CPU (share of the profiled total):")
    for func, _cc, nc, _tt, ct in sorted(rows, key=lambda r: -r[4])[:top]:
        print(f"  {100.0 * ct / prof_total:5.1f} %  {ct * 1000.0:9.1f} ms  {nc / per:8.1f}  "
              f"{name(func)}")
    print(f"\ntop {top} by own CPU:")
    for func, _cc, nc, tt, _ct in sorted(rows, key=lambda r: -r[3])[:top]:
        print(f"  {100.0 * tt / prof_total:5.1f} %  {tt * 1000.0:9.1f} ms  {nc / per:8.1f}  "
              f"{name(func)}")
    by: dict[str, float] = defaultdict(float)
    for func, _cc, _nc, tt, _ct in rows:
        by[_package(func[0])] += tt
    print("\nown CPU by package:")
    for pkg, tt in sorted(by.items(), key=lambda x: -x[1]):
        if tt / prof_total >= 0.005:
            print(f"  {100.0 * tt / prof_total:5.1f} %  {pkg}")


def _summary(p: Pass, steady_per_gw_s: float | None) -> float:
    rows = p.rows
    cons = [r[0] for r in rows]
    st = [r[1] for r in rows]
    rest = [r[2] for r in rows]
    whole = [r[0] + r[1] + r[2] for r in rows]
    loop = [r[3] for r in rows]
    wall = [r[4] for r in rows]
    med = statistics.median
    print(f"{len(rows)} starts, {p.not_done} not done within {DONE_BOUND:g} s")
    print(f"  process CPU per start (ms): median {_ms(med(whole))}, mean "
          f"{_ms(statistics.fmean(whole))}, "
          f"max {_ms(max(whole))}; of which construction {_ms(med(cons))}, start() "
          f"{_ms(med(st))}, until done {_ms(med(rest))} (medians)")
    print(f"  loop-thread CPU per start (ms): median {_ms(med(loop))} (the rest: the probe "
          "worker's and aiohttp's resolver threads)")
    print(f"  wall per start (ms): median {_ms(med(wall))}")
    if steady_per_gw_s is not None:
        net = [w - steady_per_gw_s * r[4] * r[5] for w, r in zip(whole, rows, strict=True)]
        print(f"  net of the running gateways' steady CPU in each window (ms): median "
              f"{_ms(med(net))}")
    return sum(loop)


async def main_async(args: argparse.Namespace, work: Path) -> int:
    ctx = Context(quick=False, work=work, etcd_binary=find_bench_etcd())
    etcd = start_etcd(ctx, "etcdg")
    try:
        cluster = "pgs"
        await _publish(tuple(etcd.endpoints), cluster, work)
        spec = {"endpoints": list(etcd.endpoints), "cluster": cluster, "watch": True,
                "poll_interval": 1.0, "call_timeout": 0.5}
        print(f"Python workload {time_python()} (bench/calibrate.py)")
        worker = ProbeWorker(name="prof-probes")
        plain = Pass(spec, worker, 0)
        e0 = etcd_cpu(etcd)
        await plain.run(args.n, None)
        e1 = etcd_cpu(etcd)
        await asyncio.sleep(2.0)            # not a wait: the running gateways settle
        c0, w0, e2 = time.process_time(), time.monotonic(), etcd_cpu(etcd)
        th0 = time.thread_time()
        await asyncio.sleep(args.steady)    # not a wait: the steady window
        c1, w1, e3 = time.process_time(), time.monotonic(), etcd_cpu(etcd)
        steady_loop = time.thread_time() - th0
        steady = (c1 - c0) / (w1 - w0) / args.n
        etcd_rate = (e3 - e2) / (w1 - w0)
        print(f"\npass 1 (unprofiled), {args.n} gateways started one after another:")
        loop_total = _summary(plain, steady)
        wall = sum(r[4] for r in plain.rows)
        print(f"  steady: {steady * 1000.0:.3f} ms of process CPU per gateway-second "
              f"({args.n} running, {args.steady:g} s; loop thread "
              f"{steady_loop / (w1 - w0) / args.n * 1000.0:.3f}); etcd {etcd_rate:.3f} cores "
              "beside them")
        # the running ones' steady etcd cost over the pass: on average half of them ran
        beside = etcd_rate * wall / 2
        print(f"  etcd CPU over the starts: {(e1 - e0) * 1000.0 / args.n:.2f} ms per start, "
              f"{max(0.0, e1 - e0 - beside) * 1000.0 / args.n:.2f} net of the running ones' "
              "steady cost (half of them over the pass, at the steady rate)")
        print(f"  figure 9's freshness check (snapshot() + stats()): "
              f"{_stats_cost(plain.gws[0]) * 1e6:.1f} us of CPU per call")
        steady_prof = cProfile.Profile(time.thread_time)
        steady_prof.enable()
        await asyncio.sleep(args.steady)    # not a wait: the profiled steady window
        steady_prof.disable()
        await plain.stop()
        prof = cProfile.Profile(time.thread_time)
        profiled = Pass(spec, worker, 10_000, alone=True)
        await profiled.run(args.n, prof)
        print(f"\npass 2 (profiled), {args.n} more gateways, each stopped once measured:")
        _summary(profiled, None)
        if args.out:
            prof.dump_stats(str(Path(args.out) / "gateway_start.prof"))
            steady_prof.dump_stats(str(Path(args.out) / "gateway_steady.prof"))
        print()
        _report_profile(prof, loop_total, args.top, args.n, f"the {args.n} starts")
        print()
        _report_profile(steady_prof, steady_loop, args.top, 1,
                        f"{args.n} gateways running for {args.steady:g} s")
    finally:
        etcd.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.profile_gateway_start")
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--steady", type=float, default=5.0)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--out", default=None, help="keep the cProfile dump here")
    ap.add_argument("--cards", type=int, default=FIG9_CARDS, help="directory cards in the "
                    f"registry (default {FIG9_CARDS}, figure 9's): fewer shows what they cost")
    args = ap.parse_args(argv)
    if args.cards < 1:
        ap.error(f"--cards must be at least 1, not {args.cards}")
    global CARDS        # noqa: PLW0603 - the pass's card count, read by its helpers
    CARDS = args.cards
    work = Path(tempfile.mkdtemp(prefix="awide-gwprof-"))
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
    try:
        return asyncio.run(main_async(args, work))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
