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
failed (``ClusterSnapshot.write_failure``: its host report in this turn or its last registry
transaction), or when the reports of a majority of the hosts that have one stopped advancing
together (each within its first ``STOPPED_TOGETHER`` stale cycles; once in an outage, it lasts
while a majority stays stale). In an outage cycle, and in the first cycle after one (the
freshness baseline starts again: hosts write again at their own phase), a report that did not
advance counts nothing; everything else (a fresh sick report, a missing or unreadable report)
counts as usual. A single frozen host is never a majority of 2 or more hosts reporting: it
still loses its cards after ``sick_polls`` cycles (one or two later when another host's jitter
falls in its first two stale cycles).

Two kinds of cycle (``ClusterSnapshot.trigger``). A *poll* cycle is the leader's own, one per poll
period: every card has one observation, as above. A *report* cycle runs when a host report
arrives between two polls (the leader watches ``members/``): only the reports that advanced
since the last cycle of either kind are observed, and nothing else counts (no "did not
advance", no missing or unreadable report, no write-outage judgement), so a card's sick
reports are counted as its host writes them, whatever the leader's own phase. A report
observed in a report cycle is not observed again by the next poll cycle, nor counted as not
advancing (``LeaderMemory.polled`` keeps what the last poll cycle saw): with report cycles
or without, each report is one observation and each poll period without a report is one.

``contract.health.tally`` turns observations into ``in``/``out``; ``drained`` stays drained
until an undrain intent. A reported card whose id is not in the registry is admitted. Cards
claiming one serial are marked in conflict, never merged. Intents are applied in the same
decision (and deleted in the same transaction by the shell).

The decision is a chain of pure phases, each over frozen views built by keyword (a ``Ledger``
of cards and counters passes from one to the next): ``within_cluster`` and ``judge_reports``
(which reports advanced, a write outage: a ``Reading``); ``take_intents`` (forget intents,
every intent consumed) and ``drop_foreign``; per card ``poll_card`` (a ``Poll``), ``counted``
and ``judge_card`` (hysteresis, health, state); ``apply_drains``; ``admit``;
``mark_conflicts``; ``settle`` (slot table, write or not). Each phase logs one line per
change it makes, naming the card and the reason.
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
# what started a cycle: the leader's own poll (one per poll period), or a host report that
# arrived between two polls (the leader's watch of members/)
Trigger = Literal["poll", "report"]
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
class ClusterSnapshot:
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
    # "poll": the leader's own cycle, one per poll period (a report that did not advance since
    # the last poll cycle counts); "report": a cycle run because a host report arrived (only
    # the reports that advanced since the last cycle are observed, nothing else counts)
    trigger: Trigger = "poll"


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
    # host -> (run, seq) at the last poll cycle: a report that did not advance since then
    # did not advance for a whole poll period (report cycles leave it alone)
    polled: Mapping[str, tuple[str, int]] = field(default_factory=dict)
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
    registry: Registry                      # what the registry should be (generation + 1 if write)
    write: bool                             # content changed: write ``registry``
    consumed: tuple[tuple[str, int], ...]   # intent keys (relative) and mod revisions to delete
    memory: LeaderMemory
    log: tuple[str, ...]
    moves: tuple[slotfn.Move, ...] = ()


# --- the views the phases hand each other -------------------------------------------------

Sighting = tuple[str, ReportedCard]                 # (host, card) as one host report lists it
Sightings = Mapping[str, tuple[Sighting, ...]]       # card id -> its sightings, by host name


@dataclass(frozen=True, slots=True, kw_only=True)
class Reading:
    """How this cycle reads the host reports, judged once before any card is."""

    baseline: bool                  # a new leader's first cycle: no bad observation counts
    fresh: frozenset[str]           # hosts whose report advanced since the last cycle
    # hosts whose report advanced since the last poll cycle but was observed already (by a
    # report cycle), and in a report cycle every host whose report did not advance: their
    # cards have no observation in this cycle (neither good nor "did not advance")
    idle: frozenset[str]
    streaks: Mapping[str, int]      # host -> cycles in a row its report did not advance
    outage: str                     # why this cycle is a write outage, "" when it is not
    stale_counts: bool              # a report that did not advance counts as a bad poll
    recounted: frozenset[str]       # cards whose sick report was counted in the last cycle


@dataclass(frozen=True, slots=True, kw_only=True)
class Stamp:
    """What a card changed in this cycle is marked with."""

    generation: int                 # the generation this decision writes
    at: str                         # ``now``, the text of ``changed_at``


@dataclass(frozen=True, slots=True, kw_only=True)
class Ledger:
    """The registry's cards (in registry order) and the leader's counters, as one phase of
    the decision hands them to the next, with the log lines written so far."""

    cards: Mapping[str, CardEntry]
    health: Mapping[str, Hysteresis]
    log: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class TakenIntents:
    """The intents read in this cycle, once the forget intents are applied."""

    ledger: Ledger
    forgotten: frozenset[str]               # not observed nor admitted again this cycle
    pending: tuple[Intent, ...]             # drain and undrain intents of registry cards
    consumed: tuple[tuple[str, int], ...]   # every intent key read, with its mod revision


@dataclass(frozen=True, slots=True, kw_only=True)
class Poll:
    """One observation of a registry card in this cycle."""

    good: bool | None               # None: no observation
    reason: str = ""
    source: Sighting | None = None  # where the card was seen, when it was
    stale: bool = False             # bad only because the host's report did not advance


@dataclass(frozen=True, slots=True, kw_only=True)
class CardStep:
    """One registry card after its poll: the entry, its counters and the lines to log."""

    card: CardEntry
    health: Hysteresis
    log: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Settled:
    """The registry this decision ends with, and whether it is written."""

    registry: Registry
    write: bool
    moves: tuple[slotfn.Move, ...]
    log: tuple[str, ...]


# hosts whose reports stopped advancing within this many cycles of each other stopped together
STOPPED_TOGETHER = 2


# --- phase 1: the reports -------------------------------------------------------------------

def within_cluster(snap: ClusterSnapshot, policy: Policy) -> ClusterSnapshot:
    """The snapshot with only the cluster's hosts' reports, whoever built it; the others are
    strangers. Unchanged when the policy names no hosts."""
    if not policy.hosts:
        return snap
    others = {h: "not a host of this cluster" for h in snap.reports if h not in policy.hosts}
    if not others:
        return snap
    return replace(snap, reports={h: r for h, r in snap.reports.items() if h in policy.hosts},
                   strangers={**others, **snap.strangers})


def stale_streaks(snap: ClusterSnapshot, memory: LeaderMemory) -> dict[str, int]:
    """host -> poll cycles in a row its report did not advance, counting this one (hosts
    whose report advanced, or that have none, are absent). Empty in a new leader's first
    cycle; a report cycle judges no streak (the last poll cycle's stand)."""
    if memory.cycles == 0:
        return {}
    if snap.trigger == "report":
        return dict(memory.stale_for)
    return {h: memory.stale_for.get(h, 0) + 1 for h, r in snap.reports.items()
            if memory.polled.get(h) == r.freshness}


def write_outage(snap: ClusterSnapshot, memory: LeaderMemory, streaks: Mapping[str, int]) -> str:
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


def judge_reports(snap: ClusterSnapshot, memory: LeaderMemory) -> Reading:
    """Which reports advanced, and whether this cycle is a write outage. In an outage, and in
    the cycle after it (a new freshness baseline), a report that did not advance counts
    nothing."""
    streaks = stale_streaks(snap, memory)
    fresh = frozenset(h for h, r in snap.reports.items() if memory.seen.get(h) != r.freshness)
    if snap.trigger == "report":    # the outage stands as the last poll cycle judged it
        outage = memory.outage
        idle = frozenset(snap.reports) - fresh
    else:
        outage = write_outage(snap, memory, streaks)
        idle = frozenset(h for h, r in snap.reports.items()
                         if h not in fresh and memory.polled.get(h) != r.freshness)
    return Reading(
        baseline=memory.cycles == 0,
        fresh=fresh,
        idle=idle,
        streaks=streaks,
        outage=outage,
        stale_counts=not outage and not memory.outage,
        recounted=memory.fresh_bad,
    )


def describe(c: CardEntry) -> str:
    return f"card {c.id} ({c.serial} on {c.host})"


def reported_id(rc: ReportedCard) -> str | None:
    """The card id of a reported card, or None when it cannot be one (not found, no serial,
    no on-card identity: a card whose identity could not be read is not admitted as another
    card, it only counts as a bad observation of the card registered under its name)."""
    if not rc.found or not rc.serial or not rc.identity:
        return None
    return card_id(rc.serial, rc.model, rc.identity)


def sightings(reports: Mapping[str, HostReport]) -> dict[str, tuple[Sighting, ...]]:
    """card id -> where the reports list it (hosts in name order)."""
    by_id: dict[str, list[Sighting]] = {}
    for host in sorted(reports):
        for rc in reports[host].cards:
            cid = reported_id(rc)
            if cid is not None:
                by_id.setdefault(cid, []).append((host, rc))
    return {cid: tuple(seen) for cid, seen in by_id.items()}


def initial_health(c: CardEntry) -> Hysteresis:
    """A new leader's counters: zero, starting from the state the registry holds."""
    if c.state == "drained":
        return Hysteresis(up=c.health != "sick")
    return Hysteresis(up=c.state == "in")


# --- phase 2: forget intents, and entries no host of the cluster can hold -------------------

def take_intents(ledger: Ledger, snap: ClusterSnapshot, seen: Sightings) -> TakenIntents:
    """Apply forget intents first (a forgotten card is neither observed nor re-admitted this
    cycle); keep drain/undrain for after the polls; consume every intent, good or bad."""
    cards, health, log = dict(ledger.cards), dict(ledger.health), list(ledger.log)
    forgotten: set[str] = set()
    pending: list[Intent] = []
    consumed: list[tuple[str, int]] = []
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
                if c.id in seen else ""
            log.append(f"{describe(c)} forgotten by intent{_by(it)}{still}")
        else:
            pending.append(it)
    for key, (rev, why) in sorted(snap.bad_intents.items()):
        consumed.append((key, rev))
        log.append(f"intent {key} ignored and deleted: {why}")
    return TakenIntents(ledger=Ledger(cards=cards, health=health, log=tuple(log)),
                        forgotten=frozenset(forgotten), pending=tuple(pending),
                        consumed=tuple(consumed))


def drop_foreign(ledger: Ledger, seen: Sightings, policy: Policy) -> Ledger:
    """Cards the registry places on a host that is not one of the cluster's and that no host
    of the cluster reports (a forged or stale entry): never admitted, whatever the registry
    claims; they leave the registry (and any slot: they never held one rightly)."""
    if not policy.hosts:
        return ledger
    foreign = {cid for cid, c in ledger.cards.items()
               if c.host not in policy.hosts and cid not in seen}
    if not foreign:
        return ledger
    log = [f"{describe(ledger.cards[cid])} dropped: host {ledger.cards[cid].host} is not a "
           f"host of this cluster and no host of it reports the card" for cid in sorted(foreign)]
    return Ledger(cards={cid: c for cid, c in ledger.cards.items() if cid not in foreign},
                  health={cid: h for cid, h in ledger.health.items() if cid not in foreign},
                  log=ledger.log + tuple(log))


# --- phase 3: one poll per registry card, and its health ------------------------------------

def _not_fresh(host: str, reading: Reading) -> Poll:
    """A card whose host's report did not advance since the last cycle: no observation when
    the report was observed already (or this is a report cycle), else "did not advance"."""
    if host in reading.idle:
        return Poll(good=None)
    return Poll(good=False, reason=f"report of {host} did not advance since the last cycle",
                stale=True)


def poll_card(c: CardEntry, snap: ClusterSnapshot, seen: Sightings, reading: Reading) -> Poll:
    """What this cycle observes of registry card ``c`` (before any discount, see
    ``counted``)."""
    places = seen.get(c.id, ())
    if places:
        host, rc = next(((h, r) for h, r in places if h == c.host), places[0])
        if not reading.baseline and host not in reading.fresh:
            return _not_fresh(host, reading)
        if rc.healthy:
            return Poll(good=True, source=(host, rc))
        return Poll(good=None if reading.baseline else False,
                    reason=rc.reason or "reported sick", source=(host, rc))
    if reading.baseline:
        return Poll(good=None)
    host = c.host
    if snap.trigger == "report" and host not in reading.fresh:
        return Poll(good=None)      # only the reports that arrived are observed
    if host in snap.bad_reports:
        return Poll(good=False, reason=f"report of {host} unreadable: {snap.bad_reports[host]}")
    r = snap.reports.get(host)
    if r is None:
        return Poll(good=False,
                    reason=f"no report from {host} (daemon stopped or its lease expired)")
    if host not in reading.fresh:
        return _not_fresh(host, reading)
    same_name = next((rc for rc in r.cards if rc.name == c.name), None)
    if same_name is None:
        why = f"not in the report of {host}"
    elif not same_name.found:
        why = f"not found on {host}: {same_name.reason or 'missing'}"
    elif reported_id(same_name) is None:
        why = (f"{host}/{c.name} not identified: "
               f"{same_name.reason or 'no on-card identity readable'}")
    else:
        why = (f"{host}/{c.name} now holds another card (serial {same_name.serial}): "
               f"identity changed")
    return Poll(good=False, reason=why)


def counted(poll: Poll, card: str, reading: Reading) -> Poll:
    """The poll as it counts: a sick report already counted, read again, is no new poll; nor
    is a report that did not advance because nobody could write it (a write outage)."""
    if poll.stale and (card in reading.recounted or not reading.stale_counts):
        return Poll(good=None)
    return poll


def relocate(c: CardEntry, sighting: Sighting) -> tuple[CardEntry, tuple[str, ...]]:
    """Follow where a card is reported (its host, name, target, path may change)."""
    host, rc = sighting
    target = rc.target if rc.target is not None or rc.kind == "dir" else c.target
    if (host, rc.name, target, rc.path) == (c.host, c.name, c.target, c.path):
        return c, ()
    line = (f"{describe(c)} now reported as {host}/{rc.name}"
            + (f" target {target}" if target is not None else "")
            + (f" path {rc.path}" if rc.path else ""))
    return replace(c, host=host, name=rc.name, target=target, path=rc.path), (line,)


def judge_card(c: CardEntry, before: Hysteresis, poll: Poll, policy: Policy,
               stamp: Stamp) -> CardStep:
    """One registry card after its (counted) poll: its counters, where it is, its health and
    reason, and its state (a drained card stays drained)."""
    h = tally(before, poll.good, sick_polls=policy.sick_polls,
              healthy_polls=policy.healthy_polls, reason=poll.reason)
    new = c
    log: tuple[str, ...] = ()
    if poll.source is not None:
        new, log = relocate(new, poll.source)
    if poll.good is True:
        new = replace(new, health="ok", reason="")
    elif poll.good is False and not (poll.stale and (c.health == "sick"
                                                     or (h.bad == 1 and h.up))):
        # one report that did not advance is the normal jitter between two hosts' polls: it
        # counts toward out, but the registry shows it from the second in a row; and it never
        # replaces the reason of a card already sick (else a card that stays out alternates
        # between its reason and "did not advance": a registry write, and a new generation on
        # every gateway, at every jitter)
        new = replace(new, health="sick", reason=poll.reason)
        if c.health != "sick" or c.reason != poll.reason:
            log += (f"{describe(c)} bad poll {h.bad}/{policy.sick_polls}: {poll.reason}",)
    if c.state != "drained" and h.state != c.state:
        new = replace(new, state=h.state, changed_generation=stamp.generation,
                      changed_at=stamp.at)
        if h.state == "out":
            log += (f"{describe(c)} out: {h.bad} bad polls in a row, last: {h.reason}",)
        else:
            log += (f"{describe(c)} in: healthy again ({h.good} good poll(s))",)
    return CardStep(card=new, health=h, log=log)


def judge_cards(ledger: Ledger, polls: Mapping[str, Poll], reading: Reading, policy: Policy,
                stamp: Stamp) -> Ledger:
    """Every registry card after its poll (``polls`` holds one per card, uncounted)."""
    steps = {cid: judge_card(c, ledger.health.get(cid) or initial_health(c),
                             counted(polls[cid], cid, reading), policy, stamp)
             for cid, c in sorted(ledger.cards.items())}
    return Ledger(cards={cid: steps[cid].card for cid in ledger.cards},
                  health={**ledger.health, **{cid: s.health for cid, s in steps.items()}},
                  log=ledger.log + tuple(line for s in steps.values() for line in s.log))


# --- phase 4: drain and undrain, admissions, conflicts --------------------------------------

def apply_drains(ledger: Ledger, pending: tuple[Intent, ...], stamp: Stamp) -> Ledger:
    """Drain and undrain intents; an undrained card takes the state its counters give."""
    cards, log = dict(ledger.cards), list(ledger.log)
    for it in pending:
        c = cards.get(it.card_id)
        if c is None:       # dropped from the registry in this cycle
            log.append(f"intent {it.action} for card {it.card_id} ignored: not in the registry")
        elif it.action == "drain":
            if c.state == "drained":
                log.append(f"{describe(c)} drain{_by(it)}: already drained")
            else:
                cards[c.id] = replace(c, state="drained", changed_generation=stamp.generation,
                                      changed_at=stamp.at)
                log.append(f"{describe(c)} drained by intent{_by(it)} (was {c.state})")
        elif c.state != "drained":
            log.append(f"{describe(c)} undrain{_by(it)}: not drained (state {c.state})")
        else:
            state = ledger.health.get(c.id, initial_health(c)).state
            cards[c.id] = replace(c, state=state, changed_generation=stamp.generation,
                                  changed_at=stamp.at)
            log.append(f"{describe(c)} undrained by intent{_by(it)}: {state}")
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
                         lineage=lineage, hosts=tuple(policy.hosts))
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


