"""The leader's decision, its data: what it reads, remembers and decides, and the frozen views
its phases (``decision_reports``, ``decision_cards``, ``decision_registry``) hand each other.
See ``reconcile`` for the decision itself."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from awide_cluster.contract import slots as slotfn
from awide_cluster.contract.health import Hysteresis
from awide_cluster.contract.registry import (
    CardEntry,
    Registry,
    card_id,
)
from awide_cluster.contract.report import HostReport, ReportedCard
from awide_cluster.contract.versions import Schema
from awide_cluster.contract.vouch import Allowed
from awide_cluster.contract.windows import NONE as NO_WINDOWS
from awide_cluster.contract.windows import Windows

Action = Literal["drain", "undrain", "forget", "clear-hold"]
# what started a cycle: the leader's own poll (one per poll period), or a host report that
# arrived between two polls (the leader's watch of members/)
Trigger = Literal["poll", "report"]
ACTIONS: tuple[Action, ...] = ("drain", "undrain", "forget", "clear-hold")


@dataclass(frozen=True, slots=True)
class Intent:
    """An operator intent read from ``intents/<card_id>``."""

    card_id: str
    action: Action
    mod_revision: int
    by: str = ""
    reason: str = ""        # the operator's --reason (bounded, no control character)


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """What the leader read in one cycle. Built only when every read succeeded."""

    reports: Mapping[str, HostReport]           # decoded host reports by host
    bad_reports: Mapping[str, str]              # host -> why its report did not decode
    registry: Registry | None                   # None: no registry written yet
    intents: tuple[Intent, ...] = ()
    bad_intents: Mapping[str, tuple[int, str]] = field(default_factory=dict)  # key -> (rev, why)
    # reports under members/<host> for a host that is not in Policy.hosts: host -> why refused
    strangers: Mapping[str, str] = field(default_factory=dict)
    # "" when ``registry`` is what etcd holds; else why etcd's registry is being rewritten from
    # ``registry`` (the last good one this daemon knows, or None: rebuilt from the reports)
    repair: str = ""
    generation_floor: int = 0   # the written generation must exceed this (gateways applied it)
    lineage: str = ""           # the lineage to give a registry that has none yet
    # this leader's own writes failed (its host report in this turn, or its last registry
    # transaction): why, "" when they did not. Then the hosts' writes fail too: a write outage
    write_failure: str = ""
    # "poll": the leader's own cycle, one per poll period (a report that did not advance since
    # the last poll cycle counts); "report": a cycle run because a host report arrived (only
    # the reports that advanced since the last cycle are observed, nothing else counts)
    trigger: Trigger = "poll"
    # the operator windows (decision_windows): as etcd holds them (None: none, or unusable:
    # ``windows_problem`` says why), the requests read (``WindowAsk``s) and the refused ones
    # (key -> (mod_revision, why)), and the leader's wall clock (Unix seconds) they expire by
    windows: Windows | None = None
    windows_problem: str = ""
    window_requests: tuple[Any, ...] = ()
    bad_window_requests: Mapping[str, tuple[int, str]] = field(default_factory=dict)
    wall: float = 0.0
    # the registry schema to write: the highest every live daemon and gateway reads fully
    # (leader_read.registry_schema, contract/versions.py)
    registry_schema: Schema = Schema(1, 0)


@dataclass(frozen=True, slots=True)
class Damping:
    """Flap damping (``decision_damping``): a card that went out ``outs`` times within
    ``window`` seconds is held out when it next returns, for ``first_hold`` seconds; each hold
    that follows (the card went out again before a quiet ``window`` passed) lasts twice the
    last, at most ``max_hold``. ``outs`` 0: no damping. See docs/config.md."""

    outs: int = 3
    window: float = 600.0
    first_hold: float = 10.0
    max_hold: float = 300.0


@dataclass(frozen=True, slots=True)
class Flaps:
    """What the leader keeps of one card's flaps in its term, in poll cycles of the term."""

    outs: tuple[int, ...] = ()      # the poll cycles at which it went out (within the window)
    held_until: int = 0             # the poll cycle at which its running hold ends
    quiet_from: int = 0             # the poll cycle its last hold ended (its return)


@dataclass(frozen=True, slots=True)
class Policy:
    cluster: str
    leader: str                 # this leader's host name
    sick_polls: int = 3
    healthy_polls: int = 1
    hosts: frozenset[str] = frozenset()   # the cluster's hosts (config); empty: any host
    # seconds between two poll cycles: bounds how many a restarting report is held for
    poll_interval: float = 1.0
    damping: Damping = Damping()            # flap damping
    # each storage host's allowed target addresses (config ``addresses``); None: not checked
    allowed: Allowed | None = None


