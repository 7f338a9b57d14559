"""What a campaign records, as plain frozen values, and the container the runner fills.

Times are ``time.monotonic()`` seconds, which on Linux is one clock for every process of the
machine (the gateways stamp their own lines with it), so records from different processes
compare directly.

- ``KeyEvent``: one put/delete of ``registry`` or ``leader`` from etcd's history (a watch from
  revision 1), with the time the runner saw it;
- ``RegistryRev``: a registry revision as decoded (or not) when the runner saw it;
- ``GatewayTable``: a gateway's slot view whenever it changed (placed slots only);
- ``PollObs`` / ``AccessObs``: one gateway registry poll's duration; the worst accessor call
  and event-loop lag a gateway saw over its last report period;
- ``TruthChange``: the runner changed what is physically at a card's place (a label swap);
- ``RunnerWrite``: the runner itself wrote into etcd (a poison value, a forged registry, a
  deleted key): not the cluster's write, so the checkers exclude exactly that revision;
- ``FaultRecord``: one injected fault, when it was injected, healed and agreed on again;
- ``LogLine``: a line of the campaign's event log (shown around each violation).

``History`` is appended to by several threads (one lock, appends only); ``frozen()`` gives the
immutable ``Recorded`` the checkers take.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol, TypeVar


@dataclass(frozen=True, slots=True)
class KeyEvent:
    revision: int
    key: str                    # relative to the cluster prefix: "registry" or "leader"
    kind: str                   # "put" | "delete"
    value: bytes
    create_revision: int = 0
    lease: int = 0
    t: float = 0.0


@dataclass(frozen=True, slots=True)
class RegistryRev:
    t: float
    revision: int
    generation: int | None      # None: the document did not decode
    leader: str = ""
    usable: frozenset[str] = frozenset()       # cards in service per the registry
    slots: tuple[str | None, ...] = ()
    states: tuple[tuple[str, str], ...] = ()   # (card, state) sorted
    error: str = ""


@dataclass(frozen=True, slots=True)
class SlotObs:
    slot: int
    card: str
    in_service: bool
    serial: str = ""
    model: str = ""
    device: str | None = None
    why: str = ""


@dataclass(frozen=True, slots=True)
class GatewayTable:
    t: float
    gateway: str
    generation: int
    slots: tuple[SlotObs, ...]          # placed slots only, by slot number

    @property
    def in_service(self) -> frozenset[str]:
        return frozenset(s.card for s in self.slots if s.in_service)

    @property
    def table(self) -> tuple[str | None, ...]:
        out: list[str | None] = [None] * 8
        for s in self.slots:
            if 0 <= s.slot < len(out):
                out[s.slot] = s.card
        return tuple(out)

    def slot_of(self, card: str) -> SlotObs | None:
        return next((s for s in self.slots if s.card == card), None)


@dataclass(frozen=True, slots=True)
class PollObs:
    t: float                    # when the poll ended
    gateway: str
    duration: float
    ok: bool


@dataclass(frozen=True, slots=True)
class AccessObs:
    t: float
    gateway: str
    accessor_max: float         # slowest snapshot()/placement call in the period
    loop_lag_max: float         # worst event-loop lag in the period
    calls: int


@dataclass(frozen=True, slots=True)
class TruthChange:
    t: float
    card: str
    present: bool               # the card itself is at its place (its label / its target)
    note: str = ""


@dataclass(frozen=True, slots=True)
class RunnerWrite:
    """A put or delete the runner made by hand (poison faults). ``revision`` is the etcd
    revision of that write (from its answer, or found again in the recorded history when the
    answer was lost); 0 when it was not applied."""

    t: float                    # just before the write was sent
    revision: int
    key: str                    # relative to the cluster prefix
    kind: str                   # "put" | "delete"
    fault: int                  # the fault that made it
    note: str = ""              # what was written, in words
    forged_cards: tuple[str, ...] = ()   # card ids it names that are no card of the cluster


@dataclass(frozen=True, slots=True)
class LogLine:
    t: float
    source: str
    text: str

    def render(self, t0: float = 0.0) -> str:
        return f"{self.t - t0:9.3f} {self.source:<10} {self.text}"


@dataclass(slots=True)
class FaultRecord:
    index: int
    kind: str
    target: str
    hold: float
    t_inject: float
    t_heal: float | None = None
    t_restored: float | None = None     # quorum faults: etcd answering again
    t_agreed: float | None = None       # runner's observation (the checker re-derives it)
    detail: str = ""
    # device_rename: (gateway, card, device that vanished) — it must come back under another
    renamed: tuple[tuple[str, str, str], ...] = ()
    skipped: str = ""                   # why the fault could not be injected (none: "")
    cards: tuple[str, ...] = ()         # ids of the cards the fault hits directly
    leader_ok: bool | None = None       # after settling, the leader key's holder was leading

    @property
    def heal_time(self) -> float | None:
        if self.t_heal is None or self.t_agreed is None:
            return None
        return self.t_agreed - self.t_heal


@dataclass(frozen=True, slots=True)
class Recorded:
    """An immutable copy of everything recorded (what the checkers take)."""

    key_events: tuple[KeyEvent, ...]
    registry: tuple[RegistryRev, ...]
    tables: dict[str, tuple[GatewayTable, ...]]
    polls: tuple[PollObs, ...]
    access: tuple[AccessObs, ...]
    truth: tuple[TruthChange, ...]
    faults: tuple[FaultRecord, ...]
    log: tuple[LogLine, ...]
    gateways: tuple[str, ...]
    expected_in: frozenset[str]         # cards that must be in service once all is healed
    t0: float = 0.0
    writes: tuple[RunnerWrite, ...] = ()    # the runner's own writes into etcd


class History:
    def __init__(self, gateways: tuple[str, ...] = (), t0: float = 0.0) -> None:
        self._lock = threading.Lock()
        self.t0 = t0
        self.gateways = tuple(gateways)
        self.key_events: list[KeyEvent] = []
        self.registry: list[RegistryRev] = []
        self.tables: dict[str, list[GatewayTable]] = {g: [] for g in gateways}
        self.polls: list[PollObs] = []
        self.access: list[AccessObs] = []
        self.truth: list[TruthChange] = []
        self.faults: list[FaultRecord] = []
        self.log: list[LogLine] = []
        self.expected_in: frozenset[str] = frozenset()
        self.writes: list[RunnerWrite] = []

    def add(self, item: object) -> None:
        with self._lock:
            if isinstance(item, GatewayTable):
                self.tables.setdefault(item.gateway, []).append(item)
            elif isinstance(item, PollObs):
                self.polls.append(item)
            elif isinstance(item, AccessObs):
                self.access.append(item)
            elif isinstance(item, RegistryRev):
                self.registry.append(item)
            elif isinstance(item, KeyEvent):
                self.key_events.append(item)
            elif isinstance(item, TruthChange):
                self.truth.append(item)
            elif isinstance(item, LogLine):
                self.log.append(item)
            elif isinstance(item, FaultRecord):
                self.faults.append(item)
            elif isinstance(item, RunnerWrite):
                self.writes.append(item)
            else:
                raise TypeError(f"not a history record: {type(item).__name__}")

    def note(self, t: float, source: str, text: str) -> None:
        self.add(LogLine(t, source, text))

    def latest_table(self, gateway: str) -> GatewayTable | None:
        with self._lock:
            rows = self.tables.get(gateway)
            return rows[-1] if rows else None

    def key_events_since(self, key: str, t: float) -> list[KeyEvent]:
        """The recorded events of ``key`` seen at or after ``t``."""
        with self._lock:
            return [e for e in self.key_events if e.key == key and e.t >= t]

    def latest_registry(self) -> RegistryRev | None:
        with self._lock:
            return self.registry[-1] if self.registry else None

    def frozen(self) -> Recorded:
        with self._lock:
            return Recorded(
                key_events=tuple(self.key_events), registry=tuple(self.registry),
                tables={g: tuple(sorted(rows, key=lambda r: r.t))
                        for g, rows in self.tables.items()},
                polls=tuple(self.polls), access=tuple(self.access), truth=tuple(self.truth),
                faults=tuple(replace(f) for f in self.faults),
                log=tuple(sorted(self.log, key=lambda line: line.t)),
                gateways=self.gateways, expected_in=self.expected_in, t0=self.t0,
                writes=tuple(self.writes))


class _Timed(Protocol):
    @property
    def t(self) -> float: ...


T = TypeVar("T", bound=_Timed)


def at(rows: Sequence[T], t: float) -> T | None:
    """The last row (sorted by ``.t``) at or before ``t``, or None."""
    i = bisect.bisect_right([r.t for r in rows], t)
    return rows[i - 1] if i else None


def log_around(lines: tuple[LogLine, ...], t: float, before: float = 3.0, after: float = 2.0,
               limit: int = 60, t0: float = 0.0) -> list[str]:
    """The event log from ``t - before`` to ``t + after`` (at most ``limit`` lines, the ones
    nearest ``t`` kept), rendered relative to ``t0``."""
    rows = [line for line in lines if t - before <= line.t <= t + after]
    if len(rows) > limit:
        rows.sort(key=lambda line: abs(line.t - t))
        rows = sorted(rows[:limit], key=lambda line: line.t)
    return [line.render(t0) for line in rows]


@dataclass(frozen=True, slots=True)
class Truth:
    """Ground truth per card: when it was (not) at its place. Cards never mentioned are
    present all the time."""

    changes: dict[str, tuple[TruthChange, ...]] = field(default_factory=dict)

    @classmethod
    def of(cls, rows: tuple[TruthChange, ...]) -> Truth:
        by: dict[str, list[TruthChange]] = {}
        for r in sorted(rows, key=lambda r: r.t):
            by.setdefault(r.card, []).append(r)
        return cls({k: tuple(v) for k, v in by.items()})

    def present(self, card: str, t: float) -> bool:
        rows = self.changes.get(card)
        if not rows:
            return True
        last = at(rows, t)
        return last.present if last is not None else True

    def present_during(self, card: str, a: float, b: float) -> bool:
        """Present at some moment of [a, b]."""
        if self.present(card, a) or self.present(card, b):
            return True
        return any(r.present for r in self.changes.get(card, ()) if a <= r.t <= b)

    def absences(self, card: str, end: float) -> list[tuple[float, float]]:
        """Intervals [from, to) during which the card was not at its place (to <= end)."""
        out, since = [], None
        for r in self.changes.get(card, ()):
            if not r.present and since is None:
                since = r.t
            elif r.present and since is not None:
                out.append((since, r.t))
                since = None
        if since is not None:
            out.append((since, end))
        return out
