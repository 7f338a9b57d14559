"""The follower's pure step over any interleaving of polled answers, watch events and the
watch's progress notifications.

A history of registry writes (good ones with growing generations, and hostile ones: garbage,
over the bound, a generation that goes back, another cluster, a deletion) is delivered in any
order, any number of times: as watch events, and as polls answered by a member that has
applied any prefix of the history (a lagging member answers from an older copy). Whatever the
order: the applied generation never goes down, nothing applied is a value a poll would refuse
(an event and a poll carrying the same value decide the same), and the follower ends on the
newest write delivered when that write is a good registry.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from hypothesis import given, settings
from hypothesis import strategies as st

from awide_cluster.contract import bounds
from awide_cluster.contract import registry as regdoc
from awide_cluster.contract import slots as slotfn
from awide_cluster.store.errors import Timeout, ValueTooLarge
from awide_cluster.store.types import KeyValue, RangeResult, WatchBatch, WatchEvent
from awide_gateway_cluster.follower import Answer, FollowState, Progress, step
from awide_gateway_cluster.registry_watch import proves
from tests.gateway.support import make_card

CARDS = tuple(make_card(n, admitted=n) for n in range(1, 4))
KINDS = ("good", "good", "good", "garbage", "big", "back", "cluster", "delete")
BIG = b"{" * (bounds.REGISTRY_MAX_BYTES + 1)


@dataclass(frozen=True)
class Write:
    kind: str
    revision: int               # mod_revision of the write
    value: bytes = b""
    generation: int = 0         # of a good registry (0: not one)


def _registry(gen: int, n_cards: int, cluster: str = "c1") -> regdoc.Registry:
    cards = CARDS[:n_cards]
    return regdoc.Registry(cluster=cluster, generation=gen, leader="s1", cards=cards,
                           slots=regdoc.slot_table(cards, slotfn.EMPTY), lineage="L1")


def history(kinds: list[str], gaps: list[int]) -> tuple[Write, ...]:
    out: list[Write] = []
    gen, rev = 0, 10
    for kind, gap in zip(kinds, gaps, strict=False):
        rev += gap
        if kind == "good":
            gen += 1
            out.append(Write(kind, rev, regdoc.encode(_registry(gen, 1 + gen % 3)), gen))
        elif kind == "big":
            out.append(Write(kind, rev, BIG))
        elif kind == "back" and gen >= 2:   # an older good document written back
            out.append(Write(kind, rev, regdoc.encode(_registry(gen - 1, 1 + (gen - 1) % 3))))
        elif kind in ("garbage", "back"):
            out.append(Write("garbage", rev, b'{"schema": "nonsense'))
        elif kind == "cluster":
            out.append(Write(kind, rev, regdoc.encode(_registry(gen + 1, 2, cluster="c9"))))
        else:
            out.append(Write("delete", rev))
    return tuple(out)


def _kv(w: Write) -> KeyValue:
    return KeyValue("registry", w.value, 3, w.revision, 1)


def as_event(w: Write) -> WatchEvent:
    return WatchEvent("delete" if w.kind == "delete" else "put", _kv(w))


def as_poll(state: FollowState, writes: tuple[Write, ...], applied_upto: int) -> Answer:
    """What a member holding the first ``applied_upto`` writes answers to the follower's poll
    (``min_mod_revision`` = seen_revision + 1; a value over the bound raises, as the store does)."""
    held = writes[:applied_upto]
    revision = held[-1].revision if held else 10
    if not held or held[-1].kind == "delete":
        return RangeResult(revision=revision, kvs=(), count=0)
    w = held[-1]
    if w.revision < state.seen_revision + 1:
        return RangeResult(revision=revision, kvs=(), count=1)
    if len(w.value) > bounds.REGISTRY_MAX_BYTES:
        return ValueTooLarge("'registry': value over the bound", key="registry",
                             limit=bounds.REGISTRY_MAX_BYTES, size=len(w.value),
                             mod_revision=w.revision)
    return RangeResult(revision=revision, kvs=(_kv(w),), count=1)


writes_st = st.integers(1, 7).flatmap(lambda n: st.tuples(
    st.lists(st.sampled_from(KINDS), min_size=n, max_size=n),
    st.lists(st.integers(1, 3), min_size=n, max_size=n)))
delivery_st = st.lists(st.tuples(st.sampled_from(("event", "poll", "fail", "progress")),
                                 st.integers(0, 7)), max_size=30)


def run(writes: tuple[Write, ...], deliveries: list[tuple[str, int]],
        memo: regdoc.CardMemo | None = None):
    state = FollowState()
    trace = []
    delivered: list[Write] = []
    for t, (how, i) in enumerate(deliveries):
        answer: Answer
        if how == "event":
            w = writes[i % len(writes)]
            answer = as_event(w)
            delivered.append(w)
        elif how == "poll":
            upto = i % (len(writes) + 1)
            answer = as_poll(state, writes, upto)
            if upto and isinstance(answer, (RangeResult, ValueTooLarge)) and (
                    not isinstance(answer, RangeResult) or answer.kvs or answer.count == 0):
                delivered.append(writes[upto - 1])
        elif how == "progress":
            upto = i % (len(writes) + 1)
            answer = Progress(writes[upto - 1].revision if upto else 10)
        else:
            answer = Timeout("no answer")
        before = state
        state, taken = step(state, answer, float(t), cluster="c1", memo=memo)
        trace.append((before, answer, state, taken))
    return state, trace, delivered


@settings(max_examples=150, deadline=None)
@given(writes_st, delivery_st)
def test_the_card_memo_changes_no_step(w, d):
    """With the reader's card memo (as ``Follower`` keeps one), every step of any interleaving
    is the one without it: same states, same decisions."""
    writes = history(*w)
    memo = regdoc.CardMemo()
    plain, cached = run(writes, d), run(writes, d, memo)
    assert cached[0] == plain[0]
    # the answers themselves are left out: a failed poll's error is a new object each run
    assert [(b, a, t) for b, _, a, t in cached[1]] == [(b, a, t) for b, _, a, t in plain[1]]


def _gen(s: FollowState) -> int:
    return s.registry.generation if s.registry else 0


@settings(max_examples=150, deadline=None)
@given(writes_st, delivery_st)
def test_any_interleaving_never_lowers_the_generation_nor_applies_a_refused_value(w, d):
    writes = history(*w)
    good = {x.value: x.generation for x in writes if x.kind == "good"}
    state, trace, _ = run(writes, d)
    for before, answer, after, taken in trace:
        assert _gen(after) >= _gen(before)
        assert after.seen_revision >= before.seen_revision
        if isinstance(answer, WatchEvent):
            # an event is no proof of freshness: it never clears the problem of failing polls
            assert after.last_ok == before.last_ok and after.polls == before.polls
            assert not before.failures or after.problem
        if isinstance(answer, Progress):
            # a progress notification changes nothing but the proof of freshness, and proves
            # it only for a view without a problem: it never clears one
            assert taken.outcome == "unchanged" and after.progress == before.progress + 1
            for field in ("registry", "seen_revision", "applied_revision", "problem",
                          "polls", "failures", "rejected", "events"):
                assert getattr(after, field) == getattr(before, field), field
            if not before.problem and before.registry is not None:
                assert after.last_ok is not None and after.last_ok == after.last_progress
                assert after.last_ok >= (before.last_ok or 0.0)
            else:
                assert (after.last_ok, after.last_progress) == (before.last_ok,
                                                                before.last_progress)
            assert after.known_revision == max(before.known_revision, answer.revision)
        if taken.outcome == "applied":
            # only a good registry is ever applied, and it is the one the step names
            assert taken.registry is not None and after.registry == taken.registry
            assert regdoc.encode(taken.registry) in good
            assert taken.replaced == before.registry
        else:
            assert after.registry == before.registry


@settings(max_examples=150, deadline=None)
@given(writes_st, delivery_st)
def test_any_interleaving_ends_on_the_newest_write_delivered_when_it_is_good(w, d):
    writes = history(*w)
    state, _, delivered = run(writes, d)
    if not delivered:
        return
    newest = max(delivered, key=lambda x: x.revision)
    if newest.kind == "good":
        assert _gen(state) == newest.generation
        assert state.applied_revision == newest.revision
    # whatever the newest is, the view is never behind a good write delivered after it
    assert _gen(state) >= max((x.generation for x in delivered if x.kind == "good"
                               and x.revision == state.seen_revision), default=0)


@settings(max_examples=150, deadline=None)
@given(writes_st, delivery_st, st.integers(0, 7))
def test_an_event_and_a_poll_carrying_the_same_value_decide_the_same(w, d, pick):
    writes = history(*w)
    state, _, _ = run(writes, d)
    x = writes[pick % len(writes)]
    if x.kind == "delete":
        return
    polled: Answer = RangeResult(revision=x.revision, kvs=(_kv(x),), count=1)
    if len(x.value) > bounds.REGISTRY_MAX_BYTES:
        polled = ValueTooLarge("over", key="registry", limit=bounds.REGISTRY_MAX_BYTES,
                               size=len(x.value), mod_revision=x.revision)
    by_poll, p = step(state, polled, 99.0, cluster="c1")
    by_event, e = step(state, as_event(x), 99.0, cluster="c1")
    assert (e.outcome, e.registry, e.replaced) == (p.outcome, p.registry, p.replaced)
    if e.outcome == "rejected":
        assert e.detail == p.detail
    for field in ("registry", "seen_revision", "applied_revision", "rejected", "skew"):
        assert getattr(by_event, field) == getattr(by_poll, field), field
    # only the poll counts as a read, and only a poll proves freshness
    assert by_event.polls == state.polls and by_poll.polls == state.polls + 1
    assert by_event.events == state.events + 1 and by_event.last_ok == state.last_ok


def test_an_event_at_a_revision_already_looked_at_is_not_decoded_again():
    writes = history(["good", "garbage", "good"], [1, 1, 1])
    st1, _ = step(FollowState(), as_event(writes[2]), 1.0, cluster="c1")
    assert st1.registry is not None and st1.registry.generation == 2
    # the older good one and the older garbage, from a lagging member: nothing changes
    st2, d = step(st1, as_event(writes[0]), 2.0, cluster="c1")
    st3, d3 = step(st2, as_event(writes[1]), 3.0, cluster="c1")
    assert d.outcome == d3.outcome == "unchanged" and st3.rejected == 0
    assert replace(st3, events=0) == replace(st1, events=0)


def test_a_deleted_registry_key_keeps_the_last_good_and_says_so():
    writes = history(["good", "delete", "good"], [1, 1, 1])
    st1, _ = step(FollowState(), as_event(writes[0]), 1.0, cluster="c1")
    st2, d = step(st1, as_event(writes[1]), 2.0, cluster="c1")
    assert d.outcome == "failed" and st2.registry == st1.registry and "deleted" in st2.problem
    st3, d = step(st2, as_event(writes[2]), 3.0, cluster="c1")
    assert d.outcome == "applied" and st3.problem == "" and d.problem_before == st2.problem


def test_an_event_applied_while_polls_fail_keeps_the_stale_flag():
    writes = history(["good", "good"], [1, 1])
    st1, _ = step(FollowState(), as_event(writes[0]), 1.0, cluster="c1")
    st2, _ = step(st1, Timeout("frozen"), 2.0, cluster="c1")
    st3, d = step(st2, as_event(writes[1]), 3.0, cluster="c1")
    assert d.outcome == "applied" and st3.registry is not None
    assert "frozen" in st3.problem and st3.last_ok == st2.last_ok


def test_a_progress_notification_clears_no_problem_and_proves_only_a_sound_view():
    writes = history(["good", "good"], [1, 1])
    none, _ = step(FollowState(), Progress(12), 1.0, cluster="c1")
    assert none.last_ok is None and none.progress == 1        # no registry yet: no proof
    absent, _ = step(FollowState(), RangeResult(revision=12, kvs=(), count=0), 1.0,
                     cluster="c1")
    still, _ = step(absent, Progress(13), 2.0, cluster="c1")
    assert "absent" in still.problem and still.last_ok is None
    good, _ = step(FollowState(), as_event(writes[0]), 1.0, cluster="c1")
    proved, _ = step(good, Progress(writes[0].revision), 5.0, cluster="c1")
    assert proved.last_ok == proved.last_progress == 5.0 and proved.problem == ""
    failed, _ = step(proved, Timeout("frozen"), 6.0, cluster="c1")
    after, _ = step(failed, Progress(writes[1].revision), 7.0, cluster="c1")
    assert "frozen" in after.problem and after.last_ok == 5.0    # only a poll clears it
    assert after.known_revision == writes[1].revision


def test_a_message_of_events_at_its_own_header_revision_proves_like_a_notification():
    """etcd notifies no watch that had an event in its interval: a message whose last
    ``registry`` event is at the message's header revision (the member's revision when it
    sent it) proves the view fresh instead, and is not counted as a notification; a message
    with a later header (a watch catching up: other keys were written since) proves nothing."""
    writes = history(["good"], [1])
    ev = as_event(writes[0])
    rev = ev.kv.mod_revision
    assert proves(WatchBatch(revision=rev, events=(ev,)))
    assert not proves(WatchBatch(revision=rev + 1, events=(ev,)))
    assert not proves(WatchBatch(revision=rev, events=()))
    other = WatchEvent("put", replace(ev.kv, key="gateways/g1", mod_revision=rev + 1))
    assert not proves(WatchBatch(revision=rev + 1, events=(ev, other)))   # ours is older
    assert not proves(WatchBatch(revision=rev + 1, events=(other,)))
    applied, _ = step(FollowState(), ev, 1.0, cluster="c1")
    assert applied.last_progress is None and applied.last_ok is None  # an event alone: no
    proved, _ = step(applied, Progress(rev, by_event=True), 2.0, cluster="c1")
    assert proved.last_ok == proved.last_progress == 2.0 and proved.progress == 0
    failed, _ = step(proved, Timeout("frozen"), 3.0, cluster="c1")
    after, _ = step(failed, Progress(rev, by_event=True), 4.0, cluster="c1")
    assert "frozen" in after.problem and after.last_ok == 2.0        # only a poll clears it
