"""What ``awide-cluster history`` and ``status --watch`` show of the history ring: pure.

``parse_since`` reads ``--since`` (a duration back from now, or an ISO time), ``select`` keeps
the entries of one card and/or since a time, ``Tail`` follows the ring from one read to the
next and gives the entries that arrived since the last one.

Times are the leader's wall clock when it decided (information only): ``--since`` compares
them with this machine's clock, so a leader whose clock is off shifts what ``--since 10m``
shows by as much; the order of the entries (``seq``, generations) never depends on a clock.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from awide_cluster.contract.history_ring import Entry, History

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhdw]?)$")
_UNIT = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


class BadSince(ValueError):
    pass


def parse_since(text: str, now: datetime) -> datetime:
    """``--since``: ``90s``, ``10m``, ``2h``, ``1d``, ``1w`` (a bare number is seconds) back
    from ``now``, or an ISO-8601 time (without a zone: UTC)."""
    t = text.strip()
    m = _DURATION.match(t)
    if m:
        seconds = float(m.group(1)) * _UNIT[m.group(2)]
        if seconds > 100 * 365 * 86400:
            raise BadSince(f"--since {text!r}: more than 100 years back")
        return now - timedelta(seconds=seconds)
    try:
        at = datetime.fromisoformat(t)
    except ValueError:
        raise BadSince(f"--since {text!r}: neither a duration (90s, 10m, 2h, 1d, 1w) nor an "
                       "ISO time (2026-11-30T14:00:00+00:00)") from None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def entry_time(e: Entry) -> datetime | None:
    """The entry's time (the leader's clock), None when it has none or it does not parse."""
    try:
        at = datetime.fromisoformat(e.at)
    except ValueError:
        return None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def names_card(e: Entry, card: str) -> bool:
    """``--card``: the card's id, its name, or host/name."""
    return bool(e.card) and card in (e.card, e.name, f"{e.host}/{e.name}")


def select(h: History, *, card: str | None = None,
           since: datetime | None = None) -> tuple[Entry, ...]:
    """The entries of ``card`` (None: every entry) whose time is ``since`` or later (None: any
    time; an entry without a readable time is left out when a time is given), oldest first."""
    out = []
    for e in h.entries:
        if card is not None and not names_card(e, card):
            continue
        if since is not None:
            at = entry_time(e)
            if at is None or at < since:
                continue
        out.append(e)
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Tail:
    """Where a live tail is in the ring: its id and the last ``seq`` already seen (None: no
    read yet). ``step`` gives the entries that arrived since, and the tail after them."""

    ring: str | None = None
    seq: int = 0

    def step(self, h: History | None) -> tuple[Tail, tuple[Entry, ...]]:
        if h is None:
            return self, ()
        last = h.entries[-1].seq if h.entries else 0
        if self.ring is None:                   # the first read: the baseline, nothing new
            return Tail(h.ring, last), ()
        if h.ring != self.ring:                 # a fresh ring: all of it is new
            return Tail(h.ring, last), h.entries
        return Tail(h.ring, max(last, self.seq)), tuple(e for e in h.entries if e.seq > self.seq)
