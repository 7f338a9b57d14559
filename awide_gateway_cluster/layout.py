"""Key layout: the model namespace, the layout fingerprint and the ``layouts/<namespace>`` record.

All pure. Placement itself (which card a key goes to) is in ``placement``.

- ``namespace(model)``: ``<slug>-<hash>``; the hash covers every field of the model section, so
  two model configurations that differ in anything that changes a KV block get different
  namespaces, and every object key starts with its namespace (``object_key``): two namespaces
  never map to each other's keys.
- ``fingerprint(namespace, placement, table)``: what every gateway on the same cards must share
  (namespace, placement, slot table, placement and slot algorithm versions).
- ``adopt``: the placement algorithm recorded for the namespace, when this gateway runs it.
- ``LayoutRecord``: what the first gateway of a namespace writes to ``layouts/<namespace>``
  (create-if-absent); ``compare`` says why another gateway's layout differs, naming both.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, replace
from typing import Any, Literal

from awide_cluster.contract import slots as slotfn
from awide_cluster.contract.records import (
    PLACEMENT_ALGORITHM,
    PLACEMENT_ALGORITHMS,
    LayoutRecord,
)
from awide_cluster.contract.registry import Registry

Placement = Literal["dialog", "stripe"]
PLACEMENTS: tuple[str, ...] = ("dialog", "stripe")

_SLUG_BAD = re.compile(r"[^a-z0-9]+")


class LayoutMismatch(Exception):
    """This gateway's layout differs from the one recorded for its namespace."""

    def __init__(self, namespace: str, recorded: LayoutRecord, mine: LayoutRecord,
                 message: str = "") -> None:
        self.namespace, self.recorded, self.mine = namespace, recorded, mine
        super().__init__(message or (
            f"key layout of namespace {namespace} is {recorded.describe()} (recorded by gateway "
            f"{recorded.created_by}), this gateway is configured for {mine.describe()}: "
            "refusing to start (its keys would not be found by the other gateways)"
        ))


class AlgorithmUnknown(LayoutMismatch):
    """The namespace is recorded with a placement algorithm this gateway does not run."""

    def __init__(self, namespace: str, recorded: LayoutRecord, mine: LayoutRecord,
                 runs: tuple[int, ...]) -> None:
        super().__init__(namespace, recorded, mine, (
            f"namespace {namespace} is recorded with placement algorithm {recorded.algorithm}, "
            f"this gateway runs {', '.join(map(str, runs))}: refusing to start (upgrade it to a "
            "release that runs that algorithm; docs/versions.md, placement algorithm)"))


class CardSetMismatch(LayoutMismatch):
    """The cards of this gateway's registry differ from the ones recorded for its namespace."""

    def __init__(self, namespace: str, recorded: LayoutRecord, mine: LayoutRecord) -> None:
        rec, now = set(recorded.cards or ()), set(mine.cards or ())
        gone = ", ".join(sorted(rec - now)) or "none"
        new = ", ".join(sorted(now - rec)) or "none"
        super().__init__(namespace, recorded, mine, (
            f"card set of namespace {namespace} differs from the one recorded by gateway "
            f"{recorded.created_by or '?'} at registry generation {recorded.cards_generation}: "
            f"recorded and gone (forgotten): {gone}; new: {new} (registry generation "
            f"{mine.cards_generation}): refusing to start this namespace (its keys would be "
            f"placed on other cards than its other gateways'); re-seed the namespace "
            f"(delete layouts/{namespace}) once every gateway of it uses the new cards"))


class FormatTooNew(LayoutMismatch):
    """The namespace is recorded with a newer storage format than this gateway's."""

    def __init__(self, namespace: str, recorded: LayoutRecord, mine: LayoutRecord) -> None:
        super().__init__(namespace, recorded, mine, (
            f"namespace {namespace} is recorded with storage format {recorded.format} (by "
            f"gateway {recorded.created_by or '?'}), this gateway writes format {mine.format}: "
            "refusing to start (an older gateway never reads blocks of a newer format)"))


class LayoutUnreadable(LayoutMismatch):
    """The layout recorded for the namespace does not decode (never overwritten: the start is
    refused, and counted in ``GatewayStats.layout_records_refused``)."""

    def __init__(self, namespace: str, why: str, mine: LayoutRecord) -> None:
        recorded = LayoutRecord(namespace=namespace, placement=f"<unreadable: {why}>",
                                algorithm=0, slot_algorithm=0, created_by="?")
        super().__init__(namespace, recorded, mine, (
            f"key layout record of namespace {namespace} does not decode ({why}): refusing "
            f"to start this namespace (it is never overwritten; re-seed it by deleting "
            f"layouts/{namespace} once its gateways are stopped)"))


@dataclass(frozen=True, slots=True)
class CardSet:
    """The cards holding a slot in a registry (out or drained ones too: a card going out
    keeps its slot, a forgotten one loses it), with the registry's lineage and generation."""

    cards: tuple[str, ...]
    lineage: str = ""
    generation: int = 0


def card_set(reg: Registry) -> CardSet:
    return CardSet(tuple(sorted(c for c in reg.slots.slots if c)), reg.lineage, reg.generation)


