"""Real etcd stores for daemon tests that need one call held or refused, passed to the daemon
at construction (``Daemon(cfg, store=...)``): each is an ``EtcdStore`` with one method that
checks a switch the test turns, and otherwise the real call."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from awide_cluster.store.config import StoreConfig
from awide_cluster.store.errors import NoSpace
from awide_cluster.store.etcd import EtcdStore
from awide_cluster.store.port import Op
from awide_cluster.store.types import (
    Compare,
    KeyValue,
    ManyGot,
    ManyRead,
    PrefixRead,
    TxnResult,
)


class HeldTxn(EtcdStore):
    """Transactions wait at ``gate`` while ``hold`` is set (the leader 'freezes' before its
    write); ``reached`` is set when one is waiting."""

    def __init__(self, config: StoreConfig) -> None:
        super().__init__(config)
        self.hold = False
        self.gate = asyncio.Event()
        self.reached = asyncio.Event()

    async def txn(self, compares: Iterable[Compare], success: Iterable[Op],
                  failure: Iterable[Op] = (), *, timeout: float | None = None) -> TxnResult:
        if self.hold:
            self.reached.set()
            await self.gate.wait()
        return await super().txn(compares, success, failure, timeout=timeout)


class RefusingTxn(EtcdStore):
    """Transactions refused as etcd refuses them with a full quota while ``refuse`` is set."""

    refuse = False

    async def txn(self, compares: Iterable[Compare], success: Iterable[Op],
                  failure: Iterable[Op] = (), *, timeout: float | None = None) -> TxnResult:
        if self.refuse:
            raise NoSpace("etcd: etcdserver: mvcc: database space exceeded (code 8)")
        return await super().txn(compares, success, failure, timeout=timeout)


class Severable(EtcdStore):
    """While ``severed``, reads of keys go to a real store at an address nobody listens on
    (``dead``): they fail as reads fail when no member can be reached."""

    def __init__(self, config: StoreConfig) -> None:
        super().__init__(config)
        self.severed = False
        self.dead = EtcdStore(StoreConfig(endpoints=("http://127.0.0.1:9",),
                                          prefix=config.prefix, call_timeout=0.2))

    async def read_prefix(self, prefix: str, *, max_keys: int, max_value_bytes: int,
                          timeout: float | None = None, serializable: bool = False,
                          page_keys: int | None = None) -> PrefixRead:
        if self.severed:
            return await self.dead.read_prefix(prefix, max_keys=max_keys,
                                               max_value_bytes=max_value_bytes, timeout=timeout,
                                               serializable=serializable, page_keys=page_keys)
        return await super().read_prefix(prefix, max_keys=max_keys,
                                         max_value_bytes=max_value_bytes, timeout=timeout,
                                         serializable=serializable, page_keys=page_keys)

    async def get(self, key: str, *, min_mod_revision: int | None = None,
                  serializable: bool = False, max_value_bytes: int | None = None,
                  timeout: float | None = None) -> KeyValue | None:
        if self.severed:
            return await self.dead.get(key, min_mod_revision=min_mod_revision,
                                       serializable=serializable,
                                       max_value_bytes=max_value_bytes, timeout=timeout)
        return await super().get(key, min_mod_revision=min_mod_revision,
                                 serializable=serializable, max_value_bytes=max_value_bytes,
                                 timeout=timeout)

    async def read_many(self, reads: Iterable[ManyRead], *,
                        timeout: float | None = None) -> list[ManyGot]:
        if self.severed:
            return await self.dead.read_many(reads, timeout=timeout)
        return await super().read_many(reads, timeout=timeout)

    async def close(self) -> None:
        await self.dead.close()
        await super().close()
