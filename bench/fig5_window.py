"""Figure 5's watch fleet, with the CPU a registry change costs resolved in time after the put.

    python -m bench.fig5_window [--rounds 30] [--gateways 100] [--processes 4]

The fleet of figure 5 (``bench.fleet``: real ``ClusterGateway`` instances, watch on, one probe
worker per process) against a 3-member etcd. Each round flips one card, as figure 5 does, 1-1.5 s
after the last; the CPU of the fleet processes and of the etcd members (the sum of their
threads' run time, ``/proc/<pid>/task/*/schedstat``, in nanoseconds) is sampled every 2 ms
from just before the put to 1 s after it, and the 200 ms before each put give the idle rate.
The table says, per window after the put, the CPU a change cost net of that idle rate (summed
over the rounds, then divided by them): what falls in the first tens of milliseconds is on the
path of propagation (the gateways apply one after another on their event loops, on the cores
etcd also uses), what comes later is not. Run it under the bench lock; it prints the latency
of the last gateway too (no result file: the figure itself is ``python -m bench --only 5``).
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import queue
import random
import shutil
import tempfile
import threading
import time
import uuid
from pathlib import Path

from bench.common import (
    Context,
    etcd_pids,
    find_bench_etcd,
    start_etcd,
    summary,
)
from bench.fig5_propagation import fleet_on

EDGES = (0.0, 0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.08, 0.1, 0.2, 0.4, 0.7, 1.0)
SAMPLE = 0.002


def cpu_ns(pids: list[int]) -> int:
    """Run time of every thread of ``pids`` so far (threads gone meanwhile are not counted)."""
    total = 0
    for pid in pids:
        for path in glob.glob(f"/proc/{pid}/task/*/schedstat"):
            try:
                with open(path) as f:
                    total += int(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                pass
    return total


def at(samples: list[tuple[float, int, int]], t: float, i: int) -> float:
    """Cumulative CPU of column ``i`` at time ``t``, interpolated between samples."""
    prev = samples[0]
    for s in samples:
        if s[0] >= t:
            if s[0] == prev[0]:
                return s[i]
            return prev[i] + (s[i] - prev[i]) * (t - prev[0]) / (s[0] - prev[0])
        prev = s
    return samples[-1][i]


async def run(ctx: Context, endpoints: tuple[str, ...], epids: list[int], rounds: int,
              gateways: int, procs: int) -> None:
    cluster = f"p5t{uuid.uuid4().hex[:6]}"
    async with fleet_on(ctx, endpoints, cluster, gateways=gateways, procs=procs, watch=True,
                        shared_worker=True, name="fleet5t") as (writer, sink, workers):
        cards = writer.cards
        for w in workers:
            w.expect("ready", 120.0)
        await asyncio.sleep(2.0)    # not a wait: a settled fleet before the first round
        while not sink.empty():
            sink.get_nowait()
        fpids = [w.pid for w in workers]
        fleet = [0.0] * (len(EDGES) - 1)
        etcd = [0.0] * (len(EDGES) - 1)
        idle_fleet = idle_etcd = 0.0
        every: list[float] = []
        each: list[float] = []
        rng = random.Random(5)
        for r in range(rounds):
            await asyncio.sleep(rng.uniform(1.0, 1.5) - 0.2)   # not a wait: pacing
            f0, e0 = cpu_ns(fpids), cpu_ns(epids)
            await asyncio.sleep(0.2)    # not a wait: the idle CPU window
            idle_fleet += (cpu_ns(fpids) - f0) / 0.2 / 1e9
            idle_etcd += (cpu_ns(epids) - e0) / 0.2 / 1e9
            samples: list[tuple[float, int, int]] = []
            stop = threading.Event()

            def sample(samples: list[tuple[float, int, int]] = samples,
                       stop: threading.Event = stop) -> None:
                while not stop.is_set():
                    samples.append((time.monotonic(), cpu_ns(fpids), cpu_ns(epids)))
                    time.sleep(SAMPLE)      # not a wait: the sampling period

            sampler = threading.Thread(target=sample, name="fig5-window-sampler")
            sampler.start()
            await asyncio.sleep(0.005)  # not a wait: the sampler's first sample
            gen, sent = await writer.toggle(r % len(cards))
            seen: dict[int, float] = {}
            while time.monotonic() < sent + EDGES[-1] + 0.05:
                try:
                    msg = sink.get(timeout=0.02)
                except queue.Empty:
                    continue
                if msg and msg.get("gen") == gen and msg["gw"] not in seen:
                    seen[msg["gw"]] = msg["t"]
            stop.set()
            sampler.join()
            lat = [t - sent for t in seen.values()]
            each.extend(lat)
            if len(seen) == gateways:
                every.append(max(lat))
            for k in range(len(EDGES) - 1):
                a, b = sent + EDGES[k], sent + EDGES[k + 1]
                fleet[k] += (at(samples, b, 1) - at(samples, a, 1)) / 1e9
                etcd[k] += (at(samples, b, 2) - at(samples, a, 2)) / 1e9
        last, one = summary(every), summary(each)
        print(f"{rounds} rounds, {gateways} gateways in {procs} processes; last gateway: "
              f"median {(last['median'] or 0) * 1000:.1f} ms, p99 {(last['p99'] or 0) * 1000:.1f}"
              f" ms ({rounds - len(every)} rounds with a gateway missing); each gateway: median "
              f"{(one['median'] or 0) * 1000:.1f} ms")
        print(f"idle rate: fleet {idle_fleet / rounds:.3f} cores, etcd {idle_etcd / rounds:.3f}"
              " cores")
        print("window after the put (ms)   fleet CPU (ms, net)   etcd CPU (ms, net)")
        tf = te = 0.0
        for k in range(len(EDGES) - 1):
            span = EDGES[k + 1] - EDGES[k]
            f = (fleet[k] - idle_fleet / rounds * span * rounds) / rounds * 1000
            e = (etcd[k] - idle_etcd / rounds * span * rounds) / rounds * 1000
            tf, te = tf + f, te + e
            print(f"{EDGES[k] * 1000:6.0f} - {EDGES[k + 1] * 1000:6.0f}          {f:8.2f}"
                  f"              {e:8.2f}")
        print(f"a change, first second: fleet {tf:.1f} ms ({tf / gateways:.3f} ms per gateway), "
              f"etcd {te:.1f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--gateways", type=int, default=100)
    ap.add_argument("--processes", type=int, default=4)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="awide-fig5-window-"))
    ctx = Context(quick=False, work=work, etcd_binary=find_bench_etcd(), log=print)
    etcd = start_etcd(ctx, "etcd5")
    try:
        asyncio.run(run(ctx, etcd.endpoints, etcd_pids(etcd), args.rounds, args.gateways,
                        args.processes))
    finally:
        etcd.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
