"""Child process: simulated gateways polling the registry at 1 Hz (figures 6 and 7).

    python -m bench.pollers '{"endpoints": [...], "cluster": "c1", "first": 0, "seed": 1,
                              "rotate": true, "call_timeout": 0.5}'

Each simulated gateway has its own ``EtcdStore`` (own connection) and polls at a random phase,
once per ``interval`` on a fixed schedule. ``kind``:

- ``follower``: the gateway library's own poll, ``Follower.poll()`` (a ``range`` with
  ``min_mod_revision``: an unchanged registry costs a ~200-byte answer and no decoding);
- ``naive``: fetch the full registry and decode it (``contract.registry.decode``) every time.

Commands on stdin (JSON lines), answers on stdout:
- ``{"cmd": "set", "count": N, "kind": "follower"}`` -> ``set``: N pollers of that kind run;
- ``{"cmd": "window", "t0": T0, "t1": T1}`` -> ``window``: the polls that started in
  [T0, T1) (``time.monotonic()``), once the last of them finished: latencies (ms), failures,
  polls over the bound, how late the polls started (the load generator's own lag).
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import sys
import time
from typing import Any

from awide_cluster.contract import keys
from awide_cluster.contract.registry import decode
from awide_gateway_cluster.follower import Follower
from bench.childio import emit, stdin_lines
from bench.common import store_for
from bench.proc import poll_window


class Fleet:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.call = float(spec.get("call_timeout", 0.5))
        self.interval = float(spec.get("interval", 1.0))
        self.rng = random.Random(int(spec.get("seed", 1)))
        self.kind = "follower"
        self.tasks: list[asyncio.Task[None]] = []
        # (start, latency, ok, lateness)
        self.records: list[tuple[float, float, bool, float]] = []

    def set(self, count: int, kind: str) -> None:
        self.kind = kind
        while len(self.tasks) < count:
            i = int(self.spec.get("first", 0)) + len(self.tasks)
            self.tasks.append(asyncio.create_task(self.poller(i)))
        while len(self.tasks) > count:
            self.tasks.pop().cancel()

    async def poller(self, i: int) -> None:
        store = store_for(self.spec["endpoints"], self.spec["cluster"],
                          call_timeout=self.call, rotate=i if self.spec.get("rotate", True) else 0)
        follower = Follower(store, cluster=self.spec["cluster"], call_timeout=self.call,
                            clock=time.monotonic)
        due = time.monotonic() + self.rng.uniform(0, self.interval)
        try:
            while True:
                await asyncio.sleep(max(0.0, due - time.monotonic()))   # pacing
                start = time.monotonic()
                ok = True
                if self.kind == "follower":
                    d = await follower.poll()
                    ok = d.outcome in ("unchanged", "applied")
                else:
                    try:
                        async with asyncio.timeout(self.call * 1.2 + 0.05):
                            r = await store.range(keys.REGISTRY, timeout=self.call)
                        decode(r.kvs[0].value)
                    except Exception:  # noqa: BLE001 - any failure is a failed poll
                        ok = False
                end = time.monotonic()
                self.records.append((start, end - start, ok, start - due))
                due += self.interval
                if due < end:                       # fell behind: skip, never burst
                    due = end + self.rng.uniform(0, self.interval)
        finally:
            await store.close()

    async def window(self, t0: float, t1: float) -> dict[str, Any]:
        # not a wait on a condition: every poll started before t1 ends within its call bound
        await asyncio.sleep(max(0.0, t1 - time.monotonic()) + self.call * 1.2 + 0.2)
        summary, self.records = poll_window(self.records, t0, t1, self.call)
        return summary


async def main(spec: dict[str, Any]) -> None:
    logging.basicConfig(level=logging.ERROR, stream=sys.stderr)
    fleet = Fleet(spec)
    emit("hello")
    async for cmd in stdin_lines():
        if cmd.get("cmd") == "set":
            fleet.set(int(cmd["count"]), cmd.get("kind", "follower"))
            emit("set", count=len(fleet.tasks))
        elif cmd.get("cmd") == "window":
            emit("window", **(await fleet.window(float(cmd["t0"]), float(cmd["t1"]))))
    fleet.set(0, fleet.kind)
    await asyncio.sleep(0.2)    # not a wait: the cancelled pollers close their stores


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
