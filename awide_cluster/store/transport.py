"""One HTTP POST to one etcd member, with typed errors. No retries, no deadlines here.

Every answer is read under a byte bound (``StoreConfig.max_answer_bytes`` or less, per
call): a declared Content-Length over it is refused before reading, a streamed body as soon
as it passes the bound (the connection is closed, the member stops sending). Stream frames
(watch) are bounded the same way, per line.

The aiohttp client (``http_client``) is created lazily inside the running event loop (one per
store). Whether a request may have left this process is recorded in a ``SendState`` (an aiohttp
trace marks the moment a connection is ready): a write whose connection was never established
cannot have been applied.
"""

from __future__ import annotations

import asyncio
import json
import re
import ssl
from typing import Any

import aiohttp

from awide_cluster.store.codec import error_for, error_from_body, parse_json
from awide_cluster.store.config import StoreConfig
from awide_cluster.store.errors import BadResponse, StoreError, TooLarge, Unavailable

RETIRED_POOLS = 4      # connection pools of earlier credentials kept open (reload_credentials)
HEAD_BYTES = 4096      # of a refused answer, kept on the error (see bounded.refused_kv_head)


class SendState:
    """Set by the transport once a connection to the member is ready (the request may go out)."""

    __slots__ = ("connected",)

    def __init__(self) -> None:
        self.connected = False


class EtcdUnreachable(Unavailable):
    """The connection to the member failed before anything was sent: safe to try another."""


async def _mark_connected(_session: Any, ctx: Any, _params: Any) -> None:
    state = ctx.trace_request_ctx
    if isinstance(state, SendState):
        state.connected = True


_SSL_NOTE = re.compile(r" ssl:(?:<[^>]*>|\S+)")


def connect_text(exc: BaseException) -> str:
    """aiohttp's connect error without its ``ssl:default`` note (the TLS setting of the
    attempt, which tells an operator nothing): ``Cannot connect to host 10.0.0.1:2379
    [Connection refused]``."""
    return _SSL_NOTE.sub("", str(exc))


def _with_endpoint(exc: StoreError, endpoint: str) -> StoreError:
    exc.args = (f"{endpoint}: {exc.args[0] if exc.args else ''}",)
    return exc


