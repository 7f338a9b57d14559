"""The pure parts of status: age observation, gateway lag by the reader's clock, the
verdict, etcd quorum judgement and the kind of a config file; no etcd needed."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from awide_cluster.config.common import config_kind
from awide_cluster.contract import keys, records
from awide_cluster.contract import registry as regdoc
from awide_cluster.operator.freshness import (
    PUBLISHED_KEPT,
    Age,
    Observations,
    record_read,
    saw_generation,
)
from awide_cluster.operator.judge.gateways import gateway_problems
from awide_cluster.operator.model import OPERATOR_SET, Problem
from awide_cluster.operator.snapshot import EndpointAnswer, RawSnapshot, StatusPolicy
from awide_cluster.operator.status import build_status
from awide_cluster.store.types import EndpointStatus, KeyValue, Member
from tests.operator import op_state as state


def kv(key, rev, value=b"x"):
    return KeyValue(key=key, value=value, create_revision=1, mod_revision=rev, version=1)


def test_ages_from_mod_revisions():
    s = record_read(Observations(), [kv("members/h1", 5), kv("members/h2", 6)], now=10.0)
    assert s.age("members/h1", 10.0) == Age(0.0, None)          # unknown after one read
    s = record_read(s, [kv("members/h1", 9), kv("members/h2", 6), kv("members/h3", 8)], now=11.0)
    assert s.age("members/h1", 11.0) == Age(0.0, 1.0)           # changed between the reads
    assert s.age("members/h3", 11.0) == Age(0.0, 1.0)           # appeared between the reads
    assert s.age("members/h2", 11.0) == Age(1.0, None)          # unchanged for >= 1 s
    assert record_read(s, None, now=12.0) is s                      # a failed read changes nothing
    s = record_read(s, [kv("members/h2", 6)], now=14.0)
    assert s.age("members/h1", 14.0) is None                    # gone
    assert s.age("members/h2", 14.0).describe() == ">=4.0s"
    assert Age(0.0, 1.0).describe() == "<=1.0s" and Age(2.0, 3.0).describe() == "2.0-3.0s"
    assert Age(0.0).describe() == "?"


def _status(answers, members, kvs=(), endpoints=None):
    eps = endpoints or tuple(a.endpoint for a in answers)
    raw = RawSnapshot(cluster="c1", endpoints=eps, answers=tuple(answers), members=members,
                      members_error="", kvs=tuple(kvs), read_error="", revision=10,
                      wall=1_800_000_000.0, mono=100.0)
    return build_status(raw, record_read(Observations(), kvs, 100.0), StatusPolicy())


def _member(i):
    return Member(id=i, name=f"m{i}", client_urls=(f"http://127.0.0.1:{2379 + i}",),
                  peer_urls=())


def _answer(i, leader, term=4):
    ep = f"http://127.0.0.1:{2379 + i}"
    return EndpointAnswer(ep, EndpointStatus(ep, i, leader, term, 100, "3.5.1", 20000))


def _down(i):
    return EndpointAnswer(f"http://127.0.0.1:{2379 + i}", None, "Timeout: no answer")


def codes(st):
    return sorted(p.code for p in st.problems)


def test_quorum_ok_with_one_member_down():
    st = _status([_answer(1, 2), _answer(2, 2), _down(3)], tuple(_member(i) for i in (1, 2, 3)))
    assert st.etcd.quorum == "ok" and (st.etcd.up, st.etcd.total) == (2, 3)
    assert st.etcd.leader == "m2"
    assert "etcd_member_down" in codes(st) and "quorum_lost" not in codes(st)
    down = next(m for m in st.etcd.members if not m.reachable)
    assert down.name == "m3"


def test_quorum_lost_and_unknown():
    members = tuple(_member(i) for i in (1, 2, 3))
    st = _status([_answer(1, 0), _down(2), _down(3)], members)
    assert st.etcd.quorum == "lost" and "quorum_lost" in codes(st)
    five = tuple(_member(i) for i in range(1, 6))
    st = _status([_answer(1, 2), _answer(2, 2)], five)   # 3 members not among the endpoints
    assert st.etcd.quorum == "unknown" and "quorum_unknown" in codes(st)
    assert sum(1 for m in st.etcd.members if m.error.startswith("not checked")) == 3


def test_minority_member_without_raft_leader_and_leader_disagreement():
    members = tuple(_member(i) for i in (1, 2, 3))
    st = _status([_answer(1, 2), _answer(2, 2), _answer(3, 0)], members)
    assert "etcd_no_raft_leader" in codes(st)
    st = _status([_answer(1, 1), _answer(2, 2), _answer(3, 2)], members)
    assert "etcd_leader_disagreement" in codes(st)


def test_gateway_ahead_of_the_registry():
    reg = state.registry([state.card("h1", "card0", "SN-1")], generation=3)
    kvs = [kv(keys.REGISTRY, 5, regdoc.encode(reg)), kv(keys.LEADER, 4, state.leader()),
           kv(keys.member("h1"), 6, state.healthy_state()[keys.member("h1")]),
           kv(keys.gateway("g1"), 7, state.gateway("g1", generation=9))]
    members = tuple(_member(i) for i in (1, 2, 3))
    st = _status([_answer(i, 1) for i in (1, 2, 3)], members, kvs)
    assert "gateway_ahead" in codes(st) and not st.healthy


# ---------------------------------------------------------------- judged without two clocks

# reads: (seconds since the previous read, registry generation seen or None)
reads = st.lists(st.tuples(st.floats(0.0, 100.0), st.one_of(st.none(), st.integers(1, 200))),
                 min_size=1, max_size=80)


def _seen(history):
    obs, now, first = Observations(), 0.0, {}
    for dt, gen in history:
        now += dt
        obs = saw_generation(record_read(obs, [], now), gen, now)
        if gen is not None:
            first = {g: t for g, t in first.items() if g <= gen}
            first.setdefault(gen, now)
    return obs, now, first


@given(history=reads, applied=st.integers(0, 200), later=st.floats(0.0, 100.0))
@settings(max_examples=300)
def test_behind_for_is_the_readers_own_measure(history, applied, later):
    obs, now, first = _seen(history)
    current = max(obs.published) if obs.published else applied + 1
    got = obs.behind_for(applied, current, now + later)
    kept = dict(sorted(first.items())[-PUBLISHED_KEPT:])
    above = [t for g, t in kept.items() if applied < g <= current]
    assert got == (now + later - min(above) if above else 0.0)
    assert 0.0 <= got <= now + later                 # never more than the reader has watched
    assert obs.behind_for(applied, current, now + later + 1.0) >= got   # grows with its clock
    assert len(obs.published) <= PUBLISHED_KEPT


def test_a_registry_that_went_back_forgets_the_generations_above():
    obs = saw_generation(saw_generation(Observations(), 7, 1.0), 9, 2.0)
    obs = saw_generation(obs, 8, 3.0)                # restored etcd: 9 is no more
    assert obs.published == {7: 1.0, 8: 3.0}
    assert obs.behind_for(7, 8, 4.0) == 1.0


problems = st.lists(st.builds(
    Problem, severity=st.sampled_from(["error", "warning"]),
    code=st.sampled_from(sorted(OPERATOR_SET) + ["card_out", "gateway_catching_up",
                                                 "version_skew"]),
    subject=st.just("x"), message=st.just("m")), max_size=6)


@given(ps=problems)
def test_verdict_holds_on_states_an_operator_set(ps):
    s = replace(_status([EndpointAnswer("http://127.0.0.1:1", None, "down")], None),
                problems=tuple(ps))
    errors = any(p.severity == "error" for p in ps)
    operator = any(p.code in OPERATOR_SET for p in ps)
    assert s.verdict == ("unhealthy" if errors else "warn" if operator else "healthy")
    assert s.healthy == (not errors)
    assert all(d["operator_set"] == (d["code"] in OPERATOR_SET)
               for d in s.to_dict()["problems"])


def test_config_kind():
    daemon = {"cluster": "c1", "host": "h1", "hosts": ["h1"], "etcd": {}}
    gateway = {"mode": "cluster", "cluster": "c1", "host": "g", "pod": "p", "etcd": {},
               "model": {"name": "m"}}
    assert config_kind(daemon) == "daemon" and config_kind(gateway) == "gateway"
    assert config_kind({**daemon, "model": {}}) is None          # a stray field: validation
    assert config_kind({**gateway, "hosts": ["h1"]}) is None     # names it
    assert config_kind({"cluster": "c1", "etcd": {}}) is None
    assert config_kind(["not", "a", "mapping"]) is None


def test_card_line_says_what_the_host_sees_once():
    """The host's observation is added to the reason only when the reason does not say it."""
    from awide_cluster.operator.model import CardView
    from awide_cluster.operator.render import card_lines

    def line(reason: str, reported: str) -> str:
        card = CardView(id="c1", serial="SN1", model="m", host="s1", name="card0", kind="dir",
                        target="/x", slot=None, state="out", health="sick", reason=reason,
                        since="", changed_generation=None, conflict="", unplaced="",
                        reported=reported)
        return card_lines([card])[-1]

    sick = "sick: read probe: Connection refused"
    assert line(f"3 sick polls; {sick}", sick).count("Connection refused") == 1
    shown = line("drained by alice", sick)
    assert "drained by alice" in shown and f"host sees: {sick}" in shown


def test_a_gateway_that_served_its_state_file_is_a_passing_warning():
    rec = records.decode_gateway(state.gateway("g1"))
    assert not gateway_problems(rec, 5, None, Observations(), 0.0, StatusPolicy())
    serving = replace(rec, stale=True, state_age=300, state_since="2026-12-03T14:00:00+00:00")
    now, = (p for p in gateway_problems(serving, 5, None, Observations(), 0.0, StatusPolicy())
            if p.code == "gateway_state_file")
    assert "saved 300 s before" in now.message and "still serves it" in now.message
    assert now.severity == "warning" and not now.holds
    done = replace(serving, stale=False, state_until="2026-12-03T14:01:30+00:00")
    then, = gateway_problems(done, 5, None, Observations(), 0.0, StatusPolicy())
    assert "until 2026-12-03T14:01:30+00:00 (90 s)" in then.message, then.message
