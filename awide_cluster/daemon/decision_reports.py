"""The leader's decision, phases 1 and 2 (pure): which host reports advanced and whether this
cycle is a write outage (a ``Reading``); where the reports list each card; the forget intents
applied, and the entries no host of the cluster can hold dropped."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from awide_cluster.contract.health import Hysteresis
from awide_cluster.contract.registry import CardEntry, card_id
from awide_cluster.contract.report import HostReport
from awide_cluster.contract.vouch import address_allowed
from awide_cluster.daemon.decision_model import (
    STOPPED_TOGETHER,
    ClusterSnapshot,
    Intent,
    LeaderMemory,
    Ledger,
    Policy,
    Reading,
    Sighting,
    Sightings,
    TakenIntents,
    by_whom,
    describe,
    held_polls,
    reported_id,
)

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


def within_addresses(snap: ClusterSnapshot, policy: Policy) -> ClusterSnapshot:
    """The snapshot with every reported NVMe card whose target lies outside its host's
    allowed addresses (``policy.allowed``) turned into a sick card without a target: the
    leader neither admits it nor follows it there, and counts it bad ("outside the allowed
    addresses"). Unchanged when no addresses are given."""
    allowed = policy.allowed
    if allowed is None:
        return snap
    reports = dict(snap.reports)
    for host, r in snap.reports.items():
        nets = allowed.get(host, ())
        bad = [i for i, rc in enumerate(r.cards) if rc.kind == "nvme" and rc.target is not None
               and not address_allowed(rc.target.traddr, nets)]
        if not bad:
            continue
        cards = list(r.cards)
        for i in bad:
            rc = cards[i]
            assert rc.target is not None
            cards[i] = replace(rc, healthy=False, target=None, reason=(
                f"target address {rc.target.traddr} is outside the allowed addresses of "
                f"{host}"))
        reports[host] = replace(r, cards=tuple(cards))
    return replace(snap, reports=reports)


def restarting(snap: ClusterSnapshot, memory: LeaderMemory) -> dict[str, int]:
    """host -> poll cycles its report has been marked restarting, counting this one (a
    report cycle counts none); hosts whose report is not marked are absent."""
    return {h: memory.held_for.get(h, 0) + (1 if snap.trigger == "poll" else 0)
            for h, r in snap.reports.items() if r.restarting is not None}


def held_hosts(snap: ClusterSnapshot, counts: Mapping[str, int],
               policy: Policy) -> frozenset[str]:
    """The restarting hosts still within their grace (``held_polls``). A host whose
    restarting report outlived it is not held: its report then counts as one that does not
    advance."""
    return frozenset(h for h, n in counts.items()
                     if (r := snap.reports[h].restarting) is not None
                     and n <= held_polls(r.grace, policy.poll_interval))


def hold_lines(snap: ClusterSnapshot, memory: LeaderMemory, reading: Reading,
               policy: Policy) -> tuple[str, ...]:
    """One log line per restarting host whose hold began, ended past its grace, or ended
    with a live report (its daemon back) in this cycle."""
    lines = []
    for h in sorted(set(reading.held_for) | set(memory.held_for)):
        r = snap.reports.get(h)
        mark = r.restarting if r is not None else None
        before = memory.held_for.get(h, 0)
        if mark is None:
            back = "its daemon reports again" if r is not None else "its report is gone"
            lines.append(f"host {h} no longer restarting after {before} poll(s): {back}")
            continue
        limit = held_polls(mark.grace, policy.poll_interval)
        if h in reading.held and h not in memory.held_for:
            lines.append(f"host {h} restarting (its daemon stopped cleanly, back by "
                         f"{mark.until or '?'}): its cards held for at most {limit} poll(s)")
        elif h not in reading.held and 0 < before <= limit < reading.held_for[h]:
            lines.append(f"host {h} still restarting after its grace ({mark.grace} s, "
                         f"{limit} polls): its report now counts as not advancing")
    return tuple(lines)


def stale_streaks(snap: ClusterSnapshot, memory: LeaderMemory,
                  held: frozenset[str] = frozenset()) -> dict[str, int]:
    """host -> poll cycles in a row its report did not advance, counting this one (hosts
    whose report advanced, or that have none, are absent; so are ``held`` hosts, restarting:
    their report is not meant to advance). Empty in a new leader's first cycle; a report
    cycle judges no streak (the last poll cycle's stand)."""
    if memory.cycles == 0:
        return {}
    if snap.trigger == "report":
        return dict(memory.stale_for)
    return {h: memory.stale_for.get(h, 0) + 1 for h, r in snap.reports.items()
            if memory.polled.get(h) == r.freshness and h not in held}


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


def judge_reports(snap: ClusterSnapshot, memory: LeaderMemory,
                  policy: Policy | None = None) -> Reading:
    """Which reports advanced, which hosts are restarting within their grace, and whether
    this cycle is a write outage. In an outage, and in the cycle after it (a new freshness
    baseline), a report that did not advance counts nothing."""
    counts = restarting(snap, memory)
    held = held_hosts(snap, counts, policy or Policy(cluster="", leader=""))
    streaks = stale_streaks(snap, memory, held)
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
        held=held,
        held_for=counts,
    )


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
            log.append(f"{describe(c)} forgotten by intent{by_whom(it)}{still}")
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
    claims; they leave the registry (and any slot: they never held one rightly). So does an
    entry whose id is not ``card_id(serial, model, identity)`` (the leader derives every id it
    writes: anyone else's is forged), whatever host it names."""
    forged = {cid for cid, c in ledger.cards.items()
              if cid != card_id(c.serial, c.model, c.identity)}
    foreign = {cid for cid, c in ledger.cards.items()
               if policy.hosts and c.host not in policy.hosts and cid not in seen} - forged
    if not foreign and not forged:
        return ledger
    log = [f"{describe(ledger.cards[cid])} dropped: host {ledger.cards[cid].host} is not a "
           f"host of this cluster and no host of it reports the card" for cid in sorted(foreign)]
    log += [f"{describe(ledger.cards[cid])} dropped: its id is not the card id of its serial, "
            f"model and identity ({card_id(c.serial, c.model, c.identity)})"
            for cid, c in sorted(ledger.cards.items()) if cid in forged]
    gone = foreign | forged
    return Ledger(cards={cid: c for cid, c in ledger.cards.items() if cid not in gone},
                  health={cid: h for cid, h in ledger.health.items() if cid not in gone},
                  log=ledger.log + tuple(log))
