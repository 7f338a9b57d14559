"""Child process of figure 9: real ``ClusterGateway`` instances started as a storm.

    python -m bench.storm '{"endpoints": [...], "cluster": "c1", "count": 100, "first": 0,
                            "total": 400, "spread": 2.0, "naive": false, "expect_in": 8,
                            "id_base": 50}'

Once its gateways are built it says ``built`` and waits for ``{"cmd": "go", "start_at": t}``;
gateway ``first + k`` then starts at ``t + (first + k) * spread / total`` (``time.monotonic``
is the same clock in every process), each in a task of its own: a rollout that restarts every
pod, not a paced start. Each gateway has its own store, timed (``TimedStore``: every key read's
latency and outcome, the layout writes counted). ``naive``: the retry budget off (counted, never
refusing) and no jitter (the registration right after the first read, a failing loop asking
again every interval): how a gateway started before this figure was built.

Lines: ``started`` once every gateway is fresh (or ``fresh_bound`` after the last start), with
each gateway's start and fresh times; then on ``{"cmd": "report", "t0": .., "t1": ..}`` a
``report`` line: the key reads of [t0, t1) (count, over ``bound``, failed), the extra hedged
reads, grants, layout writes and registration failures. EOF on stdin stops every gateway.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import sys
import time
from typing import Any

from awide_cluster.cards.worker import ProbeWorker
from awide_cluster.contract import keys
from awide_cluster.store import EtcdStore
from awide_cluster.store.build import store_from
from awide_cluster.store.hedge import RetryBudget
from awide_gateway_cluster import ClusterGateway
from bench.childio import emit, stdin_lines
from bench.fleet import gateway_config

READ = "/v3/kv/range"


class TimedStore(EtcdStore):
    """The gateway's store, its key reads timed and its layout writes counted."""

    def __init__(self, inner: EtcdStore, *, naive: bool) -> None:
        super().__init__(inner.config)
        if naive:       # counted, never refusing
            self.session.budget = RetryBudget(ratio=0.0, burst=1e12, start=1e12)
        self.reads: list[tuple[float, float, bool]] = []     # (start, latency, ok)
        self.layout_writes = 0
        # every HTTP request this store sent to etcd, hedges included: (when, kind)
        self.sent: list[tuple[float, str]] = []
        transport = self.session.transport
        post, open_stream = transport.post, transport.open_stream

        async def counted_post(endpoint: str, path: str, body: dict[str, Any],
                               **kw: Any) -> dict[str, Any]:
            self.sent.append((time.monotonic(), request_kind(path, body)))
            return await post(endpoint, path, body, **kw)

        async def counted_stream(endpoint: str, path: str, body: dict[str, Any]) -> Any:
            self.sent.append((time.monotonic(), "watch open"))
            return await open_stream(endpoint, path, body)

        transport.post = counted_post              # type: ignore[method-assign]
        transport.open_stream = counted_stream     # type: ignore[method-assign]

    async def read(self, path: str, body: dict[str, Any], timeout: float | None,
                   what: str, *, max_bytes: int | None = None) -> tuple[str, dict[str, Any]]:
        if path != READ:
            return await super().read(path, body, timeout, what, max_bytes=max_bytes)
        t = time.monotonic()
        ok = False
        try:
            got = await super().read(path, body, timeout, what, max_bytes=max_bytes)
            ok = True
            return got
        finally:
            self.reads.append((t, time.monotonic() - t, ok))

    async def create(self, key: str, value: bytes | str, *, lease: int = 0,
                     timeout: float | None = None) -> int:
        if key.startswith(keys.LAYOUTS):
            self.layout_writes += 1
        return await super().create(key, value, lease=lease, timeout=timeout)


def request_kind(path: str, body: dict[str, Any]) -> str:
    """What an HTTP request to etcd is, for the count of a start's requests by kind."""
    if path == READ:
        return "range serializable" if body.get("serializable") else "range linearizable"
    return {"/v3/kv/put": "put", "/v3/kv/txn": "txn", "/v3/lease/grant": "lease grant",
            "/v3/lease/keepalive": "keepalive", "/v3/lease/revoke": "revoke",
            "/v3/kv/deleterange": "delete"}.get(path, path)


