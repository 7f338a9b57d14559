"""The cluster's status, as one pure function of one bounded read of etcd.

``build_status(raw, seen, policy)``: ``RawSnapshot`` (what the shell in ``gather`` read:
endpoint statuses, the member list, every key under the cluster prefix) and ``Observations``
(how long each key has kept its value, see ``observe``) in, ``ClusterStatus`` out, with the
list of problems and ``healthy``. No I/O, no clock: the times come in ``raw``.

Problem codes and what to do about each are in docs/operations.md.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from awide_cluster.contract import bounds, keys
from awide_cluster.contract import registry as regdoc
from awide_cluster.contract import report as repdoc
from awide_cluster.contract.registry import Registry
from awide_cluster.contract.report import HostReport
from awide_cluster.contract.untrusted import clean_text
from awide_cluster.operator import records
from awide_cluster.operator.model import (
    CardView,
    ClusterStatus,
    EtcdAlarmView,
    EtcdMemberView,
    EtcdView,
    GatewayView,
    HostView,
    IntentView,
    LeaderView,
    Problem,
    RegistryView,
)
from awide_cluster.operator.observe import Age, Observations
from awide_cluster.store.types import Alarm, EndpointStatus, KeyValue, Member, Refusal


@dataclass(frozen=True, slots=True)
class EndpointAnswer:
    endpoint: str
    status: EndpointStatus | None
    error: str = ""


@dataclass(frozen=True, slots=True)
class RawSnapshot:
    cluster: str
    endpoints: tuple[str, ...]
    answers: tuple[EndpointAnswer, ...]
    members: tuple[Member, ...] | None
    members_error: str
    kvs: tuple[KeyValue, ...] | None       # every key under the prefix; None: the read failed
    read_error: str
    revision: int | None
    wall: float                            # time.time() of the read
    mono: float                            # monotonic time of the read (ages)
    refused: tuple[Refusal, ...] = ()      # keys whose value was over the read's bound
    key_count: int | None = None           # more keys than the read's bound: how many in all
    alarms: tuple[Alarm, ...] | None = ()  # etcd's alarm list; None: the read failed
    alarms_error: str = ""

    @property
    def unreachable(self) -> bool:
        """Nothing answered at all: no endpoint status and no key read."""
        return self.kvs is None and not any(a.status is not None for a in self.answers)


@dataclass(frozen=True, slots=True)
class StatusPolicy:
    stale_after: float = 3.0     # a report unchanged this long is stale (3 polls)
    behind_grace: float = 3.0    # a gateway may lag a registry generation younger than this


def build_status(raw: RawSnapshot, seen: Observations, policy: StatusPolicy) -> ClusterStatus:
    problems: list[Problem] = []
    etcd = _etcd(raw, problems)
    kv, big = _within_bounds(raw, problems)
    readable = raw.kvs is not None
    if not readable:
        problems.append(Problem("error", "keys_unreadable", raw.cluster,
                                f"cannot read the cluster's keys: {raw.read_error}"))

    def guard(section: str, fn, fallback):  # noqa: ANN001, ANN202 - local helper
        # a judgement that raises (content no decoder foresaw, a bug) costs its own section,
        # named as a problem; the rest of the status is still judged and shown
        try:
            return fn()
        except Exception as e:      # noqa: BLE001
            problems.append(Problem("error", "status_section_failed", section, clean_text(
                f"{section} could not be judged: {type(e).__name__}: {e}", 300)))
            return fallback

    leader = guard("leader", lambda: _leader(kv, raw, problems), None) if readable else None
    if leader is None and keys.LEADER in big:
        leader = LeaderView("?", "", None, "", big[keys.LEADER])
    no_reg = (None, RegistryView(None, "", "", None, 0, 0, "not read"))
    if keys.REGISTRY in big:
        reg, reg_view = None, RegistryView(None, "", "", seen.age(keys.REGISTRY, raw.mono), 0,
                                           0, big[keys.REGISTRY])
    else:
        reg, reg_view = guard("registry", lambda: _registry(kv, raw, seen, problems),
                              no_reg) if readable else no_reg
    reports, hosts = guard("hosts", lambda: _hosts(kv, raw, seen, reg, leader, policy,
                                                   problems, big), ({}, ()))
    guard("writes", lambda: _writes_refused(etcd, hosts, policy, problems), None)
    cards = guard("cards", lambda: _cards(reg, reports, problems), ())
    gateways = guard("gateways", lambda: _gateways(kv, raw, seen, reg, reg_view, policy,
                                                   problems), ())
    intents = guard("intents", lambda: _intents(kv, raw, seen, policy, problems), ())
    gateways, intents = guard("refused values", lambda: _refused_views(
        big, raw, seen, gateways, intents), (gateways, intents))
    if readable and leader is None:
        problems.append(Problem(
            "error", "no_leader", "leader",
            "no daemon holds the leader key: nobody updates the registry (cards neither go "
            "out nor come back) until a daemon is elected"))
    dev = any(h.dev_cluster for h in hosts)
    if dev:
        devs = ", ".join(h.host for h in hosts if h.dev_cluster)
        problems.append(Problem(
            "warning", "dev_cluster", devs,
            f"DEV CLUSTER: {devs} run(s) with dev_cluster: true (an etcd cluster of fewer "
            "than 3 members is accepted): not for production"))
    order = {"error": 0, "warning": 1}
    problems.sort(key=lambda p: (order[p.severity], p.code, p.subject))
    return ClusterStatus(
        cluster=raw.cluster, taken_at=records.iso(raw.wall), revision=raw.revision,
        read_error=raw.read_error, etcd=etcd, leader=leader, registry=reg_view,
        hosts=hosts, cards=cards, gateways=gateways, intents=intents,
        problems=tuple(problems), dev_cluster=dev,
    )


# ---------------------------------------------------------------------- bounds

def _within_bounds(raw: RawSnapshot, problems: list[Problem]
                   ) -> tuple[dict[str, KeyValue], dict[str, str]]:
    """The keys whose value is within its bound (``bounds.value_bound``), and why the others
    were not read or not decoded (``value_too_large``: one big key hides nothing else)."""
    kv: dict[str, KeyValue] = {}
    big: dict[str, str] = {}
    for r in raw.refused:
        if r.kind == "key":                 # a key name over the key bound: a problem only
            problems.append(Problem("error", "value_too_large", r.name,
                                    f"key {r.name}: {r.why}, not read"))
        else:
            size = f"{r.size} bytes" if r.exact else f"more than {r.limit} bytes"
            big[r.key] = f"value over {bounds.value_bound(r.key)} bytes ({size})"
    for item in raw.kvs or ():
        limit = bounds.value_bound(item.key)
        if len(item.value) > limit:
            big[item.key] = f"value over {limit} bytes ({len(item.value)} bytes)"
        else:
            kv[item.key] = item
    for key, why in sorted(big.items()):
        problems.append(Problem(
            "error", "value_too_large", key,
            f"key {key}: {why}, not read (everything else is shown; rewrite or delete it)"))
    if raw.key_count is not None:
        problems.append(Problem(
            "error", "too_many_keys", raw.cluster,
            f"{raw.key_count} keys under the cluster prefix, over the bound of "
            f"{bounds.CLUSTER_MAX_KEYS}: only the first {bounds.CLUSTER_MAX_KEYS} (in key "
            "order) are shown"))
    return kv, big


def _refused_views(
    big: dict[str, str], raw: RawSnapshot, seen: Observations,
    gateways: tuple[GatewayView, ...], intents: tuple[IntentView, ...],
) -> tuple[tuple[GatewayView, ...], tuple[IntentView, ...]]:
    """Gateways and intents whose value was over its bound, listed with the reason."""
    gws, its = list(gateways), list(intents)
    for key, why in big.items():
        age = seen.age(key, raw.mono)
        if key.startswith(keys.GATEWAYS):
            gws.append(GatewayView(keys.tail(key, keys.GATEWAYS), "", "", "", "", "", None, None,
                                   "", "", False, age, why))
        elif key.startswith(keys.INTENTS):
            its.append(IntentView(keys.tail(key, keys.INTENTS), "?", "", age, why))
    gws.sort(key=lambda v: (v.namespace, v.id))
    its.sort(key=lambda v: v.card_id)
    return tuple(gws), tuple(its)


# ---------------------------------------------------------------------- etcd

def _etcd(raw: RawSnapshot, problems: list[Problem]) -> EtcdView:
    by_id = {m.id: m for m in raw.members or ()}
    answered: dict[int, EndpointStatus] = {}
    rows: list[EtcdMemberView] = []
    for a in raw.answers:
        st = a.status
        m = by_id.get(st.member_id) if st is not None else _member_at(raw.members, a.endpoint)
        name = m.name if m is not None else ""
        if st is None:
            rows.append(EtcdMemberView(name, f"{m.id:x}" if m else "", a.endpoint, False, False,
                                       None, None, "", None, a.error))
            continue
        answered[st.member_id] = st
        rows.append(EtcdMemberView(
            name or f"{st.member_id:x}", f"{st.member_id:x}", a.endpoint, True,
            st.leader != 0 and st.leader == st.member_id, st.raft_term, st.raft_index,
            st.version, st.db_size, "; ".join(st.errors)))
    covered = {m.id for m in raw.members or () if any(_same(u, e) for u in m.client_urls
                                                      for e in raw.endpoints)}
    for m in raw.members or ():             # members status could not ask (not in endpoints)
        if m.id not in answered and m.id not in covered:
            rows.append(EtcdMemberView(m.name, f"{m.id:x}", ",".join(m.client_urls), False,
                                       False, None, None, "", None, "not checked: not among "
                                       "the endpoints given"))
    total = len(raw.members) if raw.members else len(raw.endpoints)
    leaders = {st.leader for st in answered.values() if st.leader != 0}
    up = sum(1 for st in answered.values() if st.leader != 0)
    majority = total // 2 + 1
    unchecked = sum(1 for m in raw.members or () if m.id not in answered and m.id not in covered)
    leader_id = next(iter(leaders)) if len(leaders) == 1 else 0
    leader_name = by_id[leader_id].name if leader_id in by_id else (
        f"{leader_id:x}" if leader_id else "")
    terms = [st.raft_term for st in answered.values()]
    if not answered:
        quorum = "unknown"
        problems.append(Problem("error", "etcd_unreachable", "etcd",
                                "no etcd member answered: " + _first_error(raw)))
    elif up >= majority:
        quorum = "ok"
    elif up + unchecked >= majority:
        quorum = "unknown"
        problems.append(Problem("warning", "quorum_unknown", "etcd",
                                f"{up} of {total} members seen with a leader; {unchecked} not "
                                "checked (give every member's endpoint)"))
    else:
        quorum = "lost"
        problems.append(Problem(
            "error", "quorum_lost", "etcd",
            f"etcd quorum lost: {up} of {total} members up with a raft leader, {majority} "
            "needed; no writes are possible (gateways keep their last known cards)"))
    for r in rows:
        if not r.reachable and not r.error.startswith("not checked"):
            problems.append(Problem(
                "error", "etcd_member_down", r.name or r.endpoint,
                f"etcd member {r.name or '?'} at {r.endpoint} does not answer: {r.error}"))
    if quorum == "ok":                      # a minority member cut off from the others
        for st in answered.values():
            if st.leader == 0:
                name = by_id[st.member_id].name if st.member_id in by_id else st.endpoint
                problems.append(Problem("error", "etcd_no_raft_leader", name,
                                        f"etcd member {name} at {st.endpoint} sees no raft "
                                        "leader (cut off from the others?)"))
    if len(leaders) > 1:
        problems.append(Problem("warning", "etcd_leader_disagreement", "etcd",
                                "members name different raft leaders (an election is going on)"))
    if raw.members is not None and 0 < len(raw.members) < 3:
        problems.append(Problem("warning", "etcd_too_small", "etcd",
                                f"etcd has {len(raw.members)} member(s): it tolerates no member "
                                "failure (3 or more are needed for that)"))
    versions = {r.version for r in rows if r.version}
    if len(versions) > 1:
        problems.append(Problem("warning", "etcd_version_skew", "etcd",
                                f"members run different etcd versions: {', '.join(sorted(versions))}"))
    rows.sort(key=lambda r: (r.name, r.endpoint))
    alarms = _alarms(raw, by_id, quorum, problems)
    return EtcdView(quorum=quorum, up=up, total=total, leader=leader_name,
                    raft_term=max(terms) if terms else None, members=tuple(rows),
                    alarms=alarms, alarms_error=raw.alarms_error if raw.alarms is None else "")


def _alarms(raw: RawSnapshot, by_id: dict[int, Member], quorum: str,
            problems: list[Problem]) -> tuple[EtcdAlarmView, ...]:
    """etcd's alarm list: NOSPACE (every write refused) by name, any other alarm generically."""
    if raw.alarms is None:
        if quorum == "ok":
            problems.append(Problem("warning", "etcd_alarms_unread", "etcd",
                                    f"cannot read etcd's alarm list: {raw.alarms_error}"))
        return ()
    views: list[EtcdAlarmView] = []
    for a in raw.alarms:
        if a.alarm in ("", "NONE"):
            continue
        m = by_id.get(a.member_id)
        views.append(EtcdAlarmView(a.alarm, m.name if m is not None else f"{a.member_id:x}"))
    views.sort(key=lambda v: (v.alarm, v.member))
    nospace = sorted({v.member for v in views if v.alarm == "NOSPACE"})
    if nospace:
        problems.append(Problem(
            "error", "etcd_alarm_nospace", "etcd",
            f"etcd's NOSPACE alarm is raised (by {', '.join(nospace)}): its backend quota is "
            "full and it refuses every write until space is freed and the alarm disarmed "
            "(runbook: compact, defragment each member, alarm disarm); reads still work"))
    for kind in sorted({v.alarm for v in views if v.alarm != "NOSPACE"}):
        who = ", ".join(sorted(v.member for v in views if v.alarm == kind))
        problems.append(Problem("error", "etcd_alarm", kind,
                                f"etcd alarm {kind} raised by {who} (see etcd's log)"))
    return tuple(views)


