"""The watch of the ``leader`` key, beside the turns.

When the key is vacated (deleted on a clean stop, or by etcd when its holder's lease expired)
a follower runs the campaign of the turn's step 4 at once instead of at its next poll, and a
new leader's first cycle runs right after the won campaign, in the watch's task, as an
out-of-turn cycle (``on_won``: counted like a report cycle, so the next poll cycle neither
counts its reports again nor as not advancing): the hand-over's first fenced write does not
wait for this host's card probes and report. What the watch delivers only triggers a read or
a campaign, never its value; the poll stays the bounded safety net. ``lease.on_leader_key``
decides.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from awide_cluster.contract import keys
from awide_cluster.contract.untrusted import clean_text
from awide_cluster.daemon.election import Election
from awide_cluster.daemon.lease import (
    HostLease,
    KeyAction,
    KeySeen,
    Leadership,
    key_seen,
    on_leader_key,
)
from awide_cluster.daemon.shared import DaemonShared
from awide_cluster.store.errors import StoreError, WatchMessageTooLarge
from awide_cluster.store.port import Store
from awide_cluster.store.watch import Watch

log = logging.getLogger("awide_cluster.daemon")

# a leader record is at most 4 KiB (base64 in the event): a message over this is refused unread
# (the watch skips it and the daemon reads the key instead, bounded like its poll's read)
LEADER_WATCH_MESSAGE_BYTES = 64 * 1024


def reopened(watch: Watch | None) -> int:
    """The streams a watch re-opened after a stall or a broken stream (0: none open)."""
    return watch.reconnects if watch is not None else 0


class LeaderKeyWatch:
    def __init__(self, shared: DaemonShared, store: Store, lease: HostLease,
                 leadership: Leadership, election: Election,
                 on_won: Callable[[], Awaitable[None]]) -> None:
        self.shared, self.store, self.lease = shared, store, lease
        self.leadership, self.election, self.on_won = leadership, election, on_won
        self.watch: Watch | None = None     # the open watch (its stall bound follows a reload)
        self._reopens = 0                   # streams re-opened by the watches closed before
        self._error = ""
        self.key_steps: dict[str, int] = {}     # reads or campaigns it triggered, by action
        self.key_wins = 0                   # campaigns won on a leader-key watch event

    @property
    def reopens(self) -> int:
        """Leader-key watch streams re-opened after a stall (no message within
        ``timing.leader_watch_stall``) or a broken stream, since the start."""
        return self._reopens + reopened(self.watch)

    async def run(self) -> None:
        """Follow the ``leader`` key with a watch (progress notifications, stall watchdog,
        resumption: ``store.watch``) and act on what ``on_leader_key`` decides. Never ends
        on an error: it is logged once, the watch re-opened after one poll interval, and the
        key read then (events may have been missed meanwhile). The poll covers the gap."""
        shared = self.shared
        missed = False
        while not shared.stop.is_set():
            try:
                stall = shared.config.timing.leader_watch_stall
                async with self.store.watch(keys.LEADER, stall_after=stall,
                                            max_message_bytes=LEADER_WATCH_MESSAGE_BYTES) as w:
                    self.watch = w
                    if missed:
                        await self.on_key("lost")
                        missed = False
                    while not shared.stop.is_set():
                        try:
                            batch = await w.__anext__()
                        except WatchMessageTooLarge as e:
                            self._failed(str(e))
                            await self.on_key("lost")
                            continue
                        except StopAsyncIteration:
                            break
                        await self.on_key(key_seen(batch))
            except StoreError as e:
                self._failed(str(e))
                missed = True
            except Exception as e:      # noqa: BLE001 - the watch must outlive any content
                self._failed(f"{type(e).__name__}: {e}", trace=True)
                missed = True
            finally:
                self._reopens += reopened(self.watch)
                self.watch = None
            await shared.sleep(shared.config.timing.poll_interval if missed else 0)

    def _failed(self, why: str, *, trace: bool = False) -> None:
        why = clean_text(why, 300)
        if why != self._error:
            log.warning("%s: leader key watch: %s; the poll reads the key meanwhile",
                        self.shared.config.host, why, exc_info=trace)
        self._error = why

    async def on_key(self, seen: KeySeen) -> None:
        """What the leader-key watch showed: decided by ``on_leader_key``; a campaign or a
        read of the key, never the event's value. Never raises for etcd trouble."""
        shared = self.shared
        if shared.stop.is_set():
            return
        step = on_leader_key(seen, has_key=self.leadership.has_key,
                             lease_valid=self.lease.valid())
        if seen == "progress":
            return
        host = shared.config.host
        log.info("%s: leader key watch saw %s: %s (%s)", host, seen, step.action.value,
                 step.reason)
        if step.action is KeyAction.IGNORE:
            return
        self.key_steps[step.action.value] = self.key_steps.get(step.action.value, 0) + 1
        try:
            async with shared.electing:
                if step.action is KeyAction.VERIFY and self.leadership.has_key:
                    kv = await self.store.get(keys.LEADER,
                                              timeout=shared.config.etcd.call_timeout)
                    self.leadership.observe_key(kv)
                had = self.leadership.has_key
                if not had and not shared.stop.is_set():
                    await self.election.campaign(vacated=seen == "delete")
        except StoreError as e:
            log.warning("%s: leader key read on a watch event failed (%s); the next poll "
                        "campaigns", host, clean_text(e, 300))
            return
        self._error = ""
        if self.leadership.has_key and not had:
            self.key_wins += 1
            shared.term.set()           # the members/ watch starts now too
            await self.on_won()
