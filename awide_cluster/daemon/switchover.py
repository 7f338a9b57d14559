"""Leader switchover: ``awide-cluster leader switchover [--to HOST]`` moves leadership with no
registry gap and no card out.

1. The CLI checks that the target is a live candidate (``choose``, over the host reports it
   reads: a report on a live lease, not marked restarting, a host of the cluster, not the
   leader) and writes the request at ``intents/switchover`` (``SwitchoverRecord``).
2. The leader, after a poll cycle that wrote or had nothing to write (the registry is
   current), checks again (``choose`` over the reports of that cycle) and answers in one
   transaction fenced by its leader key (create_revision) and the request's mod_revision:
   granted, it deletes the ``leader`` key and rewrites the request as granted (``to`` the
   target, ``granted_by`` itself) on a new lease of the lease TTL, and steps down; refused,
   it deletes the request. Either way one history entry says so (``leader`` or ``intent``).
3. While a granted hand-over names another host, a daemon that finds the leader key vacant
   does not campaign (``defers``); at most a lease TTL by its own clock since it first saw
   that record (a forged one, off any lease, delays an election by that much at most). The
   target's leader-key watch sees the delete and campaigns at once: the SIGTERM hand-over's
   path, with the first cycle of the new term a freshness baseline (nothing counts bad).

The old leader's writes are fenced by its key's create_revision from the moment the key is
deleted; the new leader's by its own.
"""

from __future__ import annotations

import asyncio
import getpass
import logging
import socket
from collections.abc import Mapping
from dataclasses import dataclass

from awide_cluster.contract import bounds, keys, records
from awide_cluster.contract import history_ring as histdoc
from awide_cluster.contract import report as reportdoc
from awide_cluster.contract.records import LeaderRecord, SwitchoverRecord
from awide_cluster.contract.report import HostReport
from awide_cluster.daemon.clock import Clock
from awide_cluster.store.errors import StoreError
from awide_cluster.store.port import Store
from awide_cluster.store.types import Compare, Delete, Put

log = logging.getLogger("awide_cluster.leader")


# --- pure -----------------------------------------------------------------------------------

def choose(request: SwitchoverRecord, reports: Mapping[str, HostReport], leader: str,
           hosts: frozenset[str] | tuple[str, ...] = ()) -> tuple[str | None, str]:
    """(the host to hand over to, "") or (None, why not). A live candidate: a host of the
    cluster (``hosts``; empty: any) whose report is there (its lease is live) and not marked
    restarting, other than the ``leader``. No ``to``: the first live candidate by name."""
    def refused(h: str) -> str:
        if hosts and h not in hosts:
            return "not a host of this cluster"
        r = reports.get(h)
        if r is None:
            return "no report (its daemon is not running, or its lease expired)"
        if r.restarting is not None:
            return "its daemon is restarting"
        return ""

    live = sorted(h for h in reports if h != leader and not refused(h))
    shown = ", ".join(live) or "none"
    if request.to:
        if request.to == leader:
            return None, f"{request.to} already leads"
        why = refused(request.to)
        if why:
            return None, (f"{request.to} is not a live candidate: {why} (live candidates: "
                          f"{shown})")
        return request.to, ""
    if not live:
        return None, "no other live daemon to hand leadership over to"
    return live[0], ""


def defers(record: SwitchoverRecord | None, me: str) -> bool:
    """A granted hand-over names another host: this daemon does not campaign."""
    return record is not None and record.granted and record.to != me


# --- the leader's side ----------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Answer:
    """What the leader did with a switchover request."""

    target: str | None      # the host handed over to; None: refused
    why: str = ""           # why refused
    applied: bool = False   # the transaction committed