def _same(url: str, endpoint: str) -> bool:
    return url.rstrip("/") == endpoint.rstrip("/")


def _member_at(members: tuple[Member, ...] | None, endpoint: str) -> Member | None:
    for m in members or ():
        if any(_same(u, endpoint) for u in m.client_urls):
            return m
    return None


def _first_error(raw: RawSnapshot) -> str:
    for a in raw.answers:
        if a.error:
            return f"{a.endpoint}: {a.error}"
    return raw.read_error or "no answer"


# ---------------------------------------------------------------------- leader, registry

def _leader(kv: dict[str, KeyValue], raw: RawSnapshot, problems: list[Problem]) -> LeaderView | None:
    item = kv.get(keys.LEADER)
    if item is None:
        return None
    try:
        rec = records.decode_leader(item.value)
    except records.RecordError as e:
        problems.append(Problem("error", "leader_corrupt", "leader", str(e)))
        return LeaderView("?", "", None, "", str(e))
    since = rec.since_ts
    held = raw.wall - since if since is not None else None
    return LeaderView(rec.host, records.iso(since), held, rec.api)


def _registry(
    kv: dict[str, KeyValue], raw: RawSnapshot, seen: Observations, problems: list[Problem],
) -> tuple[Registry | None, RegistryView]:
    item = kv.get(keys.REGISTRY)
    if item is None:
        problems.append(Problem("error", "registry_missing", "registry",
                                "no registry in etcd: no leader has written one yet"))
        return None, RegistryView(None, "", "", None, 0, 0, "missing")
    age = seen.age(keys.REGISTRY, raw.mono)
    try:
        reg = regdoc.decode(item.value)
    except regdoc.RegistryError as e:
        problems.append(Problem(
            "error", "registry_corrupt", "registry",
            f"{e} (readers keep their last good registry; the leader rewrites it at its next "
            "change)"))
        return None, RegistryView(None, "", "", age, 0, 0, str(e))
    # the age is this reader's own measure (observe.py); written_at is the leader's clock,
    # shown, never compared with this machine's
    mismatch = regdoc.check_slots(reg)
    if mismatch:
        problems.append(Problem("error", "slot_table_mismatch", "registry", mismatch))
    used = sum(1 for s in reg.slots.slots if s is not None)
    return reg, RegistryView(reg.generation, reg.leader, reg.written_at, age, len(reg.cards), used)


