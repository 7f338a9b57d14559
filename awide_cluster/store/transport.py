"""One HTTP POST to one etcd member, with typed errors. No retries, no deadlines here.

The session is created lazily inside the running event loop (one per store). Whether a request
may have left this process is recorded in a ``SendState`` (an aiohttp trace marks the moment a
connection is ready): a write whose connection was never established cannot have been applied.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp

from awide_cluster.store.codec import error_for, error_from_body, parse_json
from awide_cluster.store.config import StoreConfig
from awide_cluster.store.errors import BadResponse, StoreError, Unavailable

_MAX_LINE = 64 * 1024 * 1024


class SendState:
    """Set by the transport once a connection to the member is ready (the request may go out)."""

    __slots__ = ("connected",)

    def __init__(self) -> None:
        self.connected = False


class ConnectFailed(Unavailable):
    """The connection to the member failed before anything was sent: safe to try another."""


async def _mark_connected(_session: Any, ctx: Any, _params: Any) -> None:
    state = ctx.trace_request_ctx
    if isinstance(state, SendState):
        state.connected = True


def _with_endpoint(exc: StoreError, endpoint: str) -> StoreError:
    exc.args = (f"{endpoint}: {exc.args[0] if exc.args else ''}",)
    return exc


class Transport:
    def __init__(self, cfg: StoreConfig) -> None:
        self._ssl = cfg.tls.ssl_context() if cfg.tls else None
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self.token: str | None = None

    def session(self) -> aiohttp.ClientSession:
        if self._closed:
            raise Unavailable("the store is closed")
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._loop is not loop:
            trace = aiohttp.TraceConfig()
            trace.on_connection_create_end.append(_mark_connected)
            trace.on_connection_reuseconn.append(_mark_connected)
            connector = aiohttp.TCPConnector(limit=0, ssl=self._ssl if self._ssl else True)
            self._session = aiohttp.ClientSession(
                connector=connector, trace_configs=[trace],
                timeout=aiohttp.ClientTimeout(total=None, connect=None, sock_read=None,
                                              sock_connect=None),
                skip_auto_headers=("User-Agent",),
            )
            self._loop = loop
        return self._session

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = self.token
        return headers

    async def post(self, endpoint: str, path: str, body: dict[str, Any], *, write: bool = False,
                   sent: SendState | None = None) -> dict[str, Any]:
        """POST ``body`` to ``endpoint+path``; the decoded answer or a typed error."""
        session = self.session()
        data = json.dumps(body).encode()
        try:
            async with session.post(endpoint + path, data=data, headers=self._headers(),
                                    trace_request_ctx=sent) as resp:
                status = resp.status
                raw = await resp.read()
        except aiohttp.ClientConnectorError as exc:
            raise ConnectFailed(f"{endpoint}: cannot connect: {exc}") from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise Unavailable(f"{endpoint}: {type(exc).__name__}: {exc}",
                              maybe_applied=write) from exc
        return _decode(endpoint, status, raw, write)

    async def open_stream(self, endpoint: str, path: str,
                          body: dict[str, Any]) -> aiohttp.ClientResponse:
        """POST and return the open response of a streaming call; caller closes it."""
        session = self.session()
        try:
            resp = await session.post(endpoint + path, data=json.dumps(body).encode(),
                                      headers=self._headers())
        except aiohttp.ClientConnectorError as exc:
            raise ConnectFailed(f"{endpoint}: cannot connect: {exc}") from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise Unavailable(f"{endpoint}: {type(exc).__name__}: {exc}") from exc
        if resp.status != 200:
            try:
                raw = await resp.read()
            except (aiohttp.ClientError, OSError) as exc:
                raise Unavailable(f"{endpoint}: HTTP {resp.status}: {exc}") from exc
            finally:
                resp.close()
            _decode(endpoint, resp.status, raw, False)
            raise BadResponse(f"{endpoint}: HTTP {resp.status} on a stream")
        return resp

    async def close(self) -> None:
        self._closed = True
        session, self._session = self._session, None
        if session is not None and not session.closed:
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is self._loop:
                await session.close()


def _decode(endpoint: str, status: int, raw: bytes, write: bool) -> dict[str, Any]:
    if status != 200:
        try:
            body = parse_json(raw)
        except BadResponse:
            text = raw[:200].decode(errors="replace").strip()
            raise _with_endpoint(error_for(0, text, status, write=write), endpoint) from None
        raise _with_endpoint(error_from_body(body, status, write=write), endpoint)
    try:
        body = parse_json(raw)
    except BadResponse as exc:
        raise _with_endpoint(exc, endpoint) from None
    if "error" in body:  # a streaming call (lease keepalive) reports errors in-band
        raise _with_endpoint(error_from_body(body, status, write=write), endpoint)
    return body


class LineReader:
    """Newline-delimited JSON frames from a streaming answer, without a line-size trap."""

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self._resp = resp
        self._buf = bytearray()

    async def next_line(self) -> bytes | None:
        """The next non-empty line, or None at end of stream."""
        while True:
            nl = self._buf.find(b"\n")
            if nl >= 0:
                line = bytes(self._buf[:nl])
                del self._buf[:nl + 1]
                if line.strip():
                    return line
                continue
            try:
                chunk = await self._resp.content.readany()
            except (aiohttp.ClientError, OSError) as exc:
                raise Unavailable(f"stream broken: {type(exc).__name__}: {exc}") from exc
            if not chunk:
                if self._buf.strip():
                    line = bytes(self._buf)
                    self._buf.clear()
                    return line
                return None
            self._buf += chunk
            if len(self._buf) > _MAX_LINE:
                raise BadResponse("stream frame larger than 64 MiB")