class Transport:
    def __init__(self, cfg: StoreConfig, ssl_context: ssl.SSLContext | None = None) -> None:
        self._ssl = ssl_context if ssl_context is not None else \
            (cfg.tls.ssl_context() if cfg.tls else None)
        self._http: aiohttp.ClientSession | None = None
        self._retired: list[aiohttp.ClientSession] = []     # pools of earlier credentials
        self._closing: set[asyncio.Future[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self.token: str | None = None
        self.max_answer_bytes = cfg.max_answer_bytes
        self.bytes_read = 0          # answer bytes read by unary calls (watches not counted)

    def http_client(self) -> aiohttp.ClientSession:
        if self._closed:
            raise Unavailable("the store is closed")
        loop = asyncio.get_running_loop()
        if self._http is None or self._http.closed or self._loop is not loop:
            trace = aiohttp.TraceConfig()
            trace.on_connection_create_end.append(_mark_connected)
            trace.on_connection_reuseconn.append(_mark_connected)
            connector = aiohttp.TCPConnector(limit=0, ssl=self._ssl if self._ssl else True)
            self._http = aiohttp.ClientSession(
                connector=connector, trace_configs=[trace],
                timeout=aiohttp.ClientTimeout(total=None, connect=None, sock_read=None,
                                              sock_connect=None),
                skip_auto_headers=("User-Agent",),
            )
            self._loop = loop
        return self._http

    @property
    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context new connections use (None: plain HTTP or the default)."""
        return self._ssl

    def use_ssl(self, ctx: ssl.SSLContext | None) -> None:
        """New connections use ``ctx`` from now on. The pool of the old context is retired, not
        closed: calls and watch streams running on its connections finish there; its idle
        connections close after aiohttp's keep-alive timeout; it is closed with the store (at
        most ``RETIRED_POOLS`` are kept, the oldest is closed beyond that)."""
        self._ssl = ctx
        old, self._http = self._http, None
        if old is not None and not old.closed:
            self._retired.append(old)
        while len(self._retired) > RETIRED_POOLS:
            oldest = self._retired.pop(0)
            if not oldest.closed:
                task = asyncio.ensure_future(oldest.close())
                self._closing.add(task)
                task.add_done_callback(self._closing.discard)

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = self.token
        return headers

    def cap(self, max_bytes: int | None) -> int:
        """The bound of one answer: the call's, never more than the store's."""
        if max_bytes is None:
            return self.max_answer_bytes
        return max(1, min(int(max_bytes), self.max_answer_bytes))

    async def post(self, endpoint: str, path: str, body: dict[str, Any], *, write: bool = False,
                   sent: SendState | None = None, max_bytes: int | None = None,
                   what: str = "") -> dict[str, Any]:
        """POST ``body`` to ``endpoint+path``; the decoded answer or a typed error.

        An answer over ``max_bytes`` (default and ceiling: ``max_answer_bytes``) raises
        ``TooLarge`` naming ``what`` (default: the path)."""
        session = self.http_client()
        data = json.dumps(body).encode()
        limit = self.cap(max_bytes)
        try:
            async with session.post(endpoint + path, data=data, headers=self._headers(),
                                    trace_request_ctx=sent) as resp:
                status = resp.status
                raw = await read_capped(resp, limit, f"{endpoint}: {what or path}", what or path,
                                        self)
        except aiohttp.ClientConnectorError as exc:
            raise EtcdUnreachable(f"{endpoint}: cannot connect: {connect_text(exc)}") from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise Unavailable(f"{endpoint}: {type(exc).__name__}: {exc}",
                              maybe_applied=write) from exc
        return _decode(endpoint, status, raw, write)

    async def open_stream(self, endpoint: str, path: str,
                          body: dict[str, Any]) -> aiohttp.ClientResponse:
        """POST and return the open response of a streaming call; caller closes it."""
        session = self.http_client()
        try:
            resp = await session.post(endpoint + path, data=json.dumps(body).encode(),
                                      headers=self._headers())
        except aiohttp.ClientConnectorError as exc:
            raise EtcdUnreachable(f"{endpoint}: cannot connect: {connect_text(exc)}") from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise Unavailable(f"{endpoint}: {type(exc).__name__}: {exc}") from exc
        if resp.status != 200:
            try:
                raw = await read_capped(resp, self.max_answer_bytes, f"{endpoint}: {path}", path)
            except (aiohttp.ClientError, OSError) as exc:
                raise Unavailable(f"{endpoint}: HTTP {resp.status}: {exc}") from exc
            finally:
                resp.close()
            _decode(endpoint, resp.status, raw, False)
            raise BadResponse(f"{endpoint}: HTTP {resp.status} on a stream")
        return resp

    async def close(self) -> None:
        self._closed = True
        session, self._http = self._http, None
        retired, self._retired = self._retired, []
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not self._loop:
            return
        for s in (*retired, session):
            if s is not None and not s.closed:
                await s.close()


async def read_capped(resp: aiohttp.ClientResponse, limit: int, where: str, what: str,
                      counter: Transport | None = None) -> bytes:
    """The whole body, or ``TooLarge`` as soon as it passes ``limit`` bytes (closes ``resp``:
    the member stops sending). Bytes read are added to ``counter.bytes_read``."""
    declared = resp.content_length
    if declared is not None and declared > limit:
        resp.close()
        raise TooLarge(f"{where}: answer of {declared} bytes over the bound of {limit} bytes, "
                       "refused", what=what, limit=limit)
    buf = bytearray()
    while True:
        chunk = await resp.content.readany()
        if not chunk:
            return bytes(buf)
        buf += chunk
        if counter is not None:
            counter.bytes_read += len(chunk)
        if len(buf) > limit:
            resp.close()
            raise TooLarge(f"{where}: answer over the bound of {limit} bytes, refused "
                           f"(stopped reading at {len(buf)})", what=what, limit=limit,
                           head=bytes(buf[:HEAD_BYTES]))


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


class FrameTooLarge(TooLarge):
    """One stream frame over the bound: the stream cannot be resumed past it (the reader
    has dropped its bytes and closed the answer)."""


class LineReader:
    """Newline-delimited JSON frames from a streaming answer, each at most ``max_line`` bytes.

    A frame over the bound raises ``FrameTooLarge`` as soon as it passes the bound (its
    bytes are dropped, the answer closed): a stream is never read past a frame it refused.
    """

    def __init__(self, resp: aiohttp.ClientResponse, max_line: int, what: str = "stream") -> None:
        self._resp = resp
        self._buf = bytearray()
        self._max = max_line
        self._what = what

    async def next_line(self) -> bytes | None:
        """The next non-empty line, or None at end of stream; ``FrameTooLarge`` for a line
        over the bound."""
        while True:
            nl = self._buf.find(b"\n")
            if nl > self._max or (nl < 0 and len(self._buf) > self._max):
                self._refuse()
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

    def _refuse(self) -> None:
        size = len(self._buf)
        self._buf.clear()
        self._resp.close()
        raise FrameTooLarge(f"{self._what}: a message over the bound of {self._max} bytes, "
                            f"refused (stopped reading at {size})", what=self._what,
                            limit=self._max)
