"""The leader's decision: one snapshot of the cluster in, the registry it should hold out.

Pure: no I/O, no clock (the caller passes ``now`` as text for ``changed_at``). The shell in
``leader.py`` reads the snapshot, calls ``decide`` and writes the result in one fenced
transaction; ``decide`` is what the tests drive cycle by cycle.

Per registry card, one observation per cycle:

- good: a fresh host report lists the card found and healthy with the same card id;
- bad: reported sick or not found, missing from its host's report, no report from its host,
  a report that does not decode, or a report that did not advance ((run, seq) unchanged since
  the previous cycle: no wall clocks are compared across hosts);
- none: the leader's first cycle counts no bad observation (freshness baseline).

A single report that did not advance counts toward ``out`` but does not change the registry's
``health``/``reason`` (two hosts polling at nearly the same phase see this now and then); the
second in a row does. It never replaces the reason of a card already sick, and a sick report
read again in the next cycle is not counted twice (``sick_polls`` counts sick reports).

Write outages: when the hosts cannot write, every report stops advancing although nothing
happened to the cards (etcd's NOSPACE alarm, a role that lost write permission, a member that
answers reads but cannot commit). A cycle is a *write outage* when this leader's own writes
failed (``Snapshot.write_failure``: its host report in this turn or its last registry
transaction), or when the reports of a majority of the hosts that have one stopped advancing
together (each within its first ``STOPPED_TOGETHER`` stale cycles; once in an outage, it lasts
while a majority stays stale). In an outage cycle, and in the first cycle after one (the
freshness baseline starts again: hosts write again at their own phase), a report that did not
advance counts nothing; everything else (a fresh sick report, a missing or unreadable report)
counts as usual. A single frozen host is never a majority of 2 or more hosts reporting: it
still loses its cards after ``sick_polls`` cycles (one or two later when another host's jitter
falls in its first two stale cycles).

``contract.health.tally`` turns observations into ``in``/``out``; ``drained`` stays drained
until an undrain intent. A reported card whose id is not in the registry is admitted. Cards
claiming one serial are marked in conflict, never merged. Intents are applied in the same
decision (and deleted in the same transaction by the shell).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from awide_cluster.contract import slots as slotfn
from awide_cluster.contract.health import Hysteresis, tally
from awide_cluster.contract.registry import (
    MAX_GENERATION,
    CardEntry,
    Registry,
    card_id,
    slot_table,
)
from awide_cluster.contract.report import HostReport, ReportedCard

Action = Literal["drain", "undrain", "forget"]
ACTIONS: tuple[Action, ...] = ("drain", "undrain", "forget")


@dataclass(frozen=True, slots=True)
class Intent:
    """An operator intent read from ``intents/<card_id>``."""

    card_id: str
    action: Action
    mod_revision: int
    by: str = ""
    reason: str = ""        # the operator's --reason (bounded, no control character)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What the leader read in one cycle. Built only when every read succeeded."""

    reports: Mapping[str, HostReport]           # decoded host reports by host
    bad_reports: Mapping[str, str]              # host -> why its report did not decode
    registry: Registry | None                   # None: no registry written yet
    intents: tuple[Intent, ...] = ()
    bad_intents: Mapping[str, tuple[int, str]] = field(default_factory=dict)  # key -> (rev, why)
    # reports under members/<host> for a host that is not in Policy.hosts: host -> why refused
    strangers: Mapping[str, str] = field(default_factory=dict)
    # "" when ``registry`` is what etcd holds; else why etcd's registry is being rewritten from
    # ``registry`` (the last good one this daemon knows, or None: rebuilt from the reports)
    repair: str = ""
    generation_floor: int = 0   # the written generation must exceed this (gateways applied it)
    lineage: str = ""           # the lineage to give a registry that has none yet
    # this leader's own writes failed (its host report in this turn, or its last registry
    # transaction): why, "" when they did not. Then the hosts' writes fail too: a write outage
    write_failure: str = ""


