"""The gateway's watch of ``registry``: each event checked like a polled answer.

What the watch delivers goes through the same ``Follower`` step as a poll's answer (no second
read); its progress notifications prove the view fresh (the poll loop then leaves a
serializable poll out). The poll stays the guarantee of freshness: the watch starts right
after the revision the view is known up to, so no change between a poll and the watch is
missed; a compacted, refused or broken watch asks for a poll now and opens again.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable

from awide_cluster.contract import keys
from awide_cluster.store.errors import TimelineChanged, WatchCompacted, WatchMessageTooLarge
from awide_cluster.store.port import Store
from awide_cluster.store.watch import Watch
from awide_gateway_cluster.follower import WATCH_MESSAGE_BYTES, Follower, FollowStep

log = logging.getLogger("awide_gateway_cluster")


class RegistryWatch:
    def __init__(self, *, store: Callable[[], Store], take: Callable[[FollowStep], None],
                 history_check: Callable[[], bool], poll_now: Callable[[], None],
                 interval: float, stall_after: float, rng: random.Random) -> None:
        self._store, self._take, self._history_check = store, take, history_check
        self._poll_now, self._interval = poll_now, interval
        self._stall_after, self._rng = stall_after, rng
        self.restarts = 0               # registry watches opened again after they ended

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
                        stall_after=self._stall_after,
                        max_message_bytes=WATCH_MESSAGE_BYTES) as watch:
                    compacted = False
                    try:
                        await self._follow(watch, follower)
                    finally:
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
            if batch.progress:
                self._take(follower.progress(batch.revision))
            for event in batch.events:
                if event.kv.key == keys.REGISTRY:
                    self._take(follower.on_event(event))
