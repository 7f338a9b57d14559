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

The same holds for the registry's generations: ``published`` keeps when this reader first saw
each generation, so a gateway that applies generation ``a`` while the registry is at ``g`` has
been behind for at least ``now - first seen(the oldest generation above a)`` by the reader's
own clock (``behind_for``). The leader's ``written_at`` is never compared with this machine's
clock: with the leader's clock an hour off, a gateway one second behind is one second behind.
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
    published: Mapping[int, float] = field(default_factory=dict)   # generation -> first seen

    def behind_for(self, applied: int, current: int, now: float) -> float:
        """How long, at least, a reader has seen a gateway at ``applied`` behind ``current``:
        since it first saw a generation above ``applied`` (0 when it never saw one before)."""
        firsts = [t for g, t in self.published.items() if applied < g <= current]
        return max(0.0, now - min(firsts)) if firsts else 0.0

    def age(self, key: str, now: float) -> Age | None:
        s = self.keys.get(key)
        if s is None:
            return None
        at_most = None if s.changed_after is None else max(0.0, now - s.changed_after)
        return Age(at_least=max(0.0, now - s.first_seen), at_most=at_most)


def record_read(prev: Observations, kvs: Iterable[KeyValue] | None, now: float) -> Observations:
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
    return Observations(reads=prev.reads + 1, last_read=now, keys=keys,
                        published=prev.published)


PUBLISHED_KEPT = 64         # generations remembered (the newest)


def saw_generation(prev: Observations, generation: int | None, now: float) -> Observations:
    """The observations once a read at ``now`` found the registry at ``generation`` (None: no
    registry could be read, nothing changes). A registry that went back (a restored etcd)
    forgets the generations above it."""
    if generation is None:
        return prev
    kept = {g: t for g, t in prev.published.items() if g <= generation}
    kept.setdefault(generation, now)
    if len(kept) > PUBLISHED_KEPT:
        kept = dict(sorted(kept.items())[-PUBLISHED_KEPT:])
    return Observations(reads=prev.reads, last_read=prev.last_read, keys=prev.keys,
                        published=kept)
