"""Change-event subscriptions. Publishing never blocks: each subscription is a bounded queue
that drops its oldest event when full (and counts ``dropped``).

- ``Subscription``: for asyncio consumers on the gateway's own loop (``async for ev in sub``).
- ``ThreadSubscription``: for threads (``sub.get(timeout)``, or ``for ev in sub``), used by
  ``ThreadedClusterGateway``.

The hub's subscriber list is an immutable tuple replaced by one assignment, so subscribing
from another thread never races with publishing.
"""

from __future__ import annotations

import asyncio
import collections
import queue
import threading
from typing import Protocol

from awide_gateway_cluster.events import ChangeEvent


class _Sink(Protocol):
    def push(self, ev: ChangeEvent) -> None: ...


class Subscription:
    def __init__(self, hub: Hub, maxsize: int = 1000) -> None:
        self._hub = hub
        self._items: collections.deque[ChangeEvent] = collections.deque()
        self._maxsize = maxsize
        self._ready = asyncio.Event()
        self.dropped = 0
        self.closed = False

    def push(self, ev: ChangeEvent) -> None:
        if len(self._items) >= self._maxsize:
            self._items.popleft()
            self.dropped += 1
        self._items.append(ev)
        self._ready.set()

    def get_nowait(self) -> ChangeEvent | None:
        return self._items.popleft() if self._items else None

    async def get(self) -> ChangeEvent:
        while not self._items:
            if self.closed:
                raise StopAsyncIteration
            self._ready.clear()
            await self._ready.wait()
        return self._items.popleft()

    def close(self) -> None:
        self.closed = True
        self._hub.remove(self)
        self._ready.set()

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> ChangeEvent:
        return await self.get()


class ThreadSubscription:
    _CLOSED = object()

    def __init__(self, hub: Hub, maxsize: int = 1000) -> None:
        self._hub = hub
        self._q: queue.Queue[object] = queue.Queue(maxsize)
        self._lock = threading.Lock()
        self.dropped = 0

    def push(self, ev: ChangeEvent | object) -> None:
        with self._lock:            # held for a few list operations only, never across I/O
            while True:
                try:
                    self._q.put_nowait(ev)
                    return
                except queue.Full:
                    try:
                        self._q.get_nowait()
                        self.dropped += 1
                    except queue.Empty:
                        pass

    def get(self, timeout: float | None = None) -> ChangeEvent | None:
        """The next event, or None after ``timeout`` seconds or once closed."""
        try:
            ev = self._q.get(timeout=timeout)
        except queue.Empty:
            return None
        if ev is self._CLOSED:
            self.push(self._CLOSED)
            return None
        return ev  # type: ignore[return-value]

    def close(self) -> None:
        self._hub.remove(self)
        self.push(self._CLOSED)

    def __iter__(self) -> ThreadSubscription:
        return self

    def __next__(self) -> ChangeEvent:
        ev = self.get()
        if ev is None:
            raise StopIteration
        return ev


class Hub:
    def __init__(self) -> None:
        self._subs: tuple[_Sink, ...] = ()
        self._lock = threading.Lock()     # serialises add/remove only; publish takes no lock

    def add(self, sub: _Sink) -> None:
        with self._lock:
            self._subs = self._subs + (sub,)

    def remove(self, sub: _Sink) -> None:
        with self._lock:
            self._subs = tuple(s for s in self._subs if s is not sub)

    def publish(self, ev: ChangeEvent) -> None:
        for s in self._subs:
            s.push(ev)

    def close_all(self) -> None:
        for s in self._subs:
            s.close()  # type: ignore[attr-defined]
