"""What ``awide-cluster status`` shows: frozen values, built by ``status.build_status``.

``ClusterStatus.to_dict()`` is the JSON/YAML document (stable field names, documented in
docs/operations.md); the table renderer reads the same values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from awide_cluster.contract.history_ring import History
from awide_cluster.operator.freshness import Age

Severity = Literal["error", "warning"]
Verdict = Literal["healthy", "warn", "unhealthy"]
Quorum = Literal["ok", "lost", "unknown"]

# Warnings about a state an operator set: it stays until an operator clears it, so it holds
# status's exit code at 1 (a forgotten drain is never invisible; Ceph's ``noout`` is
# HEALTH_WARN for the same reason). Other warnings pass by themselves and count only with
# ``--strict``.
OPERATOR_SET = frozenset({"card_drained", "intent_pending", "dev_cluster"})
# ... and the operator windows: a pause, a host's maintenance, a card's silence, a request
OPERATOR_SET |= frozenset({"cluster_paused", "host_maintenance", "card_silenced",
                           "window_pending"})
# Warnings about redundancy lost: the cluster works, but a part of it is down (a daemon, a
# witness's included, or an etcd member with quorum kept): they hold the exit code at 1 too,
# until the part is back.
DEGRADED = frozenset({"daemon_down", "etcd_member_down", "host_restarting"})
# Warnings about a write nobody vouched for in force now (registry entries the gateways
# refuse): they hold the exit code at 1 until the registry is repaired.
FORGED = frozenset({"registry_forged"})
HOLDING = OPERATOR_SET | DEGRADED | FORGED

# The verdict as the Nagios plugin convention words it, and its exit code (docs/operations.md).
STATE = {"healthy": "OK", "warn": "WARNING", "unhealthy": "CRITICAL"}
EXIT_CODE = {"healthy": 0, "warn": 1, "unhealthy": 2}


@dataclass(frozen=True, slots=True)
class Problem:
    severity: Severity
    code: str                   # stable, e.g. card_out, quorum_lost (docs/operations.md)
    subject: str                # what it is about: a card id, host, gateway id, namespace, ...
    message: str
    muted: str = ""             # an error an operator window mutes (a warning): which, and why

    @property
    def operator_set(self) -> bool:
        """A state an operator set (a drain, an intent, a dev cluster): exit 1 until cleared."""
        return self.code in OPERATOR_SET

    @property
    def holds(self) -> bool:
        """A warning that holds the exit code at 1 (set by an operator, or a part down)."""
        return self.severity == "warning" and self.code in HOLDING

    def to_dict(self) -> dict[str, Any]:
        return {"severity": self.severity, "code": self.code, "subject": self.subject,
                "message": self.message, "operator_set": self.operator_set,
                "holds": self.holds, "muted": self.muted}


@dataclass(frozen=True, slots=True)
class EtcdMemberView:
    name: str
    id: str                     # hex member id, "" when unknown
    endpoint: str
    reachable: bool
    is_leader: bool
    raft_term: int | None
    raft_index: int | None
    version: str
    db_size: int | None         # bytes of the member's database file
    error: str
    db_size_in_use: int | None = None   # bytes of it in use (the rest: freed by a defrag)
    quota: int | None = None    # the member's backend quota (None: not read)


@dataclass(frozen=True, slots=True)
class EtcdAlarmView:
    alarm: str                  # etcd's name: NOSPACE (writes refused), CORRUPT, ...
    member: str                 # the member that raised it (name, else hex id)


@dataclass(frozen=True, slots=True)
class EtcdView:
    quorum: Quorum
    up: int                     # members answering and seeing a raft leader
    total: int                  # members of the cluster (member list, else endpoints given)
    leader: str                 # raft leader's name ("" if none seen)
    raft_term: int | None
    members: tuple[EtcdMemberView, ...]
    alarms: tuple[EtcdAlarmView, ...] = ()      # raised alarms (etcd's alarm list)
    alarms_error: str = ""      # the alarm list could not be read ("" when it was)
    margin: str = ""            # "2 of 3 members up; one more failure loses writes"


@dataclass(frozen=True, slots=True)
class LeaderView:
    host: str
    since: str                  # ISO time from the leader's own clock, "" if unknown
    held_for: float | None      # seconds, by this reader's clock (informational)
    api: str
    error: str = ""             # the leader key did not decode


@dataclass(frozen=True, slots=True)
class HostView:
    host: str
    role: str
    version: str
    api: str
    cards: int
    dev_cluster: bool
    is_leader: bool
    report_age: Age | None
    error: str = ""             # the report did not decode; "no report" for a missing host
    # the daemon stopped cleanly and its host is held until then (its own wall clock, as
    # text; "" when the report is a live one): {"until": ..., "grace": seconds}
    restarting: dict[str, Any] | None = None
    maintenance: str = ""       # in a maintenance window: by whom, since, until, why


@dataclass(frozen=True, slots=True)
class RegistryView:
    generation: int | None
    leader: str                 # who wrote it
    written_at: str
    age: Age | None
    cards: int
    slots_used: int
    error: str = ""             # missing or refused (corrupt, unknown schema)


@dataclass(frozen=True, slots=True)
class CardView:
    id: str
    serial: str
    model: str
    host: str
    name: str
    kind: str
    target: str                 # NVMe-oF address (transport://traddr:trsvcid/subnqn) or path
    slot: int | None
    state: str                  # in, out, drained; "unregistered" (reported, not yet admitted)
    health: str                 # ok, sick, unknown
    reason: str
    since: str                  # when the state last changed (leader's clock), "" if unknown
    changed_generation: int | None
    conflict: str               # why it is in conflict, "" if not
    unplaced: str               # why it has no slot, "" if it has one or needs none
    reported: str               # its host's latest observation: ok, sick: why, not found, no report
    drained_by: str = ""        # a drained card: who drained it, when, why (from the history)
    muted: str = ""             # silenced, or its host in maintenance: by whom, until, why
    # flap damping: {"level", "seconds", "active", "until", "remaining", "reason"}; remaining
    # is the hold left by this reader's clock against the leader's (informational), None when
    # unknown or the hold is over; None: no hold
    hold: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class GatewayRecordView:
    """A gateway as status shows it: its record (``gateways/<id>``), measured against the
    registry's generation."""
    id: str
    host: str
    pod: str
    namespace: str
    placement: str
    fingerprint: str
    generation: int | None      # registry generation applied
    lag: int | None             # registry generation minus the one applied
    engine: str
    version: str
    stale: bool
    age: Age | None             # since its record last changed
    error: str = ""
    # registry entries it refused since it started (not vouched for by their hosts'
    # reports), how many it refuses now, and the latest refusal (who wrote it, which field)
    refused: int = 0
    refusing: int = 0
    last_refusal: str = ""
    # it served its state file at its start (etcd did not answer): the file's age then (s),
    # since and until when (its own clock, ISO; until "" while it serves it); "" since: not
    # served (or long enough ago that its record no longer says so)
    state_age: int = 0
    state_since: str = ""
    state_until: str = ""


