"""A burst of registry reads: many gateway followers polling at once, for a while.

    python -m tests.faults.burst --endpoints http://10.250.3.11:2379,... --cluster campaign \
        --readers 128 --duration 1.0

Each reader is the gateway library's own ``Follower`` on its own ``EtcdStore`` (its own
connections), polling back to back with a few milliseconds of random pause — far denser than
gateways at random phases. Prints one JSON line: polls, failed polls, worst poll time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time

from awide_cluster.contract import keys
from awide_cluster.store import EtcdStore, StoreConfig
from awide_gateway_cluster.follower import Follower


async def reader(cfg: StoreConfig, cluster: str, call: float, until: float,
                 stats: dict[str, float]) -> None:
    async with EtcdStore(cfg) as store:
        f = Follower(store, cluster=cluster, call_timeout=call, clock=time.monotonic)
        while time.monotonic() < until:
            t0 = time.monotonic()
            d = await f.poll()
            dt = time.monotonic() - t0
            stats["polls"] += 1
            stats["failed"] += d.outcome == "failed"
            stats["max"] = max(stats["max"], dt)
            await asyncio.sleep(random.uniform(0, 0.005))


async def main_async(args: argparse.Namespace) -> dict[str, float]:
    cfg = StoreConfig(endpoints=tuple(args.endpoints.split(",")),
                      prefix=keys.prefix(args.cluster), call_timeout=args.call_timeout)
    stats = {"polls": 0, "failed": 0, "max": 0.0}
    until = time.monotonic() + args.duration
    async with asyncio.timeout(args.duration + 3 * args.call_timeout + 5.0):
        await asyncio.gather(*(reader(cfg, args.cluster, args.call_timeout, until, stats)
                               for _ in range(args.readers)))
    return stats


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--endpoints", required=True)
    ap.add_argument("--cluster", required=True)
    ap.add_argument("--readers", type=int, default=64)
    ap.add_argument("--duration", type=float, default=1.0)
    ap.add_argument("--call-timeout", type=float, default=0.5)
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    stats = asyncio.run(main_async(args))
    stats["elapsed"] = round(time.monotonic() - t0, 3)
    stats["max"] = round(stats["max"], 4)
    print(json.dumps({"burst": stats, "readers": args.readers}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
