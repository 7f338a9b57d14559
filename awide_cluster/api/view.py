"""This host's view for ``/v1/status``: one pure function from what the daemon holds.

The daemon keeps its latest host report, the registry it last read (or wrote, as leader) and
the leader key's holder; ``host_view`` turns them into the JSON document ``/v1/status`` serves.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from awide_cluster.contract import report as reportdoc
from awide_cluster.contract.registry import Registry
from awide_cluster.contract.report import HostReport


def host_view(
    *, host: str, role: str, version: str, report: HostReport | None,
    registry: Registry | None, leader: str | None, is_leader: bool,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """``extra`` is merged at the top level (e.g. ``{"etcd_error": "..."}``)."""
    cards: list[dict[str, Any]] = []
    if registry is not None:
        for c in registry.cards:
            if c.host != host:
                continue
            cards.append({
                "id": c.id, "name": c.name, "serial": c.serial, "state": c.state,
                "health": c.health, "reason": c.reason, "slot": registry.slots.slot_of(c.id),
                "conflict": c.conflict, "changed_generation": c.changed_generation,
                "changed_at": c.changed_at,
                "target": str(c.target) if c.target else (c.path or ""),
            })
    view: dict[str, Any] = {
        "host": host, "role": role, "version": version,
        "leader": leader, "is_leader": is_leader,
        "registry_generation": registry.generation if registry is not None else None,
        "registry_cards": cards,
        "report": reportdoc.to_dict(report) if report is not None else None,
    }
    if extra:
        view.update(extra)
    return view
