"""Change events, and the pure diff that derives card events from two slot views.

Kinds:
- ``joined``: a card got a slot (``in_service`` says whether it is usable yet);
- ``out`` / ``back``: a placed card left / (re)entered service (``detail`` says why); the
  first time a joined card becomes usable is a ``back`` too;
- ``moved``: a card changed slot, or lost its slot (``slot`` None: forgotten by the
  registry); ``detail`` names both slots and the cards that held them before and after;
- ``stale`` / ``fresh``: the registry could not be read or was refused (kept the last good
  one) / reading works again;
- ``layout_mismatch``: this gateway's key layout differs from the recorded one;
- ``refused``: a card (wrong serial/model/identity, hostile target), a second engine or a wipe
  request was refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from awide_cluster.contract import slots as slotfn
from awide_gateway_cluster.view import SlotView

Kind = Literal["joined", "out", "back", "moved", "stale", "fresh", "layout_mismatch", "refused"]
KINDS: tuple[str, ...] = (
    "joined", "out", "back", "moved", "stale", "fresh", "layout_mismatch", "refused")


@dataclass(frozen=True, slots=True)
class ChangeEvent:
    kind: Kind
    card_id: str | None = None
    slot: int | None = None
    old_slot: int | None = None
    generation: int = 0
    in_service: bool | None = None
    detail: str = ""

    def line(self) -> str:
        """One log line: ``kind card=... slot=... generation=N detail``."""
        parts = [f"{self.kind:<15}"]
        if self.card_id is not None:
            parts.append(f"card={self.card_id}")
        if self.kind == "moved" or self.old_slot is not None:
            parts.append(f"slot={_place(self.old_slot)}->{_place(self.slot)}")
        elif self.slot is not None:
            parts.append(f"slot={self.slot}")
        parts.append(f"generation={self.generation}")
        if self.detail:
            parts.append(self.detail)
        return " ".join(parts)


def _place(s: int | None) -> str:
    return "none" if s is None else str(s)


def describe_move(m: slotfn.Move, old: slotfn.SlotTable, new: slotfn.SlotTable) -> str:
    """A move with both cards and both slots: who held the target slot, who holds the source."""
    text = m.describe()
    if m.new is not None:
        before = old.slots[m.new]
        text += f"; slot {m.new} held {before or 'nothing'} before"
    if m.old is not None:
        after = new.slots[m.old]
        text += f"; slot {m.old} now holds {after or 'nothing'}"
    return text


def diff(old: SlotView, new: SlotView) -> list[ChangeEvent]:
    """Card events between two views, in slot-table order (moves first, then joins, then
    service changes), deterministic for the same two views."""
    gen = new.generation
    out: list[ChangeEvent] = []
    joins: list[ChangeEvent] = []
    for m in (slotfn.moves(old.table, new.table) if new.table != old.table else ()):
        if m.old is None:
            s = new.card(m.card_id)
            joins.append(ChangeEvent(
                "joined", m.card_id, m.new, None, gen, s.in_service if s else False,
                "in service" if s and s.in_service else f"not in service yet: {s.why if s else ''}",
            ))
        else:
            out.append(ChangeEvent("moved", m.card_id, m.new, m.old, gen, None,
                                   describe_move(m, old.table, new.table)))
    out.extend(joins)
    for s in new.slots:
        if s.card_id is None:
            continue
        before = old.card(s.card_id)
        if before is None or before.in_service == s.in_service:
            continue
        if s.in_service:
            out.append(ChangeEvent("back", s.card_id, s.slot, None, gen, True,
                                   f"in service (was: {before.why})"))
        else:
            out.append(ChangeEvent("out", s.card_id, s.slot, None, gen, False, s.why))
    return out