@dataclass(frozen=True, slots=True)
class Policy:
    cluster: str
    leader: str                 # this leader's host name
    sick_polls: int = 3
    healthy_polls: int = 1
    hosts: frozenset[str] = frozenset()   # the cluster's hosts (config); empty: any host


@dataclass(frozen=True, slots=True)
class LeaderMemory:
    """What a leader keeps between its own cycles. A new leader starts from ``LeaderMemory()``."""

    cycles: int = 0
    seen: Mapping[str, tuple[str, int]] = field(default_factory=dict)  # host -> (run, seq)
    health: Mapping[str, Hysteresis] = field(default_factory=dict)     # card id -> hysteresis
    # cards whose observation in the last cycle was a fresh sick report: re-reading that same
    # report next cycle (it did not advance) is not another sick poll
    fresh_bad: frozenset[str] = frozenset()
    # write outages: host -> cycles in a row its report did not advance; why the last cycle
    # was a write outage ("" when it was not)
    stale_for: Mapping[str, int] = field(default_factory=dict)
    outage: str = ""


@dataclass(frozen=True, slots=True)
class Decision:
    registry: Registry                      # what the registry should be (generation bumped if write)
    write: bool                             # content changed: write ``registry``
    consumed: tuple[tuple[str, int], ...]   # intent keys (relative) and mod revisions to delete
    memory: LeaderMemory
    log: tuple[str, ...]
    moves: tuple[slotfn.Move, ...] = ()


@dataclass(frozen=True, slots=True)
class _Obs:
    good: bool | None
    reason: str = ""
    source: tuple[str, ReportedCard] | None = None   # (host, card) the observation came from
    stale: bool = False         # bad only because the host's report did not advance


# hosts whose reports stopped advancing within this many cycles of each other stopped together
STOPPED_TOGETHER = 2


def stale_streaks(snap: Snapshot, memory: LeaderMemory) -> dict[str, int]:
    """host -> cycles in a row its report did not advance, counting this one (hosts whose
    report advanced, or that have none, are absent). Empty in a new leader's first cycle."""
    if memory.cycles == 0:
        return {}
    return {h: memory.stale_for.get(h, 0) + 1 for h, r in snap.reports.items()
            if memory.seen.get(h) == r.freshness}


def write_outage(snap: Snapshot, memory: LeaderMemory, streaks: Mapping[str, int]) -> str:
    """Why this cycle is a write outage, "" when it is not (see the module's docstring)."""
    if snap.write_failure:
        return f"this leader's own writes fail: {snap.write_failure}"
    n = len(snap.reports)
    stale = sorted(streaks)
    together = [h for h in stale if streaks[h] <= STOPPED_TOGETHER]
    if len(together) >= 2 and 2 * len(together) > n:
        return (f"the reports of {len(together)} of {n} hosts stopped advancing together "
                f"({', '.join(together)})")
    if memory.outage and len(stale) >= 2 and 2 * len(stale) > n:
        return (f"the reports of {len(stale)} of {n} hosts still do not advance "
                f"({', '.join(stale)})")
    return ""


def describe(c: CardEntry) -> str:
    return f"card {c.id} ({c.serial} on {c.host})"


def reported_id(rc: ReportedCard) -> str | None:
    """The card id of a reported card, or None when it cannot be one (not found, no serial,
    no on-card identity: a card whose identity could not be read is not admitted as another
    card, it only counts as a bad observation of the card registered under its name)."""
    if not rc.found or not rc.serial or not rc.identity:
        return None
    return card_id(rc.serial, rc.model, rc.identity)


def _initial(c: CardEntry) -> Hysteresis:
    """A new leader's counters: zero, starting from the state the registry holds."""
    if c.state == "drained":
        return Hysteresis(up=c.health != "sick")
    return Hysteresis(up=c.state == "in")


def _index(reports: Mapping[str, HostReport]) -> dict[str, list[tuple[str, ReportedCard]]]:
    by_id: dict[str, list[tuple[str, ReportedCard]]] = {}
    for host in sorted(reports):
        for rc in reports[host].cards:
            cid = reported_id(rc)
            if cid is not None:
                by_id.setdefault(cid, []).append((host, rc))
    return by_id


