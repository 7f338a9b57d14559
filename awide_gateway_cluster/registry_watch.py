"""The gateway's watch of ``registry``: each event checked like a polled answer.

What the watch delivers goes through the same ``Follower`` step as a poll's answer (no second
read); its progress notifications prove the view fresh (the poll loop then leaves a
serializable poll out). The poll stays the guarantee of freshness: the watch starts right
after the revision the view is known up to, so no change between a poll and the watch is
missed; a compacted, refused or broken watch asks for a poll now and opens again.

A watch silent for the proof window (``proof_window``: no event, no progress notification)
leaves its member at once: the stream is re-opened on the next member of the ring from the
last revision delivered, so no event is lost. A frozen member keeps its socket open and says
nothing; without the move the change would wait for the next poll.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable

from awide_cluster.contract import keys
from awide_cluster.store.errors import TimelineChanged, WatchCompacted, WatchMessageTooLarge
from awide_cluster.store.port import Store
from awide_cluster.store.types import WatchBatch
from awide_cluster.store.watch import Watch
from awide_gateway_cluster.follower import WATCH_MESSAGE_BYTES, Follower, FollowStep

log = logging.getLogger("awide_gateway_cluster")

# a progress notification proves the view fresh for this many poll intervals (a turn's
# serializable poll is then left out); it is also the bound of what a notification may hide
PROOF_WINDOW = 1.5
# the proof window never ends before the members' next notification is due: their notify
# interval (configured, or the longest gap seen between two messages of one stream when that
# is longer) times this margin (the deploy's 1.4 s notifications arrive 1.40-1.54 s apart)
NOTIFY_MARGIN = 1.25


def proves(batch: WatchBatch) -> bool:
    """Whether a watch message of events proves the view fresh as a progress notification
    does: its last ``registry`` event is at the message's header revision, the member's own
    revision when it sent it, so the member had nothing newer (etcd sends a watch in sync the
    events of each write with that write's revision; a watch catching up gets a later header,
    which proves nothing here). Pure."""
    last = [e for e in batch.events if e.kv.key == keys.REGISTRY][-1:]
    return bool(last) and last[0].kv.mod_revision == batch.revision


def proof_window(poll_interval: float, notify_interval: float, measured: float = 0.0) -> float:
    """Seconds a progress notification proves the view fresh, and the silence after which the
    registry watch leaves its member: ``PROOF_WINDOW`` poll intervals, never below the notify
    interval (the configured one or the ``measured`` gap, the longer) times ``NOTIFY_MARGIN``."""
    return max(PROOF_WINDOW * poll_interval, NOTIFY_MARGIN * max(notify_interval, measured))


class RegistryWatch:
    def __init__(self, *, store: Callable[[], Store], take: Callable[[FollowStep], None],
                 history_check: Callable[[], bool], poll_now: Callable[[], None],
                 interval: float, notify_interval: float, stall_after: float,
                 rng: random.Random, clock: Callable[[], float] = time.monotonic) -> None:
        self._store, self._take, self._history_check = store, take, history_check
        self._poll_now, self._interval, self._notify = poll_now, interval, notify_interval
        self._stall_after, self._rng, self._clock = stall_after, rng, clock
        self._gap = 0.0                 # longest silence seen between two messages of a stream
        self._watch: Watch | None = None
        self._member: str | None = None     # the member the last message came from
        self.restarts = 0               # registry watches opened again after they ended
        self.moves = 0                  # streams moved to another member after a silence

    @property
    def window(self) -> float:
        """The proof window (seconds): a progress notification proves the view fresh this
        long, and a watch silent this long leaves its member (at most ``stall_after``)."""
        return proof_window(self._interval, self._notify, self._gap)

    @property
    def member(self) -> str | None:
        """The member the current stream comes from (None between watches)."""
        return self._watch.endpoint if self._watch is not None else None

    async def run(self, follower: Follower) -> None:
        """Apply what the registry watch delivers, re-opened for ever (cancelled at stop)."""
        resume, first, compacted = 0, True, False
        epoch = self._store().timeline_epoch
        while True:
            self._history_check()
            if self._store().timeline_epoch != epoch:
                resume, epoch = 0, self._store().timeline_epoch   # a new etcd history
            start = 0 if compacted else max(resume, follower.state.known_revision) + 1
            if not first:
                self.restarts += 1
            first = False
            try:
                async with self._store().watch(
                        keys.REGISTRY, start_revision=start if start > 1 else None,
                        stall_after=min(self.window, self._stall_after),
                        max_message_bytes=WATCH_MESSAGE_BYTES) as watch:
                    compacted = False
                    self._watch = watch
                    try:
                        await self._follow(watch, follower)
                    finally:
                        self._watch = None
                        resume = max(resume, watch.revision)
            except asyncio.CancelledError:
                raise
            except WatchCompacted as e:
                # the poll (now, and every poll_interval) covers what the watch cannot resume
                log.info("registry watch: %s; polling now, then watching from the present", e)
                resume, compacted = 0, True
                self._poll_now()
                await asyncio.sleep(self._interval * (1 + self._rng.random()))
                continue
            except TimelineChanged as e:
                # the poll reads the registry of the new history now; watch it from the present
                log.info("registry watch: %s", e)
                resume = 0
                self._history_check()
                continue
            except Exception as e:  # noqa: BLE001 - any watch failure: the poll covers it
                log.debug("registry watch ended: %s", e)
            await asyncio.sleep(self._interval * (1 + self._rng.random()))

    async def _follow(self, watch: Watch, follower: Follower) -> None:
        last: float | None = None       # when the stream's last progress notification came
        reconnects = watch.reconnects
        while True:
            try:
                batch = await watch.__anext__()
            except StopAsyncIteration:
                return
            except WatchMessageTooLarge as e:
                # refused unparsed; the poll reads the key (bounded) and refuses it by name
                log.warning("registry watch: %s; polling now", e)
                self._poll_now()
                continue
            now = self._clock()
            if watch.reconnects != reconnects:
                # the stream was silent for the window (or broke): it went on on another member
                self.moves += watch.reconnects - reconnects
                log.info("registry watch: %s silent for %.2f s or gone; moved to %s, "
                         "resumed after the last revision delivered", self._member,
                         watch.stall_after, watch.endpoint)
                reconnects, last = watch.reconnects, None
            elif batch.progress and last is not None and now - last > self._gap:
                self._gap = now - last          # a slower member: widen the window
                watch.stall_after = min(self.window, self._stall_after)
            self._member = watch.endpoint
            last = now if batch.progress else None
            if batch.progress:
                self._take(follower.progress(batch.revision))
            for event in batch.events:
                if event.kv.key == keys.REGISTRY:
                    self._take(follower.on_event(event))
            if not batch.progress and proves(batch):
                # etcd notifies no watch that had an event in its interval: while the
                # registry changes, its own messages stand in for the notifications
                self._take(follower.progress(batch.revision, by_event=True))
