"""The slot function: one pure function, shared by the leader and every gateway.

A cluster has ``SLOT_COUNT`` (8) slots. The leader computes the slot table when it writes the
registry; every gateway recomputes it from the registry it read and refuses a generation whose
published table differs from its own computation (version skew).

Inputs are the registry's cards as ``SlotClaim`` values: the card id, the generation at which
the card was admitted, whether it may hold a slot (a card in a serial conflict that holds no
slot yet may not), and the slot it held in the registry the leader read (``claim``).

Rules, in order, deterministic whatever order the cards are given in:
1. Cards are taken by (admitted, id).
2. A card keeps the slot it claims when the claim is in range and no earlier card kept it:
   a card that is out or drained keeps its slot (its state is not an input at all), and a
   joining card never displaces a placed card.
3. Cards without a slot take the lowest free slot, in the same order.
4. A card left without a slot is reported with its reason (a 9th card).

``assign(claims)`` applied to the table it produced gives the same table (a fixed point): this
is what a gateway checks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

SLOT_COUNT = 8
ALGORITHM_VERSION = 1


@dataclass(frozen=True, slots=True)
class SlotClaim:
    card_id: str
    admitted: int
    claim: int | None = None
    eligible: bool = True
    ineligible_reason: str = ""


@dataclass(frozen=True, slots=True)
class SlotTable:
    """``slots[i]`` is the card id in slot i or None; ``unplaced`` maps card id -> reason."""

    slots: tuple[str | None, ...]
    unplaced: tuple[tuple[str, str], ...] = ()

    def slot_of(self, card_id: str) -> int | None:
        try:
            return self.slots.index(card_id)
        except ValueError:
            return None

    def as_mapping(self) -> dict[str, int]:
        return {cid: i for i, cid in enumerate(self.slots) if cid is not None}


EMPTY = SlotTable(slots=(None,) * SLOT_COUNT)


@dataclass(frozen=True, slots=True)
class Move:
    """A change of one card's place between two tables (``None`` = no slot)."""

    card_id: str
    old: int | None
    new: int | None

    def describe(self) -> str:
        def place(s: int | None) -> str:
            return "no slot" if s is None else f"slot {s}"

        return f"card {self.card_id}: {place(self.old)} -> {place(self.new)}"


def assign(claims: Iterable[SlotClaim], slot_count: int = SLOT_COUNT) -> SlotTable:
    ordered = sorted(claims, key=lambda c: (c.admitted, c.card_id))
    ids = [c.card_id for c in ordered]
    if len(set(ids)) != len(ids):
        raise ValueError("slot claims name the same card twice")
    slots: list[str | None] = [None] * slot_count
    waiting: list[SlotClaim] = []
    unplaced: list[tuple[str, str]] = []
    for c in ordered:
        if not c.eligible:
            unplaced.append((c.card_id, c.ineligible_reason or "not eligible for a slot"))
        elif c.claim is not None and 0 <= c.claim < slot_count and slots[c.claim] is None:
            slots[c.claim] = c.card_id
        else:
            waiting.append(c)
    for c in waiting:
        try:
            free = slots.index(None)
        except ValueError:
            unplaced.append(
                (c.card_id, f"no free slot: all {slot_count} slots are held by other cards")
            )
            continue
        slots[free] = c.card_id
    return SlotTable(slots=tuple(slots), unplaced=tuple(sorted(unplaced)))


def moves(old: SlotTable, new: SlotTable) -> tuple[Move, ...]:
    """Every card whose place differs between two tables, sorted by card id.

    A card that appears (join) or disappears (forget) is a move from/to ``None``.
    """
    a, b = old.as_mapping(), new.as_mapping()
    out = []
    for cid in sorted(set(a) | set(b)):
        if a.get(cid) != b.get(cid):
            out.append(Move(cid, a.get(cid), b.get(cid)))
    return tuple(out)


def claims_from_table(table: SlotTable) -> Mapping[str, int]:
    return table.as_mapping()
