"""The leader's cycle, the shell around ``reconcile.decide``: read, decide, fenced write.

1. Read the reports, the registry, the intents and the leader key (hedged reads, all within
   one call bound). If any read fails the cycle counts nothing ("unreachable is not empty").
2. ``decide`` (pure).
3. If the registry content changed or intents were consumed: one transaction that compares the
   leader key's create_revision (fencing), the registry's mod_revision as read, and each
   consumed intent's mod_revision; it puts the registry and deletes the intents. A failed
   compare is never forced: a deposed leader steps down, anything else re-reads next cycle.
4. The decision's log lines are logged once the transaction committed.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from dataclasses import dataclass

from awide_cluster import bounds
from awide_cluster.contract import keys, records, registry as regdoc, report as reportdoc
from awide_cluster.contract.registry import Registry, RegistryError, UnknownSchema
from awide_cluster.daemon.clock import Clock
from awide_cluster.daemon.lease import Leadership, _first
from awide_cluster.daemon.reconcile import (
    Intent, LeaderMemory, Policy, Snapshot, decide,
)
from awide_cluster.store.errors import StoreError, Timeout, ValueTooLarge
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


class RegistryTooLarge(RegistryError):
    """The registry in etcd is over its bound (refused by name, like a corrupt one)."""


class LeaderLoop:
    def __init__(self, store, leadership: Leadership, clock: Clock, *, policy: Policy,
                 call_timeout: float, metrics=None) -> None:
        self.store, self.leadership, self.clock = store, leadership, clock
        self.policy, self.call_timeout, self.metrics = policy, call_timeout, metrics
        self.memory = LeaderMemory()
        self.registry: Registry | None = None        # last registry read or written
        self.last_error = ""
        self.refused_reports: dict[str, int] = {}    # host -> reports refused (counted)

    def reset(self) -> None:
        """A new term: counters at zero, the first cycle is the freshness baseline."""
        self.memory = LeaderMemory()

    async def read(self) -> Read:
        """Every read of one cycle; StoreError if any failed, RegistryError if the registry in
        etcd is unreadable (the leader never overwrites what it cannot read)."""
        t = self.call_timeout
        members, reg_kv, intents, leader_kv = await asyncio.gather(
            self.store.read_prefix(keys.MEMBERS, max_keys=bounds.MEMBERS_MAX_KEYS,
                                   max_value_bytes=bounds.REPORT_MAX_BYTES, timeout=t),
            self._get_registry(t),
            self.store.read_prefix(keys.INTENTS, max_keys=bounds.INTENTS_MAX_KEYS,
                                   max_value_bytes=bounds.RECORD_MAX_BYTES, timeout=t),
            self.store.get(keys.LEADER, timeout=t),
        )
        members.complete()   # more hosts than the bound: TooManyKeys, the cycle counts nothing
        if intents.more:
            log.warning("%d intents pending, over the bound of %d per cycle: the first %d now, "
                        "the others at the next cycles", intents.count, intents.max_keys,
                        intents.max_keys)
        # values over their bound: refused by name, never decoded (a key over the key bound
        # is only logged: no host has that name, and deleting it would not fit in a txn)
        bad = {keys.tail(k, keys.MEMBERS): r.why for k, r in members.refused.items()
               if r.kind == "value"}
        bad_intents = {k: (r.mod_revision, r.why) for k, r in intents.refused.items()
                       if r.kind == "value"}
        for r in (*members.refused.values(), *intents.refused.values()):
            if r.kind == "key":
                log.warning("key %s ignored: %s", r.name, r.why)
        reports = {}
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
        good_intents = []
        for kv in intents.kvs:
            try:
                good_intents.append(decode_intent(kv))
            except ValueError as e:
                bad_intents[kv.key] = (kv.mod_revision, str(e)[:200])
        snap = Snapshot(reports=reports, bad_reports=bad, registry=registry,
                        intents=tuple(good_intents), bad_intents=bad_intents)
        return Read(snap, reg_kv.mod_revision if reg_kv is not None else 0, leader_kv)

    async def _get_registry(self, timeout: float) -> KeyValue | None:
        try:
            return await self.store.get(keys.REGISTRY, timeout=timeout,
                                        max_value_bytes=bounds.REGISTRY_MAX_BYTES)
        except ValueTooLarge as e:     # not read again while unchanged (the store remembers)
            raise RegistryTooLarge(f"registry (mod_revision {e.mod_revision}): value over "
                                   f"{e.limit} bytes, refused") from None

    async def cycle(self) -> Outcome:
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
                    "unknown_schema" if isinstance(e, UnknownSchema) else
                    "too_large" if isinstance(e, RegistryTooLarge) else "corrupt")
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
        d = decide(got.snapshot, self.memory, self.policy, now=self.clock.wall())
        self.memory = d.memory
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
            log.warning("%s%s; re-reading next cycle", self.last_error,
                        " (it may have been applied)" if maybe else "")
            if self.metrics is not None:
                self.metrics.registry_write("error")
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

    def _skip(self, why: str) -> Outcome:
        if why != self.last_error:
            log.warning(why)
        self.last_error = why
        return Outcome.SKIPPED