async def answer(store: Store, *, request: SwitchoverRecord, mod_revision: int,
                 reports: Mapping[str, HostReport], leader: str, hosts: frozenset[str],
                 leader_revision: int, ttl: int, generation: int,
                 ring: histdoc.History | None, wall: str, call_timeout: float) -> Answer:
    """Grant or refuse the request, in one transaction fenced by this leader's key. Raises
    StoreError."""
    target, why = choose(request, reports, leader, hosts)
    who = f" by {request.by}" if request.by else ""
    compares = [Compare(keys.LEADER, "create", "equal", leader_revision),
                Compare(keys.SWITCHOVER, "mod", "equal", mod_revision)]
    if target is None:
        entry = histdoc.Entry(generation=generation, kind="intent", at=wall, leader=leader,
                              reason=f"switchover{who} refused: {why}", host=leader,
                              by=request.by, why=request.reason)
        ops: list[Delete | Put] = [Delete(keys.SWITCHOVER)]
    else:
        entry = histdoc.Entry(generation=generation, kind="leader", at=wall, leader=leader,
                              reason=f"{leader} hands leadership over to {target} "
                                     f"(switchover{who})", host=target, by=request.by,
                              why=request.reason)
        lease = await store.grant(ttl, timeout=call_timeout)
        granted = SwitchoverRecord(to=target, by=request.by, at=wall, reason=request.reason,
                                   granted_by=leader)
        ops = [Delete(keys.LEADER), Put(keys.SWITCHOVER, granted.encode(), lease.id)]
    if ring is not None:
        ops.append(Put(keys.HISTORY, histdoc.encode(histdoc.append(ring, (entry,)))))
    res = await store.txn(compares, list(ops), [], timeout=call_timeout)
    return Answer(target=target, why=why, applied=res.succeeded)


# --- the operator's side --------------------------------------------------------------------

class SwitchoverError(Exception):
    """The switchover cannot be asked for, or was not done within the bound."""


@dataclass(frozen=True, slots=True)
class Moved:
    before: str
    after: str
    seconds: float


async def live_reports(store: Store, timeout: float) -> dict[str, HostReport]:
    """Every host report that decodes (bounded); the others are no candidates."""
    read = await store.read_prefix(keys.MEMBERS, max_keys=bounds.MEMBERS_MAX_KEYS,
                                   max_value_bytes=bounds.REPORT_MAX_BYTES, timeout=timeout)
    out: dict[str, HostReport] = {}
    for kv in read.kvs:
        try:
            r = reportdoc.decode(kv.value)
        except reportdoc.ReportError:
            continue
        if r.host == keys.tail(kv.key, keys.MEMBERS):
            out[r.host] = r
    return out


async def holder(store: Store, timeout: float) -> str | None:
    kv = await store.get(keys.LEADER, timeout=timeout)
    rec = LeaderRecord.decode(kv.value) if kv is not None else None
    return rec.host if rec is not None else None


async def plan(store: Store, to: str, hosts: tuple[str, ...], timeout: float
               ) -> tuple[str, str]:
    """(the leader now, the host leadership will move to). Raises SwitchoverError naming why
    not (no leader, the target not a live candidate), StoreError."""
    now = await holder(store, timeout)
    if now is None:
        raise SwitchoverError("no daemon holds the leader key: nothing to hand over (a daemon "
                              "is elected by itself within a lease TTL)")
    reports = await live_reports(store, timeout)
    target, why = choose(SwitchoverRecord(to=to), reports, now, frozenset(hosts))
    if target is None:
        raise SwitchoverError(f"switchover refused: {why}; nothing was written")
    return now, target


async def submit(store: Store, *, to: str, hosts: tuple[str, ...], clock: Clock, wait: float,
                 poll: float, call_timeout: float, reason: str = "",
                 by: str | None = None) -> Moved:
    """Check, write the request, and wait (at most ``wait`` s) until another daemon holds the
    leader key (the one named by ``to`` when given). Raises SwitchoverError, StoreError."""
    before, target = await plan(store, to, hosts, call_timeout)
    if by is None:
        by = f"{getpass.getuser()}@{socket.gethostname()}"
    req = SwitchoverRecord(to=to, by=by, at=clock.wall(), reason=reason)
    start = clock.monotonic()
    await store.put(keys.SWITCHOVER, req.encode(), timeout=call_timeout)
    while True:
        try:
            now = await holder(store, call_timeout)
            if now is not None and now != before and (not to or now == to):
                return Moved(before=before, after=now, seconds=clock.monotonic() - start)
            kv = await store.get(keys.SWITCHOVER, timeout=call_timeout)
            if kv is None and now == before:
                raise SwitchoverError(
                    f"the leader {before} refused the switchover (its log and "
                    "`awide-cluster history` say why); nothing changed")
            if now is not None and now != before and to and now != to:
                raise SwitchoverError(f"leadership moved to {now}, not to {to}")
        except StoreError:
            pass                    # keep waiting within the bound
        except records.RecordError:
            pass
        if clock.monotonic() - start >= wait:
            raise SwitchoverError(
                f"switchover to {target} asked, but {before} still leads after {wait:g} s "
                "(the request stays until the leader answers it)")
        await asyncio.sleep(poll)
