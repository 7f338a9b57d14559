"""Card transitions in the daemons' logs: the leader logs each one (in, out, drained,
undrained) in the history's words instead of the decision's line, at warning for a card out;
the card's own host logs the history's entries about its cards. One wording
(``history_ring.journal``, ``Entry.words``) for ``awide-cluster history`` and the journal.
Pure: ``decide`` through the test leader, no etcd."""

from __future__ import annotations

import logging
from dataclasses import replace

from awide_cluster.contract import history_ring as histdoc
from awide_cluster.daemon.history_entries import (
    entries,
    journal_lines,
    own_changed,
    own_entries,
)
from awide_cluster.daemon.reconcile import Intent
from tests.daemon.builders import Leader, card, cid, report


def _words_of(history_line: str) -> str:
    """A history line without its generation and time, padding collapsed."""
    return " ".join(history_line.split()[3:])


def test_the_journal_line_is_the_history_line_without_its_time():
    e = histdoc.Entry(generation=7, kind="out", reason="3 bad polls in a row, last: x",
                      at="2026-12-03T11:00:00+00:00", card="c0123456789a", name="card0",
                      host="h1", seq=3)
    level, line = histdoc.journal(e)
    assert level == logging.WARNING
    assert line == "gen 7 out card c0123456789a (h1/card0): 3 bad polls in a row, last: x"
    assert " ".join(line.split()[2:]) == _words_of(e.line())
    drained = replace(e, kind="drained", reason="drained (was in)", by="ops@b", why="fan")
    level, line = histdoc.journal(drained)
    assert level == logging.INFO and line.endswith("drained (was in) [by ops@b: fan]")
    assert " ".join(line.split()[2:]) == _words_of(drained.line())
    assert histdoc.journal(replace(e, kind="conflict", reason="conflict resolved"))[0] \
        == logging.INFO
    assert histdoc.journal(replace(e, kind="conflict", reason="in conflict: SN"))[0] \
        == logging.WARNING


def _leader() -> tuple[Leader, list]:
    ld = Leader("h1")
    cards = [card("card0", "SN0"), card("card1", "SN1")]
    ld.step(report("h1", 1, *cards))
    return ld, cards


def test_the_leader_logs_a_card_out_in_the_historys_words_once():
    ld, _ = _leader()
    sick = card("card0", "SN0", healthy=False, reason="unit awide-store@card0.service is failed")
    seq = 2
    while ld.state(cid("SN0")) != "out":
        prev = ld.written
        d = ld.step(report("h1", seq, sick, card("card1", "SN1")))
        seq += 1
        assert seq < 10
    news = entries(prev, d.registry, lines=d.log, at="t")
    logged = journal_lines(news, d.log, prev, d.registry)
    out = [e for e in news if e.kind == "out"]
    assert len(out) == 1
    said = [(level, line) for level, line, entry in logged if entry is not None]
    assert said == [histdoc.journal(out[0])]
    assert said[0][0] == logging.WARNING and said[0][1].startswith(
        f"gen {d.registry.generation} out card {cid('SN0')} (h1/card0): 3 bad polls in a row")
    # the decision's own line about it is replaced, not repeated; the other lines stay
    assert not any(" out: 3 bad polls" in line for _, line, _ in logged)
    assert len(logged) == len(d.log)
    assert [line for _, line, e in logged if e is None] == [
        line for line in d.log if f" out: {d.registry.card(cid('SN0')).health}" not in line
        and " out: 3 bad polls" not in line]


def test_drain_and_undrain_are_logged_with_who_and_why():
    ld, cards = _leader()
    reg = ld.written
    drain = Intent(card_id=cid("SN1"), action="drain", mod_revision=5, by="ops@laptop",
                   reason="replace the fan")
    d = ld.step(report("h1", 2, *cards), intents=[drain])
    news = entries(reg, d.registry, lines=d.log, intents=[drain])
    logged = journal_lines(news, d.log, reg, d.registry)
    lines = [line for _, line, e in logged if e is not None]
    assert lines == [f"gen {d.registry.generation} drained card {cid('SN1')} (h1/card1): "
                     "drained (was in) [by ops@laptop: replace the fan]"]
    assert not any("drained by intent" in line for _, line, _ in logged)
    reg = ld.written
    undrain = Intent(card_id=cid("SN1"), action="undrain", mod_revision=7, by="ops@laptop",
                     reason="fan replaced")
    d = ld.step(report("h1", 3, *cards), intents=[undrain])
    news = entries(reg, d.registry, lines=d.log, intents=[undrain])
    [(level, line, entry)] = [x for x in journal_lines(news, d.log, reg, d.registry)
                              if x[2] is not None]
    assert level == logging.INFO and entry is not None and entry.kind == "undrained"
    assert line.endswith("undrained: in [by ops@laptop: fan replaced]")


def test_a_transition_no_line_spoke_of_is_still_logged():
    ld, cards = _leader()
    reg = ld.written
    after = replace(reg, generation=reg.generation + 1, cards=tuple(
        replace(c, state="out", reason="gone") if c.id == cid("SN0") else c
        for c in reg.cards))
    news = entries(reg, after, lines=(), at="t")
    assert journal_lines(news, ["something else"], reg, after) == [
        (logging.INFO, "something else", None),
        (logging.WARNING, f"gen {after.generation} out card {cid('SN0')} (h1/card0): gone",
         news[0])]


def test_the_own_host_logs_its_cards_entries_of_the_generations_it_moved_through():
    ld, cards = _leader()
    reg = ld.written
    moved = replace(reg, generation=reg.generation + 2, cards=tuple(
        replace(c, state="drained") if c.id == cid("SN1") else c for c in reg.cards))
    assert own_changed(reg, moved, "h1") and not own_changed(reg, moved, "h2")
    assert not own_changed(None, moved, "h1") and not own_changed(reg, reg, "h1")

    def e(gen: int, host: str, seq: int, c: str = "c0123456789a") -> histdoc.Entry:
        return histdoc.Entry(generation=gen, kind="out", reason="r", card=c, host=host,
                             name="card0", seq=seq)

    ring = (e(reg.generation, "h1", 1), e(reg.generation + 1, "h1", 2),
            e(reg.generation + 1, "h2", 3), e(reg.generation + 2, "h1", 4),
            e(reg.generation + 3, "h1", 5),
            histdoc.Entry(generation=reg.generation + 1, kind="leader", reason="h2 leads",
                          host="h1", seq=6))
    got = own_entries(ring, "h1", reg.generation, moved.generation)
    assert [x.seq for x in got] == [2, 4]       # its cards', in the range, cards only
    assert [x.seq for x in own_entries(ring, "h1", reg.generation, moved.generation,
                                       after_seq=2)] == [4]
