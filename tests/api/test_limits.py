"""The daemon API's limits against the real server on a loopback port: GET only, request line /
header field / header count capped, and a connection that does not send a whole request in
time is closed. Raw sockets, so that nothing between the test and the server fixes requests."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Sequence

import pytest

from awide_cluster.api.health import DaemonHealth
from awide_cluster.api.metrics import DaemonMetrics
from awide_cluster.api.server import (
    MAX_FIELD_SIZE,
    MAX_HEADERS,
    MAX_LINE_SIZE,
    MAX_PEER_CONNECTIONS,
    ConnectionCap,
    DaemonApi,
)
from awide_harness.waits import wait_until

HEADER_TIMEOUT = 0.5
BOUND = 10.0          # generous: the close must come, on a loaded machine too


@pytest.fixture
async def api():
    health = DaemonHealth(loop_stale_after=5.0, report_stale_after=5.0)
    health.beat()
    metrics = DaemonMetrics(host="h1", role="storage", version="0.1.0")
    server = DaemonApi(health=health, metrics=metrics, view=lambda: {"host": "h1"},
                       listen="127.0.0.1:0", header_timeout=HEADER_TIMEOUT)
    await server.start()
    yield server
    await server.stop()


async def _exchange(server: DaemonApi, raw: bytes, *, body: bool = True
                    ) -> tuple[int, bytes, bool]:
    """Send raw bytes; (status, head, closed): the answer's status and headers, and whether the
    server then closed the connection."""
    assert server.bound is not None
    host, port = server.bound
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(raw)
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), BOUND)
        status = int(head.split(b" ", 2)[1])
        length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), 0) if body else 0
        await asyncio.wait_for(reader.readexactly(length), BOUND)
        closed = await asyncio.wait_for(reader.read(1), BOUND) == b""
        return status, head, closed
    finally:
        writer.close()


def _get(path: str = "/healthz", headers: Sequence[tuple[str, str]] = (),
         close: bool = True) -> bytes:
    lines = [f"GET {path} HTTP/1.1", "Host: 127.0.0.1"]
    lines += [f"{k}: {v}" for k, v in headers]
    if close:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def test_a_plain_get_is_answered(api):
    status, _, _ = await _exchange(api, _get())
    assert status == 200


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"])
@pytest.mark.parametrize("path", ["/healthz", "/v1/status", "/no-such-path"])
async def test_every_method_but_get_is_refused(api, method, path):
    body = b"x" * 100_000          # never read: refused before the body matters
    raw = (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
           f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    status, head, _ = await _exchange(api, raw, body=method != "HEAD")
    assert status == 405, head
    assert b"\r\nAllow: GET\r\n" in head, head


async def test_a_request_line_over_the_limit_is_refused_and_the_connection_closed(api):
    status, head, closed = await _exchange(api, _get("/healthz?" + "a" * MAX_LINE_SIZE,
                                                     close=False))
    assert status in (400, 414), head
    assert closed
    status, _, _ = await _exchange(api, _get("/healthz?" + "a" * (MAX_LINE_SIZE // 2)))
    assert status == 200                  # under the limit: served


async def test_a_header_field_over_the_limit_is_refused_and_the_connection_closed(api):
    big = [("X-Big", "b" * (MAX_FIELD_SIZE + 1))]
    status, head, closed = await _exchange(api, _get(headers=big, close=False))
    assert status in (400, 431), head
    assert closed
    status, _, _ = await _exchange(api, _get(headers=[("X-Big", "b" * (MAX_FIELD_SIZE // 2))]))
    assert status == 200


async def test_more_headers_than_the_limit_are_refused_and_the_connection_closed(api):
    many = [(f"X-H{i}", "v") for i in range(MAX_HEADERS + 1)]
    status, head, closed = await _exchange(api, _get(headers=many, close=False))
    assert status in (400, 431), head
    assert closed
    status, _, _ = await _exchange(api, _get(headers=many[: MAX_HEADERS - 3]))
    assert status == 200


@pytest.mark.parametrize("sent", [b"", b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "],
                         ids=["nothing", "half a request"])
async def test_a_connection_that_does_not_finish_its_request_in_time_is_closed(api, sent):
    host, port = api.bound
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(sent)
        await writer.drain()
        # the server closes it (EOF, no answer) after header_timeout; the bound is generous
        assert await asyncio.wait_for(reader.read(), BOUND) == b""
    finally:
        writer.close()


def test_a_header_timeout_must_be_positive():
    from awide_cluster.api.server import ApiError
    with pytest.raises(ApiError):
        DaemonApi(health=DaemonHealth(loop_stale_after=1, report_stale_after=1),
                  metrics=DaemonMetrics(host="h1", role="storage", version="0"),
                  view=dict, header_timeout=0)


async def _open_idle(server: DaemonApi, n: int) -> list[socket.socket]:
    """``n`` plain TCP connections that never send a byte."""
    assert server.bound is not None
    loop = asyncio.get_running_loop()
    out = []
    for _ in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        await loop.sock_connect(s, server.bound)
        out.append(s)
    return out


async def test_idle_connections_past_the_cap_are_closed_at_once(api):
    """2,000 idle connections from one address: at most MAX_PEER_CONNECTIONS are held, the
    others are closed as they are accepted, and once the held ones time
    out (header_timeout) the API answers again."""
    n = 2000
    before = len(os.listdir("/proc/self/fd"))
    socks = await _open_idle(api, n)
    try:
        await wait_until(lambda: api.cap.refused + api.cap.taken >= n, BOUND,
                         "every connection let in or refused")
        # held ones time out after header_timeout and free their place for later ones; never
        # more than the cap open at once, and most refused at once
        assert api.cap.peak <= MAX_PEER_CONNECTIONS
        assert api.cap.refused >= n // 2
        # the server side holds at most the cap: the process has the clients' n sockets and
        # the few held ones (plus the test's own), never 2 x n
        assert len(os.listdir("/proc/self/fd")) - before <= n + MAX_PEER_CONNECTIONS + 8
        await wait_until(lambda: api.cap.open == 0, BOUND, "the held ones timed out")
        status, _, _ = await _exchange(api, _get())
        assert status == 200
    finally:
        for s in socks:
            s.close()


def test_the_cap_counts_by_peer_and_in_all():
    cap = ConnectionCap(total=3, per_peer=2)
    assert cap.take("a") and cap.take("a") and not cap.take("a")
    assert cap.take("b") and not cap.take("c")          # 3 open in all
    cap.give_back("a")
    assert cap.take("c") and cap.by_peer == {"a": 1, "b": 1, "c": 1} and cap.refused == 2
