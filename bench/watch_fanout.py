"""``python -m bench.watch_fanout [--streams 100] [--size 3000] [--puts 30]``: etcd's own
fan-out of one change to many watches, with no gateway.

A fresh 3-member etcd (the bench's settings); ``--streams`` raw watch streams on one key
through etcd's JSON gateway, spread over the members, read by this one asyncio process, which
does nothing else (a line is only searched for ``"events"`` and timed). Then ``--puts`` puts
of a ``--size``-byte value, 1.2 s apart, each through a member in turn: per put, when the
first and the last stream's event arrived after the put was sent. Figure 5 is the
gateways' figure; this is the floor etcd itself sets for it (``--streams 1``: one watch).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import shutil
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path

from bench import calibrate
from bench.common import Context, find_bench_etcd, start_etcd

KEY = base64.b64encode(b"/fanout/registry").decode()


async def _stream(endpoint: str, arrivals: list[float], created: list[int]) -> None:
    host, port = endpoint.split("//")[1].rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    body = json.dumps({"create_request": {"key": KEY}}).encode()
    writer.write(f"POST /v3/watch HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json"
                 f"\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
    await writer.drain()
    while line := await reader.readline():
        if b'"created"' in line:
            created.append(1)
        if b'"events"' in line:
            arrivals.append(time.monotonic())
    writer.close()


def _put(endpoint: str, value: str) -> None:
    body = json.dumps({"key": KEY, "value": base64.b64encode(value.encode()).decode()})
    req = urllib.request.Request(endpoint + "/v3/kv/put", body.encode())
    with urllib.request.urlopen(req, timeout=5) as answer:      # noqa: S310 - loopback
        answer.read()


async def _run(endpoints: list[str], streams: int, size: int, puts: int
               ) -> list[tuple[float, float, int]]:
    arrivals: list[float] = []
    created: list[int] = []
    tasks = [asyncio.create_task(_stream(endpoints[i % len(endpoints)], arrivals, created))
             for i in range(streams)]
    try:
        deadline = time.monotonic() + 30
        while len(created) < streams:
            if time.monotonic() > deadline:
                raise SystemExit(f"only {len(created)} of {streams} watches created")
            await asyncio.sleep(0.05)
        value = base64.b64encode(os.urandom(size * 3 // 4)).decode()
        out = []
        for k in range(puts):
            await asyncio.sleep(1.2)        # pacing: each put on a settled set of watches
            arrivals.clear()
            sent = time.monotonic()
            await asyncio.to_thread(_put, endpoints[k % len(endpoints)], value)
            until = time.monotonic() + 3.0
            while len(arrivals) < streams and time.monotonic() < until:
                await asyncio.sleep(0.002)
            got = sorted(arrivals)
            if got:
                out.append((got[0] - sent, got[-1] - sent, len(got)))
        return out
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.watch_fanout",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--streams", type=int, default=100)
    ap.add_argument("--size", type=int, default=3000)
    ap.add_argument("--puts", type=int, default=30)
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="awide-fanout-"))
    ctx = Context(quick=False, work=work, etcd_binary=find_bench_etcd())
    try:
        cal = calibrate.measure(ctx)
        etcd = start_etcd(ctx, "etcdfan")
        try:
            rounds = asyncio.run(_run(list(etcd.endpoints), args.streams, args.size, args.puts))
        finally:
            etcd.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    first = sorted(r[0] * 1000 for r in rounds)
    last = sorted(r[1] * 1000 for r in rounds)
    print(f"calibration: {calibrate.brief(cal)}")
    print(f"{args.streams} watch streams, a {args.size}-byte value, {len(rounds)} puts: first "
          f"event median {statistics.median(first):.1f} ms; last median "
          f"{statistics.median(last):.1f} ms, p90 {last[int(len(last) * 0.9)]:.1f} ms, max "
          f"{last[-1]:.1f} ms; fewest streams reached by a put {min(r[2] for r in rounds)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
