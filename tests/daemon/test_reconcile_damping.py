"""Flap damping in the leader's decision (``decision_damping``), cycle by cycle and as
properties: against the same leader without damping, fed the same reports."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from awide_cluster.contract import registry as regdoc
from awide_cluster.daemon import history_entries
from awide_cluster.daemon.decision_damping import hold_length, polls_of
from awide_cluster.daemon.reconcile import Damping, Intent

from .builders import Leader, card, cid, entry, report

DAMP = Damping(outs=3, window=30.0, first_hold=2.0, max_hold=8.0)
C = cid("SN1")


class Pair:
    """The same cluster led with damping (``damped``) and without (``plain``)."""

    def __init__(self, damping: Damping = DAMP) -> None:
        self.damped, self.plain = Leader(), Leader()
        self.damped.policy = replace(self.damped.policy, damping=damping)
        self.plain.policy = replace(self.plain.policy, damping=Damping(outs=0))
        self.seq = 0

    def poll(self, healthy: bool, intents: tuple[Intent, ...] = ()) -> tuple[str, str]:
        self.seq += 1
        r = report("h1", self.seq, card("card0", "SN1", healthy=healthy, reason="store down"))
        self.damped.step(r, intents=intents)
        self.plain.step(r)
        return self.state(self.damped), self.state(self.plain)

    @staticmethod
    def state(leader: Leader) -> str:
        return entry(leader.registry, C).state


def flap(p: Pair, times: int) -> None:
    """``times`` faults of 3 sick polls (out), each followed by one healthy poll."""
    for _ in range(times):
        for _ in range(3):
            p.poll(False)
        p.poll(True)


def test_a_single_fault_returns_within_one_poll() -> None:
    p = Pair(Damping())         # the defaults
    p.poll(True)
    for _ in range(3):
        p.poll(False)
    assert p.state(p.damped) == "out"
    assert p.poll(True) == ("in", "in")
    assert entry(p.damped.registry, C).hold is None


def test_two_faults_return_at_once_the_third_is_held_and_holds_double() -> None:
    p = Pair()
    p.poll(True)
    flap(p, 2)
    assert p.state(p.damped) == "in"
    for _ in range(3):
        p.poll(False)
    assert p.poll(True) == ("out", "in")            # the third return: held
    c = entry(p.damped.registry, C)
    assert c.hold is not None and c.hold.active and c.hold.level == 1
    assert c.health == "ok" and c.reason.startswith("held out for 2 s")
    # held for first_hold (2 polls of 1 s) counted from the poll that held it
    assert p.poll(True) == ("out", "in")
    assert p.poll(True) == ("in", "in")
    c = entry(p.damped.registry, C)
    assert c.hold is not None and not c.hold.active and c.reason == ""
    # out again: the next return is held twice as long
    for _ in range(3):
        p.poll(False)
    held = [p.poll(True)[0] for _ in range(5)]
    assert held == ["out"] * 4 + ["in"]
    assert entry(p.damped.registry, C).hold.level == 2      # type: ignore[union-attr]


def test_a_hold_never_changes_the_generation_of_the_cards_last_change() -> None:
    p = Pair()
    p.poll(True)
    flap(p, 2)
    for _ in range(3):
        p.poll(False)
    out_at = entry(p.damped.registry, C).changed_generation
    p.poll(True)
    assert entry(p.damped.registry, C).changed_generation == out_at


def test_a_new_leader_keeps_a_running_hold() -> None:
    p = Pair()
    p.poll(True)
    flap(p, 2)
    for _ in range(3):
        p.poll(False)
    p.poll(True)                                   # held, 2 polls
    p.damped.new_leader("h2")
    p.damped.policy = replace(p.damped.policy, damping=DAMP)
    # a new leader's first cycle is a baseline; it restarts the hold from its beginning
    states = [p.poll(True)[0] for _ in range(4)]
    assert states[0] == "out" and "in" in states
    assert states.index("in") <= 1 + polls_of(DAMP.first_hold, 1.0)


def test_clear_hold_intent_puts_the_card_back_at_once_and_says_so() -> None:
    p = Pair()
    p.poll(True)
    flap(p, 2)
    for _ in range(3):
        p.poll(False)
    p.poll(True)
    before = p.damped.registry
    it = Intent(card_id=C, action="clear-hold", mod_revision=9, by="op@x", reason="fixed")
    d = p.damped.step(report("h1", p.seq + 1, card("card0", "SN1")), intents=(it,))
    p.seq += 1
    assert d.consumed == (("intents/" + C, 9),)
    c = entry(p.damped.registry, C)
    assert c.state == "in" and c.hold is None
    news = history_entries.entries(before, d.registry, lines=d.log, intents=(it,))
    kinds = [(e.kind, e.by) for e in news if e.card == C]
    assert ("in", "") in kinds and ("intent", "op@x") in kinds


def test_the_hold_begins_as_an_out_entry_in_the_history() -> None:
    p = Pair()
    p.poll(True)
    flap(p, 2)
    for _ in range(3):
        p.poll(False)
    before = p.damped.registry
    d = p.damped.step(report("h1", p.seq + 1, card("card0", "SN1")))
    news = history_entries.entries(before, d.registry, lines=d.log)
    assert [(e.kind, e.reason[:8]) for e in news if e.card == C] == [("out", "held out")]


def test_a_quiet_window_forgets_the_hold() -> None:
    p = Pair(replace(DAMP, window=12.0))
    p.poll(True)
    flap(p, 2)
    for _ in range(3):
        p.poll(False)
    for _ in range(4):
        p.poll(True)
    c = entry(p.damped.registry, C)
    assert c.state == "in" and c.hold is not None
    for _ in range(10):
        p.poll(True)
    assert entry(p.damped.registry, C).hold is not None     # not a whole window yet
    for _ in range(3):
        p.poll(True)
    assert entry(p.damped.registry, C).hold is None


def test_the_hold_round_trips_through_the_registry_document() -> None:
    p = Pair()
    p.poll(True)
    flap(p, 2)
    for _ in range(3):
        p.poll(False)
    p.poll(True)
    reg = p.damped.written
    assert regdoc.decode(regdoc.encode(reg)) == reg
    assert regdoc.decode(regdoc.encode(reg), memo=regdoc.CardMemo()) == reg


def test_a_forged_hold_is_refused_by_its_bounds() -> None:
    import json
    p = Pair()
    p.poll(True)
    doc = json.loads(regdoc.encode(p.damped.written))
    doc["cards"][0]["hold"] = {"level": 10**6, "seconds": 1e12, "active": True}
    try:
        regdoc.decode(json.dumps(doc))
    except regdoc.RegistryError as e:
        assert "hold" in str(e)
    else:
        raise AssertionError("a forged hold was accepted")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=80),
       st.sets(st.integers(min_value=0, max_value=79), max_size=3))
def test_damping_only_ever_keeps_out_never_brings_in(healthy: list[bool],
                                                    clears: set[int]) -> None:
    p = Pair()
    p.poll(True)
    outs = {"damped": 0, "plain": 0}
    last = ("in", "in")
    kept = 0
    limit = polls_of(DAMP.max_hold, 1.0)
    for i, ok in enumerate(healthy):
        its = (Intent(card_id=C, action="clear-hold", mod_revision=i + 1),) if i in clears \
            else ()
        now = p.poll(ok, its)
        damped, plain = now
        # damping never puts in a card its counters keep out
        assert not (damped == "in" and plain == "out")
        outs["damped"] += last[0] == "in" and damped == "out"
        outs["plain"] += last[1] == "in" and plain == "out"
        # a hold is bounded: in when the counters say so, after at most max_hold
        kept = kept + 1 if (damped, plain) == ("out", "in") else 0
        assert kept <= limit
        if its:
            assert damped == plain          # a cleared hold keeps nothing out
        c = entry(p.damped.registry, C)
        assert c.hold is None or c.hold.level >= 1
        assert c.state != "in" or c.hold is None or not c.hold.active
        last = now
    assert outs["damped"] <= outs["plain"]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=60))
def test_fewer_outs_than_the_threshold_change_nothing(healthy: list[bool]) -> None:
    p = Pair(replace(DAMP, window=1000.0))
    p.poll(True)
    outs = 0
    for ok in healthy:
        was = p.state(p.plain)
        damped, plain = p.poll(ok)
        outs += was == "in" and plain == "out"
        if outs < DAMP.outs:
            assert damped == plain


def test_hold_lengths_double_up_to_the_bound() -> None:
    assert [hold_length(n, DAMP) for n in range(1, 6)] == [2.0, 4.0, 8.0, 8.0, 8.0]
    d = Damping()
    assert [hold_length(n, d) for n in range(1, 8)] == [10, 20, 40, 80, 160, 300, 300]


def test_status_shows_the_hold_off_left_and_how_to_clear_it() -> None:
    from awide_cluster.contract import records
    from awide_cluster.operator.judge.cards import judge_cards
    from awide_cluster.operator.render import card_lines
    p = Pair()
    p.poll(True)
    flap(p, 2)
    for _ in range(3):
        p.poll(False)
    p.poll(True)
    reg = p.damped.written
    c = entry(reg, C)
    assert c.hold is not None
    at = "2026-12-03T10:00:00+00:00"
    reg = replace(reg, cards=(replace(c, hold=replace(c.hold, until=at)),))
    wall = records.parse_time(at)
    assert wall is not None
    views, problems = judge_cards(reg, {}, wall - 1.5)
    assert views[0].hold is not None and views[0].hold["remaining"] == 1.5
    out = next(pr for pr in problems if pr.code == "card_out")
    assert "held out for 2 s" in out.message and "1.5 s left" in out.message
    assert f"awide-cluster card clear-hold {C}" in out.message
    assert "hold-off 1.5 s left" in "\n".join(card_lines(views))
