"""The project's etcd store: etcd's v3 JSON API over aiohttp, bounded, hedged, typed.

See docs/store.md. Public names::

    from awide_cluster.store import EtcdStore, StoreConfig, TlsConfig
    from awide_cluster.store import errors, types
"""

from awide_cluster.store.errors import (  # noqa: F401
    BadResponse, Conflict, Denied, LeaseExpired, RevisionWentBack, StoreError, Timeout,
    Unavailable,
)
from awide_cluster.store.types import (  # noqa: F401
    Compare, Delete, EndpointStatus, Get, KeyValue, Lease, Member, Put, RangeResult, TxnResult,
    WatchBatch, WatchEvent,
)
