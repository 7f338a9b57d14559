"""What the daemons wrote, judged: the leader key, the registry, the history, each host's
report, and whether the daemons can write at all. Pure functions; each returns its view and
problems.

Ages are this reader's own measure (``observe``); the leader's ``written_at`` is shown, never
compared with this machine's clock.
"""

from __future__ import annotations

from dataclasses import dataclass

from awide_cluster.contract import history_ring as histdoc
from awide_cluster.contract import keys, records
from awide_cluster.contract import registry as regdoc
from awide_cluster.contract import report as reportdoc
from awide_cluster.contract import versions as ver
from awide_cluster.contract.history_ring import History
from awide_cluster.contract.registry import Registry
from awide_cluster.contract.report import HostReport, Restarting
from awide_cluster.contract.untrusted import clean_text
from awide_cluster.operator.freshness import Age, Observations
from awide_cluster.operator.model import EtcdView, HostView, LeaderView, Problem, RegistryView
from awide_cluster.operator.snapshot import StatusPolicy
from awide_cluster.store.types import KeyValue

# ---------------------------------------------------------------------- leader key


def judge_leader(item: KeyValue | None, wall: float
                 ) -> tuple[LeaderView | None, list[Problem]]:
    """The leader key's holder (None: nobody holds it); ``wall``: the time of the read."""
    if item is None:
        return None, []
    try:
        rec = records.decode_leader(item.value)
    except records.RecordError as e:
        return (unread_leader(str(e)),
                [Problem("error", "leader_corrupt", "leader", str(e))])
    since = rec.since_ts
    return LeaderView(host=rec.host, since=records.iso(since),
                      held_for=wall - since if since is not None else None, api=rec.api), []


def unread_leader(error: str) -> LeaderView:
    return LeaderView(host="?", since="", held_for=None, api="", error=error)


# ---------------------------------------------------------------------- registry

def judge_registry(item: KeyValue | None, age: Age | None
                   ) -> tuple[Registry | None, RegistryView, list[Problem]]:
    if item is None:
        return None, unread_registry(None, "missing"), [Problem(
            "error", "registry_missing", "registry",
            "no registry in etcd: no leader has written one yet")]
    try:
        reg = regdoc.decode(item.value)
    except regdoc.NewerSchema as e:
        return None, unread_registry(age, str(e)), [Problem(
            "error", "registry_schema_newer", "registry",
            f"{e}: written by a newer release than this one (readers of this release keep "
            "their last good registry, its leaders keep it as is: docs/versions.md)")]
    except regdoc.RegistryError as e:
        return None, unread_registry(age, str(e)), [Problem(
            "error", "registry_corrupt", "registry",
            f"{e} (readers keep their last good registry; the leader rewrites it at its next "
            "change)")]
    mismatch = regdoc.check_slots(reg)
    problems = [Problem("error", "slot_table_mismatch", "registry", mismatch)] if mismatch else []
    newer = ver.newer_note("registry", reg.schema_version)
    if newer:
        problems.append(Problem("warning", "registry_schema_newer", "registry", newer))
    view = RegistryView(generation=reg.generation, leader=reg.leader, written_at=reg.written_at,
                        age=age, cards=len(reg.cards),
                        slots_used=sum(1 for s in reg.slots.slots if s is not None))
    return reg, view, problems


def unread_registry(age: Age | None, error: str) -> RegistryView:
    return RegistryView(generation=None, leader="", written_at="", age=age, cards=0,
                        slots_used=0, error=error)


# ---------------------------------------------------------------------- history

def judge_history(item: KeyValue | None) -> tuple[History | None, list[Problem]]:
    """The leader's history ring (None: none yet, or it cannot be read: history_corrupt)."""
    if item is None:
        return None, []
    try:
        return histdoc.decode(item.value), []
    except histdoc.HistoryError as e:
        return None, [Problem(
            "warning", "history_corrupt", keys.HISTORY,
            f"{e} (the registry is not affected; the leader starts a fresh history at its "
            "next registry write, and what the old one held is lost)")]


# ---------------------------------------------------------------------- host reports

@dataclass(frozen=True, slots=True)
class HostsRead:
    """The reports that decoded (by host) and one view per host shown."""
    reports: dict[str, HostReport]
    views: tuple[HostView, ...]


