"""The gateway's vouching of registry entries (``contract/vouch.py``): what it uses of a
registry is only what the owning hosts' reports vouch for.

The registry the follower applied is not used as it is: each entry is taken when it is the
entry this gateway accepted last (same id, host, kind, serial, model, identity, target, path:
its state and health may change), or when it is vouched for by its host's report read *after*
the registry was applied (``vouch.vet``; one bounded read of ``members/``, made only when an
entry is new or changed, never per poll). An entry not vouched for is refused: counted, logged
once per change naming who wrote the registry (its ``leader``) and the field, and the card
keeps the entry last accepted (or is left out). Until the read answers, a new or changed
entry is held the same way (not refused, not counted).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace

from awide_cluster.contract import bounds, keys
from awide_cluster.contract import report as reportdoc
from awide_cluster.contract.registry import CardEntry, Registry
from awide_cluster.contract.report import HostReport
from awide_cluster.contract.untrusted import clean_text
from awide_cluster.contract.vouch import Allowed, Refusal, vet
from awide_cluster.store.port import StoreReader

log = logging.getLogger("awide_gateway_cluster")

LAST_MAX = 400          # characters of the latest refusal kept (and put in the gateway record)


def place(c: CardEntry) -> tuple[object, ...]:
    """What a host vouches for: what the card is and where it is served."""
    return (c.id, c.host, c.kind, c.serial, c.model, c.identity, c.target, c.path)


async def read_reports(store: StoreReader, timeout: float) -> dict[str, HostReport]:
    """Every host's report that decodes and names its own host (one bounded, linearizable
    read); a report that does not decode vouches for nothing."""
    read = await store.read_prefix(keys.MEMBERS, max_keys=bounds.MEMBERS_MAX_KEYS,
                                   max_value_bytes=bounds.REPORT_MAX_BYTES, timeout=timeout)
    out: dict[str, HostReport] = {}
    for kv in read.kvs:
        host = keys.tail(kv.key, keys.MEMBERS)
        try:
            report = reportdoc.decode(kv.value, key=kv.key)
        except reportdoc.ReportError:
            continue
        if report.host == host:
            out[host] = report
    return out


class Vouching:
    """The entries accepted and refused; ``use`` gives the registry the gateway uses."""

    def __init__(self, allowed: Allowed | None) -> None:
        self.allowed = allowed
        self.accepted: dict[str, CardEntry] = {}    # card id -> the entry last accepted
        # card id -> (the refused entry's place, why): a refusal is counted and logged once
        self.refusals: dict[str, tuple[tuple[object, ...], Refusal]] = {}
        self.refused = 0                            # entries refused (one per change)
        self.last = ""                              # the latest refusal, who wrote it first
        self.reads = 0                              # reads of members/ made to vouch

    def _known(self, c: CardEntry) -> bool:
        good = self.accepted.get(c.id)
        return good is not None and place(good) == place(c)

    def pending(self, reg: Registry) -> bool:
        """Whether an entry of ``reg`` is neither accepted nor refused at its place: a read
        of the reports is needed to judge it."""
        return any(not self._known(c) and self.refusals.get(c.id, ((),))[0] != place(c)
                   for c in reg.cards)

    def use(self, reg: Registry, reports: Mapping[str, HostReport] | None) -> Registry:
        """The registry as this gateway uses it. ``reports``: read after ``reg`` was applied
        (None: none read since; a new or changed entry is then held as it was, not
        judged)."""
        cards: list[CardEntry] = []
        for c in reg.cards:
            good = self.accepted.get(c.id)
            if self._known(c):
                cards.append(c)
                self.accepted[c.id] = c             # its state and health as written
                self.refusals.pop(c.id, None)
                continue
            why = vet(c, reports, self.allowed) if reports is not None else None
            if reports is not None and why is None:
                cards.append(c)
                self.accepted[c.id] = c
                self.refusals.pop(c.id, None)
                continue
            if why is not None and self.refusals.get(c.id) != (place(c), why):
                self.refused += 1
                self.refusals[c.id] = (place(c), why)
                self.last = clean_text(f"registry generation {reg.generation} written by "
                                       f"{reg.leader or '?'}: {why.line()}", LAST_MAX)
                log.warning("registry generation %d written by %s: %s; keeping %s",
                            reg.generation, reg.leader or "?", why.line(),
                            "the entry last accepted" if good is not None else "none")
            if good is not None:
                cards.append(good)
        listed = {c.id for c in reg.cards}
        for gone in [cid for cid in self.accepted if cid not in listed]:
            del self.accepted[gone]                 # forgotten: vouched for again if back
        for gone in [cid for cid in self.refusals if cid not in listed]:
            del self.refusals[gone]
        return replace(reg, cards=tuple(cards))

    def problems(self) -> tuple[str, ...]:
        """The refusals in force, one line each."""
        return tuple(why.line() for _, why in self.refusals.values())