def namespace_id(ns: str, storage_format: int, algorithm: int = 1) -> str:
    """The prefix of every object key of namespace ``ns`` at ``storage_format`` and placement
    ``algorithm``: the namespace itself at format 1 and algorithm 1, ``<ns>.f<N>`` at format
    N, ``.a<M>`` added at algorithm M (a new format or a migration to another algorithm starts
    the namespace cold: the blocks placed by the old one are never read)."""
    fmt = ns if storage_format == 1 else f"{ns}.f{storage_format}"
    return fmt if algorithm == 1 else f"{fmt}.a{algorithm}"


def adopt(recorded: LayoutRecord, mine: LayoutRecord,
          runs: tuple[int, ...] = PLACEMENT_ALGORITHMS) -> LayoutRecord:
    """``mine`` with the placement algorithm recorded for the namespace when this gateway runs
    it (the operator migrated the namespace, ``awide-cluster namespace migrate``); else
    ``mine`` unchanged (``decide`` then refuses an algorithm it does not run)."""
    if recorded.algorithm != mine.algorithm and recorded.algorithm in runs:
        return replace(mine, algorithm=recorded.algorithm)
    return mine


def with_cards(mine: LayoutRecord, cards: CardSet) -> LayoutRecord:
    return replace(mine, cards=cards.cards, cards_lineage=cards.lineage,
                   cards_generation=cards.generation)


LayoutStep = Literal["ok", "unrecorded", "wait", "cold", "grown"]


def decide(recorded: LayoutRecord, mine: LayoutRecord,
           runs: tuple[int, ...] = PLACEMENT_ALGORITHMS) -> LayoutStep | LayoutMismatch:
    """What a gateway does with the layout recorded for its namespace. ``mine``: this
    gateway's layout, with the card set of the registry it accepted (``cards`` None: no
    registry read yet).

    - a newer storage format recorded: refused (``FormatTooNew``); an older one: "cold" (this
      gateway records its own, a new namespace id: the old blocks are never read);
    - a placement algorithm this gateway does not run (``runs``): refused
      (``AlgorithmUnknown``); ``mine`` is expected to have adopted one it runs (``adopt``);
    - another placement or algorithm: refused (``LayoutMismatch``);
    - no card set recorded (a record of an older release): "unrecorded", used as it is;
    - no registry read yet: "wait"; a registry older than the record's, of the same
      lineage: "wait" (a lagging read catches up);
    - the same cards: "ok"; a recorded card gone (forgotten): refused (``CardSetMismatch``);
      only new cards (a card admitted into a free slot, as at a cluster's bring-up): "grown"
      (this gateway records its set: a later forget of a new card is seen too).
    """
    if recorded.format > mine.format:
        return FormatTooNew(mine.namespace, recorded, mine)
    if recorded.format < mine.format:
        return "cold"
    if recorded.algorithm not in runs:
        return AlgorithmUnknown(mine.namespace, recorded, mine, runs)
    mismatch = compare(recorded, mine)
    if mismatch is not None:
        return mismatch
    if recorded.cards is None:
        return "unrecorded"
    if mine.cards is None:
        return "wait"
    if set(mine.cards) == set(recorded.cards):
        return "ok"
    if (mine.cards_lineage == recorded.cards_lineage
            and mine.cards_generation < recorded.cards_generation):
        return "wait"
    if set(recorded.cards) - set(mine.cards):
        return CardSetMismatch(mine.namespace, recorded, mine)
    return "grown"


def namespace(model: Any) -> str:
    """The key namespace of a model configuration (a ``ModelSection`` or a plain mapping)."""
    data = model.model_dump(mode="json") if hasattr(model, "model_dump") else dict(model)
    canon = json.dumps(data, sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(canon.encode()).hexdigest()[:16]
    name = str(data.get("name", "model")).lower().rsplit("/", 1)[-1]
    slug = _SLUG_BAD.sub("-", name).strip("-")[:40].strip("-") or "model"
    return f"{slug}-{digest}"


def object_key(ns: str, tag: str, block: int | None = None, part: str = "data") -> str:
    """The object key of a conversation's block (``part``: data or desc) in namespace ``ns``."""
    if part not in ("data", "desc"):
        raise ValueError(f"part must be data or desc, not {part!r}")
    if block is None:
        return f"{ns}/{tag}/{part}"
    return f"{ns}/{tag}/{block}/{part}"


def fingerprint(ns: str, placement: str, table: slotfn.SlotTable,
                algorithm: int = PLACEMENT_ALGORITHM) -> str:
    doc = {
        "namespace": ns, "placement": placement, "placement_algorithm": algorithm,
        "slot_algorithm": slotfn.ALGORITHM_VERSION, "slots": list(table.slots),
    }
    canon = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    return "L" + hashlib.sha256(canon.encode()).hexdigest()[:16]


def compare(recorded: LayoutRecord, mine: LayoutRecord) -> LayoutMismatch | None:
    """None if ``mine`` may use the recorded layout; else the mismatch (to raise or report)."""
    if recorded.same_layout(mine):
        return None
    return LayoutMismatch(mine.namespace, recorded, mine)
