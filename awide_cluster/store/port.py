"""The store port: what the daemon, the leader, the gateway and the operator ask of etcd.

``Store`` is a ``typing.Protocol``: ``EtcdStore`` satisfies it structurally, and so does the
daemon's ``MeteredStore`` (every call timed, then passed on). Code that talks to etcd takes a
``Store`` in its constructor; tests pass a real ``EtcdStore`` (or a subclass of it that holds
or refuses one call) the same way, never by swapping an attribute after construction.
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
    Member,
    PrefixRead,
    Put,
    RangeResult,
    TxnResult,
)

if TYPE_CHECKING:
    from awide_cluster.store.watch import Watch

Op = Put | Delete | Get


class Store(Protocol):
    """etcd as the project uses it (see docs/store.md for what each call guarantees)."""

    # keys
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

    async def txn(self, compares: Iterable[Compare], success: Iterable[Op],
                  failure: Iterable[Op] = (), *, timeout: float | None = None) -> TxnResult: ...

    async def create(self, key: str, value: bytes | str, *, lease: int = 0,
                     timeout: float | None = None) -> int: ...

    async def put(self, key: str, value: bytes | str, *, lease: int = 0,
                  timeout: float | None = None) -> int: ...

    async def delete(self, key: str, *, prefix: bool = False,
                     timeout: float | None = None) -> int: ...

    # leases
    async def grant(self, ttl: int, *, timeout: float | None = None) -> Lease: ...

    async def keepalive(self, lease_id: int, *, timeout: float | None = None) -> int: ...

    async def revoke(self, lease_id: int, *, timeout: float | None = None) -> None: ...

    async def time_to_live(self, lease_id: int, *, timeout: float | None = None) -> int: ...

    # cluster
    async def members(self, *, timeout: float | None = None) -> tuple[Member, ...]: ...

    async def alarms(self, *, timeout: float | None = None) -> tuple[Alarm, ...]: ...

    async def endpoint_status(self, endpoint: str, *,
                              timeout: float | None = None) -> EndpointStatus: ...

    async def statuses(self, *, timeout: float | None = None
                       ) -> dict[str, EndpointStatus | StoreError]: ...

    # the etcd history followed (timeline.py): grows when a restored or rebuilt etcd is adopted
    @property
    def timeline_epoch(self) -> int: ...

    @property
    def timeline_note(self) -> str: ...

    # watch, lifecycle
    def watch(self, key: str, *, prefix: bool = False, start_revision: int | None = None,
              stall_after: float = 3.0, max_message_bytes: int | None = None) -> Watch: ...

    async def close(self) -> None: ...