# --- the decision ---------------------------------------------------------------------------

def decide(snap: ClusterSnapshot, memory: LeaderMemory, policy: Policy, now: str = "") -> Decision:
    """One cycle: the snapshot read, the memory of the last cycle, the policy in; the registry
    to hold, the intents to delete and the memory for the next cycle out."""
    snap = within_cluster(snap, policy)     # the same snapshot, strangers set apart
    prev = snap.registry
    generation = max(prev.generation if prev is not None else 0, snap.generation_floor)
    stamp = Stamp(generation=generation + 1, at=now)
    seen = sightings(snap.reports)
    cards = dict(prev.by_id) if prev is not None else {}
    start = Ledger(cards=cards,
                   health={cid: h for cid, h in memory.health.items() if cid in cards})
    taken = take_intents(start, snap, seen)
    ledger = drop_foreign(taken.ledger, seen, policy)
    reading = judge_reports(snap, memory)
    polls = {cid: poll_card(c, snap, seen, reading) for cid, c in ledger.cards.items()}
    ledger = judge_cards(ledger, polls, reading, policy, stamp)
    ledger = apply_drains(ledger, taken.pending, stamp)
    ledger = admit(ledger, seen, taken.forgotten, stamp)
    ledger = mark_conflicts(ledger, seen)
    settled = settle(ledger, snap, policy, generation, now)
    seen_now = {h: r.freshness for h, r in snap.reports.items()}
    remembered = LeaderMemory(
        cycles=memory.cycles + 1,
        seen=seen_now,
        polled=seen_now if snap.trigger == "poll" else memory.polled,
        health=ledger.health,
        fresh_bad=fresh_bad(polls, memory),
        stale_for=reading.streaks,
        outage=reading.outage,
    )
    return Decision(registry=settled.registry, write=settled.write, consumed=taken.consumed,
                    memory=remembered, log=settled.log, moves=settled.moves)


def fresh_bad(polls: Mapping[str, Poll], memory: LeaderMemory) -> frozenset[str]:
    """Cards whose last observation was a fresh sick report (re-reading that report when it
    did not advance is not another sick poll): this cycle's, and the last one's for a card
    not observed in this cycle (its report already observed)."""
    return frozenset(cid for cid, p in polls.items()
                     if (p.good is False and not p.stale)
                     or (p.good is None and not p.stale and p.source is None
                         and cid in memory.fresh_bad))


def _by(it: Intent) -> str:
    why = f" (reason: {it.reason})" if it.reason else ""
    return (f" from {it.by}" if it.by else "") + why


def _place(s: int | None) -> str:
    return "no slot" if s is None else f"slot {s}"
