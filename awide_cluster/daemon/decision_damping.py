"""The leader's decision, flap damping (pure): after the cards are judged (phase 3), a card
that keeps going out and coming back is held out when it returns.

Counted in poll cycles of this leader's term (``LeaderMemory.polls``; the policy's seconds
are turned into poll cycles with the poll interval, rounded up, at least one):

- a card that goes out (``in`` -> ``out``) records the poll cycle; outs older than the window
  are forgotten;
- a card about to return (``out`` -> ``in``: its counters are back up) while its hold runs
  stays out: its state, and the generation and time of its last change, as they are; its
  reason the hold's;
- a card about to return with no hold running: when it went out ``outs`` times within the
  window, or when it was held before and went out again since (no quiet window between), a
  hold starts and the card stays out. The first hold is ``first_hold`` seconds, each next one
  twice the last, at most ``max_hold``. Otherwise it returns as before (a single fault, or
  two, returns within one poll as without damping);
- a hold ends at the card's first return past its end; the hold's level stays until the card
  went out no more for a whole window, then the hold leaves the registry;
- a ``clear-hold`` intent forgets the hold and the outs: the card returns at once if its
  counters say ``in``;
- the hold is written in the card's registry entry (``CardHold``): a new leader, which has no
  memory of the card, restarts a running hold from its beginning (its length as the registry
  says, at most ``max_hold``: no wall clock is compared across hosts; ``until`` is for people).

Drained cards are left alone; an ``in`` card never keeps a running hold.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from awide_cluster.contract.card_hold import CardHold
from awide_cluster.contract.registry import CardEntry
from awide_cluster.daemon.decision_model import (
    Damping,
    Flaps,
    Intent,
    LeaderMemory,
    Ledger,
    Policy,
    Stamp,
    by_whom,
    describe,
)


def polls_of(seconds: float, poll_interval: float) -> int:
    """Poll cycles of ``seconds``: rounded up, at least one."""
    return max(1, math.ceil(seconds / max(poll_interval, 1e-3) - 1e-9))


def hold_length(level: int, d: Damping) -> float:
    """Seconds of hold number ``level`` (1: the first): doubling, at most ``max_hold``."""
    return float(min(d.max_hold, d.first_hold * 2.0 ** min(max(level, 1) - 1, 32)))


def until_text(now: str, seconds: float) -> str:
    """``now`` (ISO 8601) plus ``seconds``, as text; "" when ``now`` is not ISO 8601."""
    try:
        return (datetime.fromisoformat(now) + timedelta(seconds=seconds)).isoformat(
            timespec="seconds")
    except ValueError:
        return ""


@dataclass(frozen=True, slots=True, kw_only=True)
class DampStep:
    """One card after flap damping."""

    card: CardEntry
    flaps: Flaps
    log: tuple[str, ...] = ()
    held: bool = False              # kept out by a hold although its counters say in


def restored(c: CardEntry, tick: int, policy: Policy) -> Flaps:
    """What a leader without memory of card ``c`` starts from: a running hold restarted from
    its beginning (at most ``max_hold``), a past hold's level kept from now."""
    h = c.hold
    if h is None:
        return Flaps()
    if h.active:
        secs = min(max(h.seconds, 0.0), policy.damping.max_hold)
        return Flaps(held_until=tick + polls_of(secs, policy.poll_interval), quiet_from=tick)
    return Flaps(quiet_from=tick)


