"""Figure 5: registry written -> applied by every gateway, with 100 gateways.

100 real ``ClusterGateway`` instances (own store, registration, card workers and watch each)
run in a few child processes (``bench.fleet``) against a 3-member etcd on loopback. The bench
plays the leader: each round flips one card between ``in`` and ``drained`` in a new registry
generation; every gateway reports the moment it published that generation's change event.
Latency of a round = (last gateway's publish time) - (time the put was sent); per-gateway
latencies are kept too. Fleets: with the registry watch (goal p99 <= 50 ms), and poll-only
(floor: the poll interval, the last of 100 randomly phased gateways polls almost a whole
interval after the write; goal: floor + 0.05 s, as figure 2's one-poll return). Rounds are 1-1.5 s
apart (watch), so each change lands on a settled fleet. A reference row: one gateway alone,
watch on (what propagation costs when the gateway has a core to itself).

A fleet process hosts 25 gateways on one event loop, where a deployment runs each gateway in
a process of its own with one probe thread (``ProbeWorker``) beside its loop. The figure's
fleets give each process one probe worker for its gateways (``shared_worker``), so a process
has one probe thread under its interpreter lock, as a gateway process has; the watch fleet is
measured side by side with one probe worker per gateway (25 threads taking turns at one lock),
which the earlier runs of this figure used.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from awide_harness.registry_writer import RegistryWriter
from bench.common import (
    WRITTEN_AT,
    Context,
    Row,
    cpu_seconds,
    latency_row,
    make_dir_cards,
    ms,
    start_etcd,
    store_for,
    summary,
)
from bench.proc import Worker, WorkerError, close_all

POLL = 1.0
# the poll-only goal's margin over its floor (one poll interval): a read and an apply
# after the last gateway's poll, as figure 2's "1 poll + 0.05 s"
POLL_MARGIN = 0.05


async def published(ctx: Context, endpoints: tuple[str, ...], cluster: str) -> RegistryWriter:
    """The bench as the leader: 8 directory cards' registry published; its store is the
    writer's (the caller closes it)."""
    writer = RegistryWriter(store_for(endpoints, cluster),
                            cluster, make_dir_cards(ctx.work / "cards5", 8),
                            written_at=WRITTEN_AT)
    await writer.publish()
    return writer


