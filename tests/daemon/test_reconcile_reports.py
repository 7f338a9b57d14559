"""Report cycles (daemon/reconcile.py): the leader also decides when a host report arrives
between two of its polls. Only the reports that advanced are observed then; each report is
one observation whether a report cycle or the next poll cycle reads it; a poll period with
no report is still one "did not advance"."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from awide_cluster.daemon.reconcile import ClusterSnapshot, LeaderMemory, decide

from .builders import Leader, card, cid, report
from .test_reconcile_outage import Hosts, start

SICK = "write probe: I/O error"


def with_health(hosts: Hosts, host: str, healthy: bool) -> None:
    hosts.cards[host] = [card(c.name, c.serial, healthy=healthy, reason="" if healthy else SICK)
                         for c in hosts.cards[host]]


def test_sick_reports_out_a_card_as_they_arrive_without_a_poll_cycle() -> None:
    H = Hosts("h1", "h2", "h3")
    L = start(H)
    (a,) = H.ids("h2")
    with_health(H, "h2", healthy=False)
    for n in (1, 2):
        L.step(*H.reports(wrote=["h2"]), trigger="report")
        assert L.state(a) == "in" and L.memory.health[a].bad == n
    d = L.step(*H.reports(wrote=["h2"]), trigger="report")
    assert L.state(a) == "out" and any("out: 3 bad polls" in line for line in d.log)
    # the card comes back with its host's first healthy report, also in a report cycle
    with_health(H, "h2", healthy=True)
    L.step(*H.reports(wrote=["h2"]), trigger="report")
    assert L.state(a) == "in"


def test_a_poll_cycle_after_a_report_cycle_does_not_count_that_report_again() -> None:
    H = Hosts("h1", "h2", "h3")
    L = start(H)
    (a,) = H.ids("h2")
    with_health(H, "h2", healthy=False)
    L.step(*H.reports(wrote=["h2"]), trigger="report")
    assert L.memory.health[a].bad == 1
    L.step(*H.reports(wrote=["h1", "h3"]))          # poll cycle: h2's report is no news
    assert L.memory.health[a].bad == 1 and L.state(a) == "in"


def test_a_report_cycle_counts_nothing_against_hosts_that_did_not_write() -> None:
    H = Hosts("h1", "h2", "h3")
    L = start(H)
    quiet = H.ids("h2") + H.ids("h3")
    before = {c: L.memory.health[c] for c in quiet}
    registry = L.registry
    for _ in range(5):                          # only h1 writes; h2 and h3 look frozen
        d = L.step(*H.reports(wrote=["h1"]), trigger="report")
        assert not d.write
    assert {c: L.memory.health[c] for c in quiet} == before and L.registry == registry
    H.gone.add("h3")                            # even a report that is gone: not now
    L.step(*H.reports(wrote=["h1"]), trigger="report")
    assert {c: L.memory.health[c] for c in quiet} == before


def test_a_frozen_host_is_still_out_after_sick_polls_poll_cycles_among_report_cycles() -> None:
    H = Hosts("h1", "h2", "h3")
    L = start(H)
    (a,) = H.ids("h2")
    polls = 0
    while L.state(a) == "in":
        for h in ("h1", "h3"):                  # the others' reports arrive between polls
            L.step(*H.reports(wrote=[h]), trigger="report")
        L.step(*H.reports(wrote=()))
        polls += 1
        assert polls <= 10
    assert polls == 3


# one host's card over periods: in each, the host writes a healthy or sick report or none
# (frozen); the leader runs one poll cycle per period, with or without a report cycle on
# the report's arrival
periods = st.lists(st.sampled_from(["ok", "sick", "none"]), min_size=1, max_size=25)


@settings(max_examples=300, deadline=None)
@given(periods, st.lists(st.booleans(), min_size=25, max_size=25),
       st.integers(1, 4), st.integers(1, 2))
def test_report_cycles_change_when_not_what(plan, on_arrival, sick_polls, healthy_polls):
    """With at most one report per period, the registry after every poll cycle is the same
    with report cycles as without; with them, a change happens no later."""
    hosts = ("h1", "h2")
    polled, eager = Leader(sick_polls=sick_polls, healthy_polls=healthy_polls), \
        Leader(sick_polls=sick_polls, healthy_polls=healthy_polls)
    seq = {h: 1 for h in hosts}
    health = True
    a = cid("SN-h2")

    def reps() -> list:
        return [report(h, seq[h], card("c0", f"SN-{h}", healthy=health if h == "h2" else True,
                                       reason="" if health or h != "h2" else SICK))
                for h in hosts]

    for L in (polled, eager):
        L.step(*reps())
    for i, what in enumerate(plan):
        seq["h1"] += 1
        if what != "none":
            health = what == "ok"
            seq["h2"] += 1
            if on_arrival[i]:
                eager.step(*reps(), trigger="report")
                if polled.state(a) != eager.state(a):   # earlier, toward where it goes
                    before = polled.state(a)
                    polled_next = Leader.__new__(Leader)
                    polled_next.__dict__.update(polled.__dict__)
                    polled_next.step(*reps())
                    assert polled_next.state(a) == eager.state(a), (before, i, plan)
        polled.step(*reps())
        eager.step(*reps())
        assert polled.state(a) == eager.state(a), (i, plan)
        assert cards_of(polled) == cards_of(eager), (i, plan)


def cards_of(L: Leader) -> dict:
    """The registry's cards without the time text of their last change (the two leaders
    run a different number of cycles, so their ``now`` differs)."""
    if L.registry is None:
        return {}
    return {i: replace(c, changed_at="") for i, c in L.registry.by_id.items()}


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["h1", "h2", "h3", "h4"]),
                       st.tuples(st.integers(1, 3), st.booleans()), min_size=1),
       st.integers(1, 3), st.booleans())
def test_a_report_cycle_observes_only_reports_that_advanced(hosts, cycles, all_sick):
    """Whatever the memory, a report cycle changes no counter of a card whose host's report
    did not advance since the last cycle, and writes nothing about it."""
    seen = {h: ("run1", seq) for h, (seq, _) in hosts.items()}
    reps = {h: report(h, seq + (1 if moved else 0),
                      card("c0", f"SN-{h}", healthy=not all_sick, reason=SICK))
            for h, (seq, moved) in hosts.items()}
    L = Leader()
    L.step(*[report(h, seq, card("c0", f"SN-{h}")) for h, (seq, _) in hosts.items()])
    L.memory = LeaderMemory(cycles=cycles, seen=seen, polled=seen, health=L.memory.health)
    snap = ClusterSnapshot(reports=reps, bad_reports={}, registry=L.registry, trigger="report")
    d = decide(snap, L.memory, L.policy)
    for h, (_, moved) in hosts.items():
        c = cid(f"SN-{h}")
        if not moved:
            assert d.memory.health[c] == L.memory.health[c]
            assert d.registry.card(c) == L.registry.card(c)
        else:
            assert d.memory.health[c].bad == (1 if all_sick else 0)
