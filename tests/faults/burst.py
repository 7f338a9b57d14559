"""A burst of registry reads: many gateway followers polling at once, for a while.

    python -m tests.faults.burst --endpoints http://10.250.3.11:2379,... --cluster campaign \
        --readers 128 --duration 1.0
    python -m tests.faults.burst --endpoints ... --cluster campaign --serve FIFO
        # then one burst per line {"readers": 128, "duration": 1.0} written to the FIFO, one
        # answer line each on stdout

Each reader is the gateway library's own ``Follower`` on its own ``EtcdStore`` (its own
connections), polling back to back with a few milliseconds of random pause — far denser than
gateways at random phases. Prints one JSON line: polls, failed polls, worst poll time. The
first burst of a worker also pays for the followers' first full reads.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import select
import sys
import time
from pathlib import Path
from typing import Any

from awide_cluster.contract import keys
from awide_cluster.store import EtcdStore, StoreConfig
from awide_gateway_cluster.follower import Follower
from awide_harness.waits import WaitTimeout, wait_until_sync


class Readers:
    """Followers, each on its own ``EtcdStore`` (its own connections), kept between bursts
    like the gateways they stand for (so a burst polls; it does not connect)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.cfg = StoreConfig(endpoints=tuple(args.endpoints.split(",")),
                               prefix=keys.prefix(args.cluster), call_timeout=args.call_timeout)
        self.followers: list[Follower] = []
        self.stores: list[EtcdStore] = []

    def take(self, n: int) -> list[Follower]:
        while len(self.followers) < n:
            store = EtcdStore(self.cfg)
            self.stores.append(store)
            self.followers.append(Follower(store, cluster=self.args.cluster,
                                           call_timeout=self.args.call_timeout,
                                           clock=time.monotonic))
        return self.followers[:n]

    async def close(self) -> None:
        for s in self.stores:
            await s.close()


async def poll_until(f: Follower, until: float, stats: dict[str, float]) -> None:
    while time.monotonic() < until:
        t0 = time.monotonic()
        d = await f.poll()
        stats["polls"] += 1
        stats["failed"] += d.outcome == "failed"
        stats["max"] = max(stats["max"], time.monotonic() - t0)
        await asyncio.sleep(random.uniform(0, 0.005))   # not a wait: jitter between polls


async def burst(readers: Readers, n: int, duration: float) -> dict[str, object]:
    stats: dict[str, float] = {"polls": 0, "failed": 0, "max": 0.0}
    t0 = time.monotonic()
    until = t0 + duration
    call = readers.args.call_timeout
    async with asyncio.timeout(duration + 3 * call + 5.0):
        await asyncio.gather(*(poll_until(f, until, stats) for f in readers.take(n)))
    return {"burst": {**stats, "max": round(stats["max"], 4),
                      "elapsed": round(time.monotonic() - t0, 3)}, "readers": n}


async def serve(args: argparse.Namespace) -> None:
    """One burst per line of the FIFO (JSON ``{"readers", "duration"}``), one JSON answer
    each on stdout; ends when the writer closes the FIFO."""
    loop = asyncio.get_running_loop()
    readers = Readers(args)
    requests = open(args.serve, encoding="utf-8")     # noqa: SIM115 - read until EOF
    try:
        while True:
            line = await loop.run_in_executor(None, requests.readline)
            if not line:
                return
            try:
                ask = json.loads(line)
                out = await burst(readers, int(ask["readers"]), float(ask["duration"]))
            except (ValueError, KeyError, TypeError, TimeoutError) as e:
                out = {"error": f"{type(e).__name__}: {e}"}
            print(json.dumps(out), flush=True)
    finally:
        await readers.close()


async def once(args: argparse.Namespace) -> dict[str, object]:
    readers = Readers(args)
    try:
        return await burst(readers, args.readers, args.duration)
    finally:
        await readers.close()


class BurstWorker:
    """The campaign's side: a ``--serve`` worker started on first use (through the harness's
    ``Launcher``, so in a namespace when asked), fed through a FIFO, one summary line back per
    burst. The followers' calls are bounded at 1 s: they are load, and 200 of them saturate
    their own process first."""

    def __init__(self, launcher: Any, fifo: Path, args: list[str], *, netns: str | None,
                 env: dict[str, str]) -> None:
        self.launcher, self.fifo, self.args = launcher, fifo, args
        self.netns, self.env = netns, env
        self.proc: Any = None
        self.fd = -1

    def run(self, readers: int, duration: float) -> str:
        if self.proc is None or not self.proc.alive():
            self._start()
        out = self.proc.popen.stdout
        os.write(self.fd, (json.dumps({"readers": readers, "duration": duration})
                           + "\n").encode())
        ready, _, _ = select.select([out], [], [], duration + 20.0)
        if not ready:
            self.proc.kill()
            return "burst worker did not answer"
        return out.readline().decode(errors="replace").strip() or "burst worker exited"

    def _start(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
        if not self.fifo.exists():
            os.mkfifo(self.fifo)
        self.proc = self.launcher.spawn(
            "burst", [sys.executable, "-m", "tests.faults.burst", "--serve", str(self.fifo),
                      "--call-timeout", "1.0", *self.args],
            netns=self.netns, pipe_stdout=True, env=self.env)
        def alive() -> None:
            if not self.proc.alive():
                raise WaitTimeout("the burst worker to open its FIFO", 10.0, "it exited")

        try:        # open for writing once the worker has it open for reading (ENXIO before)
            self.fd = wait_until_sync(
                lambda: [os.open(self.fifo, os.O_WRONLY | os.O_NONBLOCK)], 10.0,
                "the burst worker opens its FIFO", ignore=(OSError,), check=alive)[0]
        except WaitTimeout as e:
            raise RuntimeError(f"the burst worker did not open its FIFO ({e}):\n"
                               + self.proc.log_tail()) from None
        os.set_blocking(self.fd, True)

    def close(self) -> None:
        """The worker reads EOF and exits (the launcher reaps it)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--endpoints", required=True)
    ap.add_argument("--cluster", required=True)
    ap.add_argument("--readers", type=int, default=64)
    ap.add_argument("--duration", type=float, default=1.0)
    ap.add_argument("--call-timeout", type=float, default=0.5)
    ap.add_argument("--serve", metavar="FIFO", default="",
                    help="bursts on request, one per line written to this FIFO")
    args = ap.parse_args(argv)
    if args.serve:
        asyncio.run(serve(args))
    else:
        print(json.dumps(asyncio.run(once(args))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
