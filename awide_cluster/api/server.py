"""The daemon's HTTP API (aiohttp), bound to localhost by default.

- ``GET /healthz``  200 while the main loop turns, 503 when it stalled (``DaemonHealth.beat``);
- ``GET /readyz``   200 when connected to etcd and the host report is current, else 503;
- ``GET /v1/status`` this host's view, JSON (what the daemon's ``view`` callable returns, plus
  the two verdicts);
- ``GET /metrics``  Prometheus text format from the daemon's own ``DaemonMetrics``.

The daemon constructs ``DaemonApi`` with objects it owns and starts/stops it inside its own
event loop; the handlers never do I/O of their own (they read the marks and the view), so a
stalled etcd cannot stall the API, and a stalled loop shows as 503 on ``/healthz``.

Read-only and bounded (docs/security.md): every method but GET is refused (405) before any
routing; a request line, a header field and the number of headers are capped (aiohttp's own
parser limits: 400/431 and the connection closed); a connection that has not sent a whole
request within ``header_timeout`` (aiohttp's keep-alive timer, which also runs from the
connection's start) is closed; a request body is never read (and capped at 1 KiB).

Loopback by default. Off loopback it serves HTTPS only and every client must present a
certificate signed by the configured client CA (``ApiTls``); plain HTTP there is refused at
start unless ``allow_insecure`` says otherwise (loudly logged).
"""

from __future__ import annotations

import json
import logging
import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from awide_cluster.api.health import DaemonHealth
from awide_cluster.api.metrics import DaemonMetrics
from awide_cluster.config.common import is_loopback_host
from awide_cluster.config.listen import ListenError, parse_listen
from awide_cluster.telemetry import CONTENT_TYPE

log = logging.getLogger(__name__)

DEFAULT_LISTEN = "127.0.0.1:9700"

# Limits of the API's HTTP parser. The paths are a few bytes; Prometheus and curl send fewer
# than 10 headers of well under 1 KiB.
MAX_LINE_SIZE = 1024          # request line (method, path, version), bytes
MAX_FIELD_SIZE = 4096         # one header field, bytes
MAX_HEADERS = 32              # header fields per request
MAX_BODY = 1024               # request body (never read by a handler), bytes
HEADER_TIMEOUT = 10.0         # seconds a connection may take to send a whole request, and may
                              # stay idle between two requests


class ApiError(RuntimeError):
    """The API could not start (bad listen address, port taken, off loopback without TLS)."""


@dataclass(frozen=True)
class ApiTls:
    """The API's certificate and key, and the CA its clients' certificates must be signed by."""

    cert_file: str
    key_file: str
    client_ca_file: str

    def files(self) -> tuple[str, str, str]:
        return self.cert_file, self.key_file, self.client_ca_file

    def context(self) -> ssl.SSLContext:
        from awide_cluster.store.credentials import server_context
        return server_context(*self.files())


def _json(data: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> web.Response:
    return web.Response(
        text=json.dumps(data, sort_keys=True, default=str) + "\n", status=status,
        content_type="application/json", headers=headers,
    )


@web.middleware
async def _only_get(request: web.Request,
                    handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                    ) -> web.StreamResponse:
    """The API is read-only: any other method is refused before routing, its body unread."""
    if request.method != "GET":
        return _json({"error": f"method {request.method} not allowed: the API is read-only "
                               "(GET only)"}, 405, headers={"Allow": "GET"})
    return await handler(request)


class DaemonApi:
    """The HTTP API of one daemon.

    ``view`` returns this host's view as a JSON-able mapping (see ``api.view.host_view``); it
    is called on each ``/v1/status`` request and must not do I/O.
    """

    def __init__(
        self, *, health: DaemonHealth, metrics: DaemonMetrics,
        view: Callable[[], Mapping[str, Any]], listen: str = DEFAULT_LISTEN,
        header_timeout: float = HEADER_TIMEOUT, tls: ApiTls | None = None,
        allow_insecure: bool = False,
    ) -> None:
        if not header_timeout > 0:
            raise ApiError(f"header_timeout must be > 0, got {header_timeout!r}")
        self.header_timeout = header_timeout
        self.tls = tls
        self.allow_insecure = allow_insecure
        self._ssl = tls.context() if tls is not None else None     # CredentialError: bad file
        self.health = health
        self.metrics = metrics
        self._view = view
        try:
            self._host, self._port = parse_listen(listen)
        except ListenError as e:
            raise ApiError(str(e)) from None
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self.bound: tuple[str, int] | None = None
        metrics.bind_heartbeat(health.beat_age)
        self.app = self._make_app()

    def _make_app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY, middlewares=[_only_get])
        for path, handler in (("/healthz", self._healthz), ("/readyz", self._readyz),
                              ("/v1/status", self._status), ("/metrics", self._metrics)):
            app.router.add_get(path, handler, allow_head=False)
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
        scheme = "https" if self._ssl is not None else "http"
        return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"

    def reload_tls(self) -> str:
        """Read the API's certificate, key and client CA files again (SIGHUP): new handshakes
        use them. A bad file raises ``CredentialError`` naming it and changes nothing. A client
        CA is added to those trusted; removing one takes a restart."""
        if self.tls is None or self._ssl is None:
            return "the API has no TLS"
        from awide_cluster.store.credentials import load_server_files
        load_server_files(self._ssl, *self.tls.files())
        return f"API certificate re-read from {', '.join(self.tls.files())}"

    async def start(self) -> None:
        """Bind and serve; ApiError naming the address if it cannot."""
        if self._runner is not None:
            return
        if not is_loopback_host(self._host) and self._ssl is None:
            if not self.allow_insecure:
                raise ApiError(f"api.tls: the API would listen on {self._host}, not loopback, "
                               "without TLS: give api.tls, or api.allow_insecure: true")
            log.warning("daemon API listens on %s, not on loopback, in plain HTTP "
                        "(api.allow_insecure): anyone who reaches it can read it", self._host)
        runner = web.AppRunner(self.app, access_log=None, handle_signals=False,
                               keepalive_timeout=self.header_timeout,
                               max_line_size=MAX_LINE_SIZE, max_field_size=MAX_FIELD_SIZE,
                               max_headers=MAX_HEADERS)
        await runner.setup()
        site = web.TCPSite(runner, self._host, self._port, reuse_address=True,
                           ssl_context=self._ssl)
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
