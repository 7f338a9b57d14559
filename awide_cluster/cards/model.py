"""What the daemon learns about its local cards each poll: frozen values, no I/O.

Identity strings (``LocalCard.identity``): ``nguid:<32 hex>``, ``uuid:<uuid>`` or
``eui64:<16 hex>`` for an NVMe namespace; ``label:<uuid>`` for a directory card.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from awide_cluster.contract.target import NvmeTarget

# probe names, in the order observations list them (the first failing one gives the reason)
DISCOVERY = "discovery"
DEVICE = "device"
IDENTITY = "identity"
WRITABLE = "writable"
STORE = "store"
LISTENER = "listener"
PROBE_ORDER = (DISCOVERY, DEVICE, IDENTITY, WRITABLE, STORE, LISTENER)


@dataclass(frozen=True, slots=True)
class LocalCard:
    name: str                       # the config entry's name
    kind: Literal["dir", "nvme"]
    serial: str
    model: str
    identity: str | None            # on-card identity, None when none could be read
    device: str | None              # nvme: namespace block device (nvme3n1); dir: the path
    controller_state: str | None    # nvme: sysfs state (live, connecting, ...); dir: None
    target: NvmeTarget | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "kind": self.kind, "serial": self.serial, "model": self.model,
            "identity": self.identity, "device": self.device,
            "controller_state": self.controller_state,
            "target": self.target.to_dict() if self.target else None,
        }


@dataclass(frozen=True, slots=True)
class ProbeResult:
    probe: str                      # one of PROBE_ORDER
    ok: bool
    reason: str                     # human words, also when ok ("unit x active")
    elapsed: float                  # seconds

    def to_dict(self) -> dict[str, Any]:
        return {"probe": self.probe, "ok": self.ok, "reason": self.reason,
                "elapsed": round(self.elapsed, 4)}


@dataclass(frozen=True, slots=True)
class CardObservation:
    card: LocalCard | None
    spec_name: str
    probes: tuple[ProbeResult, ...]
    healthy: bool
    reason: str                     # "ok", or the first failing probe's reason

    def probe(self, name: str) -> ProbeResult | None:
        for p in self.probes:
            if p.probe == name:
                return p
        return None

    def to_dict(self) -> dict[str, Any]:
        return {"spec_name": self.spec_name,
                "card": self.card.to_dict() if self.card else None,
                "probes": [p.to_dict() for p in self.probes],
                "healthy": self.healthy, "reason": self.reason}


_ORDER = {name: i for i, name in enumerate(PROBE_ORDER)}


def _rank(p: ProbeResult) -> int:
    return _ORDER.get(p.probe, len(_ORDER))


def summarize(spec_name: str, card: LocalCard | None,
              probes: tuple[ProbeResult, ...] | list[ProbeResult]) -> CardObservation:
    """Pure: order the probes, healthy = a card was found and every probe is ok."""
    ordered = tuple(sorted(probes, key=_rank))
    failing = [p for p in ordered if not p.ok]
    if card is None and not any(p.probe == DISCOVERY for p in failing):
        failing.insert(0, ProbeResult(DISCOVERY, False, f"card not found: {spec_name}", 0.0))
    healthy = card is not None and not failing
    return CardObservation(card=card, spec_name=spec_name, probes=ordered, healthy=healthy,
                           reason="ok" if healthy else failing[0].reason)
