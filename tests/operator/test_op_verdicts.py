"""status's verdict per state and its exit code (the Nagios plugins' 0 OK, 1 WARNING, 2
CRITICAL), every configured host expected (a witness's daemon included), the quorum margin,
who drained a card, the --brief line; and check-config listing every mistake. Pure: built
from a snapshot in memory, no etcd."""

from __future__ import annotations

import dataclasses

import yaml
from click.testing import CliRunner

from awide_cluster.cli.main import cli
from awide_cluster.cli.operator import cards_code, status_code
from awide_cluster.contract import history_ring as histdoc
from awide_cluster.contract import keys
from awide_cluster.contract import registry as regdoc
from awide_cluster.operator.freshness import Observations, record_read
from awide_cluster.operator.render import brief, headline
from awide_cluster.operator.snapshot import EndpointAnswer, RawSnapshot, StatusPolicy
from awide_cluster.operator.status import build_status
from awide_cluster.store.types import EndpointStatus, KeyValue, Member
from tests.operator import op_state as state

HOSTS = ("h1", "h2", "w1")


def _member(i: int) -> Member:
    return Member(id=i, name=f"m{i}", client_urls=(f"http://127.0.0.1:{2379 + i}",),
                  peer_urls=())


def _answer(i: int, leader: int = 1) -> EndpointAnswer:
    ep = f"http://127.0.0.1:{2379 + i}"
    return EndpointAnswer(ep, EndpointStatus(ep, i, leader, 4, 100, "3.5.1", 20000))


def _down(i: int) -> EndpointAnswer:
    return EndpointAnswer(f"http://127.0.0.1:{2379 + i}", None, "Timeout: no answer")


def _status(kvs: dict[str, bytes | None], *, answers=None, hosts=HOSTS):
    items = tuple(KeyValue(key=k, value=v, create_revision=1, mod_revision=2, version=1)
                  for k, v in sorted(kvs.items()) if v is not None)
    answers = tuple(answers or (_answer(1), _answer(2), _answer(3)))
    raw = RawSnapshot(cluster="c1", endpoints=tuple(a.endpoint for a in answers),
                      answers=answers, members=tuple(_member(i) for i in (1, 2, 3)),
                      members_error="", kvs=items, read_error="", revision=10,
                      wall=1_800_000_000.0, mono=100.0)
    return build_status(raw, record_read(Observations(), items, 100.0),
                        StatusPolicy(hosts=hosts))


def _with_cards(cards, kvs=None):
    kvs = dict(kvs or state.healthy_state())
    kvs[keys.REGISTRY] = regdoc.encode(state.registry(cards))
    return kvs


CARDS = [state.card("h1", "card0", "SN-A1"), state.card("h1", "card1", "SN-A2"),
         state.card("h2", "card0", "SN-B1", ip="10.0.0.2")]


def test_healthy_is_ok_exit_0():
    st = _status(state.healthy_state())
    assert (st.verdict, st.state, status_code(st), cards_code(st)) == ("healthy", "OK", 0, 0)
    assert st.etcd.margin == "3 of 3 members up; one more failure tolerated"
    assert brief(st) == "c1 OK: 3 hosts, 3 cards (3 in), quorum 3/3"
    assert st.to_dict()["state"] == "OK"


def test_a_stopped_witness_daemon_warns_naming_the_host():
    kvs = state.healthy_state()
    kvs[keys.member("w1")] = None                       # the witness's report is gone
    st = _status(kvs)
    down = [p for p in st.problems if p.code == "daemon_down"]
    assert [(p.severity, p.subject) for p in down] == [("warning", "w1")], st.problems
    assert "host w1 has no report" in down[0].message and down[0].holds
    assert (st.verdict, status_code(st), cards_code(st)) == ("warn", 1, 0)
    assert headline(st) == "WARN (1 down: daemon_down)"
    assert [h.error for h in st.hosts if h.host == "w1"] == ["no report"]
    assert brief(st).startswith("c1 WARNING: daemon_down w1; 3 hosts")
    # without a configured host list, the registry's hosts (the leader's config) count too
    assert "daemon_down" not in {p.code for p in _status(kvs, hosts=()).problems}
    reg = dataclasses.replace(state.registry(CARDS), hosts=HOSTS)
    kvs[keys.REGISTRY] = regdoc.encode(reg)
    assert "daemon_down" in {p.code for p in _status(kvs, hosts=()).problems}


