"""``python -m bench.change_cost [--gateways 100] [--procs 4] [--window 25] [--gap 1.2]``:
what a registry change costs figure 5's fleet and etcd, in CPU.

Figure 5's fleet (``bench.fig5_propagation.fleet_on``: real ``ClusterGateway`` instances,
watch on, in ``--procs`` child processes) on a fresh 3-member etcd with figure 5's registry.
Once every gateway is ready: an idle window of ``--window`` seconds, then a window of the same
length in which the bench, as the leader, flips one card every ``--gap`` seconds and waits
for every gateway to publish each generation. From /proc: the fleet's CPU and the three
members' CPU in each window; a change's cost is the changes window's CPU net of the idle
window's, per change (and per gateway for the fleet). From etcd's own /metrics: the gRPC
calls started per change by method, and raft proposals committed, net of the idle window
(each gateway's ``gateways/<id>`` rewrite with the new generation is a Put; calls with a
period near the window's length, the keepalives every 10 s and the one linearizable poll in
ten, fall unevenly into the two windows and show a few per change: compare them between
trees, not with zero). Also printed:
the last and the first gateway's latency per change (median, p90, max; too few changes for a
p99: figure 5 is the figure, this is the tool to compare two trees by their CPU). Run two
checkouts alternately, each from its own directory (``cd <checkout>``: ``python -m`` puts the
current directory first on the path, before ``PYTHONPATH``); the calibration line says how
fast the host was.
"""

from __future__ import annotations

import argparse
import asyncio
import queue
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import calibrate
from bench.common import Context, cpu_seconds, etcd_pids, find_bench_etcd, start_etcd
from bench.fig5_propagation import fleet_on
from bench.start_cost import diff, metrics


def _members_cpu(etcd: Any) -> float:
    return sum(cpu_seconds(p) for p in etcd_pids(etcd))


async def _windows(ctx: Context, etcd: Any, gateways: int, procs: int, window: float,
                   gap: float) -> dict[str, Any]:
    async with fleet_on(ctx, etcd.endpoints, "changecost", gateways=gateways, procs=procs,
                        watch=True, shared_worker=True, name="cc") as (writer, sink, workers):
        for w in workers:
            w.expect("ready", 120.0)
        await asyncio.sleep(3.0)    # not a wait: a settled fleet before the idle window
        pids = [w.proc.pid for w in workers]
        out: dict[str, Any] = {}
        lats: list[list[float]] = []
        for label, changes in (("idle", False), ("changes", True)):
            m0 = metrics(tuple(etcd.endpoints))
            f0, e0, t0 = sum(cpu_seconds(p) for p in pids), _members_cpu(etcd), time.monotonic()
            n = 0
            while time.monotonic() < t0 + window:
                await asyncio.sleep(gap)    # pacing: a change lands on a settled fleet
                if changes:
                    gen, sent = await writer.toggle(n % len(writer.cards))
                    n += 1
                    got: dict[int, float] = {}
                    deadline = time.monotonic() + 3.0
                    while len(got) < gateways and time.monotonic() < deadline:
                        try:
                            m = sink.get(timeout=0.05)
                        except queue.Empty:
                            continue
                        if m and m.get("gen") == gen:
                            got[m["gw"]] = m["t"] - sent
                    if len(got) == gateways:
                        lats.append(sorted(got.values()))
                while not sink.empty():
                    sink.get_nowait()
            span = time.monotonic() - t0
            out[label] = {"span": span, "changes": n,
                          "requests": diff(m0, metrics(tuple(etcd.endpoints))),
                          "fleet": sum(cpu_seconds(p) for p in pids) - f0,
                          "etcd": _members_cpu(etcd) - e0}
        out["latencies"] = lats
        return out


def _ms(values: list[float], q: float) -> float:
    s = sorted(values)
    return round(s[min(len(s) - 1, int(len(s) * q))] * 1000, 1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.change_cost",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--gateways", type=int, default=100)
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("--window", type=float, default=25.0)
    ap.add_argument("--gap", type=float, default=1.2)
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="awide-cc-"))
    ctx = Context(quick=False, work=work, etcd_binary=find_bench_etcd(),
                  log=lambda s: print(s, file=sys.stderr, flush=True))
    try:
        cal = calibrate.measure(ctx)
        etcd = start_etcd(ctx, "etcdcc")
        try:
            res = asyncio.run(_windows(ctx, etcd, args.gateways, args.procs, args.window,
                                       args.gap))
        finally:
            etcd.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    idle, busy = res["idle"], res["changes"]
    n = max(1, busy["changes"])

    def net(part: str) -> float:
        return busy[part] - idle[part] / idle["span"] * busy["span"]
    print(f"calibration: {calibrate.brief(cal)}")
    print(f"{args.gateways} gateways in {args.procs} processes, {busy['changes']} changes "
          f"{args.gap:g} s apart over {busy['span']:.1f} s, idle window {idle['span']:.1f} s")
    print(f"fleet CPU per change per gateway: {net('fleet') / n / args.gateways * 1000:.3f} ms "
          f"(idle {idle['fleet'] / idle['span'] * 100:.1f} % of a core, changes "
          f"{busy['fleet'] / busy['span'] * 100:.1f} %)")
    print(f"etcd CPU per change: {net('etcd') / n * 1000:.1f} ms (three members; idle "
          f"{idle['etcd'] / idle['span'] * 100:.1f} % of a core)")
    per = {k: (v - idle["requests"].get(k, 0.0) / idle["span"] * busy["span"]) / n
           for k, v in busy["requests"].items()}
    print("etcd requests per change, net of the idle window: " + ", ".join(
        f"{k} {v:.1f}" for k, v in sorted(per.items()) if abs(v) >= 0.05))
    lats = res["latencies"]
    if lats:
        last, first = [x[-1] for x in lats], [x[0] for x in lats]
        print(f"last gateway: median {statistics.median(last) * 1000:.1f} ms, p90 "
              f"{_ms(last, 0.9)} ms, max {max(last) * 1000:.1f} ms; first gateway: median "
              f"{statistics.median(first) * 1000:.1f} ms ({len(lats)} changes every gateway "
              f"published)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
