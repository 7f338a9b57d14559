"""Synchronous, bounded reads of a cluster's keys for the harness (which is not async).

``StoreThread(config)`` runs one ``EtcdStore`` on an event loop in a daemon thread;
``call(fn, bound)`` runs ``await fn(store)`` there and returns its result, raising
``TimeoutError`` after ``bound`` seconds. Usable from plain code and from inside another event
loop (it blocks the caller for at most ``bound``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from awide_cluster.store import EtcdStore, StoreConfig

T = TypeVar("T")


class StoreThread:
    def __init__(self, config: StoreConfig) -> None:
        self.config = config
        self._loop = asyncio.new_event_loop()
        self._store: EtcdStore | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="embedded-store",
                                        daemon=True)
        self._thread.start()

    def call(self, fn: Callable[[EtcdStore], Awaitable[T]], bound: float) -> T:
        async def run() -> Any:
            if self._store is None:
                self._store = EtcdStore(self.config)
            async with asyncio.timeout(bound):
                return await fn(self._store)

        fut = asyncio.run_coroutine_threadsafe(run(), self._loop)
        try:
            return fut.result(bound + 1.0)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise TimeoutError(f"no answer from etcd within {bound:g} s") from None

    def close(self) -> None:
        if not self._loop.is_running():
            return

        async def shut() -> None:
            if self._store is not None:
                await self._store.close()
                self._store = None

        try:
            asyncio.run_coroutine_threadsafe(shut(), self._loop).result(3.0)
        except Exception:  # noqa: BLE001 - best effort on the way out
            pass
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(3.0)
        if not self._loop.is_running():
            self._loop.close()
