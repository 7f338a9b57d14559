"""The gateway's Prometheus metrics: ``GatewayCollector`` reads ``stats()`` and ``snapshot()``
at each scrape (no state of its own, nothing on the hot path), ``MetricsServer`` serves them on
``GET /metrics`` (what ``awide-cluster gateway watch --metrics`` runs; a host program may
register the collector in its own registry instead). Listed in docs/metrics.md. The same server
answers ``GET /readyz``: 200 once the gateway has an accepted registry and a verified key
layout (``readiness``), 503 saying why before (a pod's readiness probe, docs/gateway.md).

Same conventions as the daemon's (``awide_cluster.api.metrics``): ``card`` is a card's id and
``card_name`` its name in its host's config; every series carries ``cluster`` and ``gateway``;
no ``_created`` series.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from awide_cluster import __version__
from awide_cluster.telemetry import CONTENT_TYPE, ConstantLabels

if TYPE_CHECKING:
    from awide_gateway_cluster.gateway import ClusterGateway
    from awide_gateway_cluster.view import SlotView

# (stats field, metric name without _total, help)
_COUNTERS = (
    ("polls", "awide_gateway_polls", "Registry polls of this gateway"),
    ("failed_polls", "awide_gateway_polls_failed", "Registry polls etcd did not answer in time"),
    ("registries_rejected", "awide_gateway_registries_rejected",
     "Registry documents refused (corrupt, unknown schema, other cluster, version skew)"),
    ("version_skew", "awide_gateway_version_skew", "Registry documents of a newer schema"),
    ("hostile_targets", "awide_gateway_hostile_targets",
     "Registry NVMe targets refused before any subprocess"),
    ("cards_refused", "awide_gateway_cards_refused",
     "Cards refused on connection (wrong serial, model, identity or label)"),
    ("registration_failures", "awide_gateway_registration_failures",
     "Failed writes of the gateway's own record gateways/<id>"),
    ("events_dropped", "awide_gateway_events_dropped",
     "Change events dropped because a subscriber's queue was full"),
    ("loop_errors", "awide_gateway_loop_errors",
     "Exceptions the gateway's poll and registration loops survived"),
    ("watch_events", "awide_gateway_watch_events", "Registry watch events taken"),
    ("watch_restarts", "awide_gateway_watch_restarts", "Registry watches opened again"),
    ("watch_progress", "awide_gateway_watch_progress",
     "Registry watch progress notifications taken"),
    ("polls_skipped", "awide_gateway_polls_skipped",
     "Registry polls left out: the watch proved the view fresh"),
    ("entries_refused", "awide_gateway_entries_refused",
     "Registry entries no host report vouched for (wrong id, host, target or address)"),
    ("layout_records_refused", "awide_gateway_layout_records_refused",
     "Layout records of this gateway's namespace that did not decode (the start refused)"),
    ("view_builds", "awide_gateway_view_builds",
     "Slot views built (a registry, layout or card path change; none while nothing changes)"),
)


class GatewayCollector(Collector):
    """The metrics of one ``ClusterGateway``, computed at collection."""

    def __init__(self, gateway: ClusterGateway) -> None:
        self._gw = gateway

    def collect(self) -> Iterator[Metric]:
        st, view = self._gw.stats(), self._gw.snapshot()
        info = GaugeMetricFamily("awide_gateway_info", "Always 1: which gateway this is",
                                 labels=["version", "placement"])
        info.add_metric([__version__, view.placement], 1)
        yield info
        yield GaugeMetricFamily("awide_gateway_registry_generation",
                                "Registry generation this gateway applied (0: none yet)",
                                value=st.generation)
        yield GaugeMetricFamily("awide_gateway_stale",
                                "1 while this gateway's view is stale (etcd not answering, "
                                "a document refused), else 0", value=1 if st.stale else 0)
        staleness = GaugeMetricFamily("awide_gateway_staleness_seconds",
                                      "Seconds since etcd last answered one of its polls "
                                      "(no sample before the first answer)", labels=[])
        if st.staleness is not None:
            staleness.add_metric([], st.staleness)
        yield staleness
        age = GaugeMetricFamily("awide_gateway_state_file_age_seconds",
                                "Age of the state file this gateway serves while etcd has not "
                                "answered since its start (no sample otherwise)", labels=[])
        if st.state_file_age is not None:
            age.add_metric([], st.state_file_age)
        yield age
        yield GaugeMetricFamily("awide_gateway_layout_ok",
                                "1 once the cluster's key layout matched this gateway's",
                                value=1 if st.layout_ok else 0)
        for field, name, doc in _COUNTERS:
            yield CounterMetricFamily(name, doc, value=getattr(st, field))
        in_service = GaugeMetricFamily(
            "awide_gateway_card_in_service",
            "Each card in a slot of this gateway's view: 1 in service here, 0 not",
            labels=["card", "card_name", "host", "slot"])
        n = 0
        for s in view.slots:
            if s.card_id is not None:
                in_service.add_metric([s.card_id, s.name, s.host, str(s.slot)],
                                      1 if s.in_service else 0)
                n += 1 if s.in_service else 0
        yield in_service
        yield GaugeMetricFamily("awide_gateway_slots_in_service",
                                "Slots whose card is in service in this gateway's view",
                                value=n)
        yield GaugeMetricFamily("awide_gateway_cards_unplaced",
                                "Registry cards with no slot in this gateway's view",
                                value=len(view.unplaced))


def gateway_registry(gateway: ClusterGateway) -> ConstantLabels:
    """A collector of the gateway's metrics with ``cluster`` and ``gateway`` on every series."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(GatewayCollector(gateway))
    return ConstantLabels(reg, {"cluster": gateway.config.cluster, "gateway": gateway.id})


