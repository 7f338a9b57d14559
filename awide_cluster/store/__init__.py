"""The project's etcd store: etcd's v3 JSON API over aiohttp, bounded, hedged, typed.

See docs/store.md. Public names::

    from awide_cluster.store import EtcdStore, StoreConfig, TlsConfig
    from awide_cluster.store import errors, types
"""

from awide_cluster.store.config import StoreConfig, TlsConfig
from awide_cluster.store.errors import (
    BadResponse,
    Conflict,
    Denied,
    InvalidRequest,
    LeaseExists,
    LeaseExpired,
    NoSpace,
    RevisionWentBack,
    StoreError,
    TimelineChanged,
    Timeout,
    TooLarge,
    TooManyKeys,
    Unavailable,
    ValueTooLarge,
    WatchCanceled,
    WatchCompacted,
    WatchMessageTooLarge,
)
from awide_cluster.store.etcd import EtcdStore
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
    Refusal,
    TxnResult,
    WatchBatch,
    WatchEvent,
)
from awide_cluster.store.watch import Watch

__all__ = [
    "Alarm", "BadResponse", "Compare", "Conflict", "Delete", "Denied", "EndpointStatus",
    "EtcdStore", "Get", "TimelineChanged", "InvalidRequest", "KeyValue", "Lease", "LeaseExists",
    "LeaseExpired",
    "Member", "NoSpace",
    "PrefixRead", "Put", "RangeResult", "Refusal", "RevisionWentBack", "StoreConfig", "StoreError",
    "Timeout", "TlsConfig", "TooLarge", "TooManyKeys", "TxnResult", "Unavailable", "ValueTooLarge",
    "Watch", "WatchBatch", "WatchCanceled", "WatchCompacted", "WatchEvent", "WatchMessageTooLarge",
]
