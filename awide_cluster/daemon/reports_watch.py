"""The leader's watch of ``members/``: a report cycle on a report's arrival.

While this daemon leads (``DaemonShared.term``), a host report that arrives between two polls
and says something the registry does not show yet (``arrivals`` decides, from the event's
value as a hint only) runs a *report cycle* at once, its own bounded reads and fenced write
like any cycle; so a card is out when its host's ``sick_polls``-th sick report arrives,
whatever the leader's phase. ``CycleRunner`` keeps cycles from overlapping and spaces the
out-of-turn ones. A new term's first cycle (``term_cycle``) runs the same way.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from awide_cluster.contract import bounds, keys
from awide_cluster.contract.untrusted import clean_text
from awide_cluster.daemon.arrivals import arrival_news
from awide_cluster.daemon.cycles import CycleRunner
from awide_cluster.daemon.leader import LeaderLoop
from awide_cluster.daemon.leader_watch import reopened
from awide_cluster.daemon.shared import DaemonShared
from awide_cluster.store.errors import StoreError, WatchMessageTooLarge
from awide_cluster.store.port import Store
from awide_cluster.store.types import WatchBatch
from awide_cluster.store.watch import Watch

if TYPE_CHECKING:
    from awide_cluster.api.metrics import DaemonMetrics

log = logging.getLogger("awide_cluster.daemon")

# a members/ watch message holds a few reports (base64 in the event): over this it is not
# looked at (a report cycle runs, its read bounded like the poll's)
REPORTS_WATCH_MESSAGE_BYTES = 4 * bounds.REPORT_MAX_BYTES * 4 // 3 + 64 * 1024


class ReportsWatch:
    def __init__(self, shared: DaemonShared, store: Store, leader_loop: LeaderLoop,
                 cycles: CycleRunner, metrics: DaemonMetrics) -> None:
        self.shared, self.store, self.leader_loop = shared, store, leader_loop
        self.cycles, self.metrics = cycles, metrics
        self.watch: Watch | None = None     # the open watch (its stall bound follows a reload)
        self._reopens = 0
        self._error = ""

    @property
    def reopens(self) -> int:
        """Streams of the ``members/`` watch re-opened after a stall
        (``timing.reports_watch_stall``) or a broken stream, since the start."""
        return self._reopens + reopened(self.watch)

    async def run(self) -> None:
        """While this daemon leads, follow ``members/`` with a watch and run a report cycle
        for a report that says something new (``arrivals.arrival_news``). Never ends on an
        error: logged once, re-opened after one poll interval; the poll cycles go on."""
        shared = self.shared
        while not shared.stop.is_set():
            await shared.until_leading()
            if shared.stop.is_set():
                return
            try:
                async with self.store.watch(keys.MEMBERS, prefix=True,
                                            stall_after=shared.config.timing.reports_watch_stall,
                                            max_message_bytes=REPORTS_WATCH_MESSAGE_BYTES) as w:
                    self.watch = w
                    while shared.term.is_set() and not shared.stop.is_set():
                        try:
                            batch = await w.__anext__()
                        except WatchMessageTooLarge as e:
                            await self.cycle(f"a members/ watch message not looked at: {e}")
                            continue
                        except StopAsyncIteration:
                            break
                        why = self.news(batch)
                        if why:
                            await self.cycle(why)
            except StoreError as e:
                self._failed(str(e))
                await shared.sleep_plain(shared.config.timing.poll_interval)
            except Exception as e:      # noqa: BLE001 - the watch must outlive any content
                self._failed(f"{type(e).__name__}: {e}", trace=True)
                await shared.sleep_plain(shared.config.timing.poll_interval)
            finally:
                self._reopens += reopened(self.watch)
                self.watch = None

    def news(self, batch: WatchBatch) -> str:
        """Why one of the batch's reports may change the registry, "" if none may."""
        loop = self.leader_loop
        for ev in batch.events:
            if ev.kind != "put":
                continue        # a report gone: the poll cycle counts it
            why = arrival_news(ev.kv.key, ev.kv.value, loop.registry, loop.memory.seen,
                               loop.reports, loop.policy.hosts, loop.reports_memo.decode)
            if why:
                return why
        return ""

    async def cycle(self, why: str) -> None:
        """A report cycle (``CycleRunner.out_of_turn``)."""
        if await self.cycles.out_of_turn(why):
            self._error = ""

    async def term_cycle(self) -> None:
        """A new term's first cycle, right after a campaign won on the watch (the hand-over's
        first fenced write, not after this host's probes and report of its next turn). An
        out-of-turn cycle like a report cycle (``reconcile``: only reports that advanced
        count). Never raises: a failure is logged, the next poll cycle runs as usual."""
        occasion = "the first of a term won on the leader-key watch"
        try:
            if await self.cycles.out_of_turn(occasion, trigger="term", occasion=occasion):
                self._error = ""
        except Exception as e:      # noqa: BLE001 - the watch must outlive a failed cycle
            why = clean_text(f"{type(e).__name__}: {e}", 300)
            self.metrics.loop_error(type(e).__name__)
            log.exception("%s: first cycle of the new term failed, the next poll cycle runs "
                          "as usual: %s", self.shared.config.host, why)

    def _failed(self, why: str, *, trace: bool = False) -> None:
        why = clean_text(why, 300)
        if why != self._error:
            log.warning("%s: members/ watch: %s; the poll cycles go on", self.shared.config.host,
                        why, exc_info=trace)
        self._error = why
