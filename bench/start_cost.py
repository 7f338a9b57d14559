"""``python -m bench.start_cost [--n 40] [--gap 0.25] [--settle 6] [--steady 5]``: what one
real gateway start asks of etcd, against the C generator's replay of a start (figure 9's).

A 3-member etcd started as the bench starts it, a registry of 8 directory cards. Two phases on
the same etcd, each ``--n`` starts ``--gap`` seconds apart (calm: no start storm, so nothing
times out and the count is what a start asks, not what a busy host retries):

1. the library: real ``ClusterGateway`` instances (figure 9's configuration) on this process's
   event loop, each store counting its HTTP requests by kind (``bench.storm.TimedStore``) and
   the connections it opened;
2. the replay: the C generator (``bench/leanload.c`` with ``record_prefix``) starting as many
   simulated gateways at the same pace.

For each phase, over its window (first start to ``--settle`` s after the last), net of etcd's
idle CPU and of the started gateways' steady cost (their rate over ``--steady`` s once all
run, for the part of the window each ran): etcd's CPU per start, and the gRPC calls etcd
served per start by method (its ``grpc_server_started_total``, the JSON gateway's requests
included), with the raft proposals committed per start. For the library also the requests
each gateway sent in its first ``--settle`` s by kind, and its connections. Printed as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import aiohttp

from awide_cluster.cards.worker import ProbeWorker
from awide_cluster.contract import keys
from awide_cluster.store.build import store_from
from awide_gateway_cluster import ClusterGateway
from awide_harness.registry_writer import RegistryWriter
from bench import cgen
from bench.common import (
    WRITTEN_AT,
    Context,
    etcd_cpu,
    etcd_idle_cores,
    find_bench_etcd,
    make_dir_cards,
    registry_revision,
    start_etcd,
    store_for,
)
from bench.fleet import gateway_config
from bench.loadset import LoadSet, sleep_until
from bench.storm import TimedStore, start_mix

_LINE = re.compile(r'^(grpc_server_started_total|etcd_server_proposals_committed_total)'
                   r'(\{[^}]*\})?\s+([0-9.eE+-]+)$')
_METHOD = re.compile(r'grpc_method="([^"]+)"')


def metrics(endpoints: tuple[str, ...]) -> dict[str, float]:
    """gRPC calls started by method, and raft proposals committed, summed over the members
    (proposals: the leader's count, the highest of the members)."""
    out: dict[str, float] = {}
    committed = 0.0
    for ep in endpoints:
        with urllib.request.urlopen(ep + "/metrics", timeout=5.0) as resp:
            text = resp.read().decode()
        for line in text.splitlines():
            m = _LINE.match(line)
            if not m:
                continue
            if m.group(1) == "etcd_server_proposals_committed_total":
                committed = max(committed, float(m.group(3)))
                continue
            method = _METHOD.search(m.group(2) or "")
            if method:
                out[method.group(1)] = out.get(method.group(1), 0.0) + float(m.group(3))
    out["raft proposals committed"] = committed
    return out


def diff(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    return {k: b.get(k, 0.0) - a.get(k, 0.0) for k in sorted(set(a) | set(b))
            if b.get(k, 0.0) != a.get(k, 0.0)}


class Counted(TimedStore):
    """``TimedStore`` that also counts the TCP connections its HTTP client opened."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.connections = 0
        transport = self.session.transport
        make = transport.http_client

        def http_client() -> aiohttp.ClientSession:
            fresh = transport._http is None
            client = make()
            if fresh:
                async def counted(*_: Any) -> None:
                    self.connections += 1
                trace = aiohttp.TraceConfig()
                trace.on_connection_create_end.append(counted)
                trace.freeze()
                client._trace_configs.append(trace)
            return client

        transport.http_client = http_client          # type: ignore[method-assign]


def per_start(total: float, rate_each: float, run_s: float, n: int) -> float:
    """A window's total net of the started ones' steady rate (each, per second) times the
    seconds they ran in it, per start."""
    return (total - rate_each * run_s) / n


async def library(endpoints: tuple[str, ...], cluster: str, args: Any, etcd: Any,
                  idle: float) -> dict[str, Any]:
    spec = {"endpoints": list(endpoints), "cluster": cluster, "watch": True,
            "poll_interval": 1.0, "call_timeout": 0.5}
    worker = ProbeWorker(name="start-cost-probes")
    gws: list[ClusterGateway] = []
    stores: list[TimedStore] = []
    counted: list[Counted] = []
    for k in range(args.n):
        cfg = gateway_config(spec, k)
        store = Counted(store_from(cfg.etcd, cfg.cluster), naive=False)
        stores.append(store)
        counted.append(store)
        gws.append(ClusterGateway(cfg, store=store, probe_worker=worker))
    m0, e0 = metrics(endpoints), etcd_cpu(etcd)
    t0 = time.monotonic() + 0.2
    sched = [t0 + k * args.gap for k in range(args.n)]

    async def one(k: int) -> None:
        await asyncio.sleep(max(0.0, sched[k] - time.monotonic()))    # the schedule
        await gws[k].start()

    await asyncio.gather(*(one(k) for k in range(args.n)))
    end = sched[-1] + args.settle
    await asyncio.sleep(max(0.0, end - time.monotonic()))              # the window
    m1, e1 = metrics(endpoints), etcd_cpu(etcd)
    await asyncio.sleep(args.steady)                                    # the steady window
    m2, e2 = metrics(endpoints), etcd_cpu(etcd)
    t2 = time.monotonic()
    steady_s = t2 - end
    run_s = sum(end - s for s in sched)
    rate_each = max(0.0, (e2 - e1) / steady_s - idle) / args.n
    win = end - t0
    cpu = per_start(e1 - e0 - idle * win, rate_each, run_s, args.n)
    calls = diff(m0, m1)
    steady_calls = diff(m1, m2)
    mix = start_mix(stores, sched, args.settle)
    out = {
        "starts": args.n, "gap_s": args.gap,
        "etcd_cpu_per_start_ms": round(cpu * 1000.0, 3),
        "etcd_steady_ms_per_gateway_second": round(rate_each * 1000.0, 3),
        "etcd_calls_per_start": {
            k: round(per_start(v, steady_calls.get(k, 0.0) / steady_s / args.n, run_s,
                               args.n), 3) for k, v in calls.items()},
        "requests_per_start_first_settle_s": {k: round(v / args.n, 3)
                                              for k, v in sorted(mix.items())},
        "connections_per_gateway": round(sum(s.connections for s in counted) / args.n, 3),
        "registration_failures": sum(g.stats().registration_failures for g in gws),
        "stale": sum(1 for g in gws if g.stats().stale),
    }
    await asyncio.gather(*(g.stop() for g in gws), return_exceptions=True)
    for s in stores:
        await s.close()
    return out


def replay(endpoints: tuple[str, ...], cluster: str, args: Any, etcd: Any, idle: float,
           work: Path) -> dict[str, Any]:
    rev = asyncio.run(registry_revision(endpoints, cluster))
    gen = cgen.choose(work / "cgen")
    load = LoadSet(endpoints, cluster, procs=1, log_dir=work / "logs", name="startcost-",
                   module="bench.leanload", seed=1,
                   extra={**cgen.spec(cluster, rev),
                          "record_prefix": keys.prefix(cluster) + keys.GATEWAYS},
                   program=gen.program)
    try:
        m0, e0 = metrics(endpoints), etcd_cpu(etcd)
        t0 = time.monotonic() + 0.2
        sched: list[float] = []
        for k in range(args.n):
            sleep_until(t0 + k * args.gap)
            sched.append(time.monotonic())
            load.set(k + 1, "mix")
        end = sched[-1] + args.settle
        sleep_until(end)
        m1, e1 = metrics(endpoints), etcd_cpu(etcd)
        sleep_until(end + args.steady)
        m2, e2 = metrics(endpoints), etcd_cpu(etcd)
        steady_s = time.monotonic() - end
    finally:
        load.close()
    run_s = sum(end - s for s in sched)
    rate_each = max(0.0, (e2 - e1) / steady_s - idle) / args.n
    cpu = per_start(e1 - e0 - idle * (end - t0), rate_each, run_s, args.n)
    calls, steady_calls = diff(m0, m1), diff(m1, m2)
    return {
        "starts": args.n, "gap_s": args.gap, "generator": gen.name,
        "etcd_cpu_per_start_ms": round(cpu * 1000.0, 3),
        "etcd_steady_ms_per_gateway_second": round(rate_each * 1000.0, 3),
        "etcd_calls_per_start": {
            k: round(per_start(v, steady_calls.get(k, 0.0) / steady_s / args.n, run_s,
                               args.n), 3) for k, v in calls.items()},
    }


async def _publish(endpoints: tuple[str, ...], cluster: str, work: Path) -> None:
    store = store_for(endpoints, cluster)
    try:
        await RegistryWriter(store, cluster, make_dir_cards(work / f"cards-{cluster}", 8),
                             written_at=WRITTEN_AT).publish()
    finally:
        await store.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--gap", type=float, default=0.25)
    ap.add_argument("--settle", type=float, default=6.0)
    ap.add_argument("--steady", type=float, default=5.0)
    ap.add_argument("--skip-replay", action="store_true")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="start-cost-"))
    ctx = Context(quick=True, work=work, etcd_binary=find_bench_etcd())
    etcd = start_etcd(ctx, "etcd-sc")
    try:
        idle = etcd_idle_cores(etcd)
        lib_cluster, rep_cluster = (f"sc{x}{uuid.uuid4().hex[:6]}" for x in "lr")
        asyncio.run(_publish(etcd.endpoints, lib_cluster, work))
        asyncio.run(_publish(etcd.endpoints, rep_cluster, work))
        out: dict[str, Any] = {"etcd_idle_cores": round(idle, 4)}
        out["library"] = asyncio.run(library(etcd.endpoints, lib_cluster, args, etcd, idle))
        print(json.dumps(out, indent=1), flush=True)
        if not args.skip_replay:
            out["replay"] = replay(etcd.endpoints, rep_cluster, args, etcd, idle, work)
        print(json.dumps(out, indent=1))
    finally:
        etcd.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
