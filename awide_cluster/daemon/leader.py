"""The leader's cycle, the shell around ``reconcile.decide``: read, decide, fenced write.

1. Read the reports, the registry, the intents and the leader key (hedged reads, all within
   one call bound). If any read fails the cycle counts nothing ("unreachable is not empty").
2. ``decide`` (pure).
3. If the registry content changed, intents were consumed or the history has something new
   (``daemon/history_entries.py``; a new term is one): one transaction that compares the
   leader key's create_revision (fencing), the registry's mod_revision as read, and each
   consumed intent's mod_revision; it puts the registry, the history ring and deletes the
   intents, so the history and the registry never disagree. A failed compare is never forced:
   a deposed leader steps down, anything else re-reads next cycle.
4. The decision's log lines are logged once the transaction committed.

Write outages (see ``reconcile``): the caller passes ``write_failure`` when this host's report
write failed in this turn; a registry transaction that failed is passed to the next cycle. The
start and the end of an outage are logged here (the decision's lines are lost when the write
fails).
"""

from __future__ import annotations

import enum
import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from awide_cluster.contract import bounds, keys, records
from awide_cluster.contract import history_ring as histdoc
from awide_cluster.contract import registry as regdoc
from awide_cluster.contract import report as reportdoc
from awide_cluster.contract import versions as ver
from awide_cluster.contract import windows as windoc
from awide_cluster.contract.registry import Registry
from awide_cluster.contract.report import HostReport
from awide_cluster.contract.untrusted import HISTORY_CORRUPT
from awide_cluster.daemon import history_entries
from awide_cluster.daemon.clock import Clock
from awide_cluster.daemon.decision_windows import window_entries
from awide_cluster.daemon.leader_fetch import LeaderFetch
from awide_cluster.daemon.leader_read import LeaderRead, StoredHistory, StoredRegistry
from awide_cluster.daemon.leader_repair import base_for, gateway_generations
from awide_cluster.daemon.lease import Leadership, first_kv
from awide_cluster.daemon.reconcile import (
    ClusterSnapshot,
    Decision,
    LeaderMemory,
    Policy,
    Trigger,
    decide,
)
from awide_cluster.store.errors import StoreError, Timeout, refusal_reason
from awide_cluster.store.port import Op, Store
from awide_cluster.store.types import Compare, Delete, Get, PrefixRead, Put

if TYPE_CHECKING:
    from awide_cluster.api.metrics import DaemonMetrics

log = logging.getLogger("awide_cluster.leader")


class CycleOutcome(enum.Enum):
    WROTE = "wrote"             # transaction committed (registry and/or intents)
    UNCHANGED = "unchanged"     # nothing to write
    SKIPPED = "skipped"         # a read failed or the registry is unreadable: counted nothing
    DEPOSED = "deposed"         # the leader key is not ours any more: stepped down
    CONFLICT = "conflict"       # registry or an intent changed under us: re-read next cycle
    ERROR = "error"             # the write could not be confirmed (timeout, unavailable)


def fenced_write(d: Decision, *, leader_revision: int, registry_revision: int,
                 ring: histdoc.History | None = None) -> tuple[list[Compare], list[Op]]:
    """The transaction of a decision: it holds only while the leader key is this term's
    (create_revision), the registry is as read (mod_revision, 0: absent) and each consumed
    intent is as read; it puts the registry (when it changed), the history ``ring`` (when it
    has new entries) and deletes those intents."""
    compares = [Compare(keys.LEADER, "create", "equal", leader_revision),
                Compare(keys.REGISTRY, "mod", "equal", registry_revision)]
    success: list[Op] = []
    if d.write:
        success.append(Put(keys.REGISTRY, regdoc.encode(d.registry)))
    if ring is not None:
        success.append(Put(keys.HISTORY, histdoc.encode(ring)))
    if d.windows_write:
        success.append(Put(keys.WINDOWS, windoc.encode(d.windows)))
    for key, rev in d.consumed:
        compares.append(Compare(key, "mod", "equal", rev))
        success.append(Delete(key))
    return compares, success