def decide(snap: Snapshot, memory: LeaderMemory, policy: Policy, now: str = "") -> Decision:
    if policy.hosts:        # only the cluster's hosts count, whoever built the snapshot
        others = {h: "not a host of this cluster" for h in snap.reports
                  if h not in policy.hosts}
        if others:
            snap = replace(snap, reports={h: r for h, r in snap.reports.items()
                                          if h in policy.hosts},
                           strangers={**others, **snap.strangers})
    prev = snap.registry
    gen = max(prev.generation if prev is not None else 0, snap.generation_floor)
    next_gen = gen + 1
    baseline = memory.cycles == 0
    log: list[str] = []

    def fresh(host: str) -> bool:
        r = snap.reports.get(host)
        return r is not None and memory.seen.get(host) != r.freshness

    by_id = _index(snap.reports)
    cards: dict[str, CardEntry] = dict(prev.by_id) if prev is not None else {}
    health: dict[str, Hysteresis] = {cid: h for cid, h in memory.health.items() if cid in cards}
    consumed: list[tuple[str, int]] = []

    # 1. forget intents first: a forgotten card is neither observed nor re-admitted this cycle.
    forgotten: set[str] = set()
    pending: list[Intent] = []
    for it in sorted(snap.intents, key=lambda i: (i.card_id, i.mod_revision)):
        consumed.append((f"intents/{it.card_id}", it.mod_revision))
        c = cards.get(it.card_id)
        if c is None:
            log.append(f"intent {it.action} for card {it.card_id} ignored: not in the registry")
        elif it.action == "forget":
            forgotten.add(c.id)
            del cards[c.id]
            health.pop(c.id, None)
            still = " (its host still reports it: it will be admitted again)" \
                if c.id in by_id else ""
            log.append(f"{describe(c)} forgotten by intent{_by(it)}{still}")
        else:
            pending.append(it)
    for key, (rev, why) in sorted(snap.bad_intents.items()):
        consumed.append((key, rev))
        log.append(f"intent {key} ignored and deleted: {why}")

    # 1b. cards the registry places on a host that is not one of the cluster's and that no
    # host of the cluster reports (a forged or stale entry): never admitted, whatever the
    # registry claims; they leave the registry (and any slot: they never held one rightly).
    if policy.hosts:
        for cid in sorted(cards):
            c = cards[cid]
            if c.host not in policy.hosts and cid not in by_id:
                del cards[cid]
                health.pop(cid, None)
                log.append(f"{describe(c)} dropped: host {c.host} is not a host of this "
                           f"cluster and no host of it reports the card")

    # 2. one observation per registry card. In a write outage, and in the cycle after it (a
    # new freshness baseline), a report that did not advance is no observation.
    streaks = stale_streaks(snap, memory)
    outage = write_outage(snap, memory, streaks)
    stale_counts = not outage and not memory.outage
    fresh_bad: set[str] = set()
    for cid in sorted(cards):
        c = cards[cid]
        o = _observe(c, snap, by_id, fresh, baseline)
        if o.stale and (cid in memory.fresh_bad or not stale_counts):
            # a sick report already counted, read again, is no new poll; nor is a report that
            # did not advance because nobody could write it
            o = _Obs(None)
        elif o.good is False and not o.stale:
            fresh_bad.add(cid)
        h0 = health.get(cid) or _initial(c)
        h = tally(h0, o.good, sick_polls=policy.sick_polls,
                    healthy_polls=policy.healthy_polls, reason=o.reason)
        health[cid] = h
        new = c
        if o.source is not None:
            new = _relocate(new, *o.source, log)
        if o.good is True:
            new = replace(new, health="ok", reason="")
        elif o.good is False and not (o.stale and (c.health == "sick" or (h.bad == 1 and h.up))):
            # one report that did not advance is the normal jitter between two hosts' polls:
            # it counts toward out, but the registry shows it from the second in a row; and
            # it never replaces the reason of a card already sick (else a card that stays out
            # alternates between its reason and "did not advance": a registry write, and a new
            # generation on every gateway, at every jitter)
            new = replace(new, health="sick", reason=o.reason)
            if c.health != "sick" or c.reason != o.reason:
                log.append(f"{describe(c)} bad poll {h.bad}/{policy.sick_polls}: {o.reason}")
        if c.state != "drained" and h.state != c.state:
            new = replace(new, state=h.state, changed_generation=next_gen, changed_at=now)
            if h.state == "out":
                log.append(f"{describe(c)} out: {h.bad} bad polls in a row, last: {h.reason}")
            else:
                log.append(f"{describe(c)} in: healthy again ({h.good} good poll(s))")
        cards[cid] = new

    # 3. drain / undrain.
    for it in pending:
        c = cards[it.card_id]
        if it.action == "drain":
            if c.state == "drained":
                log.append(f"{describe(c)} drain{_by(it)}: already drained")
            else:
                cards[c.id] = replace(c, state="drained", changed_generation=next_gen,
                                      changed_at=now)
                log.append(f"{describe(c)} drained by intent{_by(it)} (was {c.state})")
        else:
            if c.state != "drained":
                log.append(f"{describe(c)} undrain{_by(it)}: not drained (state {c.state})")
            else:
                state = health.get(c.id, _initial(c)).state
                cards[c.id] = replace(c, state=state, changed_generation=next_gen,
                                      changed_at=now)
                log.append(f"{describe(c)} undrained by intent{_by(it)}: {state}")

    # 4. admit reported cards the registry does not hold.
    for cid in sorted(by_id):
        if cid in cards or cid in forgotten:
            continue
        host, rc = by_id[cid][0]
        if rc.kind == "nvme" and rc.target is None:
            log.append(f"card {cid} ({rc.serial} on {host}) not admitted: no NVMe-oF target")
            continue
        state = "in" if rc.healthy else "out"
        cards[cid] = CardEntry(
            id=cid, serial=rc.serial, model=rc.model, identity=rc.identity, host=host,
            name=rc.name, kind=rc.kind, state=state, health="ok" if rc.healthy else "sick",
            reason="" if rc.healthy else (rc.reason or "reported sick"),
            admitted=next_gen, changed_generation=next_gen, changed_at=now,
            target=rc.target, path=rc.path,
        )
        health[cid] = Hysteresis(up=rc.healthy, bad=0 if rc.healthy else 1,
                                 good=1 if rc.healthy else 0,
                                 reason="" if rc.healthy else rc.reason)
        why = "healthy" if rc.healthy else f"not healthy: {rc.reason or 'reported sick'}"
        log.append(f"{describe(cards[cid])} admitted as {state} ({host}/{rc.name}, {why})")

    # 5. conflicts: one serial claimed by several cards, or one card reported by several hosts.
    by_serial: dict[str, list[CardEntry]] = {}
    for c in cards.values():
        by_serial.setdefault(c.serial, []).append(c)
    for cid in sorted(cards):
        c = cards[cid]
        why = []
        others = sorted((o for o in by_serial[c.serial] if o.id != cid), key=lambda o: o.id)
        if others:
            why.append(f"serial {c.serial} also claimed by "
                       + ", ".join(f"card {o.id} on {o.host}" for o in others))
        places = by_id.get(cid, [])
        if len(places) > 1:
            why.append("reported by several hosts: "
                       + ", ".join(f"{h}/{rc.name}" for h, rc in places))
        conflict = "; ".join(why) or None
        if conflict != c.conflict:
            cards[cid] = replace(c, conflict=conflict)
            if conflict:
                log.append(f"{describe(c)} in conflict: {conflict}")
            else:
                log.append(f"{describe(c)} conflict resolved")

    # 6. slots, and write only when the content changed.
    entries = tuple(cards.values())
    previous_table = prev.slots if prev is not None else slotfn.EMPTY
    table = slot_table(entries, previous_table)
    lineage = prev.lineage if prev is not None and prev.lineage else snap.lineage
    if next_gen > MAX_GENERATION:   # a forged huge generation: a new lineage, from 1 again
        log.append(f"generation {gen} is at the limit: new lineage {snap.lineage}")
        lineage, gen, next_gen = snap.lineage or lineage, 0, 1
    candidate = Registry(cluster=policy.cluster, generation=gen, leader=policy.leader,
                         cards=entries, slots=table,
                         written_at=prev.written_at if prev is not None else "",
                         lineage=lineage, hosts=tuple(policy.hosts))
    write = prev is None or bool(snap.repair) or candidate.content() != prev.content()
    if snap.repair:
        log.append(f"registry rewritten at generation {next_gen} (lineage {lineage or '-'}): "
                   f"{snap.repair}")
    moves: tuple[slotfn.Move, ...] = ()
    if write:
        candidate = replace(candidate, generation=next_gen, written_at=now)
        moves = slotfn.moves(previous_table, table)
        for m in moves:
            who = cards.get(m.card_id) or (prev.card(m.card_id) if prev is not None else None)
            name = describe(who) if who else f"card {m.card_id}"
            what = "placed" if m.old is None else "left its slot" if m.new is None else "moved"
            log.append(f"{name} {what}: {_place(m.old)} -> {_place(m.new)}")
        was = dict(previous_table.unplaced)
        for cid, why in table.unplaced:
            if was.get(cid) != why:
                log.append(f"{describe(cards[cid])} gets no slot: {why}")
    elif prev is not None:
        candidate = prev

    seen = {h: r.freshness for h, r in snap.reports.items()}
    mem = LeaderMemory(cycles=memory.cycles + 1, seen=seen, health=health,
                       fresh_bad=frozenset(fresh_bad), stale_for=streaks, outage=outage)
    return Decision(registry=candidate, write=write, consumed=tuple(consumed), memory=mem,
                    log=tuple(log), moves=moves)


