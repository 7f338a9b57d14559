"""The I/O shell of status: one bounded read of etcd, then the pure ``build_status``.

One read is five concurrent reads: every endpoint's status, every endpoint's backend quota (its
own ``/metrics`` gauge; unread is shown as unknown, no problem), the member list and etcd's
alarm list, each within the store's call bound (0.5 s by default), and the keys within twice
that (``read_cluster_keys``): one bounded read of the whole cluster prefix
(``EtcdStore.read_prefix``: pages of at most 64 keys, each value at most the largest bound of
the layout, at most ``bounds.CLUSTER_MAX_KEYS`` keys; a value over its bound is refused by name
and shown as a problem, so one big key hides nothing else; the first read of a few values near
etcd's 1.5 MiB request limit costs etcd a few hundred ms) and, beside it, the fixed keys
(``leader``, ``registry``, ``history``) read by name and the host reports under ``members/``
within their own bound: a flood of other keys (intents, gateway records, strangers) cuts the
whole read but hides none of them, and is counted per folder and named. When the
(linearizable) key read fails but some member answers, the keys are read again serializably
from any member, so a cluster that lost quorum still shows what its members hold
(``read_error`` then says so). The whole read is also under ``bound`` as a safety net.

``StatusReader`` keeps the observations between reads (report ages, see ``record_read``):
``snapshot()`` for ``--watch`` and the demo, ``sample(interval)`` for one-shot status.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from awide_cluster.contract import bounds, keys
from awide_cluster.operator.freshness import Observations, record_read, saw_generation
from awide_cluster.operator.model import ClusterStatus
from awide_cluster.operator.snapshot import EndpointAnswer, RawSnapshot, StatusPolicy
from awide_cluster.operator.status import build_status
from awide_cluster.store.errors import StoreError, ValueTooLarge
from awide_cluster.store.port import ClusterInspector, StoreReader
from awide_cluster.store.types import (
    Alarm,
    EndpointStatus,
    KeyValue,
    Member,
    PrefixRead,
    Refusal,
)


class StatusStore(StoreReader, ClusterInspector, Protocol):
    """What status reads: the keys, the cluster, and each member's backend quota."""

    async def quotas(self, *, timeout: float | None = None) -> dict[str, int | StoreError]: ...


def describe_error(e: BaseException) -> str:
    text = str(e) or "no detail"
    return f"{type(e).__name__}: {text}"


async def read_raw(
    store: StatusStore, *, cluster: str, endpoints: tuple[str, ...], bound: float,
    wall: Callable[[], float] = time.time, mono: Callable[[], float] = time.monotonic,
    keys_timeout: float | None = None,
) -> RawSnapshot:
    """One bounded read. Never raises a StoreError: failures are in the snapshot.
    ``keys_timeout``: the bound of each read of the prefix (None: the store's call bound)."""

    def read_keys(serializable: bool = False) -> Awaitable[KeyRead]:
        return read_cluster_keys(store, serializable=serializable, timeout=keys_timeout)

    async def keys() -> tuple[KeyRead | None, str]:
        try:
            return await read_keys(), ""
        except StoreError as e:
            return None, describe_error(e)

    async def members() -> tuple[tuple[Member, ...] | None, str]:
        try:
            return await store.members(), ""
        except StoreError as e:
            return None, describe_error(e)

    async def statuses() -> dict[str, EndpointStatus | StoreError]:
        return await store.statuses()

    async def alarms() -> tuple[tuple[Alarm, ...] | None, str]:
        try:
            return await store.alarms(), ""
        except StoreError as e:
            return None, describe_error(e)

    async def quotas() -> dict[str, int | StoreError]:
        return await store.quotas()

    start_wall, start_mono = wall(), mono()
    try:
        async with asyncio.timeout(bound):
            (result, read_error), (member_list, members_error), status_map, \
                (alarm_list, alarms_error), quota_map = await asyncio.gather(
                    keys(), members(), statuses(), alarms(), quotas())
            answered = any(isinstance(s, EndpointStatus) for s in status_map.values())
            if result is None and answered:
                try:
                    result = await read_keys(serializable=True)
                    read_error = (f"linearizable read failed ({read_error}); showing a "
                                  "serializable read from one member, possibly stale")
                except StoreError as e:
                    read_error = f"{read_error}; serializable read: {describe_error(e)}"
    except TimeoutError:
        msg = f"no answer within {bound:g} s"
        return RawSnapshot(
            cluster=cluster, endpoints=endpoints,
            answers=tuple(EndpointAnswer(ep, None, msg) for ep in endpoints),
            members=None, members_error=msg, kvs=None, read_error=msg, revision=None,
            wall=start_wall, mono=start_mono, alarms=None, alarms_error=msg)
    answers = tuple(
        EndpointAnswer(ep, st, "", _quota(quota_map.get(ep))) if isinstance(st, EndpointStatus)
        else EndpointAnswer(ep, None, describe_error(st))
        for ep, st in status_map.items())
    return RawSnapshot(
        cluster=cluster, endpoints=endpoints, answers=answers,
        members=tuple(member_list) if member_list is not None else None,
        members_error=members_error,
        kvs=tuple(result.kvs) if result is not None else None,
        read_error=read_error if read_error else "",
        revision=result.revision if result is not None else None,
        wall=start_wall, mono=start_mono,
        refused=tuple(result.refused.values()) if result is not None else (),
        key_count=result.count if result is not None and result.more else None,
        folder_counts=result.folder_counts if result is not None else (),
        alarms=tuple(alarm_list) if alarm_list is not None else None, alarms_error=alarms_error)