@dataclass(frozen=True, slots=True)
class LeaderMemory:
    """What a leader keeps between its own cycles. A new leader starts from ``LeaderMemory()``."""

    cycles: int = 0
    seen: Mapping[str, tuple[str, int]] = field(default_factory=dict)  # host -> (run, seq)
    # host -> (run, seq) at the last poll cycle: a report that did not advance since then
    # did not advance for a whole poll period (report cycles leave it alone)
    polled: Mapping[str, tuple[str, int]] = field(default_factory=dict)
    health: Mapping[str, Hysteresis] = field(default_factory=dict)     # card id -> hysteresis
    # cards whose observation in the last cycle was a fresh sick report: re-reading that same
    # report next cycle (it did not advance) is not another sick poll
    fresh_bad: frozenset[str] = frozenset()
    # write outages: host -> cycles in a row its report did not advance; why the last cycle
    # was a write outage ("" when it was not)
    stale_for: Mapping[str, int] = field(default_factory=dict)
    outage: str = ""
    # restarting hosts: host -> poll cycles their report has been marked restarting
    held_for: Mapping[str, int] = field(default_factory=dict)
    # flap damping: poll cycles of this term (the damping's clock), and per card its outs
    polls: int = 0
    flaps: Mapping[str, Flaps] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Decision:
    registry: Registry                      # what the registry should be (generation + 1 if write)
    write: bool                             # content changed: write ``registry``
    consumed: tuple[tuple[str, int], ...]   # intent keys (relative) and mod revisions to delete
    memory: LeaderMemory
    log: tuple[str, ...]
    moves: tuple[slotfn.Move, ...] = ()
    # the operator windows in force after this cycle, whether to write them, what changed
    windows: Windows = NO_WINDOWS
    windows_write: bool = False
    window_events: tuple[Any, ...] = ()


# --- the views the phases hand each other -------------------------------------------------

Sighting = tuple[str, ReportedCard]                 # (host, card) as one host report lists it
Sightings = Mapping[str, tuple[Sighting, ...]]       # card id -> its sightings, by host name


@dataclass(frozen=True, slots=True, kw_only=True)
class Reading:
    """How this cycle reads the host reports, judged once before any card is."""

    baseline: bool                  # a new leader's first cycle: no bad observation counts
    fresh: frozenset[str]           # hosts whose report advanced since the last cycle
    # hosts whose report advanced since the last poll cycle but was observed already (by a
    # report cycle), and in a report cycle every host whose report did not advance: their
    # cards have no observation in this cycle (neither good nor "did not advance")
    idle: frozenset[str]
    streaks: Mapping[str, int]      # host -> cycles in a row its report did not advance
    outage: str                     # why this cycle is a write outage, "" when it is not
    stale_counts: bool              # a report that did not advance counts as a bad poll
    recounted: frozenset[str]       # cards whose sick report was counted in the last cycle
    # hosts whose report is marked restarting, within its grace: their cards are held (no
    # observation), and their report not advancing is neither a bad poll nor a write outage
    held: frozenset[str] = frozenset()
    # host -> poll cycles its report has been marked restarting (held or past its grace)
    held_for: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class Stamp:
    """What a card changed in this cycle is marked with."""

    generation: int                 # the generation this decision writes
    at: str                         # ``now``, the text of ``changed_at``


@dataclass(frozen=True, slots=True, kw_only=True)
class Ledger:
    """The registry's cards (in registry order) and the leader's counters, as one phase of
    the decision hands them to the next, with the log lines written so far."""

    cards: Mapping[str, CardEntry]
    health: Mapping[str, Hysteresis]
    log: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class TakenIntents:
    """The intents read in this cycle, once the forget intents are applied."""

    ledger: Ledger
    forgotten: frozenset[str]               # not observed nor admitted again this cycle
    pending: tuple[Intent, ...]             # drain and undrain intents of registry cards
    consumed: tuple[tuple[str, int], ...]   # every intent key read, with its mod revision


@dataclass(frozen=True, slots=True, kw_only=True)
class Poll:
    """One observation of a registry card in this cycle."""

    good: bool | None               # None: no observation
    reason: str = ""
    source: Sighting | None = None  # where the card was seen, when it was
    stale: bool = False             # bad only because the host's report did not advance
    held: bool = False              # no observation: its host is restarting within its grace


@dataclass(frozen=True, slots=True, kw_only=True)
class CardStep:
    """One registry card after its poll: the entry, its counters and the lines to log."""

    card: CardEntry
    health: Hysteresis
    log: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Settled:
    """The registry this decision ends with, and whether it is written."""

    registry: Registry
    write: bool
    moves: tuple[slotfn.Move, ...]
    log: tuple[str, ...]


# hosts whose reports stopped advancing within this many cycles of each other stopped together
STOPPED_TOGETHER = 2


def held_polls(grace: int, poll_interval: float) -> int:
    """Poll cycles a restarting report of ``grace`` seconds is held for at most: its grace in
    polls and one more (the leader's phase against the writer's). Its lease expires first, in
    etcd; this bounds a report that outlives it (written by hand, off any lease)."""
    return int(-(-grace // max(poll_interval, 1e-3))) + 1


def describe(c: CardEntry) -> str:
    return f"card {c.id} ({c.serial} on {c.host})"


def reported_id(rc: ReportedCard) -> str | None:
    """The card id of a reported card, or None when it cannot be one (not found, no serial,
    no on-card identity: a card whose identity could not be read is not admitted as another
    card, it only counts as a bad observation of the card registered under its name)."""
    if not rc.found or not rc.serial or not rc.identity:
        return None
    return card_id(rc.serial, rc.model, rc.identity)


def by_whom(it: Intent) -> str:
    why = f" (reason: {it.reason})" if it.reason else ""
    return (f" from {it.by}" if it.by else "") + why