def _by(it: Intent) -> str:
    why = f" (reason: {it.reason})" if it.reason else ""
    return (f" from {it.by}" if it.by else "") + why


def _place(s: int | None) -> str:
    return "no slot" if s is None else f"slot {s}"


def _observe(c: CardEntry, snap: Snapshot, by_id, fresh, baseline: bool) -> _Obs:
    places = by_id.get(c.id, [])
    if places:
        host, rc = next(((h, r) for h, r in places if h == c.host), places[0])
        if not baseline and not fresh(host):
            return _Obs(False, f"report of {host} did not advance since the last cycle",
                        stale=True)
        if rc.healthy:
            return _Obs(True, "", (host, rc))
        return _Obs(None if baseline else False, rc.reason or "reported sick", (host, rc))
    if baseline:
        return _Obs(None)
    host = c.host
    if host in snap.bad_reports:
        return _Obs(False, f"report of {host} unreadable: {snap.bad_reports[host]}")
    r = snap.reports.get(host)
    if r is None:
        return _Obs(False, f"no report from {host} (daemon stopped or its lease expired)")
    if not fresh(host):
        return _Obs(False, f"report of {host} did not advance since the last cycle",
                    stale=True)
    same_name = next((rc for rc in r.cards if rc.name == c.name), None)
    if same_name is None:
        return _Obs(False, f"not in the report of {host}")
    if not same_name.found:
        return _Obs(False, f"not found on {host}: {same_name.reason or 'missing'}")
    if reported_id(same_name) is None:
        return _Obs(False, f"{host}/{c.name} not identified: "
                           f"{same_name.reason or 'no on-card identity readable'}")
    return _Obs(False, f"{host}/{c.name} now holds another card "
                       f"(serial {same_name.serial}): identity changed")


def _relocate(c: CardEntry, host: str, rc: ReportedCard, log: list[str]) -> CardEntry:
    """Follow where a card is reported (its host, name, target, path may change)."""
    target = rc.target if rc.target is not None or rc.kind == "dir" else c.target
    if (host, rc.name, target, rc.path) == (c.host, c.name, c.target, c.path):
        return c
    log.append(f"{describe(c)} now reported as {host}/{rc.name}"
               + (f" target {target}" if target is not None else "")
               + (f" path {rc.path}" if rc.path else ""))
    return replace(c, host=host, name=rc.name, target=target, path=rc.path)
