"""Local cards: config entries, discovery (NVMe by serial, directories by label), probes.
See docs/cards.md. Public names::

    from awide_cluster.cards import CardSpec, observe_card, CardObservation, LocalCard, ProbeResult
"""

from awide_cluster.cards.directory import (
    LABEL_FILE,
    CardLabel,
    LabelCorrupt,
    LabelError,
    LabelExists,
    LabelMissing,
    read_label,
    same_card,
    write_label,
)
from awide_cluster.cards.model import (
    DEVICE,
    DISCOVERY,
    IDENTITY,
    LISTENER,
    PROBE_ORDER,
    STORE,
    WRITABLE,
    CardObservation,
    LocalCard,
    ProbeResult,
    summarize,
)
from awide_cluster.cards.observe import observe_card
from awide_cluster.cards.spec import CardSpec, StoreProbeSpec

__all__ = [
    "CardLabel", "CardObservation", "CardSpec", "DEVICE", "DISCOVERY", "IDENTITY", "LABEL_FILE",
    "LabelCorrupt", "LabelError", "LabelExists", "LabelMissing", "LISTENER", "LocalCard",
    "observe_card", "PROBE_ORDER", "ProbeResult", "read_label", "same_card", "STORE",
    "StoreProbeSpec", "summarize", "WRITABLE", "write_label",
]
