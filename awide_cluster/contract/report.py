"""The host report: what each daemon writes to ``members/<host>`` every poll, on its lease.

The leader reads every report each cycle. A report that does not decode is ignored for that
cycle and counted (the host's cards then count as not observed), never crashes the leader.

``run`` is a random id per daemon process and ``seq`` counts that process's reports: the
leader judges a report fresh when (run, seq) changed since its previous cycle, so no wall clock
is compared across hosts.

A daemon that stops cleanly writes its last report once more, marked ``restarting``, on a
lease of its own whose TTL is the restart grace: the key expires by itself at the deadline
(etcd's lease, one clock). ``restarting.until`` is the writer's wall clock, shown to
operators only. The field is written only when set, and a reader of the same schema that does
not know it ignores it (unknown fields are ignored), so it needs no new schema.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import Field

from awide_cluster.contract import untrusted as u
from awide_cluster.contract import versions as ver
from awide_cluster.contract.registry import (  # the same wire types and checks
    _Identity,
    _Model,
    _Path,
    _Strict,
    _TargetDoc,
    card_target,
    checked,
    loaded,
)
from awide_cluster.contract.target import NvmeTarget
from awide_cluster.contract.untrusted import Name

SCHEMA_VERSION = 1
ELAPSED_MAX = 1e6               # seconds a probe may say it took (each is bounded by 30 s)
HISTORY_RESETS_MAX = 2**31 - 1  # new etcd histories one daemon process may say it followed
HISTORY_NOTE_MAX = 300          # characters of why it adopted the last one
RESTART_GRACE_MAX = 3600        # seconds a restarting report may say it is held for
UNTIL_MAX = 64                  # characters of its deadline's text
PROBE_NOTE_MAX = 300            # characters of why this daemon could not probe
ETCD_NOTE_MAX = 300             # characters of what this daemon found in etcd's members


class ReportError(u.BadValue):
    """A host report that is not valid; the message names the field at fault."""

    what = "host report"
    default_problem = u.REPORT_CORRUPT


@dataclass(frozen=True, slots=True)
class ProbeLine:
    probe: str
    ok: bool
    reason: str
    elapsed: float


@dataclass(frozen=True, slots=True)
class ReportedCard:
    name: str                       # the card's name in the host's config
    kind: Literal["nvme", "dir"]
    found: bool                     # False: configured but not found (then serial etc. empty)
    serial: str
    model: str
    identity: str
    device: str                     # e.g. nvme3n1 or the directory path
    controller_state: str
    healthy: bool
    reason: str
    target: NvmeTarget | None = None
    path: str | None = None
    probes: tuple[ProbeLine, ...] = ()


Role = Literal["storage", "witness"]    # what a host is (config: role)


@dataclass(frozen=True, slots=True)
class Restarting:
    """A report written by a daemon that stopped cleanly: its host comes back within
    ``grace`` seconds (the TTL of the lease it is written on)."""

    grace: int                      # seconds, 1..RESTART_GRACE_MAX
    until: str                      # the deadline on the writer's wall clock (for operators)


@dataclass(frozen=True, slots=True)
class HostReport:
    host: str
    role: Role
    version: str
    api: str                        # the daemon's HTTP API address, "" if none
    run: str
    seq: int
    cards: tuple[ReportedCard, ...] = ()
    dev_cluster: bool = False
    schema: int = SCHEMA_VERSION
    # new etcd histories this daemon process followed (a restore, or a member that went back)
    # and why it adopted the last one; written only when non-zero (older readers ignore them)
    history_resets: int = 0
    history_note: str = ""
    # set on the report a daemon writes once more when it stops cleanly (None: a live report)
    restarting: Restarting | None = None
    # this daemon could not run some probes (out of file descriptors or memory): those cards
    # carry their last observation; written only when non-empty (older readers ignore it)
    probe_note: str = ""
    # the minor schema version and what the writer reads and writes (contract/versions.py):
    # a report of a release before these fields decodes as minor 0, ``versions.BEFORE``
    schema_minor: int = ver.REPORT.minor
    versions: ver.Versions = ver.MINE

    # the leader key was taken from this daemon while its lease lived (deleted by another
    # identity): when and by whom, as the new key's value says; written only when non-empty
    # (older readers ignore it); kept until the daemon restarts
    leader_note: str = ""
    # etcd members older than the releases that fixed known authentication bypasses, as this
    # daemon read their versions; written only when non-empty
    etcd_note: str = ""

    @property
    def schema_version(self) -> ver.Schema:
        return ver.Schema(self.schema, self.schema_minor)

    @property
    def freshness(self) -> tuple[str, int]:
        return (self.run, self.seq)


_ProbeName: TypeAlias = Annotated[str, u.chars(u.PROBE_NAME_MAX), u.PRINTABLE]
_Reason: TypeAlias = Annotated[str, u.chars(u.REASON_MAX), u.PRINTABLE]
_Serial: TypeAlias = Annotated[str, u.chars(u.SERIAL_MAX), u.PRINTABLE]
_ControllerState: TypeAlias = Annotated[str, u.chars(u.CONTROLLER_STATE_MAX), u.PRINTABLE]
_Version: TypeAlias = Annotated[str, u.chars(u.VERSION_MAX), u.PRINTABLE]
_Api: TypeAlias = Annotated[str, u.chars(u.API_MAX), u.PRINTABLE]
_Run: TypeAlias = Annotated[str, u.chars(u.RUN_MAX, 1), u.PRINTABLE]
_HistoryNote: TypeAlias = Annotated[str, u.chars(HISTORY_NOTE_MAX), u.PRINTABLE]
_Until: TypeAlias = Annotated[str, u.chars(UNTIL_MAX), u.PRINTABLE]
_ProbeNote: TypeAlias = Annotated[str, u.chars(PROBE_NOTE_MAX), u.PRINTABLE]
_EtcdNote: TypeAlias = Annotated[str, u.chars(ETCD_NOTE_MAX), u.PRINTABLE]


class _ProbeDoc(_Strict):
    probe: _ProbeName
    ok: bool
    reason: _Reason
    elapsed: float = Field(ge=0.0, le=ELAPSED_MAX)


class _CardDoc(_Strict):
    name: Name
    kind: Literal["nvme", "dir"]
    found: bool
    serial: _Serial
    model: _Model
    identity: _Identity
    device: _Path
    controller_state: _ControllerState
    healthy: bool
    reason: _Reason
    target: _TargetDoc | None = None
    path: _Path | None = None
    probes: list[_ProbeDoc] = Field(default=[], max_length=u.PROBES_MAX)


class _RestartingDoc(_Strict):
    grace: int = Field(ge=1, le=RESTART_GRACE_MAX)
    until: _Until = ""


class _ReportDoc(_Strict):
    schema_: int = Field(alias="schema")
    host: Name
    role: Role
    version: _Version
    api: _Api
    run: _Run
    seq: int = Field(ge=0)
    dev_cluster: bool = False
    cards: list[_CardDoc] = Field(default=[], max_length=u.REPORT_CARDS_MAX)
    history_resets: int = Field(default=0, ge=0, le=HISTORY_RESETS_MAX)
    history_note: _HistoryNote = ""
    restarting: _RestartingDoc | None = None
    probe_note: _ProbeNote = ""
    leader_note: _ProbeNote = ""
    etcd_note: _EtcdNote = ""


def decode(raw: bytes | str, *, key: str = "") -> HostReport:
    """Parse and check a host report read at ``key`` (``members/<host>``).

    Raises ReportError naming the key and what is wrong, and nothing else, whatever ``raw``
    holds."""
    data = loaded(raw, schema_version=SCHEMA_VERSION, error=ReportError, unknown=ReportError,
                  limits=u.REPORT_LIMITS, key=key, span=ver.MINE.reads("report"))
    doc = checked(_ReportDoc, data, error=ReportError, key=key)
    minor = ver.schema_of(data, error=ReportError, key=key).minor
    written_by = ver.from_wire(data.get("versions"), error=ReportError, key=key)
    cards = []
    for i, c in enumerate(doc.cards):
        target = card_target(c.target, i, error=ReportError, key=key)
        cards.append(ReportedCard(
            name=c.name, kind=c.kind, found=c.found, serial=c.serial, model=c.model,
            identity=c.identity, device=c.device, controller_state=c.controller_state,
            healthy=c.healthy, reason=c.reason, target=target, path=c.path,
            probes=tuple(ProbeLine(p.probe, p.ok, p.reason, p.elapsed) for p in c.probes),
        ))
    return HostReport(
        host=doc.host, role=doc.role, version=doc.version, api=doc.api, run=doc.run,
        seq=doc.seq, cards=tuple(cards), dev_cluster=doc.dev_cluster, schema=doc.schema_,
        history_resets=doc.history_resets, history_note=doc.history_note,
        restarting=(Restarting(grace=doc.restarting.grace, until=doc.restarting.until)
                    if doc.restarting is not None else None),
        probe_note=doc.probe_note, schema_minor=minor, versions=written_by,
        leader_note=doc.leader_note, etcd_note=doc.etcd_note,
    )


def to_dict(r: HostReport) -> dict[str, Any]:
    return {
        "schema": r.schema, "host": r.host, "role": r.role, "version": r.version,
        "api": r.api, "run": r.run, "seq": r.seq, "dev_cluster": r.dev_cluster,
        "cards": [
            {
                "name": c.name, "kind": c.kind, "found": c.found, "serial": c.serial,
                "model": c.model, "identity": c.identity, "device": c.device,
                "controller_state": c.controller_state, "healthy": c.healthy,
                "reason": c.reason, "target": c.target.to_dict() if c.target else None,
                "path": c.path,
                "probes": [
                    {"probe": p.probe, "ok": p.ok, "reason": p.reason, "elapsed": p.elapsed}
                    for p in c.probes
                ],
            }
            for c in r.cards
        ],
        **({"history_resets": r.history_resets, "history_note": r.history_note}
           if r.history_resets else {}),
        **({"restarting": {"grace": r.restarting.grace, "until": r.restarting.until}}
           if r.restarting is not None else {}),
        **({"probe_note": r.probe_note} if r.probe_note else {}),
        **({"schema_minor": r.schema_minor, "versions": ver.to_wire(r.versions)}
           if r.schema_minor else {}),
        **({"leader_note": r.leader_note} if r.leader_note else {}),
        **({"etcd_note": r.etcd_note} if r.etcd_note else {}),
    }


def encode(r: HostReport) -> bytes:
    return json.dumps(to_dict(r), sort_keys=True, separators=(",", ":")).encode()


class ReportMemo:
    """The last report decoded at each key, by its bytes: the same value seen again (the
    leader's ``members/`` watch event, then its cycle's read of the same revision) is not
    decoded twice. A value that does not decode is not kept (it raises each time). At most
    ``max_keys`` keys are kept; others are decoded each time."""

    def __init__(self, max_keys: int) -> None:
        self.max_keys = max_keys
        self.hits = 0
        self._last: dict[str, tuple[bytes, HostReport]] = {}

    def decode(self, key: str, raw: bytes) -> HostReport:
        """``decode(raw)``; ReportError as it raises."""
        kept = self._last.get(key)
        if kept is not None and kept[0] == raw:
            self.hits += 1
            return kept[1]
        report = decode(raw)
        self._keep(key, raw, report)
        return report

    def remember(self, key: str, raw: bytes, report: HostReport) -> None:
        """Keep ``report`` as what ``raw`` decodes to, without decoding it: only for a report
        this process built and encoded itself (``raw == encode(report)``, of a report the
        daemon's builder made: its own report, written to ``key``), whose decoding is that
        report (tests/daemon/test_report_memo.py proves it over hostile probe texts). The
        leader's ``members/`` watch then brings its own report back without a decoding; any
        other value at the key is decoded as usual. A sequence number past JSON's exact
        integers (2**53, which readers refuse) is not kept: its bytes are decoded, and refused."""
        if 0 <= report.seq < u.MAX_INT:
            self._keep(key, raw, report)

    def _keep(self, key: str, raw: bytes, report: HostReport) -> None:
        if key in self._last or len(self._last) < self.max_keys:
            self._last[key] = (bytes(raw), report)