# ---------------------------------------------------------------------- hosts

def _hosts(
    kv: dict[str, KeyValue], raw: RawSnapshot, seen: Observations, reg: Registry | None,
    leader: LeaderView | None, policy: StatusPolicy, problems: list[Problem],
    big: dict[str, str] | None = None,
) -> tuple[dict[str, HostReport], tuple[HostView, ...]]:
    reports: dict[str, HostReport] = {}
    views: list[HostView] = []
    lead = leader.host if leader is not None else ""
    for key, why in (big or {}).items():           # a report over its bound: shown, not read
        if key.startswith(keys.MEMBERS):
            host = keys.tail(key, keys.MEMBERS)
            views.append(HostView(host, "?", "", "", 0, False, host == lead,
                                  seen.age(key, raw.mono), why))
    for key, item in kv.items():
        if not key.startswith(keys.MEMBERS):
            continue
        host = clean_text(keys.tail(key, keys.MEMBERS), 80)
        age = seen.age(key, raw.mono)
        if reg is not None and reg.hosts and host not in reg.hosts:
            problems.append(Problem(
                "error", "report_unknown_host", key,
                f"{key}: a report from {host!r}, which is not one of the cluster's hosts "
                f"({', '.join(reg.hosts)}): refused, its cards are never admitted; delete the "
                "key, or add the host to every daemon's config (hosts) if it is new"))
            continue
        try:
            r = repdoc.decode(item.value)
        except repdoc.ReportError as e:
            problems.append(Problem("error", "report_corrupt", host,
                                    f"report of host {host} refused: {e}"))
            views.append(HostView(host, "?", "", "", 0, False, host == lead, age, str(e)))
            continue
        reports[host] = r
        views.append(HostView(host, r.role, r.version, r.api, len(r.cards), r.dev_cluster,
                              host == lead, age))
        if age is not None and age.at_least >= policy.stale_after:
            problems.append(Problem(
                "error", "report_stale", host,
                f"report of host {host} unchanged for {age.at_least:.1f} s: its daemon's loop "
                "is stuck (its lease is still kept alive)"))
    registry_hosts = {c.host for c in reg.cards} if reg is not None else set()
    known = {v.host for v in views}
    for host in sorted(registry_hosts - known):
        views.append(HostView(host, "?", "", "", 0, False, host == lead, None, "no report"))
        problems.append(Problem(
            "error", "host_down", host,
            f"host {host} has cards in the registry but no report: its daemon is down or cut "
            "off (its lease expired)"))
    if lead and lead not in known and lead not in registry_hosts:
        problems.append(Problem("warning", "leader_without_report", lead,
                                f"leader {lead} has no host report"))
    versions = {v.version for v in views if v.version}
    if len(versions) > 1:
        problems.append(Problem("warning", "version_skew", "daemons",
                                f"daemons run different versions: {', '.join(sorted(versions))}"))
    views.sort(key=lambda v: v.host)
    return reports, tuple(views)


