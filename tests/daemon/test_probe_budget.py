"""A probe that could not run for want of file descriptors (EMFILE) or memory is unknown, never
a bad poll: the card keeps its last observation, the report says why in ``probe_note``, and
``status`` shows ``probes_starved``; once the probes run again the note goes."""

from __future__ import annotations

import errno
import os

from awide_cluster.api.metrics import DaemonMetrics
from awide_cluster.cards.model import (
    DISCOVERY,
    STORE,
    CardObservation,
    LocalCard,
    ProbeResult,
    summarize,
)
from awide_cluster.cards.spec import CardSpec
from awide_cluster.config import daemon as daemon_config
from awide_cluster.contract import report as reportdoc
from awide_cluster.daemon.clock import SystemClock
from awide_cluster.daemon.probes import PROBE_FD_RESERVE, CardProbes, probe_note, starved
from awide_cluster.daemon.reporter import Cards, build_report, each_card
from awide_cluster.operator.judge.daemons import judge_report
from awide_cluster.operator.snapshot import StatusPolicy
from awide_cluster.store.types import KeyValue

EMFILE = os.strerror(errno.EMFILE)
CFG = daemon_config.parse({
    "cluster": "c1", "host": "h1", "hosts": ["h1", "h2", "h3"],
    "etcd": {"endpoints": ["http://127.0.0.1:2379"]},
    "cards": [{"name": "c0", "kind": "dir", "path": "/srv/c0",
               "store": {"tcp": "127.0.0.1:7000"}}]})


def _healthy(name: str = "c0") -> CardObservation:
    card = LocalCard(name, "dir", "SN1", "dir-card", "id-1", "/srv/c0", None, None)
    return summarize(name, card, [ProbeResult(STORE, True, "store answers", 0.01)])


def _starved(name: str = "c0") -> CardObservation:
    why = f"card not found: label unreadable: [Errno {errno.EMFILE}] {EMFILE}"
    return summarize(name, None, [ProbeResult(DISCOVERY, False, why, 0.0)])


def _sick(name: str = "c0") -> CardObservation:
    card = LocalCard(name, "dir", "SN1", "dir-card", "id-1", "/srv/c0", None, None)
    return summarize(name, card, [ProbeResult(STORE, False, "store: connection refused", 0.0)])


class Scripted:
    """A card observer that returns the next observation of its script."""

    def __init__(self, *script: CardObservation) -> None:
        self.script = list(script)

    async def observe_cards(self, cards: Cards) -> list[CardObservation]:
        return await each_card(self._next, cards)

    async def _next(self, spec: CardSpec, known_identity: str | None) -> CardObservation:
        return self.script.pop(0)


def test_starved_is_told_by_the_errors_words_only():
    assert starved(_starved()) is not None
    assert starved(_healthy()) is None and starved(_sick()) is None


def test_the_note_names_the_cards_and_the_reserve():
    assert probe_note([], 10, 4096) == ""
    note = probe_note([("c0", f"label unreadable: {EMFILE}")], 10, 4096)
    assert "probes of c0 could not run" in note and EMFILE in note
    low = probe_note([], 4096 - PROBE_FD_RESERVE + 1, 4096)
    assert f"under the probes' reserve of {PROBE_FD_RESERVE}" in low


async def test_a_starved_probe_keeps_the_last_observation_and_says_so():
    probes = CardProbes(CFG, SystemClock(), DaemonMetrics(host="h1", role="storage",
                                                          version="x"),
                        observer=Scripted(_healthy(), _starved(), _sick(), _healthy()))
    first = await probes.observe(CFG, None)
    assert first[0].healthy and probes.note == ""
    second = await probes.observe(CFG, None)           # EMFILE: unknown, the last stands
    assert second[0] == first[0] and "probes of c0 could not run" in probes.note
    third = await probes.observe(CFG, None)            # a real failure is reported as is
    assert not third[0].healthy and probes.note == ""
    fourth = await probes.observe(CFG, None)
    assert fourth[0].healthy and probes.note == ""


def test_the_report_carries_the_note_and_status_shows_it():
    note = probe_note([("c0", f"label unreadable: {EMFILE}")], 10, 4096)
    rep = build_report(host="h1", role="storage", version="x", api="", run="r1", seq=3,
                       dev_cluster=False, specs=CFG.cards, observations=[_healthy()],
                       probe_note=note)
    raw = reportdoc.encode(rep)
    assert reportdoc.decode(raw).probe_note == note
    assert b"probe_note" not in reportdoc.encode(build_report(
        host="h1", role="storage", version="x", api="", run="r1", seq=3, dev_cluster=False,
        specs=CFG.cards, observations=[_healthy()]))  # absent when empty: old readers
    _, _, problems = judge_report("h1", KeyValue("members/h1", raw, 1, 2, 1), None, "h1",
                                  StatusPolicy())
    (p,) = [p for p in problems if p.code == "probes_starved"]
    assert p.severity == "warning" and "probes of c0 could not run" in p.message
