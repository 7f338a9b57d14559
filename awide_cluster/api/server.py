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
connection's start) is closed; a request body is never read (and capped at 1 KiB). At most
``MAX_CONNECTIONS`` connections are open in all and ``MAX_PEER_CONNECTIONS`` from one peer
address: the accept loop (``ConnectionCap``) closes any more at once, before a TLS handshake
or a byte is read, and a TLS handshake must finish within ``HANDSHAKE_TIMEOUT``.

Loopback by default. Off loopback it serves HTTPS only and every client must present a
certificate signed by the configured client CA (``ApiTls``); plain HTTP there is refused at
start unless ``allow_insecure`` says otherwise (loudly logged).
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import socket
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
MAX_CONNECTIONS = 256         # open API connections in all; more are closed at once
MAX_PEER_CONNECTIONS = 16     # open API connections from one peer address
HANDSHAKE_TIMEOUT = 5.0       # seconds a TLS client may take to finish its handshake
ACCEPT_BACKOFF = 0.1          # seconds the accept loop waits when the process is out of files


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


class ConnectionCap:
    """Open connections, in all and by peer address; ``take`` says whether one more may open.
    Refusals are counted (``refused``), and logged at most once per ``log_every`` refusals."""

    def __init__(self, total: int = MAX_CONNECTIONS, per_peer: int = MAX_PEER_CONNECTIONS,
                 log_every: int = 1000) -> None:
        self.total, self.per_peer, self.log_every = total, per_peer, log_every
        self.open = 0
        self.by_peer: dict[str, int] = {}
        self.refused = 0
        self.taken = 0              # connections let in since the start
        self.peak = 0               # the most open at once

    def take(self, peer: str) -> bool:
        if self.open >= self.total or self.by_peer.get(peer, 0) >= self.per_peer:
            self.refused += 1
            if self.refused % self.log_every == 1:
                log.warning("API connection from %s refused: %d open (at most %d), %d from it "
                            "(at most %d); %d refused so far", peer, self.open, self.total,
                            self.by_peer.get(peer, 0), self.per_peer, self.refused)
            return False
        self.open += 1
        self.taken += 1
        self.peak = max(self.peak, self.open)
        self.by_peer[peer] = self.by_peer.get(peer, 0) + 1
        return True

    def give_back(self, peer: str) -> None:
        self.open -= 1
        left = self.by_peer.get(peer, 1) - 1
        if left > 0:
            self.by_peer[peer] = left
        else:
            self.by_peer.pop(peer, None)


class _Counted(asyncio.Protocol):
    """The HTTP protocol of one accepted connection, giving its place back when it closes."""

    def __init__(self, inner: asyncio.Protocol, release: Callable[[], None]) -> None:
        self.inner, self._release = inner, release

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        release, self._release = self._release, _nothing
        release()
        self.inner.connection_lost(exc)


def _nothing() -> None:
    return None


class DaemonApi:
    """The HTTP API of one daemon.

    ``view`` returns this host's view as a JSON-able mapping (see ``api.view.host_view``); it
    is called on each ``/v1/status`` request and must not do I/O.
    """

    def __init__(
        self, *, health: DaemonHealth, metrics: DaemonMetrics,
        view: Callable[[], Mapping[str, Any]], listen: str = DEFAULT_LISTEN,
        header_timeout: float = HEADER_TIMEOUT, tls: ApiTls | None = None,
        allow_insecure: bool = False, handshake_timeout: float = HANDSHAKE_TIMEOUT,
    ) -> None:
        if not header_timeout > 0:
            raise ApiError(f"header_timeout must be > 0, got {header_timeout!r}")
        self.header_timeout = header_timeout
        self.handshake_timeout = handshake_timeout
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
        self._listener: socket.socket | None = None
        self._accepting: asyncio.Task[None] | None = None
        self._handshakes: set[asyncio.Task[None]] = set()
        self.cap = ConnectionCap()
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
        family = socket.AF_INET6 if ":" in self._host else socket.AF_INET
        try:
            listener = socket.create_server((self._host, self._port), family=family,
                                            backlog=1024)
        except OSError as e:
            await runner.cleanup()
            raise ApiError(f"cannot listen on {self._host}:{self._port}: {e.strerror or e}") \
                from None
        listener.setblocking(False)
        self._runner, self._listener = runner, listener
        addr = listener.getsockname()
        self.bound = (addr[0], addr[1])
        self._accepting = asyncio.get_running_loop().create_task(self._accept(listener, runner))

    async def _accept(self, listener: socket.socket, runner: web.AppRunner) -> None:
        """Accept connections while the API runs; one over the cap is closed at once."""
        loop = asyncio.get_running_loop()
        out_of_files = 0
        while True:
            try:
                conn, addr = await loop.sock_accept(listener)
            except OSError as e:
                if listener.fileno() < 0:
                    return                              # closed: the API stops
                if e.errno not in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    log.debug("API accept: %s", e)      # e.g. a client that reset first
                    continue
                out_of_files += 1
                if out_of_files % 1000 == 1:
                    log.warning("API accept: %s (%d times): connections wait in the backlog",
                                e.strerror, out_of_files)
                await asyncio.sleep(ACCEPT_BACKOFF)
                continue
            peer = str(addr[0])
            if not self.cap.take(peer):
                conn.close()
                continue
            task = loop.create_task(self._serve(conn, peer, runner))
            self._handshakes.add(task)
            task.add_done_callback(self._handshakes.discard)

    async def _serve(self, conn: socket.socket, peer: str, runner: web.AppRunner) -> None:
        """Hand an accepted connection to aiohttp (after the TLS handshake, bounded)."""
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self.cap.give_back(peer)

        server = runner.server
        assert server is not None
        loop = asyncio.get_running_loop()
        try:
            await loop.connect_accepted_socket(
                lambda: _Counted(server(), release), conn, ssl=self._ssl,
                ssl_handshake_timeout=self.handshake_timeout if self._ssl is not None else None)
        except (OSError, ssl.SSLError, ConnectionError, TimeoutError):
            release()
            conn.close()
        except BaseException:
            release()
            conn.close()
            raise

    async def stop(self) -> None:
        if self._runner is not None:
            runner, self._runner = self._runner, None
            tasks = [t for t in (self._accepting, *self._handshakes) if t is not None]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._accepting = None
            if self._listener is not None:
                self._listener.close()
                self._listener = None
            await runner.cleanup()