def start_fleet(ctx: Context, endpoints: tuple[str, ...], cluster: str, cards: int,
                sink: queue.Queue[dict[str, Any] | None], *, gateways: int, procs: int,
                watch: bool, shared_worker: bool, name: str) -> list[Worker]:
    """``gateways`` gateways (``bench.fleet``) split over ``procs`` child processes; the
    caller closes them."""
    per = [gateways // procs + (1 if k < gateways % procs else 0) for k in range(procs)]
    workers: list[Worker] = []
    first = 0
    for k, n in enumerate(per):
        spec = {"endpoints": list(endpoints), "cluster": cluster, "count": n,
                "first": first, "watch": watch, "poll_interval": POLL,
                "call_timeout": 0.5, "expect_in": cards, "shared_worker": shared_worker}
        workers.append(Worker("bench.fleet", spec, log_dir=ctx.work / "logs",
                              name=f"{name}{k}", sink=sink))
        first += n
    return workers


@contextlib.asynccontextmanager
async def fleet_on(ctx: Context, endpoints: tuple[str, ...], cluster: str, *, gateways: int,
                   procs: int, watch: bool, shared_worker: bool, name: str
                   ) -> AsyncIterator[tuple[RegistryWriter, queue.Queue[dict[str, Any] | None],
                                            list[Worker]]]:
    """The registry ``published``, a fleet started on it (``start_fleet``): (writer, the
    fleet's sink, its workers); the workers closed and the writer's store after."""
    writer = await published(ctx, endpoints, cluster)
    sink: queue.Queue[dict[str, Any] | None] = queue.Queue()
    workers: list[Worker] = []
    try:
        workers = start_fleet(ctx, endpoints, cluster, len(writer.cards), sink,
                              gateways=gateways, procs=procs, watch=watch,
                              shared_worker=shared_worker, name=name)
        yield writer, sink, workers
    finally:
        close_all(workers, bound=15.0)
        await writer.store.close()


async def _fleet_rounds(ctx: Context, endpoints: tuple[str, ...], *, watch: bool,
                        gateways: int, procs: int, rounds: int,
                        shared_worker: bool = False) -> dict[str, Any]:
    cluster = f"p5{'w' if watch else 'p'}{uuid.uuid4().hex[:6]}"
    async with fleet_on(ctx, endpoints, cluster, gateways=gateways, procs=procs, watch=watch,
                        shared_worker=shared_worker, name=f"fleet5-{'w' if watch else 'p'}"
                        ) as (writer, sink, workers):
        cards = writer.cards
        t0 = time.monotonic()
        readies = [w.expect("ready", 120.0) for w in workers]
        ready = sum(r["ready"] for r in readies)
        ctx.say(f"  {gateways} gateways ({'watch' if watch else 'poll only'}) ready in "
                f"{time.monotonic() - t0:.1f} s ({ready} with every card in service)")
        await asyncio.sleep(1.5)    # not a wait: a settled fleet before the idle measurement
        while not sink.empty():
            sink.get_nowait()

        def fleet_cpu() -> float:
            return sum(cpu_seconds(w.pid) for w in workers)

        idle_window = 1.0 if ctx.quick else 3.0

        async def idle_cpu_rate() -> float:
            c0, i0 = fleet_cpu(), time.monotonic()
            await asyncio.sleep(idle_window)    # not a wait: the idle CPU window
            return (fleet_cpu() - c0) / (time.monotonic() - i0)

        idle_before = await idle_cpu_rate()
        failed0 = polls0 = 0
        for w in workers:                 # reset each process's loop-lag maximum
            w.send({"cmd": "lag"})
            got = w.expect("lag", 10.0)
            failed0, polls0 = failed0 + got["failed_polls"], polls0 + got["polls"]
        c0, r0 = fleet_cpu(), time.monotonic()
        rng = ctx.rng(5)
        every: list[float] = []
        each: list[float] = []
        missing = 0
        puts: list[float] = []
        bound = 3.0 if watch else 3.0 * POLL + 1.0
        for r in range(rounds):
            # changes are rare in a cluster: each one lands on a settled fleet (the gateways rewrite
            # their gateways/<id> record within a poll after each change)
            await asyncio.sleep(rng.uniform(1.0, 1.5) if watch else rng.uniform(0.1, 0.4))  # pacing
            gen, sent = await writer.toggle(r % len(cards))
            puts.append(time.monotonic() - sent)
            seen: dict[int, float] = {}
            deadline = sent + bound
            while len(seen) < gateways and time.monotonic() < deadline:
                try:
                    msg = sink.get(timeout=0.05)
                except queue.Empty:
                    continue
                if msg and msg.get("gen") == gen and msg["gw"] not in seen:
                    seen[msg["gw"]] = msg["t"]
            lat = [t - sent for t in seen.values()]
            each.extend(lat)
            missing += gateways - len(seen)
            if len(seen) == gateways:
                every.append(max(lat))
            # a round that misses a gateway is reported as missing, never as fast
        busy, span = fleet_cpu() - c0, time.monotonic() - r0
        lags, failed, polls = [], -failed0, -polls0
        for w in workers:
            w.send({"cmd": "lag"})
            got = w.expect("lag", 10.0)
            lags.append(got["max_ms"])
            failed, polls = failed + got["failed_polls"], polls + got["polls"]
        await asyncio.sleep(1.5)    # not a wait: the last change's writes out of the idle window
        idle_after = await idle_cpu_rate()
        # a change's CPU: the rounds' CPU net of the idle rate (the mean of the windows before
        # and after them); the two windows' difference over the same span is its noise
        spent = busy - (idle_before + idle_after) / 2 * span
        noise = abs(idle_after - idle_before) / 2 * span
        return {"every": every, "each": each, "missing": missing, "puts": puts,
                "ready": ready, "rounds": rounds, "fleet_loop_lag_max_ms": max(lags),
                "failed_polls": failed, "polls": polls,
                "idle_cpu_ms_per_gateway_s": round(idle_before / gateways * 1000, 3),
                "idle_cpu_after_ms_per_gateway_s": round(idle_after / gateways * 1000, 3),
                "reaction_cpu_ms_per_gateway": round(spent / rounds / gateways * 1000, 3),
                "reaction_cpu_noise_ms_per_gateway": round(noise / rounds / gateways * 1000,
                                                           3)}


def run(ctx: Context) -> list[Row]:
    rounds = 4 if ctx.quick else 30
    etcd = start_etcd(ctx, "etcd5")
    rows: list[Row] = []
    fleets = (   # watch, gateways, processes, one probe worker per process (else per gateway)
        (True, 100, 4, True), (True, 100, 4, False), (False, 100, 4, True), (True, 1, 1, False))
    per_gateway_worker: Row | None = None
    try:
        for watch, gateways, procs, shared in fleets:
            what = f"{'watch' if watch else 'poll only'}, {gateways} gateways" + (
                ", one probe worker per gateway" if gateways > 1 and not shared else "")
            try:
                res = asyncio.run(_fleet_rounds(ctx, etcd.endpoints, watch=watch,
                                                gateways=gateways, procs=procs,
                                                rounds=rounds if watch else max(3, rounds // 2),
                                                shared_worker=shared))
            except WorkerError as e:
                rows.append(Row(5, f"propagation ({what})", None, "ms", 0,
                                note=f"not measured: {e}"))
                continue
            each = summary(res["each"])
            extra = {"gateways": gateways, "processes": procs, "poll_interval_s": POLL,
                     "probe_worker": "one per process" if shared else "one per gateway",
                     "rounds": res["rounds"], "missing_applies": res["missing"],
                     "per_gateway_median_ms": ms(each["median"]),
                     "per_gateway_p99_ms": ms(each["p99"]), "per_gateway_samples": len(res["each"]),
                     "put_p99_ms": ms(summary(res["puts"])["p99"]),
                     "idle_cpu_ms_per_gateway_s": res["idle_cpu_ms_per_gateway_s"],
                     "reaction_cpu_ms_per_gateway": res["reaction_cpu_ms_per_gateway"],
                     "reaction_cpu_noise_ms_per_gateway":
                         res["reaction_cpu_noise_ms_per_gateway"],
                     "idle_cpu_after_ms_per_gateway_s": res["idle_cpu_after_ms_per_gateway_s"],
                     "fleet_loop_lag_max_ms": res["fleet_loop_lag_max_ms"],
                     "gateway_polls": res["polls"], "gateway_failed_polls": res["failed_polls"]}
            cpu = res["reaction_cpu_ms_per_gateway"]
            noise = res["reaction_cpu_noise_ms_per_gateway"]
            per_change = (f"{cpu} ms CPU per gateway per change (+/- {noise})" if cpu > noise
                          else f"CPU per gateway per change below the estimate's noise "
                               f"({cpu} +/- {noise} ms)")
            note = (f"last of {gateways} gateways; per gateway p99 {ms(each['p99'])} ms; "
                    f"{per_change}, "
                    f"{procs} processes on 2 cores (their event loops stalled up to "
                    f"{res['fleet_loop_lag_max_ms']:.0f} ms); {res['failed_polls']} of "
                    f"{res['polls']} "
                    f"gateway polls failed; {res['missing']} applies missing")
            if watch and gateways == 1:
                rows.append(latency_row(5, "propagation, watch, 1 gateway alone (reference)",
                                        res["every"], note=note, **extra))
            elif watch and not shared:
                per_gateway_worker = latency_row(
                    5, "propagation, watch, 100 gateways, one probe worker per gateway "
                       "(25 probe threads per process)", res["every"], note=note, **extra)
                rows.append(per_gateway_worker)
            elif watch:
                rows.append(latency_row(5, "propagation, watch, 100 gateways (write -> every "
                                           "gateway)",
                                        res["every"], goal="p99 <= 50 ms", goal_s=0.050,
                                        note=note + "; one probe worker per fleet process, "
                                        "as one per gateway process in a deployment",
                                        **extra))
            else:
                rows.append(latency_row(5, "propagation, poll only, 100 gateways (write -> "
                                           "every gateway)",
                                        res["every"], floor_s=POLL,
                                        goal=f"p99 <= 1 poll + 0.05 s "
                                             f"({(POLL + POLL_MARGIN) * 1000:.0f} ms)",
                                        goal_s=POLL + POLL_MARGIN, note=note, **extra))
            if res["missing"]:
                rows[-1].met = False
        head = next((r for r in rows if r.goal == "p99 <= 50 ms"), None)
        if head is not None and per_gateway_worker is not None and head.value \
                and per_gateway_worker.value:
            head.baseline = per_gateway_worker.value
            head.ratio = round(per_gateway_worker.value / head.value, 2)
            head.ratio_of = "one worker per gateway / one per process"
        alone = next((r for r in rows if r.name.startswith("propagation, watch, 1 gateway alone")),
                     None)
        if head is not None and alone is not None and head.value and alone.value:
            # the host's own floor, measured in the same run: one gateway with a core to itself
            head.extra["alone_p99_ms"] = alone.value
            head.extra["ratio_to_alone"] = round(head.value / alone.value, 2)
    finally:
        etcd.stop()
    return rows