def _writes_refused(etcd: EtcdView, hosts: tuple[HostView, ...], policy: StatusPolicy,
                    problems: list[Problem]) -> None:
    """The daemons cannot write: etcd's NOSPACE alarm refuses every write, or the reports of
    a majority of the hosts (2 or more) stopped changing together (refused writes that etcd
    does not raise an alarm for: permissions, a member that answers reads but cannot commit).
    The leader counts no report that did not advance against a card meanwhile."""
    effect = ("the leader counts them against no card, but no card goes out, comes back or "
              "is admitted until writes work again; gateways keep their cards")
    if any(a.alarm == "NOSPACE" for a in etcd.alarms):
        problems.append(Problem(
            "error", "writes_refused", "daemons",
            "etcd refuses every write while its NOSPACE alarm is raised: the daemons cannot "
            f"write their reports nor the leader the registry; {effect}"))
        return
    reporting = [h for h in hosts if not h.error]
    stale = [h for h in reporting
             if h.report_age is not None and h.report_age.at_least >= policy.stale_after]
    if len(stale) >= 2 and 2 * len(stale) > len(reporting):
        since = min(h.report_age.at_least for h in stale if h.report_age is not None)
        problems.append(Problem(
            "error", "writes_refused", "daemons",
            f"the reports of {len(stale)} of {len(reporting)} hosts "
            f"({', '.join(h.host for h in stale)}) have not changed together for {since:.1f} s "
            "or more: their writes are refused or never committed (etcd permissions, a member "
            f"that answers reads but cannot commit; see /readyz on each host); {effect}"))


