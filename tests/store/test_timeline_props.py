"""The history rule (pure): one member gone back is refused, a restored cluster is adopted."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from awide_cluster.store.timeline import Claim, Timeline, admit, assess_census, quorum

IDS = st.integers(min_value=1, max_value=2**64 - 1)
REVS = st.integers(min_value=1, max_value=10**9)


@st.composite
def histories(draw: st.DrawFn) -> Timeline:
    return Timeline(cluster_id=draw(IDS), floor=draw(REVS), epoch=draw(st.integers(0, 5)))


@given(histories(), st.integers(0, 10**9))
def test_an_answer_of_the_same_cluster_at_or_above_the_floor_is_taken(h, up):
    new, j = admit(h, h, Claim(h.cluster_id, h.floor + up))
    assert j == "ok"
    assert new.floor == h.floor + up and new.cluster_id == h.cluster_id and new.epoch == h.epoch


@given(histories(), REVS)
def test_an_answer_below_the_floor_is_refused_and_changes_nothing(h, rev):
    claim = Claim(h.cluster_id, min(rev, h.floor - 1))
    if claim.revision < 1:
        return
    new, j = admit(h, h, claim)
    assert (new, j) == (h, "behind")


@given(histories(), IDS, REVS)
def test_an_answer_of_another_cluster_is_refused_whatever_its_revision(h, other, rev):
    if other == h.cluster_id:
        return
    new, j = admit(h, h, Claim(other, rev))
    assert (new, j) == (h, "foreign")


@given(histories(), REVS)
def test_a_call_sent_before_a_new_history_is_judged_by_cluster_only(h, rev):
    sent = Timeline(h.cluster_id, floor=h.floor + 10**9, epoch=h.epoch - 1)
    new, j = admit(h, sent, Claim(h.cluster_id, rev))
    assert j == "ok" and new.floor == max(h.floor, rev)


def test_the_first_answer_names_the_cluster():
    new, j = admit(Timeline(), Timeline(), Claim(7, 3))
    assert j == "ok" and new == Timeline(cluster_id=7, floor=3, epoch=0)


@st.composite
def censuses(draw: st.DrawFn, h: Timeline) -> list[tuple[str, Claim | None]]:
    """3 or 5 members, each silent, current, behind, or of another cluster."""
    n = draw(st.sampled_from((3, 5)))
    out: list[tuple[str, Claim | None]] = []
    for i in range(n):
        kind = draw(st.sampled_from(("silent", "current", "behind", "foreign")))
        claim: Claim | None = None
        if kind == "current":
            claim = Claim(h.cluster_id, h.floor + draw(st.integers(0, 100)))
        elif kind == "behind":
            claim = Claim(h.cluster_id, draw(st.integers(1, h.floor)) - 1 or 1)
        elif kind == "foreign":
            claim = Claim(h.cluster_id + 1 + draw(st.integers(0, 1)), draw(REVS))
        out.append((f"m{i}", claim))
    return out


@given(st.data())
def test_the_census_adopts_only_a_quorum_all_in_one_new_history(data):
    h = data.draw(histories())
    census = data.draw(censuses(h))
    new, verdict = assess_census(h, census)
    answered = [c for _, c in census if c is not None]
    current = [c for c in answered if c.cluster_id == h.cluster_id and c.revision >= h.floor]
    if verdict.outcome != "adopted":
        assert new == h
    if current:
        assert verdict.outcome == "kept"        # one member in this history keeps it
        return
    if len(answered) < quorum(len(census)) or len({c.cluster_id for c in answered}) != 1:
        assert verdict.outcome == "undecided"
        return
    assert verdict.outcome == "adopted"
    assert new.epoch == h.epoch + 1
    assert new.cluster_id == answered[0].cluster_id
    assert new.floor == max(c.revision for c in answered)
    for c in answered:          # every member of the census is then of the followed cluster
        assert admit(new, new, c)[1] in ("ok", "behind")
        assert admit(new, new, Claim(c.cluster_id, new.floor))[1] == "ok"


@given(histories(), st.sampled_from((3, 5)))
def test_one_member_gone_back_never_moves_the_client(h, n):
    """One member restored alone (or lagging), the others silent or current: not adopted."""
    back = ("m0", Claim(h.cluster_id, max(1, h.floor // 2)))
    for others in (None, Claim(h.cluster_id, h.floor)):
        census = [back] + [(f"m{i}", others) for i in range(1, n)]
        new, verdict = assess_census(h, census)
        assert new == h and verdict.outcome != "adopted"


@given(histories(), st.sampled_from((3, 5)))
def test_a_whole_cluster_restored_from_a_snapshot_is_adopted(h, n):
    if h.floor < 2:
        return
    census = [(f"m{i}", Claim(h.cluster_id, h.floor - 1)) for i in range(n)]
    new, verdict = assess_census(h, census)
    assert verdict.outcome == "adopted" and new.floor == h.floor - 1
    assert "restored or rebuilt" in verdict.reason


def test_a_cluster_rebuilt_from_nothing_is_adopted_with_a_quorum_answering():
    h = Timeline(cluster_id=0xA, floor=500, epoch=2)
    census = [("m0", Claim(0xB, 3)), ("m1", Claim(0xB, 4)), ("m2", None)]
    new, verdict = assess_census(h, census)
    assert verdict.outcome == "adopted"
    assert new == Timeline(cluster_id=0xB, floor=4, epoch=3)
    assert "new cluster id b (was a)" in verdict.reason
