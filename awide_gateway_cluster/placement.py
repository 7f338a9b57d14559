"""Key placement over a slot view: pure functions, no I/O, safe on the hot path.

``dialog``: all blocks of a conversation on one card. The card is chosen by rendezvous
(highest random weight) hashing of (namespace, tag) over the *placed* slots: a card that is
out keeps its slot, so its conversations stay mapped to it and the caller is told to compute
and not cache (``available`` False) — never silently sent to another card, where a later
lookup would miss or, worse, find a stale copy. When a card is forgotten (loses its slot), only
the conversations that were on it move; every other conversation keeps its card.

``stripe``: a conversation's blocks spread round-robin over the placed slots, starting at a
slot chosen by hashing (namespace, tag). Each block's description and data live on the same
card (``object_key(..., part="desc"|"data")``). While the *registry* has a card out or
drained (a fact every gateway shares), each of its blocks goes to a stand-in: the live card
(registry ``in``) of highest rendezvous weight for (namespace, tag, block), the same on every
gateway; the other blocks keep their card, and when the card is back its blocks are placed on
it again (``stand_in_for`` names the card stood in for). A card out only on this gateway (its
own path to the card failed) is not stood in for: its blocks are unavailable, as are blocks
whose stand-in this gateway cannot reach (docs/gateway.md, "Stripe re-placement").

Both carry the view's generation and fingerprint, so a caller can tell which table answered.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

from awide_gateway_cluster.layout import object_key
from awide_gateway_cluster.view import SlotState, SlotView


@dataclass(frozen=True, slots=True)
class CardChoice:
    """Where a key lives. ``available`` False: do not read or write it, compute instead."""

    slot: int | None
    card_id: str | None
    device: str | None
    available: bool
    reason: str                  # "" when available
    data_key: str = ""
    desc_key: str = ""
    generation: int = 0
    fingerprint: str = ""
    stand_in_for: str | None = None     # the card (out in the registry) whose block this is


# registry states of a card that is out for every gateway: its stripe blocks go to stand-ins
MOVED_OUT = ("out", "drained")


@dataclass(frozen=True, slots=True)
class StripePlacement:
    blocks: tuple[CardChoice, ...]
    unavailable: tuple[int, ...]         # block indices that must be computed, not restored
    generation: int = 0
    fingerprint: str = ""

    @property
    def complete(self) -> bool:
        return not self.unavailable


def _score(ns: str, tag: str, slot: int, card_id: str) -> int:
    h = hashlib.blake2b(f"{ns}\0{tag}\0{slot}\0{card_id}".encode(), digest_size=8)
    return int.from_bytes(h.digest(), "big")


def _start(ns: str, tag: str) -> int:
    h = hashlib.blake2b(f"{ns}\0{tag}\0stripe".encode(), digest_size=8)
    return int.from_bytes(h.digest(), "big")


def _stand_in_score(ns: str, tag: str, block: int, slot: int, card_id: str) -> int:
    h = hashlib.blake2b(f"{ns}\0{tag}\0{block}\0{slot}\0{card_id}\0stand-in".encode(),
                        digest_size=8)
    return int.from_bytes(h.digest(), "big")


def _choice(view: SlotView, s: SlotState | None, tag: str, block: int | None,
            stand_in_for: SlotState | None = None) -> CardChoice:
    if s is None:
        why = ("no cards in the slot table" if view.layout_ok
               else view.layout_problem or "key layout not verified")
        return CardChoice(None, None, None, False, why, generation=view.generation,
                          fingerprint=view.fingerprint)
    why = "" if s.in_service else f"card {s.card_id} in slot {s.slot} is out: {s.why}"
    if why and stand_in_for is not None:
        why = (f"{why} (stand-in for card {stand_in_for.card_id} in slot "
               f"{stand_in_for.slot}, out: {stand_in_for.why})")
    return CardChoice(
        slot=s.slot, card_id=s.card_id, device=s.device, available=s.in_service,
        reason=why, stand_in_for=stand_in_for.card_id if stand_in_for else None,
        data_key=object_key(view.namespace, tag, block, "data"),
        desc_key=object_key(view.namespace, tag, block, "desc"),
        generation=view.generation, fingerprint=view.fingerprint,
    )


def _check_tag(tag: str) -> None:
    if not isinstance(tag, str) or not tag:
        raise ValueError("a conversation tag is a non-empty string")


def dialog(view: SlotView, tag: str) -> CardChoice:
    """The one card of conversation ``tag``."""
    _check_tag(tag)
    placed = view.placed
    if not placed:
        return _choice(view, None, tag, None)
    best = max(placed, key=lambda s: (_score(view.namespace, tag, s.slot, s.card_id or ""),
                                      -s.slot))
    return _choice(view, best, tag, None)


def stripe_block(view: SlotView, tag: str, block: int) -> CardChoice:
    """The card of block ``block`` (0-based) of conversation ``tag``."""
    _check_tag(tag)
    if block < 0:
        raise ValueError("block index must be >= 0")
    placed = view.placed
    if not placed:
        return _choice(view, None, tag, block)
    home = placed[(_start(view.namespace, tag) + block) % len(placed)]
    if home.registry_state not in MOVED_OUT:
        return _choice(view, home, tag, block)
    live = [s for s in placed if s.registry_state not in MOVED_OUT]
    if not live:
        return _choice(view, home, tag, block)
    ns = view.namespace
    stand_in = max(live, key=lambda s: (_stand_in_score(ns, tag, block, s.slot, s.card_id or ""),
                                        -s.slot))
    return _choice(view, stand_in, tag, block, stand_in_for=home)


def stripe(view: SlotView, tag: str, n_blocks: int) -> StripePlacement:
    """The cards of blocks 0..n_blocks-1 of conversation ``tag``."""
    if n_blocks < 0:
        raise ValueError("n_blocks must be >= 0")
    blocks = tuple(stripe_block(view, tag, i) for i in range(n_blocks))
    return StripePlacement(
        blocks=blocks, unavailable=tuple(i for i, b in enumerate(blocks) if not b.available),
        generation=view.generation, fingerprint=view.fingerprint,
    )


class Placement:
    """Placement helpers bound to a live view source (``ClusterGateway.placement``).

    ``place(tag)`` follows the configured placement: a ``CardChoice`` (dialog) or a
    ``StripePlacement`` (stripe, with ``n_blocks``).
    """

    def __init__(self, snapshot: Callable[[], SlotView]) -> None:
        self._snapshot = snapshot

    def dialog(self, tag: str) -> CardChoice:
        return dialog(self._snapshot(), tag)

    def stripe(self, tag: str, n_blocks: int) -> StripePlacement:
        return stripe(self._snapshot(), tag, n_blocks)

    def stripe_block(self, tag: str, block: int) -> CardChoice:
        return stripe_block(self._snapshot(), tag, block)

    def place(self, tag: str, n_blocks: int = 1) -> CardChoice | StripePlacement:
        view = self._snapshot()
        if view.placement == "stripe":
            return stripe(view, tag, n_blocks)
        return dialog(view, tag)
