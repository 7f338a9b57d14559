"""What a leader cycle reads, sorted (pure): the host reports (decoded, refused, from
strangers), the intents, the registry and the history ring as etcd holds them, each value
untrusted and bounded; ``LeaderFetch.read`` (``leader_fetch``) does the reads and builds a
``LeaderRead``."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from awide_cluster.contract import history_ring as histdoc
from awide_cluster.contract import keys, records
from awide_cluster.contract import registry as regdoc
from awide_cluster.contract import report as reportdoc
from awide_cluster.contract import versions as ver
from awide_cluster.contract import windows as windoc
from awide_cluster.contract.registry import NewerSchema, Registry, RegistryError, UnknownSchema
from awide_cluster.contract.report import HostReport
from awide_cluster.contract.untrusted import clean_text
from awide_cluster.daemon.decision_windows import WindowAsk
from awide_cluster.daemon.reconcile import ACTIONS, ClusterSnapshot, Intent
from awide_cluster.store.errors import ValueTooLarge
from awide_cluster.store.types import KeyValue, PrefixRead


@dataclass(frozen=True, slots=True)
class LeaderRead:
    snapshot: ClusterSnapshot
    registry_rev: int           # mod_revision of the registry as read (0: absent)
    leader_kv: KeyValue | None
    found: str = "ok"           # the registry in etcd: ok, missing, corrupt, unknown_schema
    problem: str = ""           # why it is not ok (names the key and the field)
    history: StoredHistory | None = None    # the history ring, when this cycle read it


def decode_intent(kv: KeyValue) -> Intent:
    """Raises ValueError (RecordError) naming what is wrong."""
    cid = keys.tail(kv.key, keys.INTENTS)
    keys.check_name("card id", cid)
    rec = records.decode_intent(kv.value, cid)
    for action in ACTIONS:          # the record checked it is one of them
        if rec.action == action:
            return Intent(card_id=cid, action=action, mod_revision=kv.mod_revision, by=rec.by,
                          reason=rec.reason)
    raise ValueError(f"{keys.INTENTS}{cid}: unknown intent {rec.action!r}")


@dataclass(frozen=True, slots=True)
class HostReports:
    """The hosts' reports of one read, sorted: decoded, refused, from strangers."""

    reports: dict[str, HostReport]      # host -> its decoded report
    bad: dict[str, str]                 # host of the cluster -> why its report is refused
    strangers: dict[str, str]           # a host not of the cluster -> why it is ignored


STRANGER = "not a host of this cluster (config hosts)"


def sort_reports(members: PrefixRead, hosts: frozenset[str],
                 decode: Callable[[str, bytes], HostReport] | None = None) -> HostReports:
    """Decode the reports of the cluster's hosts (``hosts`` empty: any host). A value over its
    bound is refused by name, never decoded; a stranger's report is never decoded.
    ``decode(key, value)``: the decoder (default ``report.decode``; the leader passes its
    ``ReportMemo``)."""
    reports: dict[str, HostReport] = {}
    bad: dict[str, str] = {}
    strangers: dict[str, str] = {}
    for k, refusal in members.refused.items():
        if refusal.kind == "value":
            host = keys.tail(k, keys.MEMBERS)
            if hosts and host not in hosts:
                strangers[clean_text(host, 80)] = STRANGER
            else:
                bad[host] = refusal.why
    for kv in members.kvs:
        host = keys.tail(kv.key, keys.MEMBERS)
        if hosts and host not in hosts:
            strangers[clean_text(host, 80)] = STRANGER
            continue            # never decoded: nothing in it counts
        try:
            report = decode(kv.key, kv.value) if decode else reportdoc.decode(kv.value)
            if report.host != host:
                raise reportdoc.ReportError(f"report names host {report.host!r}")
            reports[host] = report
        except reportdoc.ReportError as e:
            bad[host] = clean_text(e, 200)
    return HostReports(reports=reports, bad=bad, strangers=strangers)


@dataclass(frozen=True, slots=True)
class StoredRegistry:
    """The registry as etcd holds it: decoded, or why it cannot be used."""

    registry: Registry | None
    revision: int               # its mod_revision (0: absent)
    found: str                  # ok, missing, corrupt, unknown_schema, too_large, newer_schema
    problem: str                # why it is not ok (names the key and the field)


