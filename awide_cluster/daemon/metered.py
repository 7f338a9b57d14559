"""The daemon's store, timed: every etcd call feeds ``awide_etcd_call_duration_seconds{op}``
and, when it fails, ``awide_etcd_call_errors_total{op,error}`` (docs/metrics.md)."""

from __future__ import annotations

from typing import Any

TIMED = ("range", "read_prefix", "get", "txn", "create", "put", "delete", "grant", "keepalive",
         "revoke", "time_to_live", "members", "statuses")


class MeteredStore:
    def __init__(self, store: Any, metrics: Any) -> None:
        self.inner = store
        self.metrics = metrics

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name not in TIMED:
            return attr
        metrics = self.metrics

        async def timed(*args: Any, **kwargs: Any) -> Any:
            with metrics.etcd_timer(name):
                return await attr(*args, **kwargs)

        timed.__name__ = name
        return timed
