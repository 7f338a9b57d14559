"""Prometheus helpers shared by the daemon's metrics (``awide_cluster.api.metrics``) and the
gateway's (``awide_gateway_cluster.metrics``), so that neither imports the other.

Importing this module switches prometheus-client's ``_created`` series off (a counter's
``_created`` series is a timestamp nobody queries, one more series per label set).
"""

from __future__ import annotations

from collections.abc import Iterator

import prometheus_client
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

CONTENT_TYPE = CONTENT_TYPE_LATEST

prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]


class ConstantLabels(Collector):
    """A collector that yields ``source``'s families with ``labels`` added to every sample
    (prometheus-client has no constant labels of its own)."""

    def __init__(self, source: CollectorRegistry, labels: dict[str, str]) -> None:
        self._source = source
        self._labels = {k: v for k, v in labels.items() if v}    # "" is no label at all

    def collect(self) -> Iterator[Metric]:
        for fam in self._source.collect():
            fam.samples = [s._replace(labels={**s.labels, **self._labels})
                           for s in fam.samples]
            yield fam
