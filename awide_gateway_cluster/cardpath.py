"""The gateway's local view of one card's path: one probe per poll, folded by a pure function.

A probe (``Probe``) is what the connector saw this poll. ``advance`` folds it into the card's
``CardPath``:

- a refusal (wrong serial/model/identity, hostile target, wrong label) takes the card out at
  once and stays until a probe no longer finds it;
- no device (never connected, namespace gone, directory missing) takes it out at once: there
  is nothing to do I/O on;
- health (controller state ``live``, no I/O errors reported since the last poll) goes through
  ``contract.health.tally``: out after ``sick_polls`` bad polls in a row, back after
  ``healthy_polls`` good ones; ``good=None`` (the probe itself could not look) changes nothing.
  A good probe of a path in service that shows nothing new returns the path as it is: its
  good streak stops at ``healthy_polls`` (beyond it no decision changes), so a healthy card's
  probe builds nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from awide_cluster.contract.health import tally
from awide_gateway_cluster.view import CardPath


@dataclass(frozen=True, slots=True)
class Probe:
    device: str | None = None
    verified: bool = False
    refused: str = ""
    note: str = ""
    good: bool | None = None        # health observation; None: no observation this poll
    reason: str = ""                # why the observation was bad
    hostile: bool = False           # the target was refused as hostile input (counted)


def advance(local: CardPath, probe: Probe, *, sick_polls: int, healthy_polls: int) -> CardPath:
    h = local.health
    if (probe.good and h.up and h.bad == 0 and h.good >= healthy_polls and not h.reason
            and probe.device == local.device and probe.verified == local.verified
            and probe.refused == local.refused and probe.note == local.note):
        # a good probe of a path in service that shows nothing new: the path as it was (the
        # good streak only needs to reach ``healthy_polls``; past it, it changes no decision)
        return local
    health = tally(h, probe.good, sick_polls=sick_polls,
                   healthy_polls=healthy_polls, reason=probe.reason)
    return replace(
        local, device=probe.device, verified=probe.verified, refused=probe.refused,
        note=probe.note, health=health,
    )
