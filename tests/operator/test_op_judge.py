"""Properties of the status judgement's phases (``awide_cluster.operator.judge``): the
quorum rule, the roll call of etcd members, the gateways' agreement and refused writes, each
a pure function checked over generated inputs; no etcd needed."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from awide_cluster.operator.freshness import Age
from awide_cluster.operator.judge.daemons import judge_writes
from awide_cluster.operator.judge.etcd import (
    NEAR_QUOTA,
    MemberCount,
    count_members,
    judge_alarms,
    judge_quorum,
    judge_space,
    member_problems,
    roll_call,
)
from awide_cluster.operator.judge.gateways import agreement
from awide_cluster.operator.model import EtcdMemberView, EtcdView, GatewayRecordView, HostView
from awide_cluster.operator.snapshot import EndpointAnswer, StatusPolicy
from awide_cluster.store.types import Alarm, EndpointStatus, Member


@st.composite
def member_counts(draw):
    total = draw(st.integers(1, 9))
    answered = draw(st.integers(0, total))
    up = draw(st.integers(0, answered))
    unchecked = draw(st.integers(0, total - answered))
    return MemberCount(answered=answered, up=up, total=total, unchecked=unchecked)


@given(count=member_counts())
@settings(max_examples=300)
def test_quorum_is_ok_exactly_with_a_majority_up(count):
    quorum, problem = judge_quorum(count, "e1: down")
    majority = count.total // 2 + 1
    assert (quorum == "ok") == (count.answered > 0 and count.up >= majority)
    assert (problem is None) == (quorum == "ok")
    if quorum == "lost":                    # lost only when the members not asked cannot help
        assert count.up + count.unchecked < majority and problem.code == "quorum_lost"
    if quorum == "unknown":
        assert problem.code in ("etcd_unreachable", "quorum_unknown")
        assert count.answered == 0 or count.up + count.unchecked >= majority


def _url(i):
    return f"http://127.0.0.1:{2379 + i}"


@st.composite
def roll_inputs(draw):
    ids = draw(st.lists(st.integers(1, 7), unique=True, min_size=1, max_size=7))
    members = tuple(Member(id=i, name=f"m{i}", client_urls=(_url(i),), peer_urls=())
                    for i in ids)
    asked = draw(st.lists(st.sampled_from(ids), unique=True))
    leader = draw(st.sampled_from([0, *ids]))
    answers = []
    for i in asked:
        if draw(st.booleans()):
            answers.append(EndpointAnswer(_url(i), EndpointStatus(
                _url(i), i, leader, 4, 100, "3.5.1", 20000)))
        else:
            answers.append(EndpointAnswer(_url(i), None, "Timeout: no answer"))
    return members, tuple(answers), tuple(_url(i) for i in asked)


@given(inputs=roll_inputs())
@settings(max_examples=200)
def test_roll_call_has_one_row_per_answer_and_per_member_not_asked(inputs):
    members, answers, endpoints = inputs
    roll = roll_call(answers, members, endpoints)
    not_asked = {m.name for m in members if _url(m.id) not in endpoints}
    assert roll.unchecked == len(not_asked)
    assert len(roll.rows) == len(answers) + len(not_asked)
    assert {r.name for r in roll.rows if r.error.startswith("not checked")} == not_asked
    assert {st.member_id for st in roll.answered} == {
        a.status.member_id for a in answers if a.status is not None}
    assert all(r.reachable == (r.name in {f"m{s.member_id}" for s in roll.answered})
               for r in roll.rows)


gateway_rows = st.lists(st.builds(
    GatewayRecordView, id=st.sampled_from(["g1", "g2", "g3", "g4"]), host=st.just("h"),
    pod=st.just("p"), namespace=st.sampled_from(["ns1", "ns2"]),
    placement=st.sampled_from(["rendezvous", "ring"]), fingerprint=st.sampled_from(["a", "b"]),
    generation=st.sampled_from([None, 3, 4]), lag=st.none(), engine=st.just(""),
    version=st.just("1"), stale=st.booleans(), age=st.none(),
    error=st.sampled_from(["", "", "corrupt"])), max_size=6)


@given(views=gateway_rows, data=st.data())
def test_gateways_agree_unless_a_namespace_holds_two_layouts(views, data):
    problems = agreement(views)
    assert agreement(data.draw(st.permutations(views))) == problems    # order does not matter
    read = [v for v in views if not v.error]
    split_prints = {(v.namespace, v.generation) for v in read
                    if len({w.fingerprint for w in read
                            if (w.namespace, w.generation) == (v.namespace, v.generation)}) > 1}
    split_places = {v.namespace for v in read
                    if len({w.placement for w in read if w.namespace == v.namespace}) > 1}
    assert sorted(p.subject for p in problems if p.code == "fingerprint_mismatch") == sorted(
        ns for ns, _ in split_prints)
    assert sorted(p.subject for p in problems if p.code == "placement_mismatch") == sorted(
        split_places)


def _host(name, age, error=""):
    return HostView(host=name, role="storage", version="1", api="", cards=1, dev_cluster=False,
                    is_leader=False, report_age=age, error=error)


ages = st.one_of(st.none(), st.builds(Age, st.floats(0.0, 10.0), st.none()))


@given(hosts=st.lists(st.tuples(ages, st.booleans()), max_size=6))
def test_writes_refused_needs_a_majority_of_two_or_more_stale_reports(hosts):
    policy = StatusPolicy(stale_after=3.0)
    views = tuple(_host(f"h{i}", age, "" if ok else "corrupt")
                  for i, (age, ok) in enumerate(hosts))
    etcd = EtcdView(quorum="ok", up=3, total=3, leader="m1", raft_term=2, members=())
    problems = judge_writes(etcd, views, policy)
    reporting = [v for v in views if not v.error]
    stale = [v for v in reporting if v.report_age is not None and v.report_age.at_least >= 3.0]
    assert bool(problems) == (len(stale) >= 2 and 2 * len(stale) > len(reporting))
    assert all(p.code == "writes_refused" for p in problems)


# ---------------------------------------------------------------------- database space

MiB = 1 << 20


@st.composite
def space_rows(draw):
    quota = draw(st.one_of(st.none(), st.integers(16 * MiB, 8 << 30)))
    top = (quota or 8 << 30) * 2
    db = draw(st.one_of(st.none(), st.integers(20_000, top)))
    in_use = draw(st.one_of(st.none(), st.integers(1, db or top)))
    return EtcdMemberView(name="m1", id="1", endpoint=_url(1), reachable=db is not None,
                          is_leader=False, raft_term=None, raft_index=None, version="3.5.1",
                          db_size=db, error="", db_size_in_use=in_use, quota=quota)


@given(row=space_rows())
@settings(max_examples=300)
def test_a_member_near_its_quota_is_a_warning_saying_what_frees_space(row):
    problems = judge_space((row,))
    near = (row.db_size is not None and row.quota is not None
            and row.db_size >= NEAR_QUOTA * row.quota)
    assert [p.code for p in problems] == (["etcd_db_near_quota"] if near else [])
    if near:
        (p,) = problems
        assert p.severity == "warning" and p.subject == "m1"
        assert f"{100 * row.db_size / row.quota:.0f}%" in p.message
        assert "NOSPACE" in p.message and "docs/operations.md" in p.message
        # a defrag alone frees it only when most of the file is not in use
        defrag_only = row.db_size_in_use is not None and row.db_size_in_use < NEAR_QUOTA * row.quota
        assert ("compact" not in p.message) == defrag_only


def test_an_unknown_quota_is_never_judged():
    row = EtcdMemberView(name="m1", id="1", endpoint=_url(1), reachable=True, is_leader=False,
                         raft_term=1, raft_index=1, version="3.4.23", db_size=10 << 30,
                         error="")
    assert row.quota is None and judge_space((row,)) == []


def test_answers_carry_size_in_use_and_quota_into_the_rows():
    status = EndpointStatus(_url(1), 1, 1, 4, 100, "3.5.1", 5 * MiB, db_size_in_use=2 * MiB)
    members = (Member(id=1, name="m1", client_urls=(_url(1),), peer_urls=()),)
    roll = roll_call((EndpointAnswer(_url(1), status, "", 16 * MiB),), members, (_url(1),))
    (row,) = roll.rows
    assert (row.db_size, row.db_size_in_use, row.quota) == (5 * MiB, 2 * MiB, 16 * MiB)


def test_a_corrupt_alarm_names_its_runbook():
    _, problems = judge_alarms((Alarm(member_id=1, alarm="CORRUPT"),), "",
                               {1: Member(id=1, name="m1", client_urls=(), peer_urls=())}, "ok")
    (p,) = problems
    assert (p.code, p.subject) == ("etcd_alarm", "CORRUPT")
    assert "m1" in p.message and "docs/operations.md" in p.message


@given(st.integers(1, 5), st.integers(0, 3))
def test_learners_have_no_share_of_the_quorum_nor_of_the_member_count(voters, learners):
    """A learner (a member being added) answers and has a raft leader, but does not vote: the
    quorum counts voters only, and too few voters is ``etcd_too_small`` whatever learners
    there are."""
    members = tuple(Member(i, f"m{i}", (_url(i),), (), is_learner=i >= voters)
                    for i in range(voters + learners))
    answers = tuple(EndpointAnswer(_url(m.id), EndpointStatus(_url(m.id), m.id, 1, 4, 100,
                                                              "3.5.1", 20000))
                    for m in members)
    roll = roll_call(answers, members, tuple(_url(m.id) for m in members))
    count = count_members(roll, members, ())
    assert (count.total, count.up) == (voters, voters)
    problems = member_problems(roll, {m.id: m for m in members}, "ok", members)
    small = [p for p in problems if p.code == "etcd_too_small"]
    assert bool(small) == (voters < 3)
    if small and learners:
        assert f"{learners} learner(s)" in small[0].message
