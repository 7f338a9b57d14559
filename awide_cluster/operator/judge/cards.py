"""The cards: every registry card with its host's latest observation, and the cards hosts
report that the registry does not hold yet. Pure functions; each returns views and problems."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from awide_cluster.contract import records
from awide_cluster.contract import registry as regdoc
from awide_cluster.contract.registry import CardEntry, NvmeTarget, Registry
from awide_cluster.contract.report import HostReport, ReportedCard
from awide_cluster.operator.model import CardView, Problem


@dataclass(frozen=True, slots=True)
class SeenCard:
    """A card as a host reports it: where, what, and the observation shown."""
    host: str
    card: ReportedCard
    observation: str            # "ok" or "sick: <reason>"


def judge_cards(reg: Registry | None, reports: dict[str, HostReport], wall: float | None = None
                ) -> tuple[tuple[CardView, ...], list[Problem]]:
    """``wall``: this reader's clock (Unix seconds), for the hold-off left of a held card."""
    sightings = seen_cards(reports)
    views: list[CardView] = []
    problems: list[Problem] = []
    if reg is not None:
        for entry in reg.cards:
            view = registered_view(entry, reg, sightings.get(entry.id), entry.host in reports)
            view = held_view(view, entry, wall)
            views.append(view)
            problems += registered_problems(entry, view.unplaced, view.hold)
    for cid, sight in sorted(sightings.items()):
        if reg is not None and cid in reg.by_id:
            continue
        views.append(unregistered_view(cid, sight))
        if reg is not None:
            problems.append(Problem(
                "warning", "card_unregistered", cid,
                f"card {cid} ({sight.host}/{sight.card.name}, serial {sight.card.serial}) is "
                "reported but not in the registry yet (the leader admits it at its next cycle)"))
    views.sort(key=lambda v: (v.slot if v.slot is not None else 99, v.host, v.name, v.id))
    return tuple(views), problems


def seen_cards(reports: dict[str, HostReport]) -> dict[str, SeenCard]:
    """Every card found by a host, by card id (a card two hosts report: the later host)."""
    sightings: dict[str, SeenCard] = {}
    for host, report in reports.items():
        for c in report.cards:
            if c.found:
                sightings[regdoc.card_id(c.serial, c.model, c.identity)] = SeenCard(
                    host=host, card=c, observation="ok" if c.healthy else f"sick: {c.reason}")
    return sightings


def registered_view(entry: CardEntry, reg: Registry, sight: SeenCard | None,
                    host_reported: bool) -> CardView:
    if sight is not None:
        observation = sight.observation
    else:
        observation = "not found" if host_reported else "no report"
    return CardView(
        id=entry.id, serial=entry.serial, model=entry.model, host=entry.host, name=entry.name,
        kind=entry.kind, target=_target(entry.target, entry.path),
        slot=reg.slots.slot_of(entry.id), state=entry.state, health=entry.health,
        reason=entry.reason, since=entry.changed_at,
        changed_generation=entry.changed_generation, conflict=entry.conflict or "",
        unplaced=dict(reg.slots.unplaced).get(entry.id, ""), reported=observation)


def held_view(view: CardView, entry: CardEntry, wall: float | None) -> CardView:
    """The view with the card's flap-damping hold, its time left by ``wall``."""
    h = entry.hold
    if h is None:
        return view
    end = records.parse_time(h.until) if h.active else None
    left = None if end is None or wall is None else round(max(0.0, end - wall), 1)
    return dataclasses.replace(view, hold={
        "level": h.level, "seconds": h.seconds, "active": h.active, "until": h.until,
        "remaining": left, "reason": h.reason})


def unregistered_view(cid: str, sight: SeenCard) -> CardView:
    c = sight.card
    return CardView(
        id=cid, serial=c.serial, model=c.model, host=sight.host, name=c.name, kind=c.kind,
        target=_target(c.target, c.path), slot=None, state="unregistered",
        health="ok" if c.healthy else "sick", reason=c.reason, since="",
        changed_generation=None, conflict="", unplaced="", reported=sight.observation)


def registered_problems(entry: CardEntry, why_unplaced: str,
                        hold: dict[str, Any] | None = None) -> list[Problem]:
    label = f"card {entry.id} ({entry.host}/{entry.name}, serial {entry.serial})"
    problems: list[Problem] = []
    if entry.state == "out":
        held = ""
        if hold is not None and hold["active"]:
            left = hold["remaining"]
            held = ("; hold-off " + (f"{left:g} s left" if left is not None else "running")
                    + f", clear it with `awide-cluster card clear-hold {entry.id}`")
        problems.append(Problem(
            "error", "card_out", entry.id,
            f"{label} is out of service: {entry.reason or entry.health} (since generation "
            f"{entry.changed_generation}{', ' + entry.changed_at if entry.changed_at else ''})"
            + held))
    if entry.conflict:
        problems.append(Problem("error", "card_conflict", entry.id,
                                f"{label} is in conflict: {entry.conflict}"))
    if why_unplaced:
        problems.append(Problem("error", "card_unplaced", entry.id,
                                f"{label} has no slot: {why_unplaced}"))
    if entry.state == "drained":
        problems.append(drained(entry, label))
    return problems


def drained(entry: CardEntry, label: str) -> Problem:
    """A drained card: an operator's state, a warning until ``undrain``."""
    since = f"since generation {entry.changed_generation}" + (
        f", {entry.changed_at} by the leader's clock" if entry.changed_at else "")
    return Problem("warning", "card_drained", entry.id,
                   f"{label} is drained ({since}): it serves nothing until "
                   f"`awide-cluster undrain {entry.id}`")


def _target(target: NvmeTarget | None, path: str | None) -> str:
    return str(target) if target is not None else (path or "")
