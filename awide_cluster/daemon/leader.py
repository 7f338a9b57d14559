"""The leader's cycle, the shell around ``reconcile.decide``: read, decide, fenced write.

1. Read the reports, the registry, the intents and the leader key (hedged reads, all within
   one call bound). If any read fails the cycle counts nothing ("unreachable is not empty").
2. ``decide`` (pure).
3. If the registry content changed or intents were consumed: one transaction that compares the
   leader key's create_revision (fencing), the registry's mod_revision as read, and each
   consumed intent's mod_revision; it puts the registry and deletes the intents. A failed
   compare is never forced: a deposed leader steps down, anything else re-reads next cycle.
4. The decision's log lines are logged once the transaction committed.

Write outages (see ``reconcile``): the caller passes ``write_failure`` when this host's report
write failed in this turn; a registry transaction that failed is passed to the next cycle. The
start and the end of an outage are logged here (the decision's lines are lost when the write
fails).
"""

from __future__ import annotations

import asyncio
import enum
import logging
from dataclasses import dataclass, replace

from awide_cluster.contract import keys, records, registry as regdoc, report as reportdoc
from awide_cluster.contract.registry import Registry, RegistryError, UnknownSchema
from awide_cluster.daemon.clock import Clock
from awide_cluster.daemon.lease import Leadership, _first
from awide_cluster.daemon.reconcile import (
    Intent, LeaderMemory, Policy, Snapshot, decide,
)
from awide_cluster.store.errors import StoreError, Timeout, refusal_reason
from awide_cluster.store.types import Compare, Delete, Get, KeyValue, Put

log = logging.getLogger("awide_cluster.leader")


class Outcome(enum.Enum):
    WROTE = "wrote"             # transaction committed (registry and/or intents)
    UNCHANGED = "unchanged"     # nothing to write
    SKIPPED = "skipped"         # a read failed or the registry is unreadable: counted nothing
    DEPOSED = "deposed"         # the leader key is not ours any more: stepped down
    CONFLICT = "conflict"       # registry or an intent changed under us: re-read next cycle
    ERROR = "error"             # the write could not be confirmed (timeout, unavailable)


@dataclass(frozen=True, slots=True)
class Read:
    snapshot: Snapshot
    registry_rev: int           # mod_revision of the registry as read (0: absent)
    leader_kv: KeyValue | None


def decode_intent(kv: KeyValue) -> Intent:
    """Raises ValueError (RecordError) naming what is wrong."""
    cid = keys.tail(kv.key, keys.INTENTS)
    keys.check_name("card id", cid)
    rec = records.decode_intent(kv.value, cid)
    return Intent(card_id=cid, action=rec.action, mod_revision=kv.mod_revision, by=rec.by)


