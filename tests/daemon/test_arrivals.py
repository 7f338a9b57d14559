"""What a report arriving between polls is worth (daemon/arrivals.py, pure): hostile values
are no news and never raise; a report that is no news would change nothing if a report
cycle ran for it; a card's change of health is news."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from awide_cluster.contract import keys
from awide_cluster.contract.report import encode
from awide_cluster.daemon.arrivals import arrival_news, report_news
from awide_cluster.daemon.reconcile import ClusterSnapshot, decide

from .builders import Leader, card, cid, report

HOSTS = frozenset({"h1", "h2"})


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40), st.binary(max_size=2000))
def test_any_key_and_value_is_no_news_or_a_reason_never_an_error(key, value):
    assert isinstance(arrival_news(key, value, None, {}, {}, HOSTS), str)
    assert arrival_news(keys.MEMBERS + "h1", value, None, {}, {}, HOSTS) in (
        "", "report of h1: no registry yet")


def test_strangers_impostors_and_old_reports_are_no_news():
    r = report("h2", 5, card("c0", "SN-1"))
    assert arrival_news(keys.MEMBERS + "h2", encode(r), None, {}, {}, HOSTS)       # news
    assert arrival_news(keys.MEMBERS + "h1", encode(r), None, {}, {}, HOSTS) == ""  # names h2
    assert arrival_news(keys.MEMBERS + "h9", encode(report("h9", 1)), None, {}, {},
                        HOSTS) == ""
    assert arrival_news("registry", encode(r), None, {}, {}, HOSTS) == ""
    assert report_news(r, None, {"h2": ("run1", 5)}, None) == ""        # observed already


def _leader_with(healthy: bool, up_cycles: int, healthy_polls: int):
    """A leader after ``up_cycles`` cycles of h2 reporting its card (healthy or not); the
    next seq, and h2's last report."""
    L = Leader(healthy_polls=healthy_polls)
    seq = 1
    for _ in range(up_cycles):
        last = report("h2", seq, card("c0", "SN-2", healthy=healthy, reason="io"))
        L.step(report("h1", seq, card("c0", "SN-1")), last)
        seq += 1
    return L, seq, last


@settings(max_examples=300, deadline=None)
@given(st.booleans(), st.integers(1, 6), st.booleans(), st.booleans(), st.booleans(),
       st.sampled_from(["io", "other"]), st.integers(1, 2))
def test_no_news_means_a_report_cycle_would_write_nothing(was_healthy, cycles, healthy,
                                                           renamed, dropped, reason,
                                                           healthy_polls):
    L, seq, last = _leader_with(was_healthy, cycles, healthy_polls)
    cards = () if dropped else (card("c9" if renamed else "c0", "SN-2", healthy=healthy,
                                     reason=reason),)
    arrived = report("h2", seq + 1, *cards)
    why = report_news(arrived, L.registry, L.memory.seen, last)
    snap = ClusterSnapshot(reports={"h1": report("h1", seq - 1, card("c0", "SN-1")), "h2": arrived},
                    bad_reports={}, registry=L.registry, trigger="report")
    d = decide(snap, L.memory, L.policy)
    if not why:
        assert not d.write, d.log
    if L.registry is not None and L.registry.card(cid("SN-2")) is not None:
        c = L.registry.card(cid("SN-2"))
        assert c is not None
        if (not healthy or dropped) and c.state == "in":
            assert why              # a sick (or missing) report of a card in is always news
        if healthy and not dropped and c.state == "out":
            assert why              # and a healthy report of a card out
