"""Regression (found by the fault campaign): polling jitter (a host report that did
not advance between two leader cycles) must not rewrite the registry for a card that is
already sick. A card that stayed out (e.g. the card that was swapped out of a directory)
alternated between its reason and "report did not advance" at every jitter: the registry was
rewritten about twice a second with nothing changed for service, and every gateway applied a
new generation each time."""

from __future__ import annotations

from .builders import Leader, card, cid, entry, report

A = cid("SNA")


def test_jitter_does_not_rewrite_the_reason_of_a_sick_card() -> None:
    L = Leader(sick_polls=3)
    L.step(report("h2", 1, card("card0", "SNA")))
    sick = card("card0", "SNA", healthy=False, reason="store: connection refused")
    for seq in (2, 3, 4):
        L.step(report("h2", seq, sick))
    assert L.state(A) == "out"
    writes, gen = L.writes, L.written.generation
    # jitter: the same report twice (stale), then a fresh one, over and over
    seq = 4
    for _ in range(5):
        d = L.step(report("h2", seq, sick))            # did not advance
        assert not d.write, d.log
        seq += 1
        d = L.step(report("h2", seq, sick))            # advanced, still sick
        assert not d.write, d.log
    assert (L.writes, L.written.generation) == (writes, gen)
    c = entry(L.registry, A)
    assert (c.state, c.health, c.reason) == ("out", "sick", "store: connection refused")


def test_a_report_that_stops_advancing_still_shows_and_takes_the_card_out() -> None:
    L = Leader(sick_polls=3)
    L.step(report("h2", 1, card("card0", "SNA")))
    L.step(report("h2", 2, card("card0", "SNA")))
    assert not L.step(report("h2", 2, card("card0", "SNA"))).write      # jitter: not shown
    assert L.step(report("h2", 2, card("card0", "SNA"))).write          # twice: shown
    assert "did not advance" in entry(L.registry, A).reason
    L.step(report("h2", 2, card("card0", "SNA")))
    assert L.state(A) == "out"


def test_a_sick_report_read_twice_counts_once() -> None:
    """sick_polls=3 means three sick reports in a row: a cycle that reads the same sick report
    again (the host's next poll had not landed yet) is not a third one."""
    L = Leader(sick_polls=3)
    L.step(report("h2", 1, card("card0", "SNA")))
    sick = card("card0", "SNA", healthy=False, reason="controller connecting")
    L.step(report("h2", 2, sick))           # sick report 1
    L.step(report("h2", 2, sick))           # the same report again: jitter
    L.step(report("h2", 3, sick))           # sick report 2
    assert L.state(A) == "in"
    L.step(report("h2", 4, sick))           # sick report 3
    assert L.state(A) == "out"


def test_a_host_that_stops_reporting_a_sick_card_still_loses_it() -> None:
    L = Leader(sick_polls=3)
    L.step(report("h2", 1, card("card0", "SNA")))
    sick = card("card0", "SNA", healthy=False, reason="controller connecting")
    L.step(report("h2", 2, sick))           # 1
    for _ in range(3):                      # frozen: the same report over and over
        L.step(report("h2", 2, sick))       # not counted once, then 2, 3
    assert L.state(A) == "out"