@dataclass(frozen=True, slots=True)
class KeyRead:
    """The keys status read: the whole prefix (bounded) with the fixed keys and the host
    reports read by name over it, and, when the prefix holds more keys than its bound, how
    many keys each folder holds (``folder_counts``)."""

    kvs: tuple[KeyValue, ...]
    refused: Mapping[str, Refusal]
    revision: int
    count: int
    more: bool
    folder_counts: tuple[tuple[str, int], ...] = ()


async def _by_name(store: StoreReader, key: str, *, serializable: bool,
                   timeout: float | None) -> KeyValue | Refusal | None:
    try:
        return await store.get(key, serializable=serializable, timeout=timeout,
                               max_value_bytes=bounds.value_bound(key))
    except ValueTooLarge as e:
        return Refusal(e.key, e.mod_revision, e.size, e.limit)


async def _count(store: StoreReader, prefix: str, *, serializable: bool,
                 timeout: float | None) -> int:
    res = await store.range(prefix, prefix=True, keys_only=True, limit=1,
                            serializable=serializable, timeout=timeout)
    return res.count


async def read_cluster_keys(store: StoreReader, *, serializable: bool = False,
                            timeout: float | None = None) -> KeyRead:
    """Every key under the cluster prefix within ``bounds.CLUSTER_MAX_KEYS``; the fixed keys
    (leader, registry, history) and the host reports are read by name (``members/`` within
    its own bound), so a flood of other keys hides none of them. StoreError when a read
    fails."""
    def prefix(folder: str, max_keys: int, max_value_bytes: int) -> Awaitable[PrefixRead]:
        return store.read_prefix(folder, max_keys=max_keys, max_value_bytes=max_value_bytes,
                                 serializable=serializable, timeout=timeout)

    whole, members, fixed = await asyncio.gather(
        prefix("", bounds.CLUSTER_MAX_KEYS, bounds.REGISTRY_MAX_BYTES),
        prefix(keys.MEMBERS, bounds.MEMBERS_MAX_KEYS, bounds.REPORT_MAX_BYTES),
        asyncio.gather(*(_by_name(store, k, serializable=serializable, timeout=timeout)
                         for k in FIXED_KEYS)))
    kvs = {kv.key: kv for kv in whole.kvs}
    refused = dict(whole.refused)
    for kv in members.kvs:
        kvs[kv.key] = kv
    refused.update(members.refused)
    for key, got in zip(FIXED_KEYS, fixed, strict=True):
        kvs.pop(key, None)
        refused.pop(key, None)
        if isinstance(got, KeyValue):
            kvs[key] = got
        elif isinstance(got, Refusal):
            refused[key] = got
    counts: tuple[tuple[str, int], ...] = ()
    if whole.more:
        folders = await asyncio.gather(*(_count(store, f, serializable=serializable,
                                                timeout=timeout) for f in FOLDERS))
        counts = tuple(zip(FOLDERS, folders, strict=True))
    return KeyRead(kvs=tuple(sorted(kvs.values(), key=lambda kv: kv.key)), refused=refused,
                   revision=whole.revision, count=whole.count, more=whole.more,
                   folder_counts=counts)


FIXED_KEYS = (keys.LEADER, keys.REGISTRY, keys.HISTORY)
FOLDERS = (keys.MEMBERS, keys.INTENTS, keys.GATEWAYS, keys.LAYOUTS)


def _quota(answer: int | StoreError | None) -> int | None:
    return answer if isinstance(answer, int) else None


class StatusReader:
    """Reads status again and again, keeping how long each key has held its value."""

    def __init__(
        self, store: StatusStore, *, cluster: str, endpoints: tuple[str, ...],
        call_timeout: float = 0.5, policy: StatusPolicy | None = None,
        wall: Callable[[], float] = time.time, mono: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.cluster = cluster
        self.endpoints = endpoints
        self.policy = policy if policy is not None else StatusPolicy()
        # status, members and keys (paged: twice the call bound) run concurrently; the
        # serializable fallback after them
        self.keys_timeout = 2 * call_timeout
        self.bound = 2 * self.keys_timeout + 0.5
        self._wall, self._mono = wall, mono
        self.seen = Observations()
        self.last_raw: RawSnapshot | None = None

    async def read(self) -> RawSnapshot:
        raw = await read_raw(self.store, cluster=self.cluster, endpoints=self.endpoints,
                             bound=self.bound, wall=self._wall, mono=self._mono,
                             keys_timeout=self.keys_timeout)
        self.seen = record_read(self.seen, raw.kvs, raw.mono)
        self.last_raw = raw
        return raw

    async def snapshot(self) -> tuple[RawSnapshot, ClusterStatus]:
        raw = await self.read()
        st = build_status(raw, self.seen, self.policy)
        # when this reader first saw each registry generation (gateway_behind is judged by it)
        self.seen = saw_generation(self.seen, st.registry.generation, raw.mono)
        return raw, st

    async def sample(self, interval: float) -> tuple[RawSnapshot, ClusterStatus]:
        """Two reads ``interval`` apart (one when 0, or when the first found nothing). When the
        first read finds a gateway behind the registry, the second comes ``behind_grace``
        after it at the earliest, so one-shot status judges the lag with its own clock."""
        raw, st = await self.snapshot()
        if interval > 0 and not raw.unreachable:
            if any(p.code == "gateway_catching_up" for p in st.problems):
                interval = max(interval, self.policy.behind_grace)
            await asyncio.sleep(interval)
            raw, st = await self.snapshot()
        return raw, st
