"""How old a key's value is, measured by the reader, never by comparing hosts' clocks.

Host reports carry no timestamp (see contract.report: freshness is (run, seq)), and each
daemon rewrites its report every poll. So status measures a report's age as the time since
its ``mod_revision`` changed, observed over successive reads:

- a key whose mod_revision changed between two reads was written within that interval: its
  age is at most ``now - previous read`` (``Age.at_most``);
- a key whose mod_revision has not changed since it was first seen is at least
  ``now - first seen`` old (``Age.at_least``); with only one read, that is 0 and the age is
  unknown.

One-shot ``awide-cluster status`` makes two reads ``--sample`` seconds apart (default 1 s, one
poll), so a healthy report shows "<=1.0s"; ``--watch`` keeps the observations between
refreshes, so a report that stopped changing shows a growing ">=Ns". All of it is pure: the
caller passes the monotonic time of each read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from awide_cluster.store.types import KeyValue


@dataclass(frozen=True, slots=True)
class Age:
    at_least: float
    at_most: float | None = None        # None: not observed changing, upper bound unknown

    def describe(self) -> str:
        if self.at_most is not None:
            if self.at_least < 0.05:
                return f"<={self.at_most:.1f}s"
            return f"{self.at_least:.1f}-{self.at_most:.1f}s"
        if self.at_least <= 0:
            return "?"
        return f">={self.at_least:.1f}s"

    def to_dict(self) -> dict[str, float | None]:
        return {"at_least": round(self.at_least, 3),
                "at_most": None if self.at_most is None else round(self.at_most, 3)}


@dataclass(frozen=True, slots=True)
class Seen:
    mod_revision: int
    first_seen: float                   # monotonic time of the read that first saw it
    changed_after: float | None         # the read before that (None: first read ever)


@dataclass(frozen=True, slots=True)
class Observations:
    reads: int = 0
    last_read: float | None = None
    keys: Mapping[str, Seen] = field(default_factory=dict)

    def age(self, key: str, now: float) -> Age | None:
        s = self.keys.get(key)
        if s is None:
            return None
        at_most = None if s.changed_after is None else max(0.0, now - s.changed_after)
        return Age(at_least=max(0.0, now - s.first_seen), at_most=at_most)


def observe(prev: Observations, kvs: Iterable[KeyValue] | None, now: float) -> Observations:
    """The observations after one read at ``now``; a failed read (None) changes nothing."""
    if kvs is None:
        return prev
    keys: dict[str, Seen] = {}
    for kv in kvs:
        old = prev.keys.get(kv.key)
        if old is not None and old.mod_revision == kv.mod_revision:
            keys[kv.key] = old
        else:
            keys[kv.key] = Seen(kv.mod_revision, now, prev.last_read)
    return Observations(reads=prev.reads + 1, last_read=now, keys=keys)
