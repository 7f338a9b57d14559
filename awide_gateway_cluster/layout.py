"""Key layout: the model namespace, the layout fingerprint and the ``layouts/<namespace>`` record.

All pure. Placement itself (which card a key goes to) is in ``placement``.

- ``namespace(model)``: ``<slug>-<hash>``; the hash covers every field of the model section, so
  two model configurations that differ in anything that changes a KV block get different
  namespaces, and every object key starts with its namespace (``object_key``): two namespaces
  never map to each other's keys.
- ``fingerprint(namespace, placement, table)``: what every gateway on the same cards must share
  (namespace, placement, slot table, placement and slot algorithm versions).
- ``LayoutRecord``: what the first gateway of a namespace writes to ``layouts/<namespace>``
  (create-if-absent); ``compare`` says why another gateway's layout differs, naming both.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Literal

from awide_cluster.contract import slots as slotfn
from awide_cluster.contract.records import PLACEMENT_ALGORITHM, LayoutRecord

Placement = Literal["dialog", "stripe"]
PLACEMENTS: tuple[str, ...] = ("dialog", "stripe")

_SLUG_BAD = re.compile(r"[^a-z0-9]+")


class LayoutMismatch(Exception):
    """This gateway's layout differs from the one recorded for its namespace."""

    def __init__(self, namespace: str, recorded: LayoutRecord, mine: LayoutRecord) -> None:
        self.namespace, self.recorded, self.mine = namespace, recorded, mine
        super().__init__(
            f"key layout of namespace {namespace} is {recorded.describe()} (recorded by gateway "
            f"{recorded.created_by}), this gateway is configured for {mine.describe()}: "
            "refusing to start (its keys would not be found by the other gateways)"
        )


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


def fingerprint(ns: str, placement: str, table: slotfn.SlotTable) -> str:
    doc = {
        "namespace": ns, "placement": placement, "placement_algorithm": PLACEMENT_ALGORITHM,
        "slot_algorithm": slotfn.ALGORITHM_VERSION, "slots": list(table.slots),
    }
    canon = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    return "L" + hashlib.sha256(canon.encode()).hexdigest()[:16]


def compare(recorded: LayoutRecord, mine: LayoutRecord) -> LayoutMismatch | None:
    """None if ``mine`` may use the recorded layout; else the mismatch (to raise or report)."""
    if recorded.same_layout(mine):
        return None
    return LayoutMismatch(mine.namespace, recorded, mine)