# ---------------------------------------------------------------------- cards

def _target(target: object, path: str | None) -> str:
    return str(target) if target is not None else (path or "")


def _cards(
    reg: Registry | None, reports: dict[str, HostReport], problems: list[Problem],
) -> tuple[CardView, ...]:
    observed: dict[str, str] = {}          # card id -> host's latest observation
    reported: dict[str, tuple[str, object]] = {}
    for host, r in reports.items():
        for c in r.cards:
            if not c.found:
                continue
            cid = regdoc.card_id(c.serial, c.model, c.identity)
            observed[cid] = "ok" if c.healthy else f"sick: {c.reason}"
            reported[cid] = (host, c)
    views: list[CardView] = []
    unplaced = dict(reg.slots.unplaced) if reg is not None else {}
    for c in reg.cards if reg is not None else ():
        obs = observed.get(c.id)
        if obs is None:
            obs = "no report" if c.host not in reports else "not found"
        slot = reg.slots.slot_of(c.id)
        why_unplaced = unplaced.get(c.id, "")
        views.append(CardView(
            c.id, c.serial, c.model, c.host, c.name, c.kind, _target(c.target, c.path), slot,
            c.state, c.health, c.reason, c.changed_at, c.changed_generation, c.conflict or "",
            why_unplaced, obs))
        label = f"card {c.id} ({c.host}/{c.name}, serial {c.serial})"
        if c.state == "out":
            problems.append(Problem(
                "error", "card_out", c.id,
                f"{label} is out of service: {c.reason or c.health} (since generation "
                f"{c.changed_generation}{', ' + c.changed_at if c.changed_at else ''})"))
        if c.conflict:
            problems.append(Problem("error", "card_conflict", c.id,
                                    f"{label} is in conflict: {c.conflict}"))
        if why_unplaced:
            problems.append(Problem("error", "card_unplaced", c.id,
                                    f"{label} has no slot: {why_unplaced}"))
        if c.state == "drained":
            problems.append(_drained(c, label))
    registered = set(reg.by_id) if reg is not None else set()
    for cid, (host, rc) in sorted(reported.items()):
        if cid in registered:
            continue
        views.append(CardView(
            cid, rc.serial, rc.model, host, rc.name, rc.kind, _target(rc.target, rc.path), None,
            "unregistered", "ok" if rc.healthy else "sick", rc.reason, "", None, "", "",
            observed[cid]))
        if reg is not None:
            problems.append(Problem(
                "warning", "card_unregistered", cid,
                f"card {cid} ({host}/{rc.name}, serial {rc.serial}) is reported but not in "
                "the registry yet (the leader admits it at its next cycle)"))
    views.sort(key=lambda v: (v.slot if v.slot is not None else 99, v.host, v.name, v.id))
    return tuple(views)


