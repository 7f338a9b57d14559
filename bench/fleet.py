"""Child process: many real ``ClusterGateway`` instances on one event loop (figures 5 and 7).

    python -m bench.fleet '{"endpoints": [...], "cluster": "c1", "count": 50, "first": 0,
                            "watch": true, "poll_interval": 1.0, "call_timeout": 0.5,
                            "expect_in": 8}'

Each gateway has its own store (own connections), registration, card workers and, with
``watch``, its own registry watch: the library exactly as a gateway process runs it. Lines:
``ready`` once every gateway applied a registry with ``expect_in`` cards in service; then one
``applied`` line per (gateway, generation) at the moment the gateway published that generation's
first change event (``t`` is ``time.monotonic()``, comparable across processes), sent in one
``applied_batch`` line per generation (a list of such lines, the times taken when each gateway
published): the reporting is the bench's, not the gateways', so it costs one write once this
process's gateways all applied it (or ``BATCH_BOUND`` after the first did), not one per gateway
in the middle of their reaction. EOF on stdin stops every gateway.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
import time
from typing import Any

from awide_cluster.cards.worker import ProbeWorker
from awide_gateway_cluster import ClusterGateway, parse_config
from awide_harness.waits import WaitTimeout, wait_until
from bench.childio import emit, gateway_doc, stdin_lines


def gateway_config(spec: dict[str, Any], i: int) -> Any:
    return parse_config(gateway_doc(spec, i))


# a generation's batch is sent at the latest this long after the first of its gateways applied
# it (one that never applies it must not hold back the others' report)
BATCH_BOUND = 0.25


class Applied:
    """The gateways' publish times, per generation, sent as one line per generation."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.pending: dict[int, list[dict[str, Any]]] = {}

    def add(self, gw: int, gen: int, t: float) -> None:
        batch = self.pending.get(gen)
        if batch is None:
            batch = self.pending[gen] = []
            asyncio.get_running_loop().call_later(BATCH_BOUND, self.flush, gen)
        batch.append({"kind": "applied", "gw": gw, "gen": gen, "t": t})
        if len(batch) >= self.count:
            self.flush(gen)

    def flush(self, gen: int) -> None:
        batch = self.pending.pop(gen, None)
        if batch:
            emit("applied_batch", applied=batch)


async def follow(i: int, gw: ClusterGateway, applied: Applied) -> None:
    seen = gw.snapshot().generation
    async for ev in gw.subscribe(maxsize=10000):
        if ev.generation > seen:
            seen = ev.generation
            applied.add(i, ev.generation, time.monotonic())


class LoopLag:
    """How late a 10 ms timer fires on this loop (the process's own stalls: CPU starvation or
    work that holds the loop), as the max since the last ``take``."""

    def __init__(self) -> None:
        self.max = 0.0
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            t = time.monotonic()
            await asyncio.sleep(0.01)   # not a wait: the loop-lag probe's period
            self.max = max(self.max, time.monotonic() - t - 0.01)

    def take(self) -> float:
        m, self.max = self.max, 0.0
        return m


async def main(spec: dict[str, Any]) -> None:
    logging.basicConfig(level=logging.ERROR, stream=sys.stderr)
    first, count = int(spec.get("first", 0)), int(spec["count"])
    expect_in = int(spec.get("expect_in", 0))
    t0 = time.monotonic()
    # one probe worker per gateway, as in a gateway process of its own; with "shared_worker",
    # one for every gateway of this process (one thread, not one per gateway, under one GIL)
    shared = ProbeWorker(name="fleet-probes") if spec.get("shared_worker") else None
    gws = [ClusterGateway(gateway_config(spec, first + k), probe_worker=shared)
           for k in range(count)]
    # start a few at a time: a burst of 100 lease grants and layout checks is not a gateway's life
    sem = asyncio.Semaphore(10)

    async def start(gw: ClusterGateway) -> None:
        async with sem:
            await gw.start()

    await asyncio.gather(*(start(g) for g in gws))
    try:
        await wait_until(lambda: all(len(g.snapshot().in_service) >= expect_in
                                     and g.snapshot().generation > 0 for g in gws),
                         float(spec.get("ready_bound", 60.0)), "every gateway ready", poll=0.05)
    except WaitTimeout:
        pass                            # reported: ``ready`` counts the gateways that are
    ready = sum(len(g.snapshot().in_service) >= expect_in for g in gws)
    applied = Applied(count)
    followers = [asyncio.create_task(follow(first + k, g, applied)) for k, g in enumerate(gws)]
    lag = LoopLag()
    emit("ready", ready=ready, count=count, start_s=round(time.monotonic() - t0, 3),
         generations=sorted({g.snapshot().generation for g in gws}))
    async for cmd in stdin_lines():
        if cmd.get("cmd") == "lag":
            emit("lag", max_ms=round(lag.take() * 1000, 1), cpu_s=round(time.process_time(), 3),
                 failed_polls=sum(g.stats().failed_polls for g in gws),
                 polls=sum(g.stats().polls for g in gws))
        elif cmd.get("cmd") == "views":
            emit("views", views=[{"gw": first + k, "gen": g.snapshot().generation,
                                  "in": len(g.snapshot().in_service),
                                  "stats_failed": g.stats().failed_polls}
                                 for k, g in enumerate(gws)])
    lag.task.cancel()
    for f in followers:
        f.cancel()
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(10.0):
            await asyncio.gather(*(g.stop() for g in gws), return_exceptions=True)


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
