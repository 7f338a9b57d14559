"""The leader's decision, phase 3 (pure): one observation (a ``Poll``) per registry card, as
it counts, and the card after it: its hysteresis counters, where it is, its health and state."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from awide_cluster.contract.health import Hysteresis, tally
from awide_cluster.contract.registry import CardEntry
from awide_cluster.daemon.decision_model import (
    CardStep,
    ClusterSnapshot,
    Ledger,
    Policy,
    Poll,
    Reading,
    Sighting,
    Sightings,
    Stamp,
    describe,
    reported_id,
)
from awide_cluster.daemon.decision_reports import initial_health

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
    ``counted``). A card observed through the report of a host restarting within its grace
    is held: no observation (its state and counters stay as they are)."""
    places = seen.get(c.id, ())
    if places:
        host, rc = next(((h, r) for h, r in places if h == c.host), places[0])
        if host in reading.held:
            return Poll(good=None, held=True)
        if not reading.baseline and host not in reading.fresh:
            return _not_fresh(host, reading)
        if rc.healthy:
            return Poll(good=True, source=(host, rc))
        return Poll(good=None if reading.baseline else False,
                    reason=rc.reason or "reported sick", source=(host, rc))
    if reading.baseline:
        return Poll(good=None)
    host = c.host
    if host in reading.held:
        return Poll(good=None, held=True)
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
    """Follow where a card is reported (its host, name, kind, target, path may change):
    what a card is and where it is served comes from its host's report, never from the
    registry read (which any daemon identity may have written)."""
    host, rc = sighting
    target = rc.target if rc.target is not None or rc.kind == "dir" else c.target
    if (host, rc.name, rc.kind, target, rc.path) == (c.host, c.name, c.kind, c.target,
                                                     c.path):
        return c, ()
    line = (f"{describe(c)} now reported as {host}/{rc.name}"
            + (f" target {target}" if target is not None else "")
            + (f" path {rc.path}" if rc.path else ""))
    return replace(c, host=host, name=rc.name, kind=rc.kind, target=target,
                   path=rc.path), (line,)


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
            log += (bad_poll_line(describe(c), h.bad, policy.sick_polls, poll.reason),)
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


def bad_poll_line(card: str, bad: int, sick_polls: int, reason: str) -> str:
    """``bad poll 2/3`` while the count goes toward out; once past it (a card already out
    whose reason changed) the count alone, never ``5/3``."""
    if bad <= sick_polls:
        return f"{card} bad poll {bad}/{sick_polls}: {reason}"
    return f"{card} still failing ({bad} bad polls in a row, out after {sick_polls}): {reason}"
