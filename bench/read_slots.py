"""``python -m bench.read_slots [--clients 500] [--period 10] [--slot 0.1] [--rounds 2]``: what
a periodic read of the registry costs etcd, linearizable or serializable, by when it arrives.

A fresh 3-member etcd (the bench's settings) and a 3 KB ``registry`` value; ``--clients``
clients, spread over the members, each reading the key every ``--period`` seconds as a
gateway's periodic poll does (``min_mod_revision`` past the value: etcd answers without it),
from one asyncio process that does nothing else. Three arrivals, in turn, ``--rounds`` times:

- ``linearizable, spread``: each client at a random phase of the period (a gateway's own
  phase: the reads come one by one);
- ``linearizable, slotted``: the same phases rounded to a ``--slot``-long slot of the period,
  so the reads of a slot come together (etcd confirms its leadership once for all the
  linearizable reads that wait at that moment);
- ``serializable, spread``: the random phases, serializable (no leadership confirmed).

Per arrival: etcd's CPU over a 20 s window, net of its idle CPU, per read made in it.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import random
import shutil
import tempfile
import time
from pathlib import Path

import aiohttp

from awide_harness.etcd_cluster import EtcdCluster
from bench import calibrate
from bench.common import Context, etcd_cpu, etcd_idle_cores, find_bench_etcd, start_etcd

KEY = base64.b64encode(b"/slots/registry").decode()
WINDOW = 20.0
ARRIVALS = ("linearizable, spread", "linearizable, slotted", "serializable, spread")


async def _put(endpoint: str, size: int) -> int:
    value = base64.b64encode(b"r" * size).decode()
    async with aiohttp.ClientSession() as s, \
            s.post(endpoint + "/v3/kv/put", json={"key": KEY, "value": value}) as r:
        return int((await r.json())["header"]["revision"])


async def _arrival(etcd: EtcdCluster, endpoints: list[str], revision: int, arrival: str, *,
                   clients: int, period: float, slot: float, seed: int) -> tuple[float, int]:
    """etcd's CPU (cores) over the window, and the reads made in it."""
    body: dict[str, object] = {"key": KEY, "min_mod_revision": str(revision + 1)}
    if arrival.startswith("serializable"):
        body["serializable"] = True
    rng = random.Random(seed)
    phases = [rng.uniform(0, period) for _ in range(clients)]
    if arrival.endswith("slotted"):
        phases = [round(p / slot) * slot for p in phases]
    made = 0
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:
        t0 = time.monotonic() + 1.0

        async def client(i: int) -> None:
            nonlocal made
            k = 0
            while True:
                await asyncio.sleep(max(0.0, t0 + phases[i] + k * period - time.monotonic()))
                k += 1
                async with s.post(endpoints[i % len(endpoints)] + "/v3/kv/range",
                                  json=body) as r:
                    await r.read()
                made += 1

        tasks = [asyncio.create_task(client(i)) for i in range(clients)]
        try:
            await asyncio.sleep(1.0 + period)   # not a wait: every client past its first read
            e0, m0, d0 = etcd_cpu(etcd), time.monotonic(), made
            await asyncio.sleep(WINDOW)         # not a wait: the measured window
            e1, m1, d1 = etcd_cpu(etcd), time.monotonic(), made
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    return (e1 - e0) / (m1 - m0), d1 - d0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.read_slots",
                                 description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--clients", type=int, default=500)
    ap.add_argument("--period", type=float, default=10.0)
    ap.add_argument("--slot", type=float, default=0.1)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="awide-slots-"))
    ctx = Context(quick=False, work=work, etcd_binary=find_bench_etcd())
    try:
        cal = calibrate.measure(ctx)
        print(f"calibration: {calibrate.brief(cal)}", flush=True)
        etcd = start_etcd(ctx, "etcdslots")
        try:
            idle = etcd_idle_cores(etcd)
            endpoints = list(etcd.endpoints)
            revision = asyncio.run(_put(endpoints[0], 3000))
            print(f"etcd idle {idle:.4f} cores; {args.clients} clients, one read every "
                  f"{args.period:g} s each, slots of {args.slot:g} s", flush=True)
            for r in range(args.rounds):
                for arrival in ARRIVALS:
                    cores, reads = asyncio.run(_arrival(
                        etcd, endpoints, revision, arrival, clients=args.clients,
                        period=args.period, slot=args.slot, seed=r))
                    per = (cores - idle) * WINDOW / reads * 1000 if reads else float("nan")
                    print(f"round {r + 1}, {arrival}: {reads} reads in {WINDOW:g} s, etcd "
                          f"{cores:.3f} cores, {per:.2f} ms of etcd CPU per read net of idle",
                          flush=True)
        finally:
            etcd.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