def damp_card(old: CardEntry, new: CardEntry, f: Flaps, *, tick: int, policy: Policy,
              stamp: Stamp, clear: Intent | None = None) -> DampStep:
    """Card ``old`` as the registry held it, ``new`` as phase 3 judged it, ``f`` what this
    term knows of its flaps; the card after damping (see the module's docstring)."""
    d = policy.damping
    window = polls_of(d.window, policy.poll_interval)
    outs = tuple(t for t in f.outs if tick - t < window)
    if clear is not None:
        line = (f"{describe(old)} hold cleared by intent{by_whom(clear)}: {new.state}"
                if old.hold is not None else
                f"{describe(old)} clear-hold{by_whom(clear)}: no hold")
        return DampStep(card=replace(new, hold=None), flaps=Flaps(), log=(line,))
    if d.outs <= 0:
        if old.hold is None:
            return DampStep(card=new, flaps=Flaps())
        return DampStep(card=replace(new, hold=None), flaps=Flaps(),
                        log=(f"{describe(old)} hold dropped: flap damping is off",))
    if "drained" in (old.state, new.state):
        card = new
        if new.state == "in" and new.hold is not None and new.hold.active:
            card = replace(new, hold=replace(new.hold, active=False, until=""))
        return DampStep(card=card, flaps=replace(f, outs=outs))
    if old.state == "in" and new.state == "out":
        outs += (tick,)
    hold = old.hold
    if not (old.state == "out" and new.state == "in"):      # not a return
        last = max((f.quiet_from, *outs))
        if hold is not None and not hold.active and new.state == "in" and tick - last >= window:
            return DampStep(card=replace(new, hold=None), flaps=Flaps(outs=outs), log=(
                f"{describe(old)} flap damping reset: no out for {d.window:g} s since its "
                f"last hold",))
        return DampStep(card=new, flaps=replace(f, outs=outs))
    if hold is not None and hold.active and f.held_until > tick:
        return DampStep(card=_kept_out(old, new, hold), flaps=replace(f, outs=outs), held=True)
    if hold is not None and hold.active:
        return DampStep(card=replace(new, hold=replace(hold, active=False, until="")),
                        flaps=Flaps(outs=outs, quiet_from=tick),
                        log=(f"{describe(old)} hold of {hold.seconds:g} s over: it returns",))
    if hold is None and len(outs) < d.outs:
        return DampStep(card=new, flaps=replace(f, outs=outs))
    level = hold.level + 1 if hold is not None else 1
    secs = hold_length(level, d)
    why = (f"held out for {secs:g} s (flap damping, hold {level}): out {len(outs)} time(s) "
           f"within {d.window:g} s" + (", again after its last hold" if hold else ""))
    started = CardHold(level=level, seconds=secs, active=True,
                       until=until_text(stamp.at, secs), reason=why)
    return DampStep(card=_kept_out(old, new, started),
                    flaps=Flaps(outs=outs, held_until=tick + polls_of(secs, policy.poll_interval)),
                    log=(f"{describe(old)} {why}",), held=True)


def _kept_out(old: CardEntry, new: CardEntry, hold: CardHold) -> CardEntry:
    """``new`` kept out by ``hold``: state and last change as ``old`` had them."""
    return replace(new, state="out", changed_generation=old.changed_generation,
                   changed_at=old.changed_at, reason=hold.reason, hold=hold)


def damp_cards(before: Mapping[str, CardEntry], ledger: Ledger, pending: tuple[Intent, ...],
               memory: LeaderMemory, policy: Policy, stamp: Stamp,
               tick: int) -> tuple[Ledger, dict[str, Flaps]]:
    """Every registry card after flap damping: ``before`` the cards as the registry held
    them (after phase 2), ``ledger`` after phase 3, ``pending`` the intents (their
    ``clear-hold`` ones are applied here), ``tick`` this cycle's poll count. The ledger, and
    what the next cycle keeps of each card's flaps."""
    clears = {it.card_id: it for it in pending if it.action == "clear-hold"}
    cards, flaps = dict(ledger.cards), {}
    log = list(ledger.log)
    for cid in sorted(ledger.cards):
        old = before.get(cid)
        if old is None:
            continue
        f = memory.flaps.get(cid) or restored(old, tick, policy)
        step = damp_card(old, ledger.cards[cid], f, tick=tick, policy=policy, stamp=stamp,
                         clear=clears.get(cid))
        cards[cid] = step.card
        if step.held:       # it does not return: phase 3's line saying it does is dropped
            head = f"{describe(old)} in: "
            log = [line for line in log if not line.startswith(head)]
        log += step.log
        if step.flaps.outs or step.flaps.held_until > tick or step.card.hold is not None:
            flaps[cid] = step.flaps
    return replace(ledger, cards=cards, log=tuple(log)), flaps