def start_mix(stores: list[TimedStore], sched: list[float], span: float) -> dict[str, int]:
    """The requests each gateway sent in its first ``span`` seconds from its scheduled start,
    summed by kind."""
    out: dict[str, int] = {}
    for store, s in zip(stores, sched, strict=True):
        for t, kind in store.sent:
            if s <= t < s + span:
                out[kind] = out.get(kind, 0) + 1
    return out


class NoJitter(random.Random):
    """No random phase or delay: every start-up delay and back-off at its low end."""

    def random(self) -> float:
        return 0.0

    def uniform(self, a: float, b: float) -> float:
        return a

    def getrandbits(self, k: int) -> int:
        # ids stay random (a lease id of each gateway's own): ``randrange`` draws its integers
        # here, and at its low end every gateway would ask for the same lease id
        return super().getrandbits(k)


async def main(spec: dict[str, Any]) -> None:
    logging.basicConfig(level=logging.ERROR, stream=sys.stderr)
    first, count, total = int(spec.get("first", 0)), int(spec["count"]), int(spec["total"])
    spread = float(spec["spread"])
    naive = bool(spec.get("naive"))
    expect_in = int(spec.get("expect_in", 0))
    shared = ProbeWorker(name="storm-probes")
    gws: list[ClusterGateway] = []
    stores: list[TimedStore] = []
    for k in range(count):
        cfg = gateway_config(spec, int(spec.get("id_base", 0)) + first + k)
        store = TimedStore(store_from(cfg.etcd, cfg.cluster), naive=naive)
        stores.append(store)
        gws.append(ClusterGateway(cfg, store=store, probe_worker=shared,
                                  rng=NoJitter() if naive else None))
    emit("built", count=count)
    commands = stdin_lines()
    start_at = 0.0
    async for cmd in commands:
        if cmd.get("cmd") == "go":
            start_at = float(cmd["start_at"])
            break
    sched = [start_at + (first + k) * spread / total for k in range(count)]
    started: list[float | None] = [None] * count
    fresh: list[float | None] = [None] * count
    errors: list[str] = []

    def is_fresh(gw: ClusterGateway) -> bool:
        v = gw.snapshot()
        return v.generation > 0 and len(v.in_service) >= expect_in and not gw.stats().stale

    async def one(k: int) -> None:
        await asyncio.sleep(max(0.0, sched[k] - time.monotonic()))  # not a wait: the schedule
        try:
            await gws[k].start()
        except Exception as e:  # noqa: BLE001 - reported, the others go on
            errors.append(f"{type(e).__name__}: {e}")
            return
        started[k] = time.monotonic()
        while not is_fresh(gws[k]):
            await asyncio.sleep(0.02)   # not a wait: the freshness sampler's period
        fresh[k] = time.monotonic()

    tasks = [asyncio.create_task(one(k)) for k in range(count)]
    bound = sched[-1] + float(spec.get("fresh_bound", 30.0)) - time.monotonic()
    await asyncio.wait(tasks, timeout=max(1.0, bound))
    emit("started", sched=sched, started=started, fresh=fresh, errors=errors[:5],
         failed_starts=len(errors))
    async for cmd in commands:
        if cmd.get("cmd") == "report":
            t0, t1 = float(cmd["t0"]), float(cmd["t1"])
            reads = [r for s in stores for r in s.reads if t0 <= r[0] < t1]
            emit("report", reads=len(reads), over=sum(1 for r in reads if r[1] > 0.5),
                 failed=sum(1 for r in reads if not r[2]),
                 extra=sum(s.session.budget.extra for s in stores),
                 refused=sum(s.session.budget.refused for s in stores),
                 deferred=sum(s.session.budget.deferred for s in stores),
                 calls=sum(s.session.budget.calls for s in stores),
                 grants=sum(g._registration.grants if g._registration else 0 for g in gws),
                 layout_writes=sum(s.layout_writes for s in stores),
                 registration_failures=sum(g.stats().registration_failures for g in gws),
                 stale=sum(1 for g in gws if g.stats().stale),
                 start_mix=start_mix(stores, sched, float(cmd.get("span", 5.0))),
                 sent=sum(1 for s in stores for r in s.sent if t0 <= r[0] < t1),
                 watch_restarts=sum(g.stats().watch_restarts for g in gws),
                 cpu_s=round(time.process_time(), 3))
    for t in tasks:
        t.cancel()
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(15.0):
            await asyncio.gather(*(g.stop() for g in gws), return_exceptions=True)
    for s in stores:
        with contextlib.suppress(Exception):
            await s.close()


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