# ---------------------------------------------------------------------- gateways

def _gateways(
    kv: dict[str, KeyValue], raw: RawSnapshot, seen: Observations, reg: Registry | None,
    reg_view: RegistryView, policy: StatusPolicy, problems: list[Problem],
) -> tuple[GatewayView, ...]:
    views: list[GatewayView] = []
    layouts: dict[str, records.LayoutRecord] = {}
    for key, item in kv.items():
        if key.startswith(keys.LAYOUTS):
            ns = keys.tail(key, keys.LAYOUTS)
            try:
                layouts[ns] = records.decode_layout(item.value, ns)
            except records.RecordError as e:
                problems.append(Problem("error", "layout_corrupt", ns, str(e)))
    generation = reg.generation if reg is not None else None
    for key, item in kv.items():
        if not key.startswith(keys.GATEWAYS):
            continue
        gid = keys.tail(key, keys.GATEWAYS)
        age = seen.age(key, raw.mono)
        try:
            g = records.decode_gateway(item.value, gid)
        except records.RecordError as e:
            problems.append(Problem("error", "gateway_record_corrupt", gid, str(e)))
            views.append(GatewayView(gid, "", "", "", "", "", None, None, "", "", False, age,
                                     str(e)))
            continue
        lag = generation - g.generation if generation is not None else None
        views.append(GatewayView(gid, g.host, g.pod, g.namespace, g.placement, g.fingerprint,
                                 g.generation, lag, g.engine or "", g.version, g.stale, age))
        if lag is not None and lag > 0:
            problems.append(_behind(g, generation, seen, raw, policy))
        elif lag is not None and lag < 0:
            problems.append(Problem(
                "error", "gateway_ahead", gid,
                f"gateway {gid} says it applies generation {g.generation}, newer than the "
                f"registry's {generation}: the registry went back (restored etcd?)"))
        if g.stale:
            problems.append(Problem("warning", "gateway_stale_view", gid,
                                    f"gateway {gid} says its registry view is stale (it cannot "
                                    "read etcd; it keeps its last known cards)"))
        lay = layouts.get(g.namespace)
        if lay is not None and lay.placement != g.placement:
            problems.append(Problem(
                "error", "layout_mismatch", gid,
                f"gateway {gid} uses placement {g.placement}, namespace {g.namespace} is "
                f"recorded with {lay.placement} (by {lay.created_by or '?'})"))
    by_group: dict[tuple[str, int | None], dict[str, list[str]]] = defaultdict(
        lambda: defaultdict(list))
    placements: dict[str, set[str]] = defaultdict(set)
    for v in views:
        if v.error:
            continue
        by_group[(v.namespace, v.generation)][v.fingerprint].append(v.id)
        placements[v.namespace].add(v.placement)
    for (ns, gen), prints in sorted(by_group.items(), key=lambda i: (i[0][0], i[0][1] or 0)):
        if len(prints) > 1:
            parts = "; ".join(f"{fp}: {', '.join(sorted(ids))}" for fp, ids in sorted(prints.items()))
            problems.append(Problem(
                "error", "fingerprint_mismatch", ns,
                f"gateways of namespace {ns} at generation {gen} disagree on the key layout "
                f"fingerprint ({parts}): their cache hits are lost"))
    for ns, ps in sorted(placements.items()):
        if len(ps) > 1:
            problems.append(Problem("error", "placement_mismatch", ns,
                                    f"gateways of namespace {ns} use different placements: "
                                    f"{', '.join(sorted(ps))}"))
    views.sort(key=lambda v: (v.namespace, v.id))
    return tuple(views)


