"""A planned absence in the leader's pure decision: a host report marked restarting holds its
host's cards (no observation: state and counters unchanged) for at most ``held_polls`` poll
cycles; past that, or once the report is gone, its absence counts as before."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from awide_cluster.contract import report as reportdoc
from awide_cluster.contract.report import HostReport, ReportError, Restarting
from awide_cluster.daemon.reconcile import held_polls
from awide_cluster.daemon.restart import deadline_text, restarting_report

from .builders import Leader, card, cid, entry, report

A = cid("SNA")
B = cid("SNB")


def marked(r: HostReport, grace: int = 5) -> HostReport:
    return restarting_report(r, grace=grace, wall="2026-12-03T08:00:00+00:00")


def started(sick_polls: int = 3) -> tuple[Leader, HostReport]:
    """A leader that admitted h2's card A, and h2's last report."""
    L = Leader(sick_polls=sick_polls)
    L.step(report("h2", 1, card("card0", "SNA")))
    last = report("h2", 2, card("card0", "SNA"))
    L.step(last)
    assert L.state(A) == "in"
    return L, last


def test_held_polls_is_the_grace_in_polls_and_one_more() -> None:
    assert held_polls(120, 1.0) == 121
    assert held_polls(5, 1.0) == 6
    assert held_polls(1, 0.25) == 5
    assert held_polls(3, 2.0) == 3


def test_the_restarting_report_names_its_deadline() -> None:
    r = marked(report("h2", 7, card("card0", "SNA")), grace=120)
    assert r.seq == 8 and r.restarting == Restarting(grace=120,
                                                     until="2026-12-03T08:02:00+00:00")
    assert deadline_text("not a time", 5) == ""


def test_a_restarting_host_keeps_its_cards_in_for_its_grace() -> None:
    L, last = started()
    writes = L.writes
    held = marked(last, grace=5)
    for i in range(held_polls(5, L.policy.poll_interval)):
        d = L.step(held)
        assert not d.write
        assert d.log == (("host h2 restarting (its daemon stopped cleanly, back by "
                          "2026-12-03T08:00:05+00:00): its cards held for at most 6 poll(s)",)
                         if i == 0 else ())
    assert L.state(A) == "in" and entry(L.registry, A).health == "ok"
    assert L.memory.health[A].bad == 0
    # the daemon started again: a new run, fresh and healthy; nothing was written meanwhile
    d = L.step(report("h2", 1, card("card0", "SNA"), run="run2"))
    assert L.state(A) == "in" and L.writes == writes
    assert d.log == ("host h2 no longer restarting after 6 poll(s): its daemon reports again",)


def test_past_its_grace_a_restarting_report_counts_as_not_advancing() -> None:
    L, last = started(sick_polls=3)
    held = marked(last, grace=2)
    for _ in range(held_polls(2, L.policy.poll_interval)):
        L.step(held)
    assert L.state(A) == "in"
    d = L.step(held)
    assert d.log[0] == ("host h2 still restarting after its grace (2 s, 3 polls): its report "
                        "now counts as not advancing")
    for _ in range(2):
        L.step(held)
    assert L.state(A) == "out"
    assert "did not advance" in entry(L.registry, A).reason


def test_once_the_restarting_report_expired_no_report_counts() -> None:
    L, last = started(sick_polls=3)
    L.step(marked(last))
    L.step(marked(last))
    for _ in range(3):
        L.step()
    assert L.state(A) == "out"
    assert "no report from h2" in entry(L.registry, A).reason


def test_held_cards_keep_their_state_and_counters() -> None:
    L = Leader(sick_polls=3)
    L.step(report("h2", 1, card("card0", "SNA"), card("card1", "SNB")))
    sick = card("card1", "SNB", healthy=False, reason="store down")
    for seq in (2, 3, 4):
        L.step(report("h2", seq, card("card0", "SNA"), card("card1", "SNB", healthy=False,
                                                             reason="store down")))
    assert (L.state(A), L.state(B)) == ("in", "out")
    L2 = Leader(sick_polls=3)
    L2.step(report("h2", 1, card("card0", "SNA")))
    last = report("h2", 2, card("card0", "SNA", healthy=False, reason="store down"))
    L2.step(last)
    before = L2.memory.health[A]
    assert before.bad == 1
    for _ in range(4):
        L2.step(marked(last))
    assert L2.memory.health[A] == before and L2.state(A) == "in"
    # the host back, still sick: the count goes on from where it was held
    L2.step(report("h2", 1, card("card0", "SNA", healthy=False, reason="store down"),
                   run="run2"))
    L2.step(report("h2", 2, card("card0", "SNA", healthy=False, reason="store down"),
                   run="run2"))
    assert L2.state(A) == "out"
    # an out card stays out while its host restarts
    last = report("h2", 5, card("card0", "SNA"), sick)
    for _ in range(3):
        L.step(marked(last))
    assert L.state(B) == "out"


def test_restarting_hosts_are_no_write_outage() -> None:
    """Two of three hosts restarting at once stop advancing together: not a write outage (a
    report that does not advance would then count nothing), and the third host's frozen
    report still counts."""
    L = Leader(sick_polls=3)
    h2 = report("h2", 1, card("card0", "SNA"))
    h3 = report("h3", 1, card("card1", "SNB"))
    h4 = report("h4", 1)
    L.step(h2, h3, h4)
    L.step(replace(h2, seq=2), replace(h3, seq=2), replace(h4, seq=2))
    for seq in range(3, 8):
        d = L.step(marked(replace(h2, seq=2)), marked(replace(h3, seq=2), grace=30),
                   replace(h4, seq=seq))
        assert L.memory.outage == "" and not d.write
    assert (L.state(A), L.state(B)) == ("in", "in")
    # h2 back, h3 still restarting, h4 frozen: h4 alone is no outage and has no card
    frozen = replace(h4, seq=7)
    for seq in (1, 2, 3):
        L.step(report("h2", seq, card("card0", "SNA"), run="run2"),
               marked(replace(h3, seq=2), grace=30), frozen)
        assert L.memory.outage == ""
    assert L.memory.stale_for == {"h4": 3}


def test_a_new_leader_holds_a_restarting_host_from_its_second_cycle() -> None:
    L, last = started()
    L.step(marked(last))
    L.new_leader("h3")
    for _ in range(4):
        assert not L.step(marked(last)).write
    assert L.state(A) == "in"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["poll", "report"]), min_size=1, max_size=12),
       st.integers(min_value=1, max_value=30))
def test_within_its_grace_a_restarting_host_changes_nothing(triggers: list[str],
                                                            grace: int) -> None:
    L, last = started()
    registry, counters = L.registry, dict(L.memory.health)
    held = marked(last, grace=grace)
    polls = 0
    for t in triggers:
        polls += t == "poll"
        if polls > held_polls(grace, L.policy.poll_interval):
            break
        d = L.step(held, trigger="poll" if t == "poll" else "report")
        assert not d.write
    assert L.registry == registry and dict(L.memory.health) == counters


def test_the_restarting_field_round_trips_and_is_written_only_when_set() -> None:
    live = report("h2", 3, card("card0", "SNA"))
    assert b"restarting" not in reportdoc.encode(live)
    r = marked(live, grace=120)
    assert reportdoc.decode(reportdoc.encode(r)) == r
    for bad in (0, 3601, "5"):
        doc = reportdoc.to_dict(r)
        doc["restarting"]["grace"] = bad
        with pytest.raises(ReportError, match="restarting"):
            reportdoc.decode(json.dumps(doc).encode())


def test_a_reader_ignores_fields_it_does_not_know() -> None:
    """Why the field needs no new schema: this reader (and the one before it) ignores a field
    it does not know, so a report of a newer daemon is read, not counted as a bad poll."""
    doc = reportdoc.to_dict(report("h2", 3, card("card0", "SNA")))
    doc["planned_absence_v9"] = {"anything": 1}
    assert reportdoc.decode(json.dumps(doc).encode()) == report("h2", 3, card("card0", "SNA"))


def test_a_restarting_report_is_no_news_for_a_report_cycle() -> None:
    from awide_cluster.daemon.arrivals import report_news
    L, last = started()
    sick = report("h2", 3, card("card0", "SNA", healthy=False, reason="store down"))
    assert report_news(sick, L.registry, L.memory.seen, last) != ""
    assert report_news(marked(sick), L.registry, L.memory.seen, last) == ""
