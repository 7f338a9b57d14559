"""Child process: many simulated gateways making a gateway's whole etcd request mix, cheaply
(figure 6).

    python -m bench.leanload '{"endpoints": [...], "cluster": "c1", "first": 0, "seed": 1,
                               "registry_mod_revision": 7, "lease_ttl": 30}'

What one simulated gateway does, like the gateway library at its defaults (docs/gateway.md,
"Cost to etcd"), over raw HTTP/1.1 keep-alive connections of its own to the member it lists
first (the members' order rotated per gateway, as the library's gateways spread):

- ``mix``: a registry poll turn every ``interval`` (1 s) at a random phase on a fixed
  schedule: a ``range`` of the registry with ``min_mod_revision`` past the registry's current
  revision (an unchanged registry answers no value), serializable except every 10th turn's
  (each gateway starts at a random point of that cycle, as in a fleet's steady state); a
  **watch** of the registry (one stream on a second connection, progress notifications on),
  whose bytes prove the view fresh as the library's progress notifications do: a serializable
  poll due within ``PROOF_WINDOW`` turns of the stream's last bytes is left out (counted as
  ``proven``), the linearizable one never is; and a **lease
  keepalive** every ``lease_ttl``/3 (the gateway's registration; ``lease_ttl`` defaults to the
  gateway config's, ``awide_gateway_cluster.config``);
- ``naive``: a full linearizable read of the registry every ``interval`` and the same
  keepalive, no watch (the naive full-read poller).

The client is lean so that what is measured is etcd, not the generator: requests are bytes
built once, answers are framed (status line, ``Content-Length`` or the chunked terminator)
without being decoded, timers are the event loop's ``call_at``, and one sweep every 50 ms
finds requests over the bound. Its own CPU per request is reported with every window (the
process's CPU over the window divided by the requests it made), so a reader can check the
generator stayed far below etcd's cost.

Commands on stdin, answers on stdout, as ``bench.pollers`` (``set``, ``window``), and
``mark``: a window also carries ``requests`` (polls and keepalives answered) and ``gen_cpu_s``
(this process's CPU) since the last mark.
A poll that is due while the previous request of its gateway is still out is not sent (the
gateway is behind, never bursting); the window counts it as not made.

``parts`` in the spec (a list, default ``["poll", "watch", "keepalive", "proof"]``) switches
parts of the ``mix`` off to measure what each costs etcd (figure 6's decomposition): a gateway
without ``poll`` makes no registry poll (its windows count no polls), without ``watch`` opens
no watch stream, without ``keepalive`` sends no keepalive (the lease is still granted once at
start), without ``proof`` makes every turn's poll (the mix before the watch proved
freshness). ``naive`` ignores it. An unknown part is an error naming it.

``bench/leanload.c`` is the same generator in C (same commands, mix and accounting, at a
fraction of this one's CPU per request); figure 6 uses it when a C compiler is installed
(``bench.cgen``) and this one otherwise.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import random
import sys
from typing import Any

import uvloop

from awide_cluster.contract import keys
from awide_gateway_cluster.config import TimingSection as GatewayTiming
from awide_gateway_cluster.gateway import PROOF_WINDOW
from bench.childio import emit, stdin_lines
from bench.proc import poll_window

BOUND = 0.5          # a poll over this is "over the bound" and the connection is dropped
SWEEP = 0.05
LINEARIZABLE_EVERY = 10
PARTS = ("poll", "watch", "keepalive", "proof")


def parts_of(spec: dict[str, Any]) -> frozenset[str]:
    """The parts of the mix the spec switches on (all by default); ValueError naming a bad one."""
    raw = spec.get("parts", list(PARTS))
    if not isinstance(raw, list) or not all(isinstance(p, str) for p in raw):
        raise ValueError(f"spec parts must be a list of strings among {list(PARTS)}: {raw!r}")
    bad = [p for p in raw if p not in PARTS]
    if bad:
        raise ValueError(f"spec parts: unknown part(s) {bad} (known: {list(PARTS)})")
    return frozenset(raw)


def _b64(s: str | bytes) -> str:
    return base64.b64encode(s.encode() if isinstance(s, str) else s).decode()


def _request(host: str, path: str, body: dict[str, Any]) -> bytes:
    raw = json.dumps(body, separators=(",", ":")).encode()
    return (f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(raw)}\r\n\r\n").encode() + raw


class Framer:
    """Splits a byte stream into HTTP/1.1 responses (no body decoding): ``feed`` returns how
    many whole responses arrived and whether each said 200."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def feed(self, data: bytes) -> list[bool]:
        self.buf += data
        done: list[bool] = []
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return done
            head = bytes(self.buf[:end])
            ok = head.startswith(b"HTTP/1.1 200")
            at = head.find(b"Content-Length: ")
            if at >= 0:
                stop = head.find(b"\r\n", at)
                length = int(head[at + 16:stop if stop >= 0 else len(head)])
                need = end + 4 + length
                if len(self.buf) < need:
                    return done
            else:                                   # chunked: up to the last (empty) chunk
                last = self.buf.find(b"\r\n0\r\n\r\n", end)
                if last < 0:
                    return done
                need = last + 7
            del self.buf[:need]
            done.append(ok)