class LeaderLoop:
    def __init__(self, store, leadership: Leadership, clock: Clock, *, policy: Policy,
                 call_timeout: float, metrics=None) -> None:
        self.store, self.leadership, self.clock = store, leadership, clock
        self.policy, self.call_timeout, self.metrics = policy, call_timeout, metrics
        self.memory = LeaderMemory()
        self.registry: Registry | None = None        # last registry read or written
        self.last_error = ""
        self.refused_reports: dict[str, int] = {}    # host -> reports refused (counted)
        self.txn_failure = ""           # the last registry transaction failed: why (next cycle)

    def reset(self) -> None:
        """A new term: counters at zero, the first cycle is the freshness baseline."""
        self.memory = LeaderMemory()
        self.txn_failure = ""
        if self.metrics is not None:
            self.metrics.write_outage(False)

    @property
    def outage(self) -> str:
        """Why the last cycle was a write outage ("" when it was not)."""
        return self.memory.outage

    async def read(self) -> Read:
        """Every read of one cycle; StoreError if any failed, RegistryError if the registry in
        etcd is unreadable (the leader never overwrites what it cannot read)."""
        t = self.call_timeout
        members, reg_kv, intents, leader_kv = await asyncio.gather(
            self.store.range(keys.MEMBERS, prefix=True, timeout=t),
            self.store.get(keys.REGISTRY, timeout=t),
            self.store.range(keys.INTENTS, prefix=True, timeout=t),
            self.store.get(keys.LEADER, timeout=t),
        )
        reports, bad = {}, {}
        for kv in members.kvs:
            host = keys.tail(kv.key, keys.MEMBERS)
            try:
                r = reportdoc.decode(kv.value)
                if r.host != host:
                    raise reportdoc.ReportError(f"report names host {r.host!r}")
                reports[host] = r
            except reportdoc.ReportError as e:
                bad[host] = str(e)[:200]
        registry = regdoc.decode(reg_kv.value) if reg_kv is not None else None
        good_intents, bad_intents = [], {}
        for kv in intents.kvs:
            try:
                good_intents.append(decode_intent(kv))
            except ValueError as e:
                bad_intents[kv.key] = (kv.mod_revision, str(e)[:200])
        snap = Snapshot(reports=reports, bad_reports=bad, registry=registry,
                        intents=tuple(good_intents), bad_intents=bad_intents)
        return Read(snap, reg_kv.mod_revision if reg_kv is not None else 0, leader_kv)

    async def cycle(self, write_failure: str = "") -> Outcome:
        """One cycle. ``write_failure``: this host's report write failed in this turn (why)."""
        ld = self.leadership
        if not ld.holds():
            ld.step_down("lease not confirmed within TTL - margin")
            return Outcome.DEPOSED
        try:
            got = await self.read()
        except StoreError as e:
            return self._skip(f"etcd read failed, counting nothing this cycle: {e}")
        except RegistryError as e:
            if self.metrics is not None:
                self.metrics.registry_refused(
                    "unknown_schema" if isinstance(e, UnknownSchema) else "corrupt")
            return self._skip(f"registry in etcd is unreadable, not overwriting it: {e}")
        ld.observe_key(got.leader_kv)
        if not ld.holds():
            return Outcome.DEPOSED
        for host, why in got.snapshot.bad_reports.items():
            self.refused_reports[host] = self.refused_reports.get(host, 0) + 1
            if self.metrics is not None:
                self.metrics.report_refused(host)
            log.warning("host report of %s ignored: %s", host, why)
        self.registry = got.snapshot.registry or self.registry
        failure = "; ".join(f for f in (write_failure, self.txn_failure) if f)
        self.txn_failure = ""
        snap = replace(got.snapshot, write_failure=failure) if failure else got.snapshot
        was = self.memory.outage
        d = decide(snap, self.memory, self.policy, now=self.clock.wall())
        self.memory = d.memory
        self._outage_changed(was, d.memory.outage)
        self.last_error = ""
        if not d.write and not d.consumed:
            for line in d.log:
                log.info(line)
            return Outcome.UNCHANGED
        if not ld.holds():           # the decision took time: check again before writing
            ld.step_down("lease not confirmed within TTL - margin")
            return Outcome.DEPOSED
        compares = [Compare(keys.LEADER, "create", "equal", ld.revision),
                    Compare(keys.REGISTRY, "mod", "equal", got.registry_rev)]
        success = []
        reg = d.registry
        if d.write:
            success.append(Put(keys.REGISTRY, regdoc.encode(reg)))
        for key, rev in d.consumed:
            compares.append(Compare(key, "mod", "equal", rev))
            success.append(Delete(key))
        try:
            res = await self.store.txn(compares, success, [Get(keys.LEADER)],
                                       timeout=self.call_timeout)
        except StoreError as e:
            maybe = isinstance(e, Timeout) and e.maybe_applied
            self.last_error = f"registry write not confirmed: {e}"
            self.txn_failure = f"registry write: {e}"[:300]
            log.warning("%s%s; re-reading next cycle", self.last_error,
                        " (it may have been applied)" if maybe else "")
            if self.metrics is not None:
                self.metrics.registry_write("error")
                self.metrics.write_refused("registry", refusal_reason(e))
            return Outcome.ERROR
        if not res.succeeded:
            ld.observe_key(_first(res))
            if self.metrics is not None:
                self.metrics.registry_write("conflict")
            if not ld.leading:
                log.warning("registry write refused by etcd: no longer the leader")
                return Outcome.DEPOSED
            log.info("registry write refused by etcd: the registry or an intent changed "
                     "since it was read; re-reading next cycle")
            return Outcome.CONFLICT
        for line in d.log:
            log.info(line)
        if d.write:
            self.registry = reg
            log.info("registry generation %d written (%d cards, %d placed)", reg.generation,
                     len(reg.cards), sum(1 for s in reg.slots.slots if s is not None))
            if self.metrics is not None:
                self.metrics.registry_write("written")
                self.metrics.observe_registry(reg)
        return Outcome.WROTE

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

    def _skip(self, why: str) -> Outcome:
        if why != self.last_error:
            log.warning(why)
        self.last_error = why
        return Outcome.SKIPPED
