"""What a host report that arrives between two leader polls is worth (pure).

The leader watches ``members/``. A report that arrives is looked at only to decide whether a
*report cycle* (``reconcile``: the whole cycle, with its own bounded reads, fenced write and
checks) should run now instead of at the next poll: when it says something new (its cards
changed since the report the leader last read), or counts toward a card's change of state (a
sick report of a card in, a healthy one of a card out). The event's value is untrusted and
never used beyond that hint: what the cycle decides comes from its own read. A report that
does not decode, is a stranger's, names another host, was observed already or is marked
restarting (its cards are held, ``reconcile``) is no news (the next poll cycle reads and
counts it as usual), so nothing in a value can make the leader act on it, only make it read
earlier.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from awide_cluster.contract import keys
from awide_cluster.contract import report as reportdoc
from awide_cluster.contract.registry import CardEntry, Registry
from awide_cluster.contract.report import HostReport, ReportedCard
from awide_cluster.daemon.reconcile import reported_id


def _said(rc: ReportedCard) -> tuple[object, ...]:
    """What a reported card says that a decision reads (not its probes' timings)."""
    return (rc.name, rc.found, rc.serial, rc.model, rc.identity, rc.healthy, rc.reason,
            rc.target, rc.path)


def card_news(c: CardEntry, rc: ReportedCard) -> str:
    """Why ``rc`` (a host's word on registry card ``c``, as it said it before) still counts
    toward a change of ``c``'s state, or ""."""
    if rc.healthy and (c.health != "ok" or c.state == "out"):
        return f"card {c.id} reported healthy ({c.state}, {c.health} in the registry)"
    if not rc.healthy and c.state == "in":
        return f"card {c.id} reported sick: {rc.reason or 'no reason given'}"
    return ""


def report_news(report: HostReport, registry: Registry | None,
                seen: Mapping[str, tuple[str, int]], last: HostReport | None) -> str:
    """Why this report may change the registry (run a report cycle now), "" when it may not.
    ``seen``: (run, seq) of each host's report as the leader's last cycle read it; ``last``:
    the host's report that cycle read (None: none). A report that says what the last one
    said, of cards whose state it does not count toward changing, is no news."""
    host = report.host
    if seen.get(host) == report.freshness:
        return ""                       # observed already
    if report.restarting is not None:
        return ""                       # a planned absence: its cards are held, not observed
    if registry is None:
        return f"report of {host}: no registry yet"
    if last is None or [_said(rc) for rc in report.cards] != [_said(rc) for rc in last.cards]:
        return f"report of {host}: its cards changed"
    listed: set[str] = set()
    for rc in report.cards:
        cid = reported_id(rc)
        c = registry.card(cid) if cid is not None else None
        if c is None:
            continue                    # not admitted last time: not now either
        listed.add(c.id)
        why = card_news(c, rc)
        if why:
            return f"report of {host}: {why}"
    for c in registry.cards:
        if c.host == host and c.id not in listed and c.state == "in":
            return f"report of {host}: card {c.id} ({c.name}) not reported"
    return ""


def arrival_news(key: str, value: bytes, registry: Registry | None,
                 seen: Mapping[str, tuple[str, int]], last: Mapping[str, HostReport],
                 hosts: frozenset[str],
                 decode: Callable[[str, bytes], HostReport] | None = None) -> str:
    """``report_news`` of a watch event's ``members/<host>`` value; "" for a value that is
    not a report of that host of the cluster (the poll cycle judges and counts it).
    ``decode(key, value)``: the decoder (default ``report.decode``)."""
    if not key.startswith(keys.MEMBERS):
        return ""
    host = keys.tail(key, keys.MEMBERS)
    if hosts and host not in hosts:
        return ""
    try:
        report = decode(key, value) if decode else reportdoc.decode(value)
    except reportdoc.ReportError:
        return ""
    if report.host != host:
        return ""
    return report_news(report, registry, seen, last.get(host))
