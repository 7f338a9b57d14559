"""Plain data returned by the store. Keys are ``str`` relative to the store's prefix."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass(frozen=True, slots=True)
class KeyValue:
    key: str                 # relative to the store prefix
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int = 0


@dataclass(frozen=True, slots=True)
class RangeResult:
    revision: int            # cluster revision of the answer (header.revision)
    kvs: tuple[KeyValue, ...]
    count: int
    endpoint: str = ""       # which member answered (for metrics and logs)


@dataclass(frozen=True, slots=True)
class Compare:
    """One comparison of a transaction. ``target`` names the field compared."""

    key: str
    target: Literal["create", "mod", "version", "value", "lease"]
    result: Literal["equal", "not_equal", "greater", "less"]
    value: int | bytes


@dataclass(frozen=True, slots=True)
class Put:
    key: str
    value: bytes
    lease: int = 0


@dataclass(frozen=True, slots=True)
class Delete:
    key: str
    prefix: bool = False


@dataclass(frozen=True, slots=True)
class Get:
    key: str
    prefix: bool = False


@dataclass(frozen=True, slots=True)
class TxnResult:
    succeeded: bool
    revision: int
    # one entry per op of the branch taken: a RangeResult for Get, None otherwise
    responses: tuple[RangeResult | None, ...] = field(default_factory=tuple)


@dataclass(frozen=True, slots=True)
class Lease:
    id: int
    ttl: int                 # seconds granted


@dataclass(frozen=True, slots=True)
class Member:
    id: int
    name: str
    client_urls: tuple[str, ...]
    peer_urls: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class EndpointStatus:
    endpoint: str
    member_id: int
    leader: int              # member id of the raft leader, 0 if none
    raft_term: int
    raft_index: int
    version: str
    db_size: int
    errors: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Alarm:
    """One raised etcd alarm: ``alarm`` is etcd's name for it (``NOSPACE``, ``CORRUPT``)."""

    member_id: int
    alarm: str


@dataclass(frozen=True, slots=True)
class WatchEvent:
    kind: Literal["put", "delete"]
    kv: KeyValue


@dataclass(frozen=True, slots=True)
class WatchBatch:
    """What a watch yields: events (possibly none: a progress notification) at a revision."""

    revision: int
    events: tuple[WatchEvent, ...]
    progress: bool = False
