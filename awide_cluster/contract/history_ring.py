"""The history: a bounded ring of the newest registry changes, one JSON document at
``history``, written by the leader only, in the same fenced transaction as the registry.

etcd compacts its old revisions, so what happened is kept in the value itself, not in the key's
past versions. Each entry says what one registry generation changed (a card joined, went out,
came back in, moved, was forgotten, drained, undrained, dropped, put in or out of conflict, a
leader change, an operator's intent that changed nothing, a repair) with the decision's reason,
and for operator actions who and why. ``at`` is the leader's wall clock, information only.

Schema 1 (docs/registry.md, "The history")::

    {"schema": 1, "ring": "3f9a0c1b2d4e", "seq": 41,
     "entries": [{"seq": 41, "generation": 7, "kind": "out", "card": "c3f1...", "name": "card0",
                  "host": "h1", "reason": "3 bad polls in a row, last: ...",
                  "at": "2026-11-30T14:00:00+00:00", "leader": "h2", "by": "", "why": ""}]}

Entries are oldest first, ``seq`` grows by one per entry within a ring (the document's ``seq``
is the last one given, also when the bounds dropped that entry); ``ring`` names the ring (a
fresh ring, after one that could not be read, gets a new one). Bounded on both sides: the
writer keeps the newest ``HISTORY_MAX_ENTRIES`` entries within ``HISTORY_MAX_BYTES``
(``append``); a reader refuses anything else with ``HistoryError`` (problem ``history_corrupt``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field

from awide_cluster.contract import bounds, keys
from awide_cluster.contract import untrusted as u
from awide_cluster.contract.untrusted import Name
from awide_cluster.contract.wire import validated

SCHEMA_VERSION = 1
Kind = Literal["joined", "in", "out", "moved", "forgotten", "dropped", "drained",
               "undrained", "conflict", "leader", "intent", "repaired"]
KINDS: tuple[Kind, ...] = ("joined", "in", "out", "moved", "forgotten", "dropped", "drained",
                           "undrained", "conflict", "leader", "intent", "repaired")


class HistoryError(u.BadValue):
    """The history document is not valid; the message names the key and the field."""

    what = "history"
    default_problem = u.HISTORY_CORRUPT


@dataclass(frozen=True, slots=True)
class Entry:
    """One change of one registry generation. ``seq`` is given by ``append``."""

    generation: int
    kind: Kind
    reason: str
    at: str = ""            # the leader's wall clock when it decided, information only
    leader: str = ""        # the leader that wrote it
    card: str = ""          # the card id, when a card is meant
    name: str = ""          # its name in its host's config
    host: str = ""
    by: str = ""            # an operator action: who (user@host)
    why: str = ""           # an operator action: the --reason
    seq: int = 0

    def __post_init__(self) -> None:
        # what the leader writes is what every reader accepts (untrusted.clean_text)
        for name, limit in (("reason", u.HISTORY_REASON_MAX), ("at", u.TIME_TEXT_MAX),
                            ("by", u.BY_MAX), ("why", u.INTENT_REASON_MAX)):
            object.__setattr__(self, name, u.clean_text(getattr(self, name), limit))

    def to_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "generation": self.generation, "kind": self.kind,
                "card": self.card, "name": self.name, "host": self.host,
                "reason": self.reason, "at": self.at, "leader": self.leader, "by": self.by,
                "why": self.why}

    def words(self, pad: int = 0) -> str:
        """What happened, without generation and time: the kind (padded to ``pad``), the card,
        the reason, who/why. The one wording of a change: the history's ``line`` and the
        daemons' log line about it (``journal``) both say it so."""
        what = ""
        if self.card:
            where = f"{self.host}/{self.name}" if self.host and self.name else self.host
            what = f" card {self.card}" + (f" ({where})" if where else "")
        elif self.host and self.kind != "leader":
            what = f" {self.host}"
        op = ""
        if self.by or self.why:
            op = f" [by {self.by or '?'}" + (f": {self.why}" if self.why else "") + "]"
        return f"{self.kind:<{pad}}{what}: {self.reason}{op}"

    def line(self) -> str:
        """One readable line: generation, time, kind, the card, the reason, who/why."""
        at = self.at or "-"
        return f"gen {self.generation:<6} {at:<25} {self.words(9)}"


# A change a daemon logs at warning (the others at info): a card that left service or the
# registry, or was put in conflict.
WARNING_KINDS = frozenset({"out", "dropped", "conflict"})


def journal(e: Entry) -> tuple[int, str]:
    """The log level (``logging.WARNING``/``INFO``) and line of a change, as the leader and
    the card's own host log it: the history's words after the generation, e.g. ``gen 7 out
    card c1a2b3c4d5e6 (h1/card0): 3 bad polls in a row, last: ...``."""
    warn = e.kind in WARNING_KINDS and not (e.kind == "conflict"
                                            and e.reason.startswith("conflict resolved"))
    return (logging.WARNING if warn else logging.INFO), f"gen {e.generation} {e.words()}"


