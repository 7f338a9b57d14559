"""Figure 6's comparison generator: one part of a gateway's mix through etcd's gRPC API.

The library speaks etcd's JSON gateway (``/v3/...`` over HTTP/1.1). Figure 6's ``--mix-parts``
measures, beside the C generator's parts, what the same parts cost etcd through its native gRPC
API, to tell the cost of the JSON translation from etcd's own cost per message. The library does
not use this module; only the bench does, when ``grpcio`` is installed (the ``test`` extra).

``python -m bench.grpcload '<spec json>'`` with spec ``{"endpoints": [...], "key": "<key>",
"count": N, "part": "poll"|"watch", "min_mod_revision": R, "interval": 1.0, "seed": S}``:
``count`` simulated gateways, each on a connection of its own (a local subchannel pool per
channel, so gRPC does not share one connection between them), spread over the endpoints.

- ``poll``: a serializable range of ``key`` with ``min_mod_revision`` R (the revision after the
  registry's: the answer carries no value while it is unchanged, as the library's change check)
  every ``interval`` seconds, each gateway from a random phase; bounded by 0.5 s.
- ``watch``: one watch of ``key`` with ``progress_notify`` per gateway; the members'
  ``--experimental-watch-progress-notify-interval`` sets how often each gets a message.

Requests are hand-encoded protobuf (the few fields above; no generated stubs). It prints
``ready`` once every gateway has its first answer (poll) or its watch created (watch), then a
JSON line a second: ``{"answers": n, "failed": f, "p99_ms": x}`` (answers: polls answered, or
watch messages received, creation responses included).
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
from typing import Any

BOUND = 0.5


def varint(value: int) -> bytes:
    """Protobuf base-128 varint of a non-negative int."""
    if value < 0:
        raise ValueError(f"varint of a negative number: {value}")
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def field_bytes(number: int, data: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(data)) + data


def field_varint(number: int, value: int) -> bytes:
    return varint(number << 3) + varint(value)


def range_request(key: bytes, min_mod_revision: int) -> bytes:
    """etcdserverpb.RangeRequest{key: 1, serializable: 7, min_mod_revision: 10}."""
    return field_bytes(1, key) + field_varint(7, 1) + field_varint(10, min_mod_revision)


def watch_create(key: bytes) -> bytes:
    """etcdserverpb.WatchRequest{create_request: 1 = WatchCreateRequest{key: 1,
    progress_notify: 4}}."""
    return field_bytes(1, field_bytes(1, key) + field_varint(4, 1))


class Fleet:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.endpoints = [str(e).removeprefix("http://") for e in spec["endpoints"]]
        self.key = str(spec["key"]).encode()
        self.count = int(spec["count"])
        self.part = str(spec["part"])
        if self.part not in ("poll", "watch"):
            raise ValueError(f"part must be poll or watch, not {self.part!r}")
        self.interval = float(spec.get("interval", 1.0))
        self.min_rev = int(spec.get("min_mod_revision", 0))
        self.rng = random.Random(int(spec.get("seed", 0)))
        self.answers = self.failed = 0
        self.started = 0
        self.latencies: list[float] = []

    def _channel(self, i: int) -> Any:
        import grpc
        return grpc.aio.insecure_channel(self.endpoints[i % len(self.endpoints)],
                                         options=[("grpc.use_local_subchannel_pool", 1)])

    async def _poller(self, i: int, ready: asyncio.Event) -> None:
        call = self._channel(i).unary_unary("/etcdserverpb.KV/Range",
                                            request_serializer=lambda b: b,
                                            response_deserializer=lambda b: b)
        req = range_request(self.key, self.min_rev)
        first = True
        await asyncio.sleep(self.rng.uniform(0, self.interval))    # pacing: a random phase
        while True:
            t = time.monotonic()
            try:
                await call(req, timeout=BOUND)
                self.answers += 1
                self.latencies.append(time.monotonic() - t)
            except Exception:       # noqa: BLE001 - a failed poll is counted, not fatal
                self.failed += 1
            if first:
                first = False
                self._one_started(ready)
            await asyncio.sleep(max(0.0, t + self.interval - time.monotonic()))    # pacing

    async def _watcher(self, i: int, ready: asyncio.Event) -> None:
        call = self._channel(i).stream_stream("/etcdserverpb.Watch/Watch",
                                              request_serializer=lambda b: b,
                                              response_deserializer=lambda b: b)
        create = watch_create(self.key)

        async def requests() -> Any:
            yield create
            await asyncio.Event().wait()

        first = True
        try:
            async for _ in call(requests()):
                self.answers += 1
                if first:
                    first = False
                    self._one_started(ready)
        except Exception:           # noqa: BLE001 - a broken stream is counted
            self.failed += 1

    def _one_started(self, ready: asyncio.Event) -> None:
        self.started += 1
        if self.started == self.count:
            ready.set()

    async def run(self) -> None:
        ready = asyncio.Event()
        one = self._poller if self.part == "poll" else self._watcher
        tasks = [asyncio.create_task(one(i, ready)) for i in range(self.count)]
        await ready.wait()
        print("ready", flush=True)
        while True:
            await asyncio.sleep(1.0)    # not a wait: the status line's period
            recent = sorted(self.latencies[-5000:])
            p99 = recent[max(0, -(-99 * len(recent) // 100) - 1)] if recent else None
            print(json.dumps({"answers": self.answers, "failed": self.failed,
                              "p99_ms": round(p99 * 1000, 2) if p99 is not None else None}),
                  flush=True)
            del self.latencies[:-5000]
        del tasks


def main() -> None:
    asyncio.run(Fleet(json.loads(sys.argv[1])).run())


if __name__ == "__main__":
    main()