@dataclass(frozen=True, slots=True)
class IntentView:
    card_id: str
    action: str
    by: str
    age: Age | None
    error: str = ""
    reason: str = ""            # the operator's --reason
    at: str = ""                # when it was written (the writer's clock, informational)


@dataclass(frozen=True, slots=True)
class WindowView:
    """An operator window in force: ``pause``, ``host`` (name: the host) or ``card`` (the
    card id), who set it, since and until when (the leader's clock), why."""
    scope: str
    name: str
    by: str
    since: str
    until: str
    reason: str
    drained: bool = False


@dataclass(frozen=True, slots=True)
class ClusterStatus:
    cluster: str
    taken_at: str               # ISO time of the read (this machine's clock)
    revision: int | None        # etcd revision of the key read
    read_error: str             # the key read failed ("" when it worked)
    etcd: EtcdView
    leader: LeaderView | None
    registry: RegistryView
    hosts: tuple[HostView, ...]
    cards: tuple[CardView, ...]
    gateways: tuple[GatewayRecordView, ...]
    intents: tuple[IntentView, ...]
    problems: tuple[Problem, ...]
    dev_cluster: bool
    # the history ring as read (None: none, or unreadable); not part of to_dict: the
    # ``history`` command shows it, ``status --watch`` tails it
    history: History | None = None
    windows: tuple[WindowView, ...] = ()        # the operator windows in force

    @property
    def healthy(self) -> bool:
        return not any(p.severity == "error" for p in self.problems)

    @property
    def errors(self) -> tuple[Problem, ...]:
        return tuple(p for p in self.problems if p.severity == "error")

    @property
    def operator_set(self) -> tuple[Problem, ...]:
        return tuple(p for p in self.problems if p.operator_set)

    @property
    def holding(self) -> tuple[Problem, ...]:
        return tuple(p for p in self.problems if p.holds)

    @property
    def verdict(self) -> Verdict:
        """``unhealthy``: an error; ``warn``: no error but a state an operator set (a drained
        card, a pending intent, a dev cluster) or a part down with the cluster working (a
        daemon, an etcd member with quorum kept); ``healthy`` otherwise (passing warnings,
        such as a gateway catching up, may be listed)."""
        if self.errors:
            return "unhealthy"
        return "warn" if self.holding else "healthy"

    @property
    def state(self) -> str:
        """``OK``, ``WARNING`` or ``CRITICAL``: the verdict in the Nagios plugins' words."""
        return STATE[self.verdict]

    @property
    def exit_code(self) -> int:
        """0, 1 or 2: the verdict's exit code (3, UNKNOWN, is etcd unreachable: no status)."""
        return EXIT_CODE[self.verdict]

    def to_dict(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster, "healthy": self.healthy, "verdict": self.verdict,
            "state": self.state,
            "taken_at": self.taken_at,
            "revision": self.revision, "read_error": self.read_error,
            "dev_cluster": self.dev_cluster,
            "etcd": _plain(self.etcd), "leader": _plain(self.leader),
            "registry": _plain(self.registry),
            "hosts": [_plain(h) for h in self.hosts],
            "cards": [_plain(c) for c in self.cards],
            "gateways": [_plain(g) for g in self.gateways],
            "intents": [_plain(i) for i in self.intents],
            "problems": [p.to_dict() for p in self.problems],
            "windows": [_plain(w) for w in self.windows],
        }


def _plain(value: Any) -> Any:
    """Dataclasses to dicts (Age as {at_least, at_most}), recursively, field order kept."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, Age):
        return value.to_dict()
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    fields = getattr(value, "__dataclass_fields__", None)
    if fields is not None:
        return {name: _plain(getattr(value, name)) for name in fields}
    return value


def card_to_dict(card: CardView) -> dict[str, Any]:
    return {name: _plain(getattr(card, name)) for name in card.__dataclass_fields__}
