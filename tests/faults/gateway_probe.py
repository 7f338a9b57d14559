"""A gateway process for the fault campaign: a real ``ClusterGateway`` plus instruments.

    python -m tests.faults.gateway_probe --config gw.yaml

It runs the library exactly as a pod would (its own store, nvme-cli, label reader), with two
instruments around it, both passed in or running beside it (nothing is patched):

- the etcd store is wrapped (``TimedStore``): every registry poll's duration and outcome is
  printed as a ``poll`` line;
- a thread calls the hot-path accessors (``snapshot()``, ``placement.dialog``) every 10 ms and
  an event-loop task measures the loop's lag; the worst of each per half second is an
  ``access`` line.

One JSON object per line on stdout, each with ``type``, ``t`` (``time.monotonic()``, one clock
for all processes) and ``gateway``: ``started``, ``table`` (whenever the slot view changed:
generation and placed slots with card, in-service, serial, model, device, why; checked
every 20 ms), ``poll``
(``dur``, ``ok``), ``access`` (``accessor_max``, ``loop_lag_max``, ``calls``), ``stopped``.
``parse_line`` (pure) turns a line back into a ``history`` record.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import threading
import time
from typing import Any

from tests.faults.campaign_record import AccessObs, GatewayTable, PollObs, SlotObs

ACCESS_PERIOD = 0.5
ACCESS_EVERY = 0.01
LAG_EVERY = 0.02
TABLE_EVERY = 0.02


# ---------------------------------------------------------------- parsing (pure)

def parse_line(line: bytes | str) -> object | None:
    """A ``history`` record from one line, or None (not a record, or not JSON)."""
    try:
        doc = json.loads(line)
        kind, t, gw = doc["type"], float(doc["t"]), str(doc["gateway"])
        if kind == "table":
            slots = tuple(SlotObs(slot=int(s["slot"]), card=str(s["card"]),
                                  in_service=bool(s["in"]), serial=str(s.get("serial", "")),
                                  model=str(s.get("model", "")), device=s.get("device"),
                                  why=str(s.get("why", "")))
                          for s in doc["slots"])
            return GatewayTable(t=t, gateway=gw, generation=int(doc["generation"]), slots=slots)
        if kind == "poll":
            return PollObs(t=t, gateway=gw, duration=float(doc["dur"]), ok=bool(doc["ok"]))
        if kind == "access":
            return AccessObs(t=t, gateway=gw, accessor_max=float(doc["accessor_max"]),
                             loop_lag_max=float(doc["loop_lag_max"]), calls=int(doc["calls"]))
    except (ValueError, KeyError, TypeError):
        return None
    return None


# ---------------------------------------------------------------- the program

_out_lock = threading.Lock()


def emit(kind: str, gateway: str, **fields: Any) -> None:
    line = json.dumps({"type": kind, "t": time.monotonic(), "gateway": gateway, **fields})
    with _out_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


class TimedStore:
    """Delegates to an ``EtcdStore``; times each registry poll (a range of ``registry``)."""

    def __init__(self, inner: Any, gateway: str) -> None:
        self._inner, self._gateway = inner, gateway

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def range(self, key: str, **kw: Any) -> Any:
        if key != "registry":
            return await self._inner.range(key, **kw)
        start = time.monotonic()
        ok = False
        try:
            result = await self._inner.range(key, **kw)
            ok = True
            return result
        finally:
            emit("poll", self._gateway, dur=round(time.monotonic() - start, 4), ok=ok)


def _store(cfg: Any) -> Any:
    from awide_cluster.contract import keys
    from awide_cluster.store import EtcdStore, StoreConfig
    e = cfg.etcd
    return EtcdStore(StoreConfig(endpoints=tuple(e.endpoints), prefix=keys.prefix(cfg.cluster),
                                 call_timeout=e.call_timeout, hedge_after=e.hedge_after))


def _table(gw: Any) -> None:
    v = gw.snapshot()
    slots = [{"slot": s.slot, "card": s.card_id, "in": s.in_service, "serial": s.serial,
              "model": s.model, "device": s.device, "why": s.why}
             for s in v.slots if s.card_id is not None]
    emit("table", gw.id, generation=v.generation, slots=slots)


class Instruments:
    def __init__(self, gw: Any) -> None:
        self.gw = gw
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self.accessor_max = 0.0
        self.lag_max = 0.0
        self.calls = 0

    def accessor_thread(self) -> None:
        n = 0
        while not self.stop.is_set():
            n += 1
            t0 = time.monotonic()
            v = self.gw.snapshot()
            self.gw.placement.dialog(f"conversation-{n % 97}")
            _ = v.in_service
            dt = time.monotonic() - t0
            with self._lock:
                self.accessor_max = max(self.accessor_max, dt)
                self.calls += 1
            self.stop.wait(ACCESS_EVERY)

    async def lag_task(self) -> None:
        while True:
            t0 = time.monotonic()
            await asyncio.sleep(LAG_EVERY)     # not a wait: the lag probe's period
            lag = time.monotonic() - t0 - LAG_EVERY
            with self._lock:
                self.lag_max = max(self.lag_max, lag)

    async def report_task(self) -> None:
        while True:
            await asyncio.sleep(ACCESS_PERIOD)     # not a wait: the report period
            with self._lock:
                acc, lag, calls = self.accessor_max, self.lag_max, self.calls
                self.accessor_max = self.lag_max = 0.0
                self.calls = 0
            emit("access", self.gw.id, accessor_max=round(acc, 4),
                 loop_lag_max=round(max(0.0, lag), 4), calls=calls)


async def run(config_path: str) -> int:
    from awide_gateway_cluster import ClusterGateway, load_config
    cfg = load_config(config_path)
    inner = _store(cfg)
    gw = ClusterGateway(cfg, store=TimedStore(inner, cfg.id))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await gw.start()
    emit("started", gw.id)
    _table(gw)
    inst = Instruments(gw)
    thread = threading.Thread(target=inst.accessor_thread, name="accessors", daemon=True)
    thread.start()

    async def tables() -> None:
        shown = gw.snapshot()
        while True:                 # the view is swapped (a new object) on every change
            await asyncio.sleep(TABLE_EVERY)     # not a wait: the table's refresh period
            now = gw.snapshot()
            if now is not shown:
                shown = now
                _table(gw)

    tasks = [asyncio.create_task(c) for c in (tables(), inst.lag_task(), inst.report_task())]
    try:
        await stop.wait()
    finally:
        inst.stop.set()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await gw.stop()
        await inner.close()
        emit("stopped", gw.id)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="a ClusterGateway with timing instruments")
    ap.add_argument("--config", required=True)
    args = ap.parse_args(argv)
    return asyncio.run(run(args.config))


if __name__ == "__main__":
    sys.exit(main())
