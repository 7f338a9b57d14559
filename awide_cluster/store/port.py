"""The store port: what the daemon, the leader, the gateway and the operator ask of etcd.

Roles, each a ``typing.Protocol``: ``StoreReader``, ``StoreWriter``, ``LeaseKeeper``,
``StoreWatcher`` and ``ClusterInspector``; ``Store`` is all of them (what the daemon uses).
``EtcdStore`` satisfies them structurally, and so does the daemon's ``MeteredStore`` (every call
timed, then passed on). Code that talks to etcd takes the roles it uses (or ``Store``) in its
constructor; tests pass a real ``EtcdStore`` (or a subclass of it that holds or refuses one
call) the same way, never by swapping an attribute after construction.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

from awide_cluster.store.errors import StoreError
from awide_cluster.store.types import (
    Alarm,
    Compare,
    Delete,
    EndpointStatus,
    Get,
    KeyValue,
    Lease,
    ManyGot,
    ManyRead,
    Member,
    PrefixRead,
    Put,
    RangeResult,
    TxnResult,
)

if TYPE_CHECKING:
    from awide_cluster.store.watch import Watch

Op = Put | Delete | Get


class StoreReader(Protocol):
    """Reads of keys, bounded (docs/store.md, "Bounded reads"), and the etcd history they are
    of (timeline.py): the epoch grows when a restored or rebuilt etcd is adopted, so whoever
    remembers a revision compares the epoch it remembered it in."""

    @property
    def timeline_epoch(self) -> int: ...

    @property
    def timeline_note(self) -> str: ...

    async def range(self, key: str, *, prefix: bool = False,
                    min_mod_revision: int | None = None, serializable: bool = False,
                    keys_only: bool = False, limit: int = 0, revision: int | None = None,
                    max_value_bytes: int | None = None,
                    timeout: float | None = None) -> RangeResult: ...

    async def get(self, key: str, *, min_mod_revision: int | None = None,
                  serializable: bool = False, max_value_bytes: int | None = None,
                  timeout: float | None = None) -> KeyValue | None: ...

    async def read_prefix(self, prefix: str, *, max_keys: int, max_value_bytes: int,
                          timeout: float | None = None, serializable: bool = False,
                          page_keys: int | None = None) -> PrefixRead: ...

    async def read_many(self, reads: Iterable[ManyRead], *,
                        timeout: float | None = None) -> list[ManyGot]: ...


class StoreWriter(Protocol):
    """Writes of keys: each sent once, never repeated once it may have been applied."""

    async def txn(self, compares: Iterable[Compare], success: Iterable[Op],
                  failure: Iterable[Op] = (), *, timeout: float | None = None) -> TxnResult: ...

    async def create(self, key: str, value: bytes | str, *, lease: int = 0,
                     timeout: float | None = None) -> int: ...

    async def put(self, key: str, value: bytes | str, *, lease: int = 0,
                  timeout: float | None = None) -> int: ...

    async def delete(self, key: str, *, prefix: bool = False,
                     timeout: float | None = None) -> int: ...


class LeaseKeeper(Protocol):
    """etcd leases: granted, kept alive, revoked."""

    async def grant(self, ttl: int, *, lease_id: int = 0,
                    timeout: float | None = None) -> Lease: ...

    async def keepalive(self, lease_id: int, *, timeout: float | None = None) -> int: ...

    async def revoke(self, lease_id: int, *, timeout: float | None = None) -> None: ...

    async def time_to_live(self, lease_id: int, *, timeout: float | None = None) -> int: ...


class StoreWatcher(Protocol):
    """Watches of keys (every watch of an etcd history ends when the store adopts a new one)."""

    def watch(self, key: str, *, prefix: bool = False, start_revision: int | None = None,
              stall_after: float = 3.0, max_message_bytes: int | None = None) -> Watch: ...


class ClusterInspector(Protocol):
    """The etcd cluster itself: members, alarms, each member's status."""

    async def members(self, *, timeout: float | None = None) -> tuple[Member, ...]: ...

    async def alarms(self, *, timeout: float | None = None) -> tuple[Alarm, ...]: ...

    async def endpoint_status(self, endpoint: str, *,
                              timeout: float | None = None) -> EndpointStatus: ...

    async def statuses(self, *, timeout: float | None = None
                       ) -> dict[str, EndpointStatus | StoreError]: ...


class Store(StoreReader, StoreWriter, LeaseKeeper, StoreWatcher, ClusterInspector, Protocol):
    """etcd as the daemon uses it: every role (see docs/store.md for what each call
    guarantees). Code that needs less takes the roles it uses."""

    async def close(self) -> None: ...