def judge_hosts(
    kv: dict[str, KeyValue], big: dict[str, str], seen: Observations, mono: float,
    reg: Registry | None, leader: LeaderView | None, policy: StatusPolicy,
) -> tuple[HostsRead, list[Problem]]:
    lead = leader.host if leader is not None else ""
    problems: list[Problem] = []
    views = [_host_view(keys.tail(key, keys.MEMBERS), lead, seen.age(key, mono), error=why)
             for key, why in big.items() if key.startswith(keys.MEMBERS)]  # shown, not read
    reports: dict[str, HostReport] = {}
    for key, item in kv.items():
        if not key.startswith(keys.MEMBERS):
            continue
        host = clean_text(keys.tail(key, keys.MEMBERS), 80)
        if reg is not None and reg.hosts and host not in reg.hosts:
            problems.append(_unknown_host(key, host, reg.hosts))
            continue
        report, view, found = judge_report(host, item, seen.age(key, mono), lead, policy)
        if report is not None:
            reports[host] = report
        views.append(view)
        problems += found
    registry_hosts = {c.host for c in reg.cards} if reg is not None else set()
    known = {v.host for v in views}
    for host in sorted(registry_hosts - known):
        views.append(_host_view(host, lead, None, error="no report"))
        problems.append(Problem(
            "error", "host_down", host,
            f"host {host} has cards in the registry but no report: its daemon is down or cut "
            "off (its lease expired)"))
    configured = set(reg.hosts if reg is not None else ()) | set(policy.hosts)
    for host in sorted(configured - known - registry_hosts):
        views.append(_host_view(host, lead, None, error="no report"))
        problems.append(daemon_down(host))
    if lead and lead not in known and lead not in registry_hosts:
        problems.append(Problem("warning", "leader_without_report", lead,
                                f"leader {lead} has no host report"))
    held = schema_held(lead, reports.get(lead), reg)
    if held is not None:
        problems.append(held)
    versions = sorted({v.version for v in views if v.version})
    if len(versions) > 1:
        problems.append(Problem("warning", "version_skew", "daemons",
                                f"daemons run different versions: {', '.join(versions)}"))
    views.sort(key=lambda v: v.host)
    return HostsRead(reports=reports, views=tuple(views)), problems


def schema_held(lead: str, report: HostReport | None, reg: Registry | None) -> Problem | None:
    """The leader's release does not fully read the registry's schema (its report says what
    it reads): it keeps the registry as it is and decides nothing (docs/versions.md). A leader
    of a release before the versions fields (its report has none) reads any minor of major 1
    and does not hold: nothing to say."""
    if report is None or reg is None or report.schema_minor == 0:
        return None
    span = report.versions.reads("registry")
    if span.fit(reg.schema_version) == "full":
        return None
    return Problem(
        "error", "registry_schema_held", lead,
        f"leader {lead} reads registry schemas {span}, the registry is of schema "
        f"{reg.schema_version} (a newer release wrote it): it keeps it as it is and takes no "
        f"card out or back until a leader that reads it takes over (upgrade {lead}, or stop "
        "its daemon so an upgraded host leads)")


def daemon_down(host: str) -> Problem:
    """A configured host without cards (a witness, or a storage host whose cards are not
    admitted) and without a report: the cluster works, with one daemon fewer to lead (and,
    usually, one etcd member fewer: see the etcd section)."""
    return Problem(
        "warning", "daemon_down", host,
        f"host {host} has no report: its daemon is down or cut off (its lease expired); no "
        "card depends on it, but it can no longer lead, and its etcd member (if any) is "
        f"checked above; look at `systemctl status awide-cluster` on {host}")


def judge_report(host: str, item: KeyValue, age: Age | None, lead: str, policy: StatusPolicy
                 ) -> tuple[HostReport | None, HostView, list[Problem]]:
    """One host's report: refused when it does not decode, stale when unchanged too long."""
    try:
        report = reportdoc.decode(item.value)
    except reportdoc.ReportError as e:
        return None, _host_view(host, lead, age, error=str(e)), [Problem(
            "error", "report_corrupt", host, f"report of host {host} refused: {e}")]
    problems = []
    if report.restarting is not None:
        problems.append(restarting(host, report.restarting))
    elif age is not None and age.at_least >= policy.stale_after:
        problems.append(Problem(
            "error", "report_stale", host,
            f"report of host {host} unchanged for {age.at_least:.1f} s: its daemon's loop "
            "is stuck (its lease is still kept alive)"))
    if report.history_resets:
        problems.append(history_reset(host, report.history_resets, report.history_note))
    if report.probe_note:
        problems.append(Problem(
            "warning", "probes_starved", host,
            f"the daemon of {host} cannot run all its probes: {report.probe_note} (its cards "
            "are not taken out for it; see its process_open_fds against process_max_fds)"))
    if report.leader_note:
        problems.append(Problem(
            "warning", "leader_taken", host,
            f"the daemon of {host} says: {report.leader_note} (etcd names no writer: the "
            "holder is what the new key says; every daemon identity may write the key, and "
            "the gateways' vouching keeps such a leader from moving any card; shown until "
            "that daemon restarts)"))
    return report, _host_view(host, lead, age, report=report), problems