def test_a_member_down_with_quorum_kept_warns_with_the_margin():
    st = _status(state.healthy_state(), answers=(_answer(1), _answer(2), _down(3)))
    down = [p for p in st.problems if p.code == "etcd_member_down"]
    assert [p.severity for p in down] == ["warning"]
    assert "quorum kept: 2 of 3 members up; one more failure loses writes" in down[0].message
    assert st.etcd.margin == "2 of 3 members up; one more failure loses writes"
    assert (st.verdict, st.state, status_code(st)) == ("warn", "WARNING", 1)


def test_quorum_lost_is_critical():
    st = _status(state.healthy_state(), answers=(_answer(1, leader=0), _down(2), _down(3)))
    assert st.etcd.quorum == "lost"
    assert {p.severity for p in st.problems if p.code == "etcd_member_down"} == {"error"}
    assert (st.verdict, st.state, status_code(st)) == ("unhealthy", "CRITICAL", 2)


def test_drained_is_warning_out_is_critical():
    drained = [state.card("h1", "card0", "SN-A1", state="drained", changed=6), *CARDS[1:]]
    st = _status(_with_cards(drained))
    assert (status_code(st), cards_code(st)) == (1, 1)
    out = [state.card("h1", "card0", "SN-A1", state="out", health="sick", reason="gone"),
           *CARDS[1:]]
    st = _status(_with_cards(out))
    assert (status_code(st), cards_code(st), st.state) == (2, 2, "CRITICAL")
    assert brief(st).startswith(f"c1 CRITICAL: card_out {out[0].id}; ")


def test_a_drained_card_says_who_when_and_why():
    drained = [state.card("h1", "card0", "SN-A1", state="drained", changed=6), *CARDS[1:]]
    cid = drained[0].id
    kvs = _with_cards(drained)
    ring = histdoc.append(histdoc.EMPTY, [
        histdoc.Entry(generation=4, kind="drained", reason="drained", card=cid, by="old@h9",
                      why="first time", at="2026-12-01T10:00:00+00:00"),
        histdoc.Entry(generation=6, kind="drained", reason="drained", card=cid,
                      by="alice@ops1", why="fan swap", at="2026-12-03T08:00:00+00:00")],
        ring="r1")
    kvs[keys.HISTORY] = histdoc.encode(ring)
    st = _status(kvs)
    said = "by alice@ops1 at 2026-12-03T08:00:00+00:00: fan swap"
    assert [c.drained_by for c in st.cards if c.id == cid] == [said]
    problem = next(p for p in st.problems if p.code == "card_drained")
    assert problem.message.endswith(f"(drained {said})")
    # no history entry: nothing made up
    assert all(not c.drained_by for c in _status(_with_cards(drained)).cards)


def test_check_config_lists_every_mistake(tmp_path):
    data = {
        "cluster": "a/b",                               # 1. not a name
        "host": "h 1",                                  # 2. not a name
        "hosts": ["h1"], "role": "king",                # 3. no such role
        "etcd": {"endpoints": ["http://127.0.0.1:2379"], "call_timeout": -1},     # 4.
        "timing": {"poll_interval": "often"},           # 5. not a number
        "cards": [],
    }
    f = tmp_path / "c.yaml"
    f.write_text(yaml.safe_dump(data))
    r = CliRunner().invoke(cli, ["check-config", str(f)])
    assert r.exit_code == 78, r.output
    lines = r.stderr.splitlines()
    fields = [ln.split(": ")[1] for ln in lines]
    assert fields == ["cluster", "host", "role", "etcd.call_timeout", "timing.poll_interval"], \
        r.stderr
    assert all(ln.startswith(f"{f}: ") for ln in lines)
    assert "(got: 'king')" in r.stderr and "(got: -1)" in r.stderr      # the value written


def test_check_config_never_shows_a_secret_value(tmp_path):
    data = {"cluster": "c1", "host": "h1", "hosts": ["h1"], "cards": [],
            "etcd": {"endpoints": ["https://root:hunter2@10.0.0.1:2379x"],
                     "password": 12345}}
    f = tmp_path / "c.yaml"
    f.write_text(yaml.safe_dump(data))
    r = CliRunner().invoke(cli, ["check-config", str(f)])
    assert r.exit_code == 78 and "hunter2" not in r.output and "12345" not in r.output, r.output