class LeaderLoop(LeaderFetch):
    """The cycle; its reads (``leader_fetch``) and its switchover handling
    (``leader_switchover``) are its bases."""

    def __init__(self, store: Store, leadership: Leadership, clock: Clock, *, policy: Policy,
                 call_timeout: float, metrics: DaemonMetrics | None = None) -> None:
        self.store, self.leadership, self.clock = store, leadership, clock
        self.policy, self.call_timeout, self.metrics = policy, call_timeout, metrics
        self.memory = LeaderMemory()
        # the members/ watch's events and the cycle's read decode each report once
        self.reports_memo = reportdoc.ReportMemo(bounds.MEMBERS_MAX_KEYS)
        self._registry_kept: tuple[int, bytes, StoredRegistry] | None = None
        self.registry_decodes = 0       # registry values decoded (once per value read)
        self.registry: Registry | None = None        # last registry read or written
        self.own: Registry | None = None             # last registry this term wrote
        self.attempted: Registry | None = None       # a write not confirmed (maybe applied)
        self.known: Registry | None = None           # newest good registry known at takeover
        self.last_error = ""
        self.refused_reports: dict[str, int] = {}    # host -> reports refused (counted)
        self._refusals: dict[str, str] = {}          # key -> last reason logged
        self._newer: dict[str, str] = {}             # key -> report of a newer minor, said
        self.repairs = 0
        self.txn_failure = ""           # the last registry transaction failed: why (next cycle)
        self._why = ""                  # what the decision's log lines add: the cycle's trigger
        self.reports: Mapping[str, HostReport] = {}     # the host reports the last cycle read
        # etcd's history changed since this daemon last led a cycle: the first cycle repairs
        # a registry of another lineage than the one held, like an older one
        self.history_reset = False
        # ... and it waits until then (monotonic) before it republishes: gateways rewrite their
        # records (the generation they applied, the floor of the republished one) meanwhile
        self.hold_repair_until = float("-inf")
        self._holding = ""
        self.history: histdoc.History | None = None     # the ring as this term knows it
        self.announced = False          # this term's "leader" history entry is written
        self.history_refused = 0        # rings found unreadable (and started afresh)
        self.windows = windoc.NONE      # the operator windows in force, as the last cycle decided
        # a switchover request read in this cycle, with its mod_revision (``switchover``)
        self.switchover: tuple[records.SwitchoverRecord, int] | None = None
        self._switchover_refused = ""
        # why this leader keeps a registry of a newer schema as it is ("" when it does not)
        self.schema_hold = ""
        self.gateway_records: PrefixRead | None = None  # the last poll cycle's gateway records

    def reset(self, known: Registry | None = None) -> None:
        """A new term: counters at zero, the first cycle is the freshness baseline.
        ``known``: the newest good registry this daemon holds (it followed it), the base of a
        repair if etcd's registry is unreadable or missing at the first cycle."""
        self.memory = LeaderMemory()
        self.own = self.attempted = None
        self.known = known if known is not None else self.registry
        self.txn_failure = ""
        self.history, self.announced = None, False
        if self.metrics is not None:
            self.metrics.write_outage(False)

    @property
    def outage(self) -> str:
        """Why the last cycle was a write outage ("" when it was not)."""
        return self.memory.outage

    async def cycle(self, write_failure: str = "", *, trigger: Trigger = "poll",
                    occasion: str = "") -> CycleOutcome:
        """``_cycle``, then a switchover request answered after a poll cycle that left the
        registry current (``switchover``)."""
        outcome = await self._cycle(write_failure, trigger=trigger, occasion=occasion)
        if self.switchover is None or trigger != "poll" or outcome not in (
                CycleOutcome.WROTE, CycleOutcome.UNCHANGED):
            return outcome
        if await self._answer_switchover(*self.switchover):
            return CycleOutcome.DEPOSED
        return outcome

    async def _cycle(self, write_failure: str = "", *, trigger: Trigger = "poll",
                     occasion: str = "") -> CycleOutcome:
        """One cycle. ``write_failure``: this host's report write failed in this turn (why).
        ``trigger``: "report" for a cycle run out of turn, because a host report arrived
        between polls or a term was just won (``reconcile``: only the reports that advanced
        count; a failed transaction is left for the next poll cycle to judge). ``occasion``:
        what the decision's log lines say started it (default: a report's arrival)."""
        ld = self.leadership
        occasion = occasion or "on a report's arrival"
        self._why = f" ({occasion})" if trigger == "report" else ""
        if not ld.is_leader:
            ld.step_down("lease not confirmed within TTL - margin")
            return CycleOutcome.DEPOSED
        try:
            got = await self.read(gateways=trigger == "poll")
        except StoreError as e:
            return self._skip(f"etcd read failed, counting nothing this cycle: {e}")
        ld.observe_key(got.leader_kv)
        if not ld.is_leader:
            return CycleOutcome.DEPOSED
        if ld.tampered:
            if self.metrics is not None:
                self.metrics.value_refused("leader_corrupt")
            try:
                await ld.repair_key()
            except StoreError as e:
                log.warning("leader key not rewritten yet: %s", e)
            if not ld.is_leader:
                return CycleOutcome.DEPOSED
        self._note_refusals(got.snapshot)
        self._take_history(got.history)
        if got.found == "newer_schema":
            return self._hold_newer(got.problem)
        if self.schema_hold:
            log.warning("registry schema hold over: the registry is of a schema this release "
                        "reads fully; leading again")
            self.schema_hold = ""
        try:
            snap = await self._repair_base(got)
        except StoreError as e:
            return self._skip(f"etcd read failed, counting nothing this cycle: {e}")
        left = self.hold_repair_until - self.clock.monotonic()
        if snap.repair and left > 0:
            why = (f"{snap.repair}: republishing in {left:.1f} s, once gateways have recorded "
                   "the generation they applied in etcd's new history")
            if why.split(": republishing")[0] != self._holding:
                log.warning("%s%s", why, self._why)
            self._holding = why.split(": republishing")[0]
            return CycleOutcome.UNCHANGED
        self.history_reset = False
        self._holding = ""
        if snap.registry is not None and not snap.repair:
            self.registry = snap.registry
        if trigger == "poll":
            failure = "; ".join(f for f in (write_failure, self.txn_failure) if f)
            self.txn_failure = ""
            snap = replace(snap, write_failure=failure) if failure else snap
        else:
            snap = replace(snap, trigger=trigger)
        was = self.memory.outage
        d = decide(snap, self.memory, self.policy, now=self.clock.wall())
        self.reports = snap.reports
        self.memory = d.memory
        self._outage_changed(was, d.memory.outage)
        self.last_error = ""
        if not d.write and d.registry is not None and self.own is None:
            self.own = d.registry       # adopted as it is: this term's baseline
        news = history_entries.entries(
            snap.registry, d.registry, leader=self.policy.leader, lines=d.log,
            intents=snap.intents,
            refused_intents={k: why for k, (_, why) in snap.bad_intents.items()},
            repair=snap.repair, new_term=not self.announced, at=self.clock.wall(),
            taken=self._takings(snap.reports))
        news += window_entries(d.window_events, d.registry, leader=self.policy.leader,
                               at=self.clock.wall())
        self.windows = d.windows
        if self.metrics is not None:
            self.metrics.observe_silenced(d.registry, d.windows)
        if not d.write and not d.consumed and not news and not d.windows_write:
            for line in d.log:
                log.info("%s%s", line, self._why)
            return CycleOutcome.UNCHANGED
        if not ld.is_leader or ld.revision is None:     # the decision took time: check again
            ld.step_down("lease not confirmed within TTL - margin")
            return CycleOutcome.DEPOSED
        ring = histdoc.append(self.history or histdoc.EMPTY, news,
                              ring=uuid.uuid4().hex[:12]) if news else None
        return await self._write(d, snap, got, leader_revision=ld.revision, ring=ring,
                                 news=news)

    def _hold_newer(self, problem: str) -> CycleOutcome:
        """The registry is of a schema this release does not fully read (written by a newer
        release): it is kept as it is, never rewritten; this leader decides nothing (no card
        goes out or in) until a leader that reads it takes over. Said once per change."""
        why = (f"{problem}; this leader ({ver.MINE.describe()}) keeps the registry as it is "
               "and writes nothing until a leader of a release that reads it takes over")
        if why != self.schema_hold:
            log.warning("registry schema hold: %s", why)
            if self.metrics is not None:
                self.metrics.registry_refused("newer_schema")
        self.schema_hold = why
        return CycleOutcome.UNCHANGED

    def _takings(self, reports: Mapping[str, HostReport]) -> dict[str, str]:
        """Leaderships taken from a daemon (its report's ``leader_note``) that the ring does
        not hold yet: one history entry each."""
        held = {e.reason for e in self.history.entries} if self.history is not None else set()
        return {h: r.leader_note for h, r in reports.items()
                if r.leader_note and history_entries.taken_reason(h, r.leader_note) not in held}

    def _take_history(self, stored: StoredHistory | None) -> None:
        """The ring read in this cycle becomes this term's; one that cannot be read is
        counted, logged once and replaced by a fresh ring at the next write (the registry's
        writes never wait for it)."""
        if stored is None:
            return
        self.history = stored.history
        if stored.problem:
            self.history_refused += 1
            if self.metrics is not None:
                self.metrics.value_refused(HISTORY_CORRUPT)
            log.warning("%s; starting a fresh history at the next registry write",
                        stored.problem)

    async def _write(self, d: Decision, snap: ClusterSnapshot, got: LeaderRead, *,
                     leader_revision: int, ring: histdoc.History | None = None,
                     news: Sequence[histdoc.Entry] = ()) -> CycleOutcome:
        """The decision's one fenced transaction, and what its answer means."""
        ld = self.leadership
        reg = d.registry
        compares, success = fenced_write(d, leader_revision=leader_revision,
                                         registry_revision=got.registry_rev, ring=ring)
        try:
            res = await self.store.txn(compares, success, [Get(keys.LEADER)],
                                       timeout=self.call_timeout)
        except StoreError as e:
            maybe = isinstance(e, Timeout) and e.maybe_applied
            if d.write:
                self.attempted = reg
            self.history = None             # maybe applied: read it again next cycle
            self.last_error = f"registry write not confirmed: {e}"
            self.txn_failure = f"registry write: {e}"[:300]
            log.warning("%s%s; re-reading next cycle", self.last_error,
                        " (it may have been applied)" if maybe else "")
            if self.metrics is not None:
                self.metrics.registry_write("error")
                self.metrics.write_refused("registry", refusal_reason(e))
            return CycleOutcome.ERROR
        if not res.succeeded:
            self.history = None
            ld.observe_key(first_kv(res))
            if self.metrics is not None:
                self.metrics.registry_write("conflict")
            if not ld.has_key:
                log.warning("registry write refused by etcd: no longer the leader")
                return CycleOutcome.DEPOSED
            log.info("registry write refused by etcd: the registry or an intent changed "
                     "since it was read; re-reading next cycle")
            return CycleOutcome.CONFLICT
        for level, line, entry in history_entries.journal_lines(
                news if ring is not None else (), d.log, snap.registry, d.registry):
            if entry is None:
                log.log(level, "%s%s", line, self._why)
            else:               # a card's transition: the history's words
                log.log(level, "%s%s", line, self._why,
                        extra={"card": entry.card, "card_host": entry.host})
        if ring is not None:
            self.history, self.announced = ring, True
        if d.write:
            self.registry = self.own = reg
            self.attempted = None
            if snap.repair:
                self.repairs += 1
                if self.metrics is not None:
                    self.metrics.registry_repaired(got.found if got.found != "ok" else "foreign")
            log.info("registry generation %d written (%d cards, %d placed)", reg.generation,
                     len(reg.cards), sum(1 for s in reg.slots.slots if s is not None))
            if self.metrics is not None:
                self.metrics.registry_write("written")
                self.metrics.observe_registry(reg)
        return CycleOutcome.WROTE

    @property
    def refusals(self) -> dict[str, str]:
        """Keys under members/ whose report was refused, with the reason last logged."""
        return dict(self._refusals)

    def _note_refusals(self, snap: ClusterSnapshot) -> None:
        """Count every refused value each cycle; log a refusal when its reason changes."""
        now: dict[str, str] = {}
        for host, why in snap.bad_reports.items():
            now[keys.MEMBERS + host] = f"host report refused: {why}"
            self.refused_reports[host] = self.refused_reports.get(host, 0) + 1
            if self.metrics is not None:
                self.metrics.report_refused(host)       # a host of the cluster: bounded labels
                self.metrics.value_refused("report_corrupt")
        for host, why in snap.strangers.items():
            now[keys.MEMBERS + host] = f"report from an unknown host refused: {why}"
            if self.metrics is not None:
                self.metrics.value_refused("report_unknown_host")
        for key, line in now.items():
            if self._refusals.get(key) != line:
                log.warning("%s: %s", key, line)
        self._refusals = now
        newer = {keys.MEMBERS + h: note for h, r in snap.reports.items()
                 if (note := ver.newer_note("report", r.schema_version))}
        for key, note in newer.items():
            if self._newer.get(key) != note:
                log.warning("%s: %s", key, note)
        self._newer = newer

    async def _repair_base(self, got: LeaderRead) -> ClusterSnapshot:
        """The snapshot ``decide`` builds on (``leader_repair.base_for``)."""
        snap, etcd_reg = got.snapshot, got.snapshot.registry
        b = base_for(got, own=self.own, attempted=self.attempted, known=self.known,
                     history_reset=self.history_reset)
        if b.confirmed:
            self.own, self.attempted = b.own, None
        if b.refused and self.metrics is not None:
            self.metrics.registry_refused(b.refused)
        if not b.why and b.registry is not None:
            # a registry written before lineages existed gets one now (and a new generation)
            return snap if b.registry.lineage else replace(snap, lineage=uuid.uuid4().hex[:12])
        floor = max((r.generation for r in (etcd_reg, b.own, self.known) if r is not None),
                    default=0)
        floor = max(floor, await gateway_generations(self.store, self.call_timeout))
        if b.why:
            log.warning("%s: repairing it from generation %s", b.why,
                        b.registry.generation if b.registry is not None
                        else "none (rebuilt from reports)")
        return replace(snap, registry=b.registry, repair=b.why, generation_floor=floor,
                       lineage=uuid.uuid4().hex[:12])

    def _outage_changed(self, was: str, now: str) -> None:
        if self.metrics is not None:
            self.metrics.write_outage(bool(now))
        if now and not was:
            log.warning("write outage: %s; a report that did not advance counts against no "
                        "card until writes come back", now)
        elif was and not now:
            log.warning("write outage over: reports advance again; this cycle is a new "
                        "freshness baseline (a report that did not advance counts from the "
                        "next cycle)")

    def _skip(self, why: str) -> CycleOutcome:
        if why != self.last_error:
            log.warning(why)
        self.last_error = why
        return CycleOutcome.SKIPPED