class Unary(asyncio.Protocol):
    """One gateway's request connection: one request out at a time."""

    def __init__(self, gw: Gateway) -> None:
        self.gw = gw
        self.framer = Framer()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.gw.connected()

    def data_received(self, data: bytes) -> None:
        for ok in self.framer.feed(data):
            self.gw.answered(ok)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.gw.lost()


class Stream(asyncio.Protocol):
    """The watch stream: read and dropped; its bytes counted, and when they came kept (the
    gateway's proof of freshness)."""

    def __init__(self, gw: Gateway) -> None:
        self.gw = gw
        self.fleet = gw.fleet
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.fleet.watch_bytes += len(data)
        self.gw.proof = self.fleet.loop.time()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None


class Gateway:
    def __init__(self, fleet: Fleet, i: int) -> None:
        self.fleet = fleet
        self.i = i
        eps = fleet.endpoints
        self.host, self.port = eps[i % len(eps)]
        self.conn: Unary | None = None
        self.stream: Stream | None = None
        self.out: tuple[str, float, float] | None = None   # (what, sent at, due)
        self.queued_keepalive = False
        self.polls = 0
        self.turns = 0
        self.proof: float | None = None              # when the watch last delivered bytes
        self.lease: int | None = None
        self.closed = False
        self.timers: list[asyncio.TimerHandle] = []

    # ---------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        await self._connect()
        self.lease = await self._grant()
        mix = self.fleet.kind == "mix"
        if mix and "watch" in self.fleet.parts:
            _, self.stream = await loop.create_connection(
                lambda: Stream(self), self.host, self.port)
            assert self.stream.transport is not None
            self.stream.transport.write(self.fleet.watch_request(self.host, self.port))
        now = loop.time()
        rng = self.fleet.rng
        self.turns = rng.randrange(LINEARIZABLE_EVERY)   # a steady fleet: any point of the cycle
        if not mix or "poll" in self.fleet.parts:
            self._at(now + rng.uniform(0, self.fleet.interval), self.poll)
        if not mix or "keepalive" in self.fleet.parts:
            self._at(now + rng.uniform(0, self.fleet.keepalive_every), self.keepalive)

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        _, self.conn = await loop.create_connection(lambda: Unary(self), self.host, self.port)

    async def _grant(self) -> int:
        """A lease for the registration, granted once at start (its answer decoded)."""
        reader, writer = await asyncio.open_connection(self.host, self.port)
        try:
            writer.write(_request(f"{self.host}:{self.port}", "/v3/lease/grant",
                                  {"TTL": str(self.fleet.lease_ttl)}))
            head = await reader.readuntil(b"\r\n\r\n")
            at = head.find(b"Content-Length: ")
            length = int(head[at + 16:head.find(b"\r\n", at)])
            body = json.loads(await reader.readexactly(length))
            return int(body["ID"])
        finally:
            writer.close()

    def close(self) -> None:
        self.closed = True
        for t in self.timers:
            t.cancel()
        for c in (self.conn, self.stream):
            if c is not None and c.transport is not None:
                c.transport.close()

    def _at(self, when: float, fn: Any) -> None:
        loop = self.fleet.loop
        self.timers = [t for t in self.timers if not t.cancelled()][-4:]
        self.timers.append(loop.call_at(when, fn, when))

    # ---------------------------------------------------------------- requests

    def poll(self, due: float) -> None:
        if self.closed:
            return
        self._at(due + self.fleet.interval, self.poll)
        fleet = self.fleet
        linear = self.turns % LINEARIZABLE_EVERY == 0
        self.turns += 1
        if (fleet.kind == "mix" and {"proof", "watch"} <= fleet.parts and not linear
                and self.proof is not None and due - self.proof < PROOF_WINDOW * fleet.interval):
            fleet.proven.append(due)                 # the watch proved the view fresh
            return
        if self.out is not None or self.conn is None or self.conn.transport is None:
            self.fleet.skipped += 1                  # behind: this poll is not made
            self.fleet.behind.append(due)
            return
        self.polls += 1
        if self.fleet.kind == "naive":
            req = self.fleet.naive
        elif linear:
            req = self.fleet.poll_linear
        else:
            req = self.fleet.poll_serial
        self._send("poll", req, due)

    def keepalive(self, due: float) -> None:
        if self.closed:
            return
        self._at(due + self.fleet.keepalive_every, self.keepalive)
        if self.out is not None:
            self.queued_keepalive = True
            return
        self._send_keepalive(due)

    def _send_keepalive(self, due: float) -> None:
        if self.conn is None or self.conn.transport is None or self.lease is None:
            return
        self._send("keepalive", self.fleet.keepalive_request(self.host, self.port, self.lease),
                   due)

    def _send(self, what: str, req: bytes, due: float) -> None:
        assert self.conn is not None and self.conn.transport is not None
        now = self.fleet.loop.time()
        self.out = (what, now, due)
        self.fleet.inflight.add(self)
        self.conn.transport.write(req)

    def answered(self, ok: bool) -> None:
        if self.out is None:
            return
        what, sent, due = self.out
        now = self.fleet.loop.time()
        self.out = None
        self.fleet.inflight.discard(self)
        self.fleet.requests += 1
        if what == "poll":
            self.fleet.records.append((sent, now - sent, ok, sent - due))
        elif not ok:
            self.fleet.keepalive_failed += 1
        if self.queued_keepalive:
            self.queued_keepalive = False
            self._send_keepalive(now)

    def expired(self, now: float) -> None:
        """The request out is over the bound: a failed poll; the connection is replaced."""
        assert self.out is not None
        what, sent, due = self.out
        self.out = None
        if what == "poll":
            self.fleet.records.append((sent, now - sent, False, sent - due))
        if self.conn is not None and self.conn.transport is not None:
            self.conn.transport.abort()

    def connected(self) -> None:
        pass

    def lost(self) -> None:
        self.conn = None
        if not self.closed:
            self.fleet.loop.create_task(self._reconnect())

    async def _reconnect(self) -> None:
        try:
            await self._connect()
        except OSError:
            self.fleet.reconnect_failed += 1


