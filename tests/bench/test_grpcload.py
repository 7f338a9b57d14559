"""Figure 6's gRPC comparison generator (``bench/grpcload.py``): its hand-encoded protobuf is
what etcd's gRPC API understands. Against a real 3-member etcd: a serializable range answers
the value, and with ``min_mod_revision`` past the value's revision answers none (the library's
change check); a watch created with ``progress_notify`` delivers a put's value; the generator's
fleet reports every gateway started and its answers."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.grpcload import field_bytes, range_request, varint, watch_create
from tests.timing import bound

grpc = pytest.importorskip("grpc")


def _read_varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = data[at]
        value |= (b & 0x7F) << shift
        at += 1
        if not b & 0x80:
            return value, at
        shift += 7


@given(st.integers(min_value=0, max_value=2**63 - 1))
def test_varint_reads_back(n: int) -> None:
    data = varint(n)
    assert _read_varint(data, 0) == (n, len(data))
    assert all(b & 0x80 for b in data[:-1]) and not data[-1] & 0x80


def test_known_encodings() -> None:
    assert varint(300) == b"\xac\x02"
    assert field_bytes(1, b"ab") == b"\x0a\x02ab"
    # key, serializable, min_mod_revision 5
    assert range_request(b"k", 5) == b"\x0a\x01k\x38\x01\x50\x05"
    assert watch_create(b"k") == b"\x0a\x05\x0a\x01k\x20\x01"
    with pytest.raises(ValueError, match="negative"):
        varint(-1)


def _fields(data: bytes) -> list[tuple[int, int | bytes]]:
    """The top-level (number, value) pairs of a protobuf message (varint and bytes fields)."""
    out: list[tuple[int, int | bytes]] = []
    at = 0
    while at < len(data):
        tag, at = _read_varint(data, at)
        if tag & 7 == 0:
            value, at = _read_varint(data, at)
            out.append((tag >> 3, value))
        elif tag & 7 == 2:
            n, at = _read_varint(data, at)
            out.append((tag >> 3, data[at:at + n]))
            at += n
        else:
            raise AssertionError(f"wire type {tag & 7} not expected")
    return out


def _mod_revision(range_response: bytes) -> int:
    kvs = [v for n, v in _fields(range_response) if n == 2]
    assert len(kvs) == 1 and isinstance(kvs[0], bytes)
    return next(v for n, v in _fields(kvs[0]) if n == 3)  # type: ignore[return-value]


async def _put(endpoint: str, key: bytes, value: bytes) -> None:
    async with grpc.aio.insecure_channel(endpoint) as ch:
        put = ch.unary_unary("/etcdserverpb.KV/Put", request_serializer=lambda b: b,
                             response_deserializer=lambda b: b)
        await put(field_bytes(1, key) + field_bytes(2, value), timeout=bound(5.0))


async def _range(endpoint: str, req: bytes) -> bytes:
    async with grpc.aio.insecure_channel(endpoint) as ch:
        call = ch.unary_unary("/etcdserverpb.KV/Range", request_serializer=lambda b: b,
                              response_deserializer=lambda b: b)
        return await call(req, timeout=bound(5.0))


async def _watch_sees_put(endpoint: str, put_value: bytes) -> list[bytes]:
    got: list[bytes] = []
    async with grpc.aio.insecure_channel(endpoint) as ch:
        call = ch.stream_stream("/etcdserverpb.Watch/Watch", request_serializer=lambda b: b,
                                response_deserializer=lambda b: b)
        put = ch.unary_unary("/etcdserverpb.KV/Put", request_serializer=lambda b: b,
                             response_deserializer=lambda b: b)

        async def requests():
            yield watch_create(b"grpc/w")
            await asyncio.Event().wait()

        stream = call(requests())
        async with asyncio.timeout(bound(10.0)):
            async for msg in stream:
                got.append(msg)
                if len(got) == 1:       # created: now the put
                    await put(field_bytes(1, b"grpc/w") + field_bytes(2, put_value),
                              timeout=bound(5.0))
                if put_value in msg:
                    break
        stream.cancel()
    return got


@pytest.mark.timeout(120)
def test_requests_are_understood_by_etcd(etcd3) -> None:
    ep = etcd3.endpoints[0].removeprefix("http://")
    asyncio.run(_put(ep, b"grpc/k", b"the-value"))
    seen = asyncio.run(_range(ep, range_request(b"grpc/k", 0)))
    assert b"the-value" in seen
    rev = _mod_revision(seen)
    assert b"the-value" in asyncio.run(_range(ep, range_request(b"grpc/k", rev)))
    assert b"the-value" not in asyncio.run(_range(ep, range_request(b"grpc/k", rev + 1)))
    msgs = asyncio.run(_watch_sees_put(ep, b"watched-value"))
    assert len(msgs) >= 2 and b"watched-value" in msgs[-1]


@pytest.mark.timeout(120)
def test_fleet_starts_every_gateway_and_counts_answers(etcd3) -> None:
    asyncio.run(_put(etcd3.endpoints[1].removeprefix("http://"), b"grpc/f", b"v"))
    spec = {"endpoints": list(etcd3.endpoints), "key": "grpc/f", "count": 6, "part": "poll",
            "interval": 0.2, "min_mod_revision": 0, "seed": 1}
    proc = subprocess.Popen([sys.executable, "-m", "bench.grpcload", json.dumps(spec)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        first = json.loads(proc.stdout.readline())
        second = json.loads(proc.stdout.readline())
        assert first["failed"] == 0 and second["failed"] == 0
        assert second["answers"] > first["answers"] >= 6
        assert second["p99_ms"] is not None and second["p99_ms"] < bound(500)
    finally:
        proc.terminate()
        proc.communicate(timeout=10)


def test_fleet_refuses_an_unknown_part() -> None:
    done = subprocess.run([sys.executable, "-m", "bench.grpcload", json.dumps(
        {"endpoints": ["127.0.0.1:1"], "key": "k", "count": 1, "part": "gossip"})],
        capture_output=True, text=True, timeout=30)
    assert done.returncode != 0 and "part must be poll or watch, not 'gossip'" in done.stderr
