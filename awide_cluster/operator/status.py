"""The cluster's status, as one pure function of one bounded read of etcd.

``build_status(raw, seen, policy)``: ``RawSnapshot`` (what the shell in ``gather`` read:
endpoint statuses, the member list, every key under the cluster prefix) and ``Observations``
(how long each key has kept its value, see ``observe``) in, ``ClusterStatus`` out, with the
list of problems and ``healthy``. No I/O, no clock: the times come in ``raw``.

The phases, each in its own module of ``awide_cluster.operator.judge``: etcd (members, quorum,
alarms), the keys within their bounds (here), the leader key, the registry, the history, the
host reports, refused writes (``daemons``), the cards (``cards``), the gateways and intents
(``gateways``), then the cluster-wide problems (no leader, dev cluster). Each part that raises
costs only its own section (``status_section_failed``); the rest is still judged.

Problem codes and what to do about each are in docs/operations.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TypeVar

from awide_cluster.contract import bounds, etcd_version, keys, records
from awide_cluster.contract.history_ring import History
from awide_cluster.contract.registry import Registry
from awide_cluster.contract.untrusted import clean_text
from awide_cluster.contract.windows import NONE as NO_WINDOWS
from awide_cluster.operator.freshness import Observations
from awide_cluster.operator.judge.cards import judge_cards
from awide_cluster.operator.judge.daemons import (
    HostsRead,
    judge_history,
    judge_hosts,
    judge_leader,
    judge_registry,
    judge_writes,
    unread_leader,
    unread_registry,
)
from awide_cluster.operator.judge.etcd import judge_etcd
from awide_cluster.operator.judge.gateways import (
    judge_gateways,
    judge_intents,
    unread_gateway,
    unread_intent,
)
from awide_cluster.operator.judge.windows import judge_windows, mute
from awide_cluster.operator.model import (
    CardView,
    ClusterStatus,
    EtcdView,
    GatewayRecordView,
    HostView,
    IntentView,
    LeaderView,
    Problem,
    RegistryView,
    WindowView,
)
from awide_cluster.operator.snapshot import RawSnapshot, StatusPolicy
from awide_cluster.store.types import KeyValue

T = TypeVar("T")
_NO_CARDS: tuple[CardView, ...] = ()
_NO_GATEWAYS: tuple[GatewayRecordView, ...] = ()
_NO_INTENTS: tuple[IntentView, ...] = ()
_NO_WINDOWS: tuple[WindowView, ...] = ()
_NONE: tuple[Problem, ...] = ()
_SEVERITY_ORDER = {"error": 0, "warning": 1}


def build_status(raw: RawSnapshot, seen: Observations, policy: StatusPolicy) -> ClusterStatus:
    problems: list[Problem] = []
    etcd, etcd_problems = judge_etcd(raw)
    problems += etcd_problems
    if policy.auth:
        problems += vulnerable(etcd)
    kv, big, bound_problems = within_bounds(raw)
    problems += bound_problems
    readable = raw.kvs is not None
    if not readable:
        problems.append(Problem("error", "keys_unreadable", raw.cluster,
                                f"cannot read the cluster's keys: {raw.read_error}"))

    def section(name: str, judge: Callable[[], tuple[T, Sequence[Problem]]], fallback: T) -> T:
        return _section(name, judge, fallback, problems)

    leader: LeaderView | None = None
    if readable:
        leader = section("leader", lambda: judge_leader(kv.get(keys.LEADER), raw.wall), None)
    if leader is None and keys.LEADER in big:
        leader = unread_leader(big[keys.LEADER])
    reg, reg_view = _registry(kv, big, raw, seen, readable, section)
    ring = section("history", lambda: judge_history(kv.get(keys.HISTORY)), None) \
        if readable else None
    hosts = section("hosts", lambda: judge_hosts(kv, big, seen, raw.mono, reg, leader, policy),
                    HostsRead(reports={}, views=()))
    section("writes", lambda: (None, judge_writes(etcd, hosts.views, policy)), None)
    cards = section("cards", lambda: judge_cards(reg, hosts.reports, raw.wall), _NO_CARDS)
    gateways = section("gateways", lambda: judge_gateways(
        kv, seen, raw.mono, reg.generation if reg is not None else None, policy), _NO_GATEWAYS)
    intents = section("intents", lambda: judge_intents(kv, seen, raw.mono, policy), _NO_INTENTS)
    gateways, intents = section("refused values", lambda: (
        refused_views(big, raw, seen, gateways, intents), _NONE), (gateways, intents))
    problems += cluster_problems(readable, leader, hosts.views)
    cards, problems = who_drained(cards, problems, ring)
    in_force, windows = section("windows", lambda: judge_windows(kv, raw.wall),
                                (NO_WINDOWS, _NO_WINDOWS))
    problems, cards, host_views = mute(problems, cards, hosts.views, in_force)
    problems.sort(key=lambda p: (_SEVERITY_ORDER[p.severity], p.code, p.subject))
    return ClusterStatus(
        cluster=raw.cluster, taken_at=records.iso(raw.wall), revision=raw.revision,
        read_error=raw.read_error, etcd=etcd, leader=leader, registry=reg_view,
        hosts=host_views, cards=cards, gateways=gateways, intents=intents,
        problems=tuple(problems), dev_cluster=any(h.dev_cluster for h in hosts.views),
        history=ring, windows=windows,
    )


Section = Callable[[str, Callable[[], tuple[T, Sequence[Problem]]], T], T]


def _section(name: str, judge: Callable[[], tuple[T, Sequence[Problem]]], fallback: T,
             problems: list[Problem]) -> T:
    """A judgement that raises (content no decoder foresaw, a bug) costs its own section,
    named as a problem; the rest of the status is still judged and shown."""
    try:
        value, found = judge()
    except Exception as e:      # noqa: BLE001
        problems.append(Problem("error", "status_section_failed", name, clean_text(
            f"{name} could not be judged: {type(e).__name__}: {e}", 300)))
        return fallback
    problems += found
    return value


def _registry(kv: dict[str, KeyValue], big: dict[str, str], raw: RawSnapshot,
              seen: Observations, readable: bool, section: Section[tuple[
                  Registry | None, RegistryView]],
              ) -> tuple[Registry | None, RegistryView]:
    if keys.REGISTRY in big:
        return None, unread_registry(seen.age(keys.REGISTRY, raw.mono), big[keys.REGISTRY])
    not_read: tuple[Registry | None, RegistryView] = (None, unread_registry(None, "not read"))
    if not readable:
        return not_read

    def judge() -> tuple[tuple[Registry | None, RegistryView], list[Problem]]:
        item = kv.get(keys.REGISTRY)
        age = seen.age(keys.REGISTRY, raw.mono) if item is not None else None
        reg, view, problems = judge_registry(item, age)
        return (reg, view), problems

    return section("registry", judge, not_read)


def vulnerable(etcd: EtcdView) -> list[Problem]:
    """Members whose etcd version has a known authentication bypass (judged only when
    this reader authenticates, i.e. authentication is on): a passing warning naming the CVE
    and the release that fixed it (docs/security.md, "etcd's own weaknesses")."""
    line = etcd_version.note({m.name or m.endpoint: m.version for m in etcd.members
                              if m.version})
    if not line:
        return []
    return [Problem("warning", "etcd_vulnerable", "etcd",
                    f"{line} (install a fixed etcd and firewall the client port to known "
                    "hosts: docs/security.md)")]


def cluster_problems(readable: bool, leader: LeaderView | None,
                     hosts: tuple[HostView, ...]) -> list[Problem]:
    """What no single part shows: nobody leads, or a host runs as a dev cluster."""
    problems: list[Problem] = []
    if readable and leader is None:
        problems.append(Problem(
            "error", "no_leader", "leader",
            "no daemon holds the leader key: nobody updates the registry (cards neither go "
            "out nor come back) until a daemon is elected"))
    devs = ", ".join(h.host for h in hosts if h.dev_cluster)
    if devs:
        problems.append(Problem(
            "warning", "dev_cluster", devs,
            f"DEV CLUSTER: {devs} run(s) with dev_cluster: true (an etcd cluster of fewer "
            "than 3 members is accepted): not for production"))
    return problems


def who_drained(cards: tuple[CardView, ...], problems: list[Problem], ring: History | None
                ) -> tuple[tuple[CardView, ...], list[Problem]]:
    """A drained card's latest ``drained`` history entry says who, when and why: shown on the
    card (``drained_by``) and in its ``card_drained`` problem. Nothing when the history no
    longer holds it (a ring keeps the newest entries only)."""
    latest: dict[str, str] = {}
    for e in ring.entries if ring is not None else ():
        if e.kind == "drained" and e.card:
            who = e.by or "?"
            latest[e.card] = f"by {who}" + (f" at {e.at}" if e.at else "") + (
                f": {e.why}" if e.why else "")
    if not latest:
        return cards, problems
    cards = tuple(dataclasses.replace(c, drained_by=latest[c.id])
                  if c.state == "drained" and c.id in latest else c for c in cards)
    problems = [dataclasses.replace(p, message=f"{p.message} (drained {latest[p.subject]})")
                if p.code == "card_drained" and p.subject in latest else p for p in problems]
    return cards, problems


# ---------------------------------------------------------------------- bounds

def within_bounds(raw: RawSnapshot
                  ) -> tuple[dict[str, KeyValue], dict[str, str], list[Problem]]:
    """The keys whose value is within its bound (``bounds.value_bound``), and why the others
    were not read or not decoded (``value_too_large``: one big key hides nothing else)."""
    kv: dict[str, KeyValue] = {}
    big: dict[str, str] = {}
    problems: list[Problem] = []
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
        problems.append(Problem("error", "too_many_keys", raw.cluster, key_flood(raw, kv)))
    return kv, big, problems


def key_flood(raw: RawSnapshot, kv: dict[str, KeyValue]) -> str:
    """The ``too_many_keys`` message: how many keys, in which folders, and what is still
    read by name (the fixed keys and the host reports). Pure."""
    fixed = sum(1 for k in (keys.LEADER, keys.REGISTRY, keys.HISTORY) if k in kv)
    where = [f"{n} under {folder}" for folder, n in
             sorted(raw.folder_counts, key=lambda fc: (-fc[1], fc[0])) if n]
    if raw.folder_counts:
        elsewhere = raw.key_count or 0
        elsewhere -= sum(n for _, n in raw.folder_counts) + fixed
        if elsewhere > 0:
            where.append(f"{elsewhere} elsewhere")
    detail = f" ({', '.join(where)})" if where else ""
    return (f"key flood: {raw.key_count} keys under the cluster prefix{detail}, over the "
            f"bound of {bounds.CLUSTER_MAX_KEYS}: the leader, registry, history and host "
            f"reports are read by name and shown; of the other keys only the first "
            f"{bounds.CLUSTER_MAX_KEYS} in key order (gateway records or intents beyond may "
            "look missing). Delete the junk keys")


def refused_views(
    big: dict[str, str], raw: RawSnapshot, seen: Observations,
    gateways: tuple[GatewayRecordView, ...], intents: tuple[IntentView, ...],
) -> tuple[tuple[GatewayRecordView, ...], tuple[IntentView, ...]]:
    """Gateways and intents whose value was over its bound, listed with the reason."""
    gws, its = list(gateways), list(intents)
    for key, why in big.items():
        age = seen.age(key, raw.mono)
        if key.startswith(keys.GATEWAYS):
            gws.append(unread_gateway(keys.tail(key, keys.GATEWAYS), age, why))
        elif key.startswith(keys.INTENTS):
            its.append(unread_intent(keys.tail(key, keys.INTENTS), age, why))
    gws.sort(key=lambda v: (v.namespace, v.id))
    its.sort(key=lambda v: v.card_id)
    return tuple(gws), tuple(its)
