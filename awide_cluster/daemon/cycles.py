"""Leader cycles, one at a time: the turn's poll cycle and the out-of-turn ones.

An out-of-turn cycle runs when a host report arrives between two polls (the ``members/``
watch) or right after a campaign won on the leader-key watch (a new term's first cycle). It
is at least ``REPORT_CYCLE_GAP`` of a poll after the last out-of-turn cycle, never beside
another cycle (``lock``), and runs only while this daemon holds the leader key. Every cycle's
outcome is kept (the last 50, for tests) and counted in the metrics by trigger.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Literal

from awide_cluster.contract.untrusted import clean_text
from awide_cluster.daemon.leader import CycleOutcome, LeaderLoop
from awide_cluster.daemon.lease import Leadership
from awide_cluster.daemon.shared import DaemonShared

if TYPE_CHECKING:
    from awide_cluster.api.metrics import DaemonMetrics

log = logging.getLogger("awide_cluster.daemon")

# report cycles are at least this share of a poll interval apart (a burst of arrivals, or a
# writer that rewrites its report in a loop, costs at most 1/gap reads per poll)
REPORT_CYCLE_GAP = 0.05


class CycleRunner:
    def __init__(self, shared: DaemonShared, leader_loop: LeaderLoop, leadership: Leadership,
                 metrics: DaemonMetrics) -> None:
        self.shared, self.leader_loop, self.leadership = shared, leader_loop, leadership
        self.metrics = metrics
        self.lock = asyncio.Lock()          # one leader cycle at a time
        self.outcomes: list[CycleOutcome] = []     # last leader outcomes (bounded, for tests)
        self.report_cycles: dict[str, int] = {}    # out-of-turn cycles run, by outcome
        self._last_out_of_turn = float("-inf")

    async def poll_cycle(self, report_failure: str) -> bool:
        """4b. One leader cycle of the turn (told whether this turn's report write failed).
        False: it read or wrote nothing."""
        async with self.lock:
            outcome = await self.leader_loop.cycle(write_failure=report_failure)
        self.metrics.leader_cycles.labels(trigger="poll").inc()
        self._record(outcome)
        return outcome not in (CycleOutcome.SKIPPED, CycleOutcome.ERROR)

    async def out_of_turn(self, why: str, *, trigger: Literal["report", "term"] = "report",
                          occasion: str = "") -> bool:
        """One leader cycle started by a report's arrival (or, ``trigger`` "term", by a
        campaign won on the watch), at least ``REPORT_CYCLE_GAP`` of a poll after the last
        one, never beside the turn's cycle. False: it did not run (not leading, stopping)."""
        shared = self.shared
        gap = REPORT_CYCLE_GAP * shared.config.timing.poll_interval
        wait = self._last_out_of_turn + gap - shared.clock.monotonic()
        if wait > 0:
            await shared.sleep_plain(wait)
        async with self.lock:
            if not self.leadership.has_key or shared.stop.is_set():
                return False
            self._last_out_of_turn = shared.clock.monotonic()
            log.debug("%s: %s cycle: %s", shared.config.host, trigger, clean_text(why, 300))
            outcome = await self.leader_loop.cycle(trigger="report", occasion=occasion)
        self.metrics.leader_cycles.labels(trigger=trigger).inc()
        self.report_cycles[outcome.value] = self.report_cycles.get(outcome.value, 0) + 1
        self._record(outcome)
        return True

    def _record(self, outcome: CycleOutcome) -> None:
        self.outcomes = (self.outcomes + [outcome])[-50:]
        if self.leader_loop.registry is not None:
            self.shared.registry = self.leader_loop.registry
