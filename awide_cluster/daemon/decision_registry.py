"""The leader's decision, phases 4 and 5 (pure): drain and undrain intents, admissions,
conflicts marked; then the slot table, and whether the registry is written."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Literal

from awide_cluster.contract import slots as slotfn
from awide_cluster.contract import versions as ver
from awide_cluster.contract.health import Hysteresis
from awide_cluster.contract.registry import (
    MAX_GENERATION,
    CardEntry,
    Registry,
    slot_table,
)
from awide_cluster.daemon.decision_model import (
    ClusterSnapshot,
    Intent,
    Ledger,
    Policy,
    Settled,
    Sightings,
    Stamp,
    by_whom,
    describe,
)
from awide_cluster.daemon.decision_reports import initial_health

# --- phase 4: drain and undrain, admissions, conflicts --------------------------------------

def apply_drains(ledger: Ledger, pending: tuple[Intent, ...], stamp: Stamp) -> Ledger:
    """Drain and undrain intents; an undrained card takes the state its counters give."""
    cards, log = dict(ledger.cards), list(ledger.log)
    for it in pending:
        c = cards.get(it.card_id)
        if it.action == "clear-hold":       # applied by flap damping (decision_damping)
            continue
        if c is None:       # dropped from the registry in this cycle
            log.append(f"intent {it.action} for card {it.card_id} ignored: not in the registry")
        elif it.action == "drain":
            if c.state == "drained":
                log.append(f"{describe(c)} drain{by_whom(it)}: already drained")
            else:
                cards[c.id] = replace(c, state="drained", changed_generation=stamp.generation,
                                      changed_at=stamp.at)
                log.append(f"{describe(c)} drained by intent{by_whom(it)} (was {c.state})")
        elif c.state != "drained":
            log.append(f"{describe(c)} undrain{by_whom(it)}: not drained (state {c.state})")
        else:
            state = ledger.health.get(c.id, initial_health(c)).state
            cards[c.id] = replace(c, state=state, changed_generation=stamp.generation,
                                  changed_at=stamp.at)
            log.append(f"{describe(c)} undrained by intent{by_whom(it)}: {state}")
    return replace(ledger, cards=cards, log=tuple(log))


def admit(ledger: Ledger, seen: Sightings, forgotten: frozenset[str], stamp: Stamp) -> Ledger:
    """Admit the reported cards the registry does not hold (not those forgotten this cycle,
    nor an NVMe card without a target), as reported by the first host listing them."""
    cards, health, log = dict(ledger.cards), dict(ledger.health), list(ledger.log)
    for cid in sorted(seen):
        if cid in cards or cid in forgotten:
            continue
        host, rc = seen[cid][0]
        if rc.kind == "nvme" and rc.target is None:
            log.append(f"card {cid} ({rc.serial} on {host}) not admitted: no NVMe-oF target")
            continue
        state: Literal["in", "out"] = "in" if rc.healthy else "out"
        reason = "" if rc.healthy else (rc.reason or "reported sick")
        cards[cid] = CardEntry(
            id=cid, serial=rc.serial, model=rc.model, identity=rc.identity, host=host,
            name=rc.name, kind=rc.kind, state=state, health="ok" if rc.healthy else "sick",
            reason=reason, admitted=stamp.generation, changed_generation=stamp.generation,
            changed_at=stamp.at, target=rc.target, path=rc.path,
        )
        health[cid] = Hysteresis(up=rc.healthy, bad=0 if rc.healthy else 1,
                                 good=1 if rc.healthy else 0,
                                 reason="" if rc.healthy else rc.reason)
        why = "healthy" if rc.healthy else f"not healthy: {reason}"
        log.append(f"{describe(cards[cid])} admitted as {state} ({host}/{rc.name}, {why})")
    return Ledger(cards=cards, health=health, log=tuple(log))


def conflicts(cards: Mapping[str, CardEntry], seen: Sightings) -> dict[str, str | None]:
    """card id -> why it is in conflict (one serial claimed by several cards, or one card
    reported by several hosts), None when it is not."""
    by_serial: dict[str, list[CardEntry]] = {}
    for c in cards.values():
        by_serial.setdefault(c.serial, []).append(c)
    found: dict[str, str | None] = {}
    for cid, c in cards.items():
        why = []
        claimants = sorted((o for o in by_serial[c.serial] if o.id != cid), key=lambda o: o.id)
        if claimants:
            why.append(f"serial {c.serial} also claimed by "
                       + ", ".join(f"card {o.id} on {o.host}" for o in claimants))
        places = seen.get(cid, ())
        if len(places) > 1:
            why.append("reported by several hosts: "
                       + ", ".join(f"{h}/{rc.name}" for h, rc in places))
        found[cid] = "; ".join(why) or None
    return found


def mark_conflicts(ledger: Ledger, seen: Sightings) -> Ledger:
    """Cards in conflict are marked (never merged); a resolved conflict is cleared."""
    found = conflicts(ledger.cards, seen)
    cards, log = dict(ledger.cards), list(ledger.log)
    for cid in sorted(cards):
        c = cards[cid]
        if found[cid] != c.conflict:
            cards[cid] = replace(c, conflict=found[cid])
            log.append(f"{describe(c)} in conflict: {found[cid]}" if found[cid]
                       else f"{describe(c)} conflict resolved")
    return replace(ledger, cards=cards, log=tuple(log))


# --- phase 5: slots, and write only when the content changed --------------------------------

def settle(ledger: Ledger, snap: ClusterSnapshot, policy: Policy, generation: int,
           now: str) -> Settled:
    """The registry the cards give, with the slot table the shared slot function gives;
    written (at ``generation`` + 1) when its content changed, etcd's needs a repair, or there
    is none yet. ``generation`` is the highest the gateways may hold."""
    prev = snap.registry
    log = list(ledger.log)
    entries = tuple(ledger.cards.values())
    previous_table = prev.slots if prev is not None else slotfn.EMPTY
    table = slot_table(entries, previous_table)
    lineage = prev.lineage if prev is not None and prev.lineage else snap.lineage
    gen, next_gen = generation, generation + 1
    if next_gen > MAX_GENERATION:   # a forged huge generation: a new lineage, from 1 again
        log.append(f"generation {gen} is at the limit: new lineage {snap.lineage}")
        lineage, gen, next_gen = snap.lineage or lineage, 0, 1
    candidate = Registry(cluster=policy.cluster, generation=gen, leader=policy.leader,
                         cards=entries, slots=table,
                         written_at=prev.written_at if prev is not None else "",
                         lineage=lineage, hosts=tuple(policy.hosts),
                         schema=snap.registry_schema.major,
                         schema_minor=snap.registry_schema.minor,
                         versions=ver.MINE if snap.registry_schema.minor else None)
    if prev is not None and prev.schema_version != snap.registry_schema:
        log.append(f"registry schema {prev.schema_version} -> {snap.registry_schema}: the "
                   "highest every live daemon and gateway reads fully")
    write = prev is None or bool(snap.repair) or candidate.content() != prev.content()
    if snap.repair:
        log.append(f"registry rewritten at generation {next_gen} (lineage {lineage or '-'}): "
                   f"{snap.repair}")
    if not write:
        assert prev is not None     # a first registry is always written
        return Settled(registry=prev, write=False, moves=(), log=tuple(log))
    moves = slotfn.moves(previous_table, table)
    for m in moves:
        who = ledger.cards.get(m.card_id) or (prev.card(m.card_id) if prev is not None else None)
        name = describe(who) if who else f"card {m.card_id}"
        what = "placed" if m.old is None else "left its slot" if m.new is None else "moved"
        log.append(f"{name} {what}: {_place(m.old)} -> {_place(m.new)}")
    was = dict(previous_table.unplaced)
    for cid, why in table.unplaced:
        if was.get(cid) != why:
            log.append(f"{describe(ledger.cards[cid])} gets no slot: {why}")
    return Settled(registry=replace(candidate, generation=next_gen, written_at=now),
                   write=True, moves=moves, log=tuple(log))


def _place(s: int | None) -> str:
    return "no slot" if s is None else f"slot {s}"
