"""This gateway's own records in etcd: ``gateways/<id>`` on its lease, ``layouts/<namespace>``.

Both are best effort for serving: a failure here is logged and counted, and never takes a card
out or stops the hot path. The layout check is the exception at start: a layout recorded by
another gateway that differs from this one's refuses the start (``LayoutMismatch``).
"""

from __future__ import annotations

import logging
from typing import Protocol

from awide_cluster.contract import keys
from awide_cluster.contract.records import (
    GatewayRecord,
    LayoutRecord,
    LayoutRecordError,
    decode_layout,
)
from awide_cluster.store.errors import Conflict, LeaseExpired, StoreError
from awide_cluster.store.port import LeaseKeeper, StoreReader, StoreWriter
from awide_gateway_cluster.layout import LayoutMismatch, compare

log = logging.getLogger("awide_gateway_cluster.registration")


class LayoutStore(StoreReader, StoreWriter, Protocol):
    """What ``check_layout`` uses of the store."""


class RegistrationStore(LeaseKeeper, StoreWriter, Protocol):
    """What ``Registration`` uses of the store: a lease, and a key written on it."""


async def check_layout(store: LayoutStore, mine: LayoutRecord, *,
                       timeout: float) -> LayoutMismatch | None:
    """Record ``mine`` if no layout is recorded for its namespace; else compare.

    Raises StoreError when etcd does not answer (the caller decides what that means).
    A recorded layout that does not decode counts as a mismatch (never overwritten).
    """
    key = keys.layout(mine.namespace)
    try:
        await store.create(key, mine.encode(), timeout=timeout)
        log.info("recorded key layout of namespace %s: %s", mine.namespace, mine.describe())
        return None
    except Conflict:
        pass
    kv = await store.get(key, timeout=timeout)
    if kv is None:          # deleted between the two calls: check again at the next start
        raise StoreError(f"{key} vanished while being read")
    try:
        recorded = decode_layout(kv.value, key=key)
    except LayoutRecordError as e:
        recorded = LayoutRecord(namespace=mine.namespace, placement=f"<unreadable: {e}>",
                                algorithm=0, slot_algorithm=0, created_by="?")
    return compare(recorded, mine)


class Registration:
    """Keeps ``gateways/<id>`` written on this gateway's own lease.

    ``tick(record, now)`` grants a lease when there is none (or it expired), rewrites the key
    when the record changed or the lease is new, and sends a keepalive every ttl/3.
    """

    def __init__(self, store: RegistrationStore, gateway_id: str, *, ttl: int,
                 call_timeout: float) -> None:
        self.store = store
        self.key = keys.gateway(gateway_id)
        self.ttl, self.call_timeout = ttl, call_timeout
        self.lease: int | None = None
        self._written: GatewayRecord | None = None
        self._last_keepalive = 0.0
        self.failures = 0

    async def tick(self, record: GatewayRecord, now: float, *, hold: bool = False) -> None:
        """One refresh; a lease found gone is granted again and the record written at once.
        ``hold``: a changed record waits for a later tick, unless none is written on the
        current lease (the key must exist)."""
        for _ in range(2):
            try:
                await self._tick(record, now, hold)
                return
            except LeaseExpired:
                log.warning("lease of %s expired: registering again", self.key)
                self.lease, self._written = None, None
                self.failures += 1
            except StoreError as e:
                self.failures += 1
                log.debug("registration of %s not refreshed: %s", self.key, e)
                return

    async def _tick(self, record: GatewayRecord, now: float, hold: bool) -> None:
        s = self.store
        if self.lease is None:
            lease = await s.grant(self.ttl, timeout=self.call_timeout)
            self.lease, self._written, self._last_keepalive = lease.id, None, now
        elif now - self._last_keepalive >= self.ttl / 3:
            await s.keepalive(self.lease, timeout=self.call_timeout)
            self._last_keepalive = now
        if record != self._written and not (hold and self._written is not None):
            await s.put(self.key, record.encode(), lease=self.lease,
                        timeout=self.call_timeout)
            self._written = record

    def history_reset(self) -> None:
        """A new etcd history (restored or rebuilt): the record is written again at the next
        tick (the restored one is older, a rebuilt etcd has none); a lease the new history
        does not know raises LeaseExpired at its keepalive and is granted again."""
        self._written = None
        self._last_keepalive = float("-inf")

    async def close(self) -> None:
        if self.lease is None:
            return
        try:
            await self.store.revoke(self.lease, timeout=self.call_timeout)
        except StoreError as e:
            log.info("lease of %s not revoked (it expires by itself): %s", self.key, e)
        self.lease = None
