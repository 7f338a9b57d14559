"""What one leader cycle adds to the history: a pure function of the registry before and after,
the decision's log lines (its reasons), the intents it consumed and whether a term begins.

``entries`` derives, per card, one entry per kind of change: ``joined`` (new in the registry),
``forgotten`` (by an intent) or ``dropped`` (left otherwise), ``drained``/``undrained``,
``out``/``in`` (``out`` also when flap damping holds out a card about to return), ``moved``
(its host or name, or its slot), ``conflict`` (marked or resolved); ``intent`` for a
``clear-hold``; then ``intent`` for an operator intent that changed nothing, ``repaired``
when the leader rewrote a registry it could not use, and ``leader`` at the start of a term.
The reasons are the decision's own words (its log line about the card, ``reconcile.describe``
prefix taken off), or, where it logged none, what the registry itself says.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from awide_cluster.contract import slots as slotfn
from awide_cluster.contract.history_ring import Entry, Kind, journal
from awide_cluster.contract.registry import CardEntry, Registry
from awide_cluster.contract.untrusted import HISTORY_REASON_MAX, clean_text
from awide_cluster.daemon.reconcile import Intent, describe


def said(lines: Sequence[str], card: CardEntry, verb: str) -> str | None:
    """The rest of the decision's line about ``card`` that says ``verb`` next ("out: ..."),
    None when it logged none."""
    head = f"{describe(card)} {verb}"
    for line in lines:
        if line.startswith(head):
            return line[len(head):]
    return None


def _hold_began(o: CardEntry, n: CardEntry) -> bool:
    """A hold began (flap damping): none running before, one now, or a longer one."""
    return n.hold is not None and n.hold.active and (
        o.hold is None or not o.hold.active or o.hold.level != n.hold.level)


def _place(s: int | None) -> str:
    return "no slot" if s is None else f"slot {s}"


class _Builder:
    def __init__(self, generation: int, at: str, leader: str) -> None:
        self.generation, self.at, self.leader = generation, at, leader
        self.out: list[Entry] = []

    def add(self, kind: Kind, reason: str, card: CardEntry | None = None, *, host: str = "",
            intent: Intent | None = None) -> None:
        self.out.append(Entry(
            generation=self.generation, kind=kind, reason=reason, at=self.at,
            leader=self.leader, card=card.id if card else "", name=card.name if card else "",
            host=card.host if card else host, by=intent.by if intent else "",
            why=intent.reason if intent else ""))


def taken_reason(host: str, note: str) -> str:
    """The history entry's reason for a leadership taken from ``host`` (its report's note)."""
    return clean_text(f"{host}: {note}", HISTORY_REASON_MAX)


def entries(before: Registry | None, after: Registry, *, leader: str = "",
            lines: Sequence[str] = (),
            intents: Sequence[Intent] = (), refused_intents: Mapping[str, str] | None = None,
            repair: str = "", new_term: bool = False, at: str = "",
            taken: Mapping[str, str] | None = None) -> tuple[Entry, ...]:
    """The history entries of one cycle whose registry went from ``before`` to ``after``
    (``after is before`` when nothing was written): ``leader`` this leader's host (default:
    the one ``after`` names, which is an older leader's when nothing was written in this term
    yet), ``lines`` the decision's log lines,
    ``intents`` the intents it consumed, ``refused_intents`` (key -> why) the intents it
    deleted unread, ``repair`` why it rewrote etcd's registry, ``new_term`` this leader's first
    write of its term, ``at`` its wall clock, ``taken`` (host -> its report's note) the
    leaderships taken from a daemon while its lease lived that the ring does not hold yet."""
    leader = leader or after.leader
    b = _Builder(after.generation, at, leader)
    old = before.by_id if before is not None else {}
    new = after.by_id
    by_card: dict[str, Intent] = {}
    for given in intents:
        by_card.setdefault(given.card_id, given)
    acted: set[str] = set()
    if new_term:
        was = before.leader if before is not None else ""
        b.add("leader", f"{leader} leads" + (f" (the registry was written by {was})"
                                             if was and was != leader else
                                             " (a new term)" if was else ""), host=leader)
    for host, note in sorted((taken or {}).items()):
        b.add("leader", taken_reason(host, note), host=host)
    if repair:
        b.add("repaired", f"registry rewritten: {repair}")
    for cid in sorted(set(old) | set(new)):
        o, n = old.get(cid), new.get(cid)
        it = by_card.get(cid)
        if o is None and n is not None:
            rest = said(lines, n, "admitted as ")
            b.add("joined", f"admitted as {rest}" if rest else f"admitted as {n.state}", n)
            continue
        if o is not None and n is None:
            if it is not None and it.action == "forget":
                acted.add(cid)
                rest = said(lines, o, "forgotten by intent")
                still = " (its host still reports it: it will be admitted again)"
                b.add("forgotten", "left the registry by intent"
                      + (still if rest and rest.endswith(still) else ""), o, intent=it)
            else:
                rest = said(lines, o, "dropped: ")
                b.add("dropped", rest or "left the registry", o)
            continue
        assert o is not None and n is not None
        if o.state != n.state:
            if n.state == "drained":
                acted.add(cid)
                b.add("drained", f"drained (was {o.state})", n,
                      intent=it if it is not None and it.action == "drain" else None)
            elif o.state == "drained":
                acted.add(cid)
                b.add("undrained", f"undrained: {n.state}", n,
                      intent=it if it is not None and it.action == "undrain" else None)
            elif n.state == "out":
                rest = said(lines, o, "out: ")
                b.add("out", rest or n.reason or "out", n)
            else:
                rest = said(lines, o, "in: ")
                b.add("in", rest or "healthy again", n)
        elif n.state == "out" and _hold_began(o, n):
            # flap damping: a card about to return is held out (no state change); an ``out``
            # entry, so that every reader of the history knows the kind
            b.add("out", n.reason or "held out (flap damping)", n)
        if it is not None and it.action == "clear-hold":
            acted.add(cid)
            b.add("intent", f"clear-hold: {'hold cleared, ' if o.hold else 'no hold, '}"
                  f"state {n.state}", n, intent=it)
        if (o.host, o.name) != (n.host, n.name):
            b.add("moved", f"now reported as {n.host}/{n.name} (was {o.host}/{o.name})", n)
        if o.conflict != n.conflict:
            b.add("conflict", f"in conflict: {n.conflict}" if n.conflict
                  else "conflict resolved", n)
    for m in slotfn.moves(before.slots if before is not None else slotfn.EMPTY, after.slots):
        c = new.get(m.card_id) or old.get(m.card_id)
        if c is None or m.card_id not in new:
            continue                # a card that left: its forgotten/dropped entry says so
        what = "placed" if m.old is None else "left its slot" if m.new is None else "moved"
        b.add("moved", f"{what}: {_place(m.old)} -> {_place(m.new)}", c)
    for given in sorted(intents, key=lambda i: (i.card_id, i.mod_revision)):
        if given.card_id in acted:
            continue
        c = old.get(given.card_id) or new.get(given.card_id)
        if c is None:
            b.add("intent", f"{given.action} ignored: card {given.card_id} is not in the "
                  "registry", intent=given)
            continue
        rest = said(lines, c, f"{given.action} from ") or said(lines, c, given.action)
        tail = rest.rpartition(": ")[2] if rest else f"state {c.state}"
        b.add("intent", f"{given.action} changed nothing: {tail}", c, intent=given)
    for key, why in sorted((refused_intents or {}).items()):
        b.add("intent", f"intent {key} ignored and deleted: {why}")
    return tuple(b.out)


# A card's transitions: the history's words replace the decision's line about them in the log.
TRANSITIONS: Mapping[str, str] = {"out": "out: ", "in": "in: ", "drained": "drained by intent",
                                  "undrained": "undrained by intent"}


def journal_lines(news: Sequence[Entry], lines: Sequence[str], before: Registry | None,
                  after: Registry) -> list[tuple[int, str, Entry | None]]:
    """What the leader logs for one written cycle: (level, line, the entry it words or None),
    the decision's lines in order, each line about a card's transition (``TRANSITIONS``)
    replaced by that transition's history entry in the history's words
    (``history_ring.journal``: the same line as ``awide-cluster history``, at warning for a
    card out); a transition no line spoke of is added at the end. Pure."""
    cards = {**(before.by_id if before is not None else {}), **after.by_id}
    olds = before.by_id if before is not None else {}
    heads: dict[int, Entry] = {}
    extra: list[Entry] = []
    taken: set[int] = set()
    for e in news:
        if e.kind not in TRANSITIONS or not e.card:
            continue
        found = None
        for c in (olds.get(e.card), cards.get(e.card)):
            if c is None:
                continue
            head = f"{describe(c)} {TRANSITIONS[e.kind]}"
            found = next((i for i, line in enumerate(lines)
                          if i not in taken and line.startswith(head)), None)
            if found is not None:
                break
        if found is None:
            extra.append(e)
        else:
            taken.add(found)
            heads[found] = e
    out: list[tuple[int, str, Entry | None]] = []
    for i, line in enumerate(lines):
        if i in heads:
            level, text = journal(heads[i])
            out.append((level, text, heads[i]))
        else:
            out.append((logging.INFO, line, None))
    for e in extra:
        level, text = journal(e)
        out.append((level, text, e))
    return out


def own_changed(before: Registry | None, after: Registry, host: str) -> bool:
    """Whether ``host``'s cards changed between two registries a follower read (one joined or
    left, or its state or conflict changed): then it reads the history for their entries."""
    if before is None:
        return False

    def mine(r: Registry) -> dict[str, tuple[str, str | None]]:
        return {c.id: (c.state, c.conflict) for c in r.cards if c.host == host}

    return mine(before) != mine(after)


def own_entries(ring: Sequence[Entry], host: str, after_generation: int, upto: int,
                after_seq: int = 0) -> tuple[Entry, ...]:
    """The entries about ``host``'s cards of the generations a follower just moved through
    (``after_generation`` < generation <= ``upto``), not already logged (seq > ``after_seq``
    within the same ring), oldest first. Pure."""
    return tuple(e for e in ring if e.card and e.host == host and e.seq > after_seq
                 and after_generation < e.generation <= upto)
