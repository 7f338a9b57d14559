"""What each gateway process shows, read from its ``gateway watch --json`` lines.

- ``GatewayView``: one gateway's view at one moment (generation, slot table, per-card in-service
  state) with the ``time.monotonic()`` the gateway printed it at;
- ``view_from_table(doc)``: pure, a JSON ``table`` line -> view;
- ``GatewayFeed``: a thread reading one gateway's stdout, keeping the latest view, the history
  of views and the events (all JSON objects, with their times);
- predicates for ``EmbeddedCluster.wait_until``: ``card_out(id)``, ``card_in(id)``,
  ``card_placed_in(id)``, ``cards_in(ids)``, ``generation_at_least(n)``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import IO, Any

Predicate = Callable[["GatewayView"], bool]


@dataclass(frozen=True)
class GatewayView:
    gateway: str
    generation: int
    slots: tuple[str | None, ...]            # card id per slot (None: empty)
    in_service: Mapping[str, bool]           # card id -> usable now on this gateway
    why: Mapping[str, str]                   # card id -> why not in service ("" when in)
    seen_at: float                           # time.monotonic() of the gateway's line
    layout_ok: bool = True
    unplaced: tuple[str, ...] = ()

    def card_in(self, card_id: str) -> bool:
        return self.in_service.get(card_id, False)

    def slot_of(self, card_id: str) -> int | None:
        try:
            return self.slots.index(card_id)
        except ValueError:
            return None

    def same_as(self, other: GatewayView) -> bool:
        """Same slot table and same in-service states (generation and reasons may differ)."""
        return self.slots == other.slots and dict(self.in_service) == dict(other.in_service)

    def to_dict(self) -> dict[str, Any]:
        return {"gateway": self.gateway, "generation": self.generation,
                "slots": list(self.slots), "in_service": dict(self.in_service),
                "seen_at": self.seen_at}


def view_from_table(doc: Mapping[str, Any]) -> GatewayView:
    """A ``{"type": "table", ...}`` line -> GatewayView. KeyError/TypeError when it is not one."""
    slots: list[str | None] = []
    ins: dict[str, bool] = {}
    why: dict[str, str] = {}
    for s in doc["slots"]:
        if s is None:
            slots.append(None)
            continue
        cid = str(s["card"])
        slots.append(cid)
        ins[cid] = bool(s["in"])
        why[cid] = str(s.get("why", ""))
    return GatewayView(
        gateway=str(doc["gateway"]), generation=int(doc["generation"]), slots=tuple(slots),
        in_service=ins, why=why, seen_at=float(doc["t"]),
        layout_ok=bool(doc.get("layout_ok", True)),
        unplaced=tuple(str(u[0]) for u in doc.get("unplaced", ())))


# ------------------------------------------------------------------ predicates

def card_out(card_id: str) -> Predicate:
    """Placed but not in service (what a gateway shows for a sick card)."""
    return lambda v: v.slot_of(card_id) is not None and not v.card_in(card_id)


def card_in(card_id: str) -> Predicate:
    return lambda v: v.card_in(card_id)


card_placed_in = card_in  # a card in service has a slot by construction


def cards_in(card_ids: Iterable[str]) -> Predicate:
    ids = tuple(card_ids)
    return lambda v: all(v.card_in(c) for c in ids)


def cards_out(card_ids: Iterable[str]) -> Predicate:
    ids = tuple(card_ids)
    return lambda v: all(card_out(c)(v) for c in ids)


def generation_at_least(n: int) -> Predicate:
    return lambda v: v.generation >= n


def first_time(history: list[GatewayView], pred: Predicate, since: float) -> float | None:
    """Pure: when ``history`` (in time order) first satisfied ``pred`` at or after ``since``.
    A view older than ``since`` that was still current at ``since`` counts from ``since``."""
    current: GatewayView | None = None
    for v in history:
        if v.seen_at < since:
            current = v
            continue
        if current is not None:
            if pred(current):
                return since
            current = None
        if pred(v):
            return v.seen_at
    if current is not None and pred(current):
        return since
    return None


def disagreement(views: Mapping[str, GatewayView | None]) -> str:
    """Pure: "" when every gateway has a view and all show the same table and states."""
    missing = sorted(g for g, v in views.items() if v is None)
    if missing:
        return "no view yet from " + ", ".join(missing)
    items = sorted((g, v) for g, v in views.items() if v is not None)
    if not items:
        return ""
    ref_g, ref = items[0]
    for g, v in items[1:]:
        if v.slots != ref.slots:
            return f"slot tables differ: {ref_g} {list(ref.slots)} vs {g} {list(v.slots)}"
        if dict(v.in_service) != dict(ref.in_service):
            diff = sorted(c for c in set(ref.in_service) | set(v.in_service)
                          if ref.in_service.get(c) != v.in_service.get(c))
            return (f"in-service states differ for {', '.join(diff)}: " + "; ".join(
                f"{c}: {ref_g} {ref.in_service.get(c)} vs {g} {v.in_service.get(c)}"
                for c in diff))
    return ""


# ------------------------------------------------------------------ the reader thread

@dataclass
class GatewayFeed:
    """Reads one gateway's JSON lines in a daemon thread (``start(stream)``)."""

    gateway: str
    history: list[GatewayView] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    garbage: int = 0
    started_at: float | None = None
    ended: bool = False
    changed: threading.Condition = field(default_factory=threading.Condition)
    _thread: threading.Thread | None = None

    def start(self, stream: IO[bytes]) -> None:
        self.ended = False
        self._thread = threading.Thread(target=self._read, args=(stream,),
                                        name=f"feed-{self.gateway}", daemon=True)
        self._thread.start()

    def latest(self) -> GatewayView | None:
        with self.changed:
            return self.history[-1] if self.history else None

    def snapshot(self) -> list[GatewayView]:
        with self.changed:
            return list(self.history)

    def take(self, line: bytes | str) -> None:
        """Consume one line (public for tests of the parsing)."""
        try:
            doc = json.loads(line)
            kind = doc["type"]
        except (ValueError, KeyError, TypeError):
            with self.changed:
                self.garbage += 1
            return
        with self.changed:
            if kind == "table":
                try:
                    self.history.append(view_from_table(doc))
                except (KeyError, TypeError, ValueError):
                    self.garbage += 1
                    return
            elif kind == "started":
                self.started_at = float(doc.get("t", 0.0))
            elif kind == "event":
                self.events.append(doc)
            self.changed.notify_all()

    def join(self, timeout: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def _read(self, stream: IO[bytes]) -> None:
        try:
            for line in iter(stream.readline, b""):
                self.take(line)
        except (OSError, ValueError):
            pass
        finally:
            with self.changed:
                self.ended = True
                self.changed.notify_all()