# ---------------------------------------------------------------------- intents

def _intents(
    kv: dict[str, KeyValue], raw: RawSnapshot, seen: Observations, policy: StatusPolicy,
    problems: list[Problem],
) -> tuple[IntentView, ...]:
    views: list[IntentView] = []
    for key, item in sorted(kv.items()):
        if not key.startswith(keys.INTENTS):
            continue
        cid = keys.tail(key, keys.INTENTS)
        age = seen.age(key, raw.mono)
        try:
            rec = records.decode_intent(item.value, cid)
        except records.RecordError as e:
            views.append(IntentView(cid, "?", "", age, str(e)))
            problems.append(Problem("warning", "intent_corrupt", cid, str(e)))
            continue
        views.append(IntentView(cid, rec.action, rec.by, age, reason=rec.reason, at=rec.at))
        problems.append(_pending(cid, rec, age, policy))
    return tuple(views)


# ---------------------------------------------------------------- judged without two clocks

def _drained(c, label: str) -> Problem:  # noqa: ANN001 - a registry CardEntry
    """A drained card: an operator's state, a warning until ``undrain``."""
    since = f"since generation {c.changed_generation}" + (
        f", {c.changed_at} by the leader's clock" if c.changed_at else "")
    return Problem("warning", "card_drained", c.id,
                   f"{label} is drained ({since}): it serves nothing until "
                   f"`awide-cluster undrain {c.id}`")


def _pending(cid: str, rec: records.IntentRecord, age: Age | None,
             policy: StatusPolicy) -> Problem:
    """An intent not applied yet: an operator's action in flight, a warning until applied."""
    who = f" by {rec.by}" if rec.by else ""
    why = f" (reason: {rec.reason})" if rec.reason else ""
    if age is not None and age.at_least >= policy.stale_after:
        state = f"pending for {age.at_least:.0f} s by this reader's clock: is there a leader?"
    else:
        state = "not applied yet (the leader applies it at its next cycle)"
    return Problem("warning", "intent_pending", cid,
                   f"{rec.action} of card {cid}{who}{why}: {state}")


def _behind(g: records.GatewayRecord, generation: int, seen: Observations, raw: RawSnapshot,
            policy: StatusPolicy) -> Problem:
    """A gateway behind the registry, judged by how long this reader has seen it behind (its
    own monotonic clock, across its reads), never by the leader's ``written_at``."""
    lag = generation - g.generation
    head = (f"gateway {g.id} ({g.host}/{g.pod}) applies registry generation {g.generation}, "
            f"{lag} behind {generation}")
    behind = seen.behind_for(g.generation, generation, raw.mono)
    if behind >= policy.behind_grace:
        return Problem("error", "gateway_behind", g.id,
                       f"{head}: seen behind for {behind:.1f} s by this reader (over "
                       f"{policy.behind_grace:g} s)")
    if seen.reads <= 1:
        how = "one read only: how long it lags is not measured (--sample 0)"
    else:
        how = f"seen behind for {behind:.1f} s so far (within {policy.behind_grace:g} s)"
    return Problem("warning", "gateway_catching_up", g.id, f"{head}: {how}")