def families(gateway: ClusterGateway) -> Iterator[tuple[str, str]]:
    """(name, type) of every metric family, as exposed (for the docs test)."""
    for fam in GatewayCollector(gateway).collect():
        yield fam.name, fam.type


def readiness(view: SlotView) -> tuple[bool, str]:
    """Ready: a registry accepted (from etcd, or a state file served in an etcd outage) and
    the namespace's key layout verified; otherwise not, and why (one line)."""
    if view.generation <= 0:
        return False, "no registry accepted yet"
    if not view.layout_ok:
        return False, f"registry generation {view.generation} accepted, key layout not verified"
    return True, f"registry generation {view.generation} accepted, key layout verified"


class MetricsServer:
    """``GET /metrics`` and ``GET /readyz`` (nothing else) on ``listen`` (``HOST:PORT``), on
    the caller's loop."""

    def __init__(self, gateway: ClusterGateway, listen: str) -> None:
        host, sep, port = listen.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ValueError(f"metrics address {listen!r}: expected HOST:PORT")
        self._host, self._port = host.strip("[]"), int(port)
        self._collector = gateway_registry(gateway)
        self._gateway = gateway
        self._runner: web.AppRunner | None = None
        self.bound: tuple[str, int] | None = None

    async def _metrics(self, request: web.Request) -> web.Response:
        if request.method != "GET":
            raise web.HTTPMethodNotAllowed(request.method, ["GET"])
        return web.Response(body=generate_latest(self._collector),
                            headers={"Content-Type": CONTENT_TYPE})

    async def _ready(self, request: web.Request) -> web.Response:
        if request.method != "GET":
            raise web.HTTPMethodNotAllowed(request.method, ["GET"])
        ok, why = readiness(self._gateway.snapshot())
        return web.Response(status=200 if ok else 503, text=why + "\n")

    async def start(self) -> None:
        app = web.Application(client_max_size=1024)
        app.router.add_route("*", "/metrics", self._metrics)
        app.router.add_route("*", "/readyz", self._ready)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self._port)
        try:
            await site.start()
        except OSError as e:
            await self._runner.cleanup()
            self._runner = None
            raise ValueError(f"metrics: cannot listen on {self._host}:{self._port}: "
                             f"{e.strerror or e}") from e
        server = site._server
        sockets = getattr(server, "sockets", None) or ()
        self.bound = sockets[0].getsockname()[:2] if sockets else (self._host, self._port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
