"""A store, timed: every etcd call feeds ``awide_etcd_call_duration_seconds{op}`` and, when it
fails, ``awide_etcd_call_errors_total{op,error}`` (docs/metrics.md). Errors are re-raised
unchanged; a cancelled call is not counted as an etcd error. Watch streams are not timed per
call (a stream is not one call).

``MeteredStore(store, metrics)`` is itself a ``Store`` (awide_cluster.store.port): the daemon
builds it around the store it was given, and its lease, leader and follower use it."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import Protocol

from awide_cluster.store.errors import StoreError
from awide_cluster.store.port import Op, Store
from awide_cluster.store.types import (
    Alarm,
    Compare,
    EndpointStatus,
    KeyValue,
    Lease,
    ManyGot,
    ManyRead,
    Member,
    PrefixRead,
    RangeResult,
    TxnResult,
)
from awide_cluster.store.watch import Watch


class CallTimer(Protocol):
    """What the wrapper needs of the metrics (``DaemonMetrics.etcd_timer``)."""

    def etcd_timer(self, op: str, clock: Callable[[], float] = ...
                   ) -> AbstractContextManager[None]: ...


class MeteredStore:
    def __init__(self, store: Store, metrics: CallTimer,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.inner = store
        self.metrics = metrics
        self.clock = clock

    def reload_credentials(self) -> str:
        """The wrapped store's ``reload_credentials`` (``CredentialError`` when a file is bad),
        or a line saying it has none."""
        reload = getattr(self.inner, "reload_credentials", None)
        if reload is None:
            return "this store reads no credential files"
        return str(reload())

    def _timer(self, op: str) -> AbstractContextManager[None]:
        return self.metrics.etcd_timer(op, self.clock)

    # ------------------------------------------------------------------ keys

    async def range(self, key: str, *, prefix: bool = False,
                    min_mod_revision: int | None = None, serializable: bool = False,
                    keys_only: bool = False, limit: int = 0, revision: int | None = None,
                    max_value_bytes: int | None = None,
                    timeout: float | None = None) -> RangeResult:
        with self._timer("range"):
            return await self.inner.range(
                key, prefix=prefix, min_mod_revision=min_mod_revision,
                serializable=serializable, keys_only=keys_only, limit=limit, revision=revision,
                max_value_bytes=max_value_bytes, timeout=timeout)

    async def get(self, key: str, *, min_mod_revision: int | None = None,
                  serializable: bool = False, max_value_bytes: int | None = None,
                  timeout: float | None = None) -> KeyValue | None:
        with self._timer("get"):
            return await self.inner.get(key, min_mod_revision=min_mod_revision,
                                        serializable=serializable,
                                        max_value_bytes=max_value_bytes, timeout=timeout)

    async def read_prefix(self, prefix: str, *, max_keys: int, max_value_bytes: int,
                          timeout: float | None = None, serializable: bool = False,
                          page_keys: int | None = None) -> PrefixRead:
        with self._timer("read_prefix"):
            return await self.inner.read_prefix(prefix, max_keys=max_keys,
                                                max_value_bytes=max_value_bytes,
                                                timeout=timeout, serializable=serializable,
                                                page_keys=page_keys)

    async def read_many(self, reads: Iterable[ManyRead], *,
                        timeout: float | None = None) -> list[ManyGot]:
        with self._timer("read_many"):
            return await self.inner.read_many(reads, timeout=timeout)

    async def txn(self, compares: Iterable[Compare], success: Iterable[Op],
                  failure: Iterable[Op] = (), *, timeout: float | None = None) -> TxnResult:
        with self._timer("txn"):
            return await self.inner.txn(compares, success, failure, timeout=timeout)

    async def create(self, key: str, value: bytes | str, *, lease: int = 0,
                     timeout: float | None = None) -> int:
        with self._timer("create"):
            return await self.inner.create(key, value, lease=lease, timeout=timeout)

    async def put(self, key: str, value: bytes | str, *, lease: int = 0,
                  timeout: float | None = None) -> int:
        with self._timer("put"):
            return await self.inner.put(key, value, lease=lease, timeout=timeout)

    async def delete(self, key: str, *, prefix: bool = False,
                     timeout: float | None = None) -> int:
        with self._timer("delete"):
            return await self.inner.delete(key, prefix=prefix, timeout=timeout)

    # ------------------------------------------------------------------ leases

    async def grant(self, ttl: int, *, lease_id: int = 0,
                    timeout: float | None = None) -> Lease:
        with self._timer("grant"):
            return await self.inner.grant(ttl, lease_id=lease_id, timeout=timeout)

    async def keepalive(self, lease_id: int, *, timeout: float | None = None) -> int:
        with self._timer("keepalive"):
            return await self.inner.keepalive(lease_id, timeout=timeout)

    async def revoke(self, lease_id: int, *, timeout: float | None = None) -> None:
        with self._timer("revoke"):
            await self.inner.revoke(lease_id, timeout=timeout)

    async def time_to_live(self, lease_id: int, *, timeout: float | None = None) -> int:
        with self._timer("time_to_live"):
            return await self.inner.time_to_live(lease_id, timeout=timeout)

    # ------------------------------------------------------------------ cluster

    async def members(self, *, timeout: float | None = None) -> tuple[Member, ...]:
        with self._timer("members"):
            return await self.inner.members(timeout=timeout)

    async def alarms(self, *, timeout: float | None = None) -> tuple[Alarm, ...]:
        with self._timer("alarms"):
            return await self.inner.alarms(timeout=timeout)

    async def endpoint_status(self, endpoint: str, *,
                              timeout: float | None = None) -> EndpointStatus:
        with self._timer("endpoint_status"):
            return await self.inner.endpoint_status(endpoint, timeout=timeout)

    async def statuses(self, *, timeout: float | None = None
                       ) -> dict[str, EndpointStatus | StoreError]:
        with self._timer("statuses"):
            return await self.inner.statuses(timeout=timeout)

    # ------------------------------------------------------------------ history

    @property
    def timeline_epoch(self) -> int:
        return self.inner.timeline_epoch

    @property
    def timeline_note(self) -> str:
        return self.inner.timeline_note

    # ------------------------------------------------------------------ watch, lifecycle

    def watch(self, key: str, *, prefix: bool = False, start_revision: int | None = None,
              stall_after: float = 3.0, max_message_bytes: int | None = None) -> Watch:
        return self.inner.watch(key, prefix=prefix, start_revision=start_revision,
                                stall_after=stall_after, max_message_bytes=max_message_bytes)

    async def close(self) -> None:
        await self.inner.close()