@dataclass(frozen=True, slots=True)
class History:
    ring: str                           # this ring's id ("" : none written yet)
    entries: tuple[Entry, ...] = ()     # oldest first, seq increasing
    seq: int = 0                        # the last seq given (its entry may have been dropped)

    @property
    def next_seq(self) -> int:
        return max(self.seq, self.entries[-1].seq if self.entries else 0) + 1


EMPTY = History(ring="")


def to_dict(h: History) -> dict[str, Any]:
    return {"schema": SCHEMA_VERSION, "ring": h.ring, "seq": h.next_seq - 1,
            "entries": [e.to_dict() for e in h.entries]}


def _dumps(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def encode(h: History) -> bytes:
    return _dumps(to_dict(h))


def append(h: History, new: Sequence[Entry], *, ring: str = "",
           max_entries: int = bounds.HISTORY_MAX_ENTRIES,
           max_bytes: int = bounds.HISTORY_MAX_BYTES) -> History:
    """``h`` with ``new`` added (numbered on from ``h``), then the oldest entries dropped until
    at most ``max_entries`` remain and the document encodes to at most ``max_bytes``.
    ``ring``: the id of the ring when ``h`` has none yet."""
    seq = h.next_seq
    numbered = [replace(e, seq=seq + i) for i, e in enumerate(new)]
    last = seq + len(numbered) - 1
    entries = (*h.entries, *numbered)[-max_entries:] if max_entries > 0 else ()
    whole = History(ring=h.ring or ring, entries=entries, seq=last)
    if len(encode(whole)) <= max_bytes:
        return whole                # all fit: the loop below would keep every entry
    head = len(encode(History(ring=h.ring or ring, seq=last)))
    kept: list[Entry] = []
    size = head
    for e in reversed(entries):
        size += len(_dumps(e.to_dict())) + (1 if kept else 0)
        if size > max_bytes:
            break
        kept.append(e)
    return History(ring=h.ring or ring, entries=tuple(reversed(kept)), seq=last)


# ---------------------------------------------------------------- wire format

class _Strict(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)


_Reason: TypeAlias = Annotated[str, u.chars(u.HISTORY_REASON_MAX), u.PRINTABLE]
_Time: TypeAlias = Annotated[str, u.chars(u.TIME_TEXT_MAX), u.PRINTABLE]
_By: TypeAlias = Annotated[str, u.chars(u.BY_MAX), u.PRINTABLE]
_Why: TypeAlias = Annotated[str, u.chars(u.INTENT_REASON_MAX), u.PRINTABLE]
_MaybeName: TypeAlias = Name | Literal[""]


class _EntryDoc(_Strict):
    seq: int = Field(ge=1)
    generation: int = Field(ge=0)
    kind: Kind
    reason: _Reason
    at: _Time = ""
    leader: _MaybeName = ""
    card: _MaybeName = ""
    name: _MaybeName = ""
    host: _MaybeName = ""
    by: _By = ""
    why: _Why = ""


class _HistoryDoc(_Strict):
    schema_: int = Field(alias="schema")
    ring: Name
    seq: int = Field(default=0, ge=0)
    entries: list[_EntryDoc] = Field(max_length=bounds.HISTORY_MAX_ENTRIES)


def decode(raw: bytes | str, *, key: str = keys.HISTORY) -> History:
    """Parse and check a history document read at ``key``. Raises HistoryError naming the key
    and what is wrong, and nothing else, whatever ``raw`` holds."""
    doc = validated(_HistoryDoc, raw, schema_version=SCHEMA_VERSION, error=HistoryError,
                    unknown=HistoryError, limits=u.HISTORY_LIMITS, key=key)
    entries = tuple(Entry(seq=e.seq, generation=e.generation, kind=e.kind, reason=e.reason,
                          at=e.at, leader=e.leader, card=e.card, name=e.name, host=e.host,
                          by=e.by, why=e.why) for e in doc.entries)
    for i in range(1, len(entries)):
        if entries[i].seq <= entries[i - 1].seq:
            raise HistoryError(f"field entries[{i}].seq: {entries[i].seq} does not follow "
                               f"{entries[i - 1].seq}", key=key)
    if entries and doc.seq < entries[-1].seq:
        raise HistoryError(f"field seq: {doc.seq} is below the last entry's "
                           f"{entries[-1].seq}", key=key)
    return History(ring=doc.ring, entries=entries, seq=max(doc.seq, entries[-1].seq if entries
                                                           else 0))

