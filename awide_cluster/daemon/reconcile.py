"""The leader's decision: one snapshot of the cluster in, the registry it should hold out.

Pure: no I/O, no clock (the caller passes ``now`` as text for ``changed_at``). The shell in
``leader.py`` reads the snapshot, calls ``decide`` and writes the result in one fenced
transaction; ``decide`` is what the tests drive cycle by cycle.

Per registry card, one observation per cycle:

- good: a fresh host report lists the card found and healthy with the same card id;
- bad: reported sick or not found, missing from its host's report, no report from its host,
  a report that does not decode, or a report that did not advance ((run, seq) unchanged since
  the previous cycle: no wall clocks are compared across hosts);
- none: the leader's first cycle counts no bad observation (freshness baseline); nor is a
  card observed while the report it is seen through is marked *restarting* (its daemon
  stopped cleanly and comes back within its grace, ``restart_grace``): the card is *held*,
  its state and counters stay as they are, for at most ``held_polls`` poll cycles (the
  report's lease expires first, in etcd; then "no report" counts as before). A restarting
  report that does not advance is neither "did not advance" nor part of a write outage.

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
and ``judge_card`` (hysteresis, health, state); ``damp_cards`` (flap damping, and the
``clear-hold`` intents, in ``decision_damping``); ``apply_drains``; ``admit``;
``mark_conflicts``; ``settle`` (slot table, write or not). Each phase logs one line per
change it makes, naming the card and the reason.

The phases live in ``decision_reports`` (1, 2), ``decision_cards`` (3) and
``decision_registry`` (4, 5), their frozen data in ``decision_model``; this module is the
decision itself, and where the rest of the daemon and the tests import its names from.
"""

from __future__ import annotations

from collections.abc import Mapping

from awide_cluster.daemon.decision_cards import (
    counted,
    judge_card,
    judge_cards,
    poll_card,
    relocate,
)
from awide_cluster.daemon.decision_damping import damp_card, damp_cards
from awide_cluster.daemon.decision_model import (
    ACTIONS,
    STOPPED_TOGETHER,
    Action,
    CardStep,
    ClusterSnapshot,
    Damping,
    Decision,
    Intent,
    LeaderMemory,
    Ledger,
    Policy,
    Poll,
    Reading,
    Settled,
    Sighting,
    Sightings,
    Stamp,
    TakenIntents,
    Trigger,
    by_whom,
    describe,
    held_polls,
    reported_id,
)
from awide_cluster.daemon.decision_registry import (
    admit,
    apply_drains,
    conflicts,
    mark_conflicts,
    settle,
)
from awide_cluster.daemon.decision_reports import (
    drop_foreign,
    held_hosts,
    hold_lines,
    initial_health,
    judge_reports,
    restarting,
    sightings,
    stale_streaks,
    take_intents,
    within_addresses,
    within_cluster,
    write_outage,
)
from awide_cluster.daemon.decision_windows import hold_polls, take_windows

# the decision's names, where the leader, its tests and its tools find them
__all__ = [
    "ACTIONS", "Action", "CardStep", "ClusterSnapshot", "Damping", "Decision", "Intent",
    "LeaderMemory",
    "Ledger", "Policy", "Poll", "Reading", "STOPPED_TOGETHER", "Settled", "Sighting",
    "Sightings", "Stamp", "TakenIntents", "Trigger", "admit", "apply_drains", "by_whom",
    "conflicts", "counted", "damp_card", "damp_cards", "decide", "describe", "drop_foreign",
    "fresh_bad", "initial_health",
    "held_hosts", "held_polls", "hold_lines", "judge_card", "judge_cards", "judge_reports",
    "mark_conflicts", "poll_card", "relocate", "reported_id", "restarting", "settle", "sightings",
    "stale_streaks", "take_intents", "within_cluster", "within_addresses", "write_outage",
]


# --- the decision ---------------------------------------------------------------------------

def decide(snap: ClusterSnapshot, memory: LeaderMemory, policy: Policy, now: str = "") -> Decision:
    """One cycle: the snapshot read, the memory of the last cycle, the policy in; the registry
    to hold, the intents to delete and the memory for the next cycle out."""
    snap = within_cluster(snap, policy)     # the same snapshot, strangers set apart
    snap = within_addresses(snap, policy)   # no card followed outside its host's addresses
    prev = snap.registry
    generation = max(prev.generation if prev is not None else 0, snap.generation_floor)
    stamp = Stamp(generation=generation + 1, at=now)
    seen = sightings(snap.reports)
    cards = dict(prev.by_id) if prev is not None else {}
    start = Ledger(cards=cards,
                   health={cid: h for cid, h in memory.health.items() if cid in cards})
    taken = take_intents(start, snap, seen)
    ledger = drop_foreign(taken.ledger, seen, policy)
    reading = judge_reports(snap, memory, policy)
    windows = take_windows(snap, policy, ledger.cards, snap.windows, snap.window_requests,
                           snap.bad_window_requests, now_ts=snap.wall, now=now,
                           problem=snap.windows_problem)
    polls = {cid: poll_card(c, snap, seen, reading) for cid, c in ledger.cards.items()}
    polls = hold_polls(polls, ledger.cards, snap, windows.windows)
    registered = ledger.cards
    ledger = judge_cards(ledger, polls, reading, policy, stamp)
    # the poll cycle this one counts as: a report cycle belongs to the poll period it runs in,
    # so holds end at the same poll with report cycles or without
    tick = memory.polls + 1
    ledger, flaps = damp_cards(registered, ledger, taken.pending, memory, policy, stamp, tick)
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
        held_for=reading.held_for,
        polls=tick if snap.trigger == "poll" else memory.polls,
        flaps=flaps,
    )
    return Decision(registry=settled.registry, write=settled.write,
                    consumed=taken.consumed + windows.consumed, memory=remembered,
                    log=hold_lines(snap, memory, reading, policy) + windows.log + settled.log,
                    moves=settled.moves, windows=windows.windows,
                    windows_write=windows.write, window_events=windows.events)


def fresh_bad(polls: Mapping[str, Poll], memory: LeaderMemory) -> frozenset[str]:
    """Cards whose last observation was a fresh sick report (re-reading that report when it
    did not advance is not another sick poll): this cycle's, and the last one's for a card
    not observed in this cycle (its report already observed)."""
    return frozenset(cid for cid, p in polls.items()
                     if (p.good is False and not p.stale)
                     or (p.good is None and not p.stale and p.source is None
                         and cid in memory.fresh_bad))
