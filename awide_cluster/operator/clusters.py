"""Which clusters an etcd holds: the names under ``/awide/``, for "no such cluster" messages.

Bounded: at most ``MAX_NAMES`` reads of one key name each (``keys_only``, ``limit`` 1), each
starting past the cluster found before (``/awide/<name>0``: ``0`` is the byte after ``/``),
so a cluster with thousands of keys costs one read, and the whole listing is under one
deadline. Values are never read.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from awide_cluster.contract import keys
from awide_cluster.store.codec import b64, prefix_end
from awide_cluster.store.config import StoreConfig
from awide_cluster.store.etcd import EtcdStore

ROOT = "/awide/"
MAX_NAMES = 32


@dataclass(frozen=True, slots=True)
class ClusterNames:
    names: tuple[str, ...]          # valid cluster names found, in key order
    more: bool                      # MAX_NAMES reached: there may be others
    odd: int = 0                    # keys under /awide/ that name no valid cluster

    def describe(self) -> str:
        if not self.names:
            return "none (no key under /awide/ in this etcd)"
        return ", ".join(self.names) + (", ..." if self.more else "")


def _next_start(segment: bytes, had_slash: bool) -> bytes:
    # past every key of this segment: "/awide/<seg>/..." ends before "/awide/<seg>0"
    return ROOT.encode() + segment + (b"0" if had_slash else b"\x00")


async def cluster_names(config: StoreConfig, *, timeout: float) -> ClusterNames:
    """The cluster names under ``/awide/``. Raises ``StoreError`` when etcd does not answer."""
    root_config = StoreConfig(
        endpoints=config.endpoints, prefix=ROOT, call_timeout=config.call_timeout,
        hedge_after=config.hedge_after, tls=config.tls, username=config.username,
        password=config.password, max_answer_bytes=64 * 1024)
    store = EtcdStore(root_config)
    end = prefix_end(ROOT.encode())
    names: list[str] = []
    odd = 0
    deadline = time.monotonic() + timeout
    start = ROOT.encode()
    try:
        async with asyncio.timeout(timeout):
            for _ in range(MAX_NAMES + 1):
                body = {"key": b64(start), "range_end": b64(end), "keys_only": True,
                        "limit": "1"}
                left = max(0.01, deadline - time.monotonic())
                ep, answer = await store.read("/v3/kv/range", body, min(left, config.call_timeout),
                                              "list clusters", max_bytes=64 * 1024)
                result = store.codec.range_result(answer, ep)
                if not result.kvs:
                    return ClusterNames(tuple(names), False, odd)
                if len(names) >= MAX_NAMES:
                    return ClusterNames(tuple(names), True, odd)
                rel = result.kvs[0].key
                segment, slash, _ = rel.partition("/")
                try:
                    if not slash:
                        raise keys.BadName("a key, not a folder")
                    names.append(keys.check_name("cluster", segment))
                except keys.BadName:
                    odd += 1
                start = _next_start(segment.encode(errors="surrogateescape"), bool(slash))
    finally:
        await store.close()
    return ClusterNames(tuple(names), True, odd)