class Fleet:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.loop = asyncio.get_running_loop()
        self.spec = spec
        self.endpoints = []
        for ep in spec["endpoints"]:
            hostport = ep.split("://", 1)[-1]
            host, port = hostport.rsplit(":", 1)
            self.endpoints.append((host, int(port)))
        first = int(spec.get("first", 0))
        self.first = first
        self.interval = float(spec.get("interval", 1.0))
        self.lease_ttl = int(spec.get("lease_ttl", GatewayTiming().registration_ttl))
        self.keepalive_every = self.lease_ttl / 3
        self.rng = random.Random(int(spec.get("seed", 1)))
        self.parts = parts_of(spec)
        key = keys.prefix(spec["cluster"]) + keys.REGISTRY
        rev = int(spec["registry_mod_revision"])
        host = "{}:{}".format(*self.endpoints[0])
        self.poll_serial = _request(host, "/v3/kv/range", {
            "key": _b64(key), "min_mod_revision": str(rev + 1), "serializable": True})
        self.poll_linear = _request(host, "/v3/kv/range", {
            "key": _b64(key), "min_mod_revision": str(rev + 1)})
        self.naive = _request(host, "/v3/kv/range", {"key": _b64(key)})
        self.registry_key, self.registry_rev = key, rev
        self.kind = "mix"
        self.gateways: list[Gateway] = []
        self.inflight: set[Gateway] = set()
        self.records: list[tuple[float, float, bool, float]] = []
        self.requests = 0
        self.skipped = 0
        self.proven: list[float] = []                # due times of turns left out (proof)
        self.behind: list[float] = []                # due times of polls not made (behind)
        self.keepalive_failed = 0
        self.reconnect_failed = 0
        self.watch_bytes = 0
        self.marked = (0, 0.0, 0.0)
        self._sweeper = self.loop.call_later(SWEEP, self._sweep)

    def mark(self) -> None:
        """Start counting this process's requests and CPU (read back by ``window``)."""
        self.marked = (self.requests, _cpu(), os.times().system)

    def watch_request(self, host: str, port: int) -> bytes:
        return _request(f"{host}:{port}", "/v3/watch", {"create_request": {
            "key": _b64(self.registry_key), "start_revision": str(self.registry_rev + 1),
            "progress_notify": True}})

    def keepalive_request(self, host: str, port: int, lease: int) -> bytes:
        return _request(f"{host}:{port}", "/v3/lease/keepalive", {"ID": str(lease)})

    def _sweep(self) -> None:
        now = self.loop.time()
        for gw in [g for g in self.inflight if g.out is not None and now - g.out[1] > BOUND]:
            self.inflight.discard(gw)
            gw.expired(now)
        self._sweeper = self.loop.call_later(SWEEP, self._sweep)

    async def set(self, count: int, kind: str) -> None:
        if kind != self.kind:
            for gw in self.gateways:
                gw.close()
            self.gateways = []
            self.kind = kind
        while len(self.gateways) > count:
            self.gateways.pop().close()
        new = []
        while len(self.gateways) < count:
            gw = Gateway(self, self.first + len(self.gateways))
            self.gateways.append(gw)
            new.append(gw)
        for k in range(0, len(new), 200):            # connect in batches, not all at once
            await asyncio.gather(*(gw.start() for gw in new[k:k + 200]))

    async def window(self, t0: float, t1: float) -> dict[str, Any]:
        """Polls that started in [t0, t1) (``time.monotonic()``, the loop's clock here)."""
        # not a wait on a condition: every poll started before t1 ends within BOUND
        await asyncio.sleep(max(0.0, t1 - self.loop.time()) + BOUND + 0.2)
        summary, self.records = poll_window(self.records, t0, t1, BOUND)
        proven = sum(1 for d in self.proven if t0 <= d < t1)
        self.proven = [d for d in self.proven if d >= t1]
        behind = sum(1 for d in self.behind if t0 <= d < t1)
        self.behind = [d for d in self.behind if d >= t1]
        return {
            **summary,
            # since the last mark: requests answered and this process's CPU
            "requests": self.requests - self.marked[0], "gen_cpu_s": _cpu() - self.marked[1],
            "gen_sys_s": os.times().system - self.marked[2],     # of which in the kernel
            "skipped": self.skipped, "proven": proven, "behind": behind,
            "keepalive_failed": self.keepalive_failed, "watch_bytes": self.watch_bytes,
            "generator": "python",
        }


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


async def main(spec: dict[str, Any]) -> None:
    fleet = Fleet(spec)
    emit("hello")
    async for cmd in stdin_lines():
        if cmd.get("cmd") == "set":
            await fleet.set(int(cmd["count"]), cmd.get("kind", "mix"))
            emit("set", count=len(fleet.gateways))
        elif cmd.get("cmd") == "window":
            emit("window", **(await fleet.window(float(cmd["t0"]), float(cmd["t1"]))))
        elif cmd.get("cmd") == "mark":
            fleet.mark()
            emit("mark")
    await fleet.set(0, fleet.kind)


if __name__ == "__main__":
    uvloop.run(main(json.loads(sys.argv[1])))   # half the client CPU of asyncio's own loop
