"""A clean stop is a planned absence: the host report written once more, marked restarting.

Before a daemon that stops cleanly revokes its lease (its leader key vanishes at once: the
hand-over), it writes its last report again with ``seq + 1`` and ``restarting`` set, on a new
lease whose TTL is ``timing.restart_grace``: the key outlives the daemon by the grace and
expires by itself at the deadline (etcd's lease, one clock). The leader holds that host's
cards meanwhile (``reconcile``: no observation, state and counters unchanged); the daemon
started again writes a normal report over it. A crash writes nothing: the report stops
advancing and its lease expires, as before. ``restart_grace: 0`` writes nothing either.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime, timedelta

from awide_cluster.contract import keys
from awide_cluster.contract import report as reportdoc
from awide_cluster.contract.report import HostReport, Restarting
from awide_cluster.store.errors import StoreError
from awide_cluster.store.port import Store
from awide_cluster.store.types import Compare, Delete, Put

log = logging.getLogger("awide_cluster.daemon")


def deadline_text(wall: str, grace: int) -> str:
    """``wall`` (ISO 8601 text) plus ``grace`` seconds, as text; "" when ``wall`` is not
    ISO 8601 (the deadline shown is informational; the lease is the deadline)."""
    try:
        return (datetime.fromisoformat(wall) + timedelta(seconds=grace)).isoformat(
            timespec="seconds")
    except ValueError:
        return ""


def restarting_report(last: HostReport, *, grace: int, wall: str) -> HostReport:
    """The report a cleanly stopping daemon writes once more: ``last``, one seq later,
    marked restarting for ``grace`` seconds."""
    return replace(last, seq=last.seq + 1,
                   restarting=Restarting(grace=grace, until=deadline_text(wall, grace)))


async def mark_restarting(store: Store, last: HostReport | None, *, grace: int, wall: str,
                          call_timeout: float, leader_revision: int | None = None
                          ) -> tuple[HostReport | None, bool]:
    """Write ``last`` again marked restarting on a lease of ``grace`` seconds (two bounded
    calls: the grant, then one transaction); with ``leader_revision`` (this daemon leads: its
    key's create_revision) the same transaction deletes the leader key when it is still that
    term's (the hand-over, in the revision that marks the report). Returns the report written
    (None when nothing was: no grace, no report yet, or etcd refused; then the report vanishes
    with the lease, as after any stop, and so does the leader key) and whether the leader key
    was deleted."""
    if grace <= 0 or last is None:
        return None, False          # the leader key, if any, goes with the lease's revoke
    resign = [Compare(keys.LEADER, "create", "equal", leader_revision)] \
        if leader_revision is not None else []
    marked = restarting_report(last, grace=grace, wall=wall)
    try:
        lease = await store.grant(grace, timeout=call_timeout)
        put = Put(keys.member(last.host), reportdoc.encode(marked), lease.id)
        if resign:
            res = await store.txn(resign, [put, Delete(keys.LEADER)], [put],
                                  timeout=call_timeout)
        else:
            await store.put(put.key, put.value, lease=lease.id, timeout=call_timeout)
    except StoreError as e:
        log.warning("%s not marked restarting (%s): its report vanishes with its lease",
                    last.host, e)
        return None, False
    log.info("%s marked restarting until %s (grace %d s, lease %x): its cards are held",
             last.host, marked.restarting.until if marked.restarting else "", grace, lease.id)
    return marked, bool(resign) and res.succeeded
