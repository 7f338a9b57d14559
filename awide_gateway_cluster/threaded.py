"""``ThreadedClusterGateway``: the library for programs without asyncio.

It runs a ``ClusterGateway`` on its own event loop in one background (daemon) thread. The hot
path (``snapshot``, ``placement``, ``report_io_error``) is served straight from the caller's
thread: it reads the gateway's current immutable view, so it never waits for the loop.
``start``/``stop`` block the caller, bounded.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from awide_gateway_cluster.config import GatewayConfig
from awide_gateway_cluster.gateway import ClusterGateway
from awide_gateway_cluster.stats import GatewayStats
from awide_gateway_cluster.subscribe import ThreadSubscription
from awide_gateway_cluster.view import SlotView

T = TypeVar("T")


class ThreadedClusterGateway:
    def __init__(self, config: GatewayConfig, **kwargs: Any) -> None:
        self.gateway = ClusterGateway(config, **kwargs)
        self.placement = self.gateway.placement
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        """Its loop thread runs (between ``start`` and ``stop``)."""
        return self._thread is not None

    def start(self, timeout: float | None = None) -> None:
        """Start the loop thread and the gateway; raises what ``ClusterGateway.start`` raises."""
        if self._thread is not None:
            return
        cfg = self.gateway.config
        bound = timeout if timeout is not None else (
            cfg.start_timeout + 6 * cfg.etcd.call_timeout + 2.0)
        loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(ready.set)
            loop.run_forever()
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

        self._loop = loop
        self._thread = threading.Thread(target=run, name=f"awide-gateway-{self.gateway.id}",
                                        daemon=True)
        self._thread.start()
        ready.wait(5.0)
        try:
            self._call(self.gateway.start(), bound)
        except BaseException:
            self._halt()
            raise

    def stop(self, timeout: float = 10.0) -> None:
        if self._thread is None:
            return
        try:
            self._call(self.gateway.stop(), timeout)
        finally:
            self._halt()

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        assert self._loop is not None
        fut = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return fut.result(timeout)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise TimeoutError(f"gateway did not answer within {timeout:g} s") from None

    def _halt(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(5.0)
        self._thread = self._loop = None

    def __enter__(self) -> ThreadedClusterGateway:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # the hot path and the synchronous API, served from the caller's thread
    def snapshot(self) -> SlotView:
        return self.gateway.snapshot()

    def stats(self) -> GatewayStats:
        return self.gateway.stats()

    def report_io_error(self, card_id: str) -> None:
        self.gateway.report_io_error(card_id)

    def _on_loop(self, fn: Callable[..., T], *args: object) -> T:
        """Run a synchronous gateway method on its loop (it publishes events there)."""
        if self._loop is None:
            return fn(*args)

        async def call() -> T:
            return fn(*args)

        return self._call(call(), 5.0)

    def attach_engine(self, name: str) -> None:
        self._on_loop(self.gateway.attach_engine, name)

    def detach_engine(self, name: str) -> None:
        self._on_loop(self.gateway.detach_engine, name)

    def request_wipe(self) -> None:
        self._on_loop(self.gateway.request_wipe)

    def reload_credentials(self) -> str:
        """``ClusterGateway.reload_credentials`` on the gateway's loop."""
        return str(self._on_loop(self.gateway.reload_credentials))

    def subscribe(self, maxsize: int = 1000) -> ThreadSubscription:
        sub = ThreadSubscription(self.gateway._hub, maxsize)
        self.gateway._hub.add(sub)
        return sub
