"""The slot view: an immutable snapshot of the 8 slots, built by a pure function.

The gateway rebuilds the view whenever the registry or its local view of a card changes and
swaps it in with one reference assignment; ``ClusterGateway.snapshot()`` returns the current
one without I/O or locks.

A slot's card is in service when all of these hold, and ``why`` names the first that does not:
1. the registry says ``in`` (and no serial conflict);
2. the key layout of this gateway's namespace is verified (``layouts/<namespace>``);
3. the card was refused by no identity or target check;
4. the card is connected and its namespace (device) or directory found and verified;
5. the gateway's own hysteresis over its path says up (``contract.health.tally``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from awide_cluster.contract import slots as slotfn
from awide_cluster.contract.health import Hysteresis
from awide_cluster.contract.registry import CardEntry, Registry


@dataclass(frozen=True, slots=True)
class CardPath:
    """What this gateway knows of one card's path, maintained by the connector."""

    card_id: str
    device: str | None = None          # /dev/nvmeXnY, or the directory of a dir card
    verified: bool = False             # serial/model (and identity or label) checked
    refused: str = ""                  # why this card is refused ("" = not refused)
    note: str = "not connected yet"    # why it has no device, when it has none
    health: Hysteresis = Hysteresis()


@dataclass(frozen=True, slots=True)
class SlotState:
    slot: int
    card_id: str | None = None
    serial: str = ""
    model: str = ""
    kind: str = ""
    host: str = ""
    name: str = ""
    device: str | None = None
    in_service: bool = False
    why: str = "empty slot"
    registry_state: str = ""


@dataclass(frozen=True, slots=True)
class SlotView:
    generation: int = 0                            # registry generation applied (0: none yet)
    slots: tuple[SlotState, ...] = tuple(SlotState(i) for i in range(slotfn.SLOT_COUNT))
    table: slotfn.SlotTable = slotfn.EMPTY
    unplaced: tuple[tuple[str, str], ...] = ()
    namespace: str = ""
    placement: str = "dialog"
    fingerprint: str = ""
    layout_ok: bool = False
    layout_problem: str = "key layout not verified yet"
    # not None while the registry is the gateway's state file (served at a start while etcd
    # did not answer): the wall-clock time it was saved
    saved_at: float | None = None
    by_card: dict[str, SlotState] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "by_card", {s.card_id: s for s in self.slots if s.card_id is not None})

    def card(self, card_id: str) -> SlotState | None:
        return self.by_card.get(card_id)

    @property
    def placed(self) -> tuple[SlotState, ...]:
        return tuple(s for s in self.slots if s.card_id is not None)

    @property
    def in_service(self) -> tuple[SlotState, ...]:
        return tuple(s for s in self.slots if s.in_service)

    def table_lines(self) -> list[str]:
        """A human-readable slot table (``gateway watch`` prints it)."""
        head = (f"generation {self.generation}  namespace {self.namespace}  "
                f"placement {self.placement}  fingerprint {self.fingerprint or '-'}")
        lines = [head]
        for s in self.slots:
            if s.card_id is None:
                lines.append(f"  slot {s.slot}: -")
                continue
            state = "IN " if s.in_service else "OUT"
            why = "" if s.in_service else f"  ({s.why})"
            lines.append(f"  slot {s.slot}: {state} {s.card_id} serial={s.serial} "
                         f"host={s.host} device={s.device or '-'}{why}")
        for cid, why in self.unplaced:
            lines.append(f"  no slot: {cid} ({why})")
        return lines


def why_out(card: CardEntry, local: CardPath | None, layout_ok: bool,
            layout_problem: str) -> str:
    """"" when the card is in service, else the first reason it is not (see module doc)."""
    if card.conflict is not None:
        return f"registry: serial conflict: {card.conflict}"
    if card.state != "in":
        return f"registry: {card.state}" + (f" ({card.reason})" if card.reason else "")
    if not layout_ok:
        return layout_problem or "key layout not verified"
    if local is None:
        return "not connected yet"
    if local.refused:
        return f"refused: {local.refused}"
    if local.device is None or not local.verified:
        return local.note or "not verified yet"
    if not local.health.up:
        return f"local: {local.health.reason or 'unhealthy'} ({local.health.bad} bad polls)"
    return ""


def shown(local: CardPath) -> tuple[object, ...]:
    """What ``build`` reads of a card's path (through ``why_out`` and the slot's device): two
    paths with the same ``shown`` give the same view, so a change of the path that leaves it
    equal (a good streak growing) needs no new view."""
    h, missing = local.health, local.device is None or not local.verified
    return (local.device, local.verified, local.refused, local.note if missing else "",
            h.up, "" if h.up else h.reason, 0 if h.up else h.bad)


_Made = tuple[CardEntry, CardPath | None, bool, str, int, SlotState]


class SlotMemo:
    """One gateway's slot states of its last view, each with what it was made from (the
    card's registry entry and path, the layout's state, the slot): a view built again after
    a change of one card makes that card's slot state only. The entries and paths are
    compared by identity (both are immutable, and swapped, never changed, when they change),
    so a state is reused only when it would be made from the same objects."""

    def __init__(self) -> None:
        self._states: dict[str, _Made] = {}

    def state(self, i: int, card: CardEntry, loc: CardPath | None, layout_ok: bool,
              layout_problem: str) -> SlotState | None:
        """The last view's state of ``card``'s slot if made from the same inputs, else None."""
        hit = self._states.get(card.id)
        if (hit is not None and hit[0] is card and hit[1] is loc and hit[2] == layout_ok
                and hit[3] == layout_problem and hit[4] == i):
            return hit[5]
        return None

    def keep(self, made: dict[str, _Made]) -> None:
        self._states = made         # the last view's slots only


_EMPTY_SLOTS = tuple(SlotState(i) for i in range(slotfn.SLOT_COUNT))


def build(reg: Registry | None, local: Mapping[str, CardPath], *, namespace: str,
          placement: str, fingerprint: str, layout_ok: bool, layout_problem: str = "",
          saved_at: float | None = None, memo: SlotMemo | None = None) -> SlotView:
    """The view of ``reg`` (None: no registry applied yet) with the local card states.
    ``memo``: the gateway's ``SlotMemo``, which changes no outcome, only what a build
    costs."""
    if reg is None:
        return SlotView(namespace=namespace, placement=placement, fingerprint=fingerprint,
                        layout_ok=layout_ok, layout_problem=layout_problem, saved_at=saved_at)
    states = []
    made: dict[str, _Made] = {}
    for i, cid in enumerate(reg.slots.slots):
        card = reg.card(cid) if cid is not None else None
        if card is None:
            states.append(_EMPTY_SLOTS[i] if i < len(_EMPTY_SLOTS) else SlotState(i))
            continue
        loc = local.get(card.id)
        state = memo.state(i, card, loc, layout_ok, layout_problem) if memo else None
        if state is None:
            why = why_out(card, loc, layout_ok, layout_problem)
            state = SlotState(
                slot=i, card_id=card.id, serial=card.serial, model=card.model, kind=card.kind,
                host=card.host, name=card.name, device=loc.device if loc else None,
                in_service=not why, why=why, registry_state=card.state,
            )
        states.append(state)
        made[card.id] = (card, loc, layout_ok, layout_problem, i, state)
    if memo is not None:
        memo.keep(made)
    return SlotView(
        generation=reg.generation, slots=tuple(states), table=reg.slots,
        unplaced=reg.slots.unplaced, namespace=namespace, placement=placement,
        fingerprint=fingerprint, layout_ok=layout_ok, layout_problem=layout_problem,
        saved_at=saved_at,
    )
