"""Local cards: config entries, discovery (NVMe by serial, directories by label), probes.
See docs/cards.md. Public names::

    from awide_cluster.cards import CardSpec, observe, CardObservation, LocalCard, ProbeResult
"""

from awide_cluster.cards.directory import (  # noqa: F401
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
from awide_cluster.cards.model import (  # noqa: F401
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
from awide_cluster.cards.observe import observe  # noqa: F401
from awide_cluster.cards.spec import CardSpec, StoreProbeSpec  # noqa: F401