def registry_found(kv: KeyValue | ValueTooLarge | None) -> StoredRegistry:
    if isinstance(kv, ValueTooLarge):
        return StoredRegistry(registry=None, revision=kv.mod_revision, found="too_large",
                              problem=clean_text(f"value over {kv.limit} bytes, refused unread",
                                                 200))
    if kv is None:
        return StoredRegistry(registry=None, revision=0, found="missing",
                              problem="no registry in etcd")
    try:
        reg = regdoc.decode(kv.value)
    except NewerSchema as e:
        return StoredRegistry(registry=None, revision=kv.mod_revision, found="newer_schema",
                              problem=clean_text(f"{e}: written by a newer release", 300))
    except UnknownSchema as e:
        return StoredRegistry(registry=None, revision=kv.mod_revision, found="unknown_schema",
                              problem=clean_text(e, 200))
    except RegistryError as e:
        return StoredRegistry(registry=None, revision=kv.mod_revision, found="corrupt",
                              problem=clean_text(e, 200))
    newer = ver.newer_note("registry", reg.schema_version)
    if newer and reg.versions is not None and reg.versions.says_it_writes(
            "registry", reg.schema_version):
        # readable, not fully, written by a newer release (it says it writes that schema):
        # a leader never rewrites what it cannot fully read. Without that claim it is a
        # registry like any other (rewritten if it is not the one this leader wrote)
        return StoredRegistry(registry=reg, revision=kv.mod_revision, found="newer_schema",
                              problem=clean_text(f"{keys.REGISTRY}: {newer}", 300))
    return StoredRegistry(registry=reg, revision=kv.mod_revision, found="ok", problem="")


def registry_schema(reports: Iterable[HostReport], gateways: PrefixRead) -> ver.Schema:
    """The registry schema the leader writes: the highest it writes that every live daemon
    (its report) and gateway (its record) reads fully. A record that does not decode says
    nothing (it is refused elsewhere)."""
    readers = [r.versions for r in reports]
    for kv in gateways.kvs:
        try:
            readers.append(records.decode_gateway(kv.value, keys.tail(kv.key, keys.GATEWAYS))
                           .versions)
        except ValueError:
            continue
    return ver.registry_to_write(readers)


@dataclass(frozen=True, slots=True)
class StoredHistory:
    """The history ring as etcd holds it: decoded (empty when absent), or why it cannot be
    used (then the leader starts a fresh ring)."""

    history: histdoc.History
    problem: str = ""


def history_found(kv: KeyValue | ValueTooLarge | None) -> StoredHistory:
    if isinstance(kv, ValueTooLarge):
        return StoredHistory(histdoc.EMPTY, str(histdoc.HistoryError(
            f"value over {kv.limit} bytes, refused unread", key=keys.HISTORY)))
    if kv is None:
        return StoredHistory(histdoc.EMPTY)
    try:
        return StoredHistory(histdoc.decode(kv.value))
    except histdoc.HistoryError as e:
        return StoredHistory(histdoc.EMPTY, clean_text(e, 300))


def sort_intents(intents: PrefixRead
                 ) -> tuple[tuple[Intent, ...], dict[str, tuple[int, str]]]:
    """The intents that decode, and the refused ones by key: (mod_revision, why)."""
    bad = {k: (r.mod_revision, r.why) for k, r in intents.refused.items() if r.kind == "value"}
    good: list[Intent] = []
    for kv in intents.kvs:
        try:
            good.append(decode_intent(kv))
        except ValueError as e:
            bad[kv.key] = (kv.mod_revision, str(e)[:200])
    return tuple(good), bad


def sort_window_requests(read: PrefixRead
                         ) -> tuple[tuple[WindowAsk, ...], dict[str, tuple[int, str]]]:
    """The window requests that decode, and the refused ones by key: (mod_revision, why)."""
    bad = {k: (r.mod_revision, r.why) for k, r in read.refused.items() if r.kind == "value"}
    good: list[WindowAsk] = []
    for kv in read.kvs:
        try:
            scope, name = windoc.request_scope(kv.key)
            req = windoc.decode_request(kv.value, key=kv.key)
        except windoc.WindowRequestError as e:
            bad[kv.key] = (kv.mod_revision, clean_text(e, 200))
            continue
        good.append(WindowAsk(scope=scope, name=name, request=req, key=kv.key,
                              mod_revision=kv.mod_revision))
    return tuple(good), bad


def windows_found(kv: KeyValue | ValueTooLarge | None) -> tuple[windoc.Windows | None, str]:
    """The windows in force as etcd holds them (None: none yet), or None and why they cannot
    be used (then the leader writes them afresh: the windows are lost, and logged)."""
    if isinstance(kv, ValueTooLarge):
        return None, clean_text(windoc.WindowsError(
            f"value over {kv.limit} bytes, refused unread", key=keys.WINDOWS), 300)
    if kv is None:
        return None, ""
    try:
        return windoc.decode(kv.value), ""
    except windoc.WindowsError as e:
        return None, clean_text(e, 300)
