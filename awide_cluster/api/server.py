"""The daemon's HTTP API (aiohttp), bound to localhost by default.

- ``GET /healthz``  200 while the main loop turns, 503 when it stalled (``DaemonHealth.beat``);
- ``GET /readyz``   200 when connected to etcd and the host report is current, else 503;
- ``GET /v1/status`` this host's view, JSON (what the daemon's ``view`` callable returns, plus
  the two verdicts);
- ``GET /metrics``  Prometheus text format from the daemon's own ``DaemonMetrics``.

The daemon constructs ``DaemonApi`` with objects it owns and starts/stops it inside its own
event loop; the handlers never do I/O of their own (they read the marks and the view), so a
stalled etcd cannot stall the API, and a stalled loop shows as 503 on ``/healthz``.
"""

from __future__ import annotations

import ipaddress
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web

from awide_cluster.api.health import DaemonHealth
from awide_cluster.api.metrics import CONTENT_TYPE, DaemonMetrics

log = logging.getLogger(__name__)

DEFAULT_LISTEN = "127.0.0.1:9700"


class ApiError(RuntimeError):
    """The API could not start (bad listen address, port taken)."""


def parse_listen(listen: str) -> tuple[str, int]:
    """``"127.0.0.1:9700"`` / ``"[::1]:9700"`` / ``"localhost:0"`` -> (host, port)."""
    text = listen.strip()
    if text.startswith("["):
        host, sep, port = text[1:].partition("]:")
        if not sep:
            raise ApiError(f"listen address {listen!r}: expected [IPv6]:PORT")
    else:
        host, sep, port = text.rpartition(":")
        if not sep or ":" in host:
            raise ApiError(f"listen address {listen!r}: expected HOST:PORT (IPv6 as [ADDR]:PORT)")
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ApiError(f"listen address {listen!r}: port must be 0..65535")
    if not host:
        raise ApiError(f"listen address {listen!r}: host missing (use 0.0.0.0 to mean all)")
    return host, int(port)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(
        text=json.dumps(data, sort_keys=True, default=str) + "\n", status=status,
        content_type="application/json",
    )


class DaemonApi:
    """The HTTP API of one daemon.

    ``view`` returns this host's view as a JSON-able mapping (see ``api.view.host_view``); it
    is called on each ``/v1/status`` request and must not do I/O.
    """

    def __init__(
        self, *, health: DaemonHealth, metrics: DaemonMetrics,
        view: Callable[[], Mapping[str, Any]], listen: str = DEFAULT_LISTEN,
    ) -> None:
        self.health = health
        self.metrics = metrics
        self._view = view
        self._host, self._port = parse_listen(listen)
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self.bound: tuple[str, int] | None = None
        metrics.bind_heartbeat(health.beat_age)
        self.app = self._make_app()

    def _make_app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/v1/status", self._status)
        app.router.add_get("/metrics", self._metrics)
        return app

    # ---------------------------------------------------------------- handlers
    async def _healthz(self, request: web.Request) -> web.Response:
        v = self.health.liveness()
        return _json(v.to_dict(), 200 if v.ok else 503)

    async def _readyz(self, request: web.Request) -> web.Response:
        v = self.health.readiness()
        return _json(v.to_dict(), 200 if v.ok else 503)

    async def _status(self, request: web.Request) -> web.Response:
        try:
            view = dict(self._view())
        except Exception as e:          # the view is the daemon's; report, do not crash
            log.exception("host view failed")
            return _json({"error": f"host view failed: {type(e).__name__}: {e}"}, 500)
        view["liveness"] = self.health.liveness().to_dict()
        view["readiness"] = self.health.readiness().to_dict()
        return _json(view)

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=self.metrics.exposition(), headers={"Content-Type": CONTENT_TYPE})

    # ---------------------------------------------------------------- lifecycle
    @property
    def url(self) -> str:
        if self.bound is None:
            raise ApiError("the API is not started")
        host, port = self.bound
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    async def start(self) -> None:
        """Bind and serve; ApiError naming the address if it cannot."""
        if self._runner is not None:
            return
        if not is_loopback(self._host):
            log.warning("daemon API listens on %s, not on loopback: it has no authentication",
                        self._host)
        runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, self._host, self._port, reuse_address=True)
        try:
            await site.start()
        except OSError as e:
            await runner.cleanup()
            raise ApiError(f"cannot listen on {self._host}:{self._port}: {e.strerror or e}") \
                from None
        self._runner, self._site = runner, site
        sockets = getattr(site._server, "sockets", None) or ()     # noqa: SLF001
        addr = sockets[0].getsockname() if sockets else (self._host, self._port)
        self.bound = (addr[0], addr[1])

    async def stop(self) -> None:
        if self._runner is not None:
            runner, self._runner, self._site = self._runner, None, None
            await runner.cleanup()
