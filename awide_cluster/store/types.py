"""Plain data returned by the store. Keys are ``str`` relative to the store's prefix."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from awide_cluster.store.errors import ValueTooLarge


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
    count: int               # keys in the range (all of them, also beyond ``limit``)
    endpoint: str = ""       # which member answered (for metrics and logs)
    more: bool = False       # ``limit`` cut the answer: more keys follow in the range


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
    is_learner: bool = False        # a learner replicates but does not vote (no quorum share)


@dataclass(frozen=True, slots=True)
class EndpointStatus:
    endpoint: str
    member_id: int
    leader: int              # member id of the raft leader, 0 if none
    raft_term: int
    raft_index: int
    version: str
    db_size: int              # bytes of the backend file (dbSize)
    errors: tuple[str, ...] = ()
    db_size_in_use: int | None = None   # bytes in use in it (dbSizeInUse; None: not said)
    cluster_id: int = 0       # etcd's cluster id (header; 0: not said)
    revision: int = 0         # the member's current revision (header)


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


@dataclass(frozen=True, slots=True)
class Refusal:
    """A key whose value was not read: over the reader's bound. Named, never decoded.

    ``size`` is the value's size in bytes, or a lower bound when ``exact`` is False (the
    answer passed the read bound and was cut off).
    """

    key: str
    mod_revision: int
    size: int
    limit: int
    exact: bool = True
    kind: Literal["value", "key"] = "value"     # "key": the key's name is over the key bound

    @property
    def name(self) -> str:
        """The key, cut for logs and messages when it is long."""
        return self.key if len(self.key) <= 80 else f"{self.key[:64]!r}... ({len(self.key)} chars)"

    @property
    def why(self) -> str:
        if self.kind == "key":
            return f"key of {self.size} bytes over the bound of {self.limit} bytes"
        got = f"{self.size} bytes" if self.exact else "the answer passed the read bound"
        return f"value over {self.limit} bytes ({got})"


@dataclass(frozen=True, slots=True)
class PrefixRead:
    """What ``EtcdStore.read_prefix`` read: never silently cut.

    ``kvs``: the keys whose value is within the bound, in key order; ``refused``: the keys
    whose value is over it (by key). ``more``: there are more than ``max_keys`` keys under
    the prefix; ``kvs`` and ``refused`` then hold the first ``max_keys`` and ``count`` says
    how many there are in all. ``revision``: the cluster revision of the read.
    """

    prefix: str
    revision: int
    kvs: tuple[KeyValue, ...]
    refused: Mapping[str, Refusal]
    count: int
    more: bool
    max_keys: int

    def complete(self) -> PrefixRead:
        """This read, or ``TooManyKeys`` when it holds only the first ``max_keys`` keys."""
        if self.more:
            from awide_cluster.store.errors import TooManyKeys
            raise TooManyKeys(f"{self.count} keys under {self.prefix!r}, over the bound of "
                              f"{self.max_keys}: not read", prefix=self.prefix,
                              count=self.count, limit=self.max_keys)
        return self


@dataclass(frozen=True, slots=True)
class KeyRead:
    """One key of a ``read_many``: its value, refused (``ValueTooLarge``) when over
    ``max_value_bytes`` (None: only the answer's bound, as ``get`` without a bound).
    ``ranged``: answered as ``range`` answers it, a ``RangeResult`` (the answer's revision
    and count with the value, as a reader that follows the key from that revision needs)."""

    key: str
    max_value_bytes: int | None = None
    ranged: bool = False


@dataclass(frozen=True, slots=True)
class FolderRead:
    """Every key under ``prefix`` in a ``read_many``: what ``read_prefix`` reads."""

    prefix: str
    max_keys: int
    max_value_bytes: int


ManyRead = KeyRead | FolderRead
# what ``read_many`` answers for each read: a ``KeyRead``'s value, its absence or its refusal
# (a ranged one's ``RangeResult`` or its refusal), a ``FolderRead``'s ``PrefixRead``
ManyGot = KeyValue | ValueTooLarge | None | PrefixRead | RangeResult
