"""The I/O shell of status: one bounded read of etcd, then the pure ``build_status``.

One read is five concurrent reads: every endpoint's status, every endpoint's backend quota (its
own ``/metrics`` gauge; unread is shown as unknown, no problem), the member list and etcd's
alarm list, each within the store's call bound (0.5 s by default), and one bounded read of the
whole cluster prefix within twice that (``EtcdStore.read_prefix``: pages of at most 64 keys,
each value at most the largest bound of the layout, at most ``bounds.CLUSTER_MAX_KEYS`` keys; a
value over its bound is refused by name and shown as a problem, so one big key hides nothing
else; the first read of a few values near etcd's 1.5 MiB request limit costs etcd a few hundred
ms). When the (linearizable) key read fails but some member answers, the keys are read again
serializably from any member, so a cluster that lost quorum still shows what its members hold
(``read_error`` then says so). The whole read is also under ``bound`` as a safety net.

``StatusReader`` keeps the observations between reads (report ages, see ``record_read``):
``snapshot()`` for ``--watch`` and the demo, ``sample(interval)`` for one-shot status.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

from awide_cluster.contract import bounds
from awide_cluster.operator.freshness import Observations, record_read, saw_generation
from awide_cluster.operator.model import ClusterStatus
from awide_cluster.operator.snapshot import EndpointAnswer, RawSnapshot, StatusPolicy
from awide_cluster.operator.status import build_status
from awide_cluster.store.errors import StoreError
from awide_cluster.store.port import ClusterInspector, StoreReader
from awide_cluster.store.types import Alarm, EndpointStatus, Member, PrefixRead


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

    def read_keys(serializable: bool = False) -> Awaitable[PrefixRead]:
        return store.read_prefix("", max_keys=bounds.CLUSTER_MAX_KEYS,
                                 max_value_bytes=bounds.REGISTRY_MAX_BYTES,
                                 serializable=serializable, timeout=keys_timeout)

    async def keys() -> tuple[PrefixRead | None, str]:
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
        alarms=tuple(alarm_list) if alarm_list is not None else None, alarms_error=alarms_error)


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