def restarting(host: str, r: Restarting) -> Problem:
    """A daemon stopped cleanly, its host held (a planned absence): a warning while it
    lasts; once its grace is over the report expires and the host is down."""
    return Problem(
        "warning", "host_restarting", host,
        f"host {host} is restarting: its daemon stopped cleanly, its cards stay as they are "
        f"until {r.until or '?'} (grace {r.grace} s); if it is not back by then, its cards go "
        "out")


def history_reset(host: str, count: int, note: str) -> Problem:
    """A daemon that followed a new etcd history (a restore, or a member that went back): a
    warning, shown until the daemon restarts."""
    times = "once" if count == 1 else f"{count} times"
    return Problem(
        "warning", "etcd_history_reset", host,
        f"the daemon of {host} followed a new etcd history {times} since it started"
        f"{': ' + note if note else ''} (expected after a restore, docs/operations.md "
        "\"Restore etcd\"; otherwise a member went back in time)")


def _host_view(host: str, lead: str, age: Age | None, *, report: HostReport | None = None,
               error: str = "") -> HostView:
    """A host as shown: from its report, else with ``error`` (refused, too large, missing)."""
    if report is None:
        return HostView(host=host, role="?", version="", api="", cards=0, dev_cluster=False,
                        is_leader=host == lead, report_age=age, error=error)
    return HostView(host=host, role=report.role, version=report.version, api=report.api,
                    cards=len(report.cards), dev_cluster=report.dev_cluster,
                    is_leader=host == lead, report_age=age,
                    restarting=({"until": report.restarting.until,
                                 "grace": report.restarting.grace}
                                if report.restarting is not None else None))


def _unknown_host(key: str, host: str, hosts: tuple[str, ...]) -> Problem:
    return Problem(
        "error", "report_unknown_host", key,
        f"{key}: a report from {host!r}, which is not one of the cluster's hosts "
        f"({', '.join(hosts)}): refused, its cards are never admitted; delete the "
        "key, or add the host to every daemon's config (hosts) if it is new")


# ---------------------------------------------------------------------- refused writes

def judge_writes(etcd: EtcdView, hosts: tuple[HostView, ...], policy: StatusPolicy
                 ) -> list[Problem]:
    """The daemons cannot write: etcd's NOSPACE alarm refuses every write, or the reports of
    a majority of the hosts (2 or more) stopped changing together (refused writes that etcd
    does not raise an alarm for: permissions, a member that answers reads but cannot commit).
    The leader counts no report that did not advance against a card meanwhile."""
    effect = ("the leader counts them against no card, but no card goes out, comes back or "
              "is admitted until writes work again; gateways keep their cards")
    if any(a.alarm == "NOSPACE" for a in etcd.alarms):
        return [Problem(
            "error", "writes_refused", "daemons",
            "etcd refuses every write while its NOSPACE alarm is raised: the daemons cannot "
            f"write their reports nor the leader the registry; {effect}")]
    reporting = [h for h in hosts if not h.error]
    stale = [(h.host, h.report_age.at_least) for h in reporting
             if h.report_age is not None and h.report_age.at_least >= policy.stale_after]
    if len(stale) < 2 or 2 * len(stale) <= len(reporting):
        return []
    since = min(at_least for _, at_least in stale)
    return [Problem(
        "error", "writes_refused", "daemons",
        f"the reports of {len(stale)} of {len(reporting)} hosts "
        f"({', '.join(host for host, _ in stale)}) have not changed together for {since:.1f} s "
        "or more: their writes are refused or never committed (etcd permissions, a member "
        f"that answers reads but cannot commit; see /readyz on each host); {effect}")]
