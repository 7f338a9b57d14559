"""Status of known cluster states written into a real etcd: every problem it must name."""

from __future__ import annotations

import json

import pytest
import yaml

from awide_cluster.contract import keys
from awide_cluster.contract import registry as regdoc
from awide_cluster.contract import report as reportdoc
from awide_cluster.operator.gather import StatusReader
from awide_cluster.operator.render import render, render_cards
from awide_cluster.operator.snapshot import StatusPolicy
from tests.operator import op_state as state
from tests.operator.op_fixtures import cluster_name, shared_etcd  # noqa: F401

DEFAULT_POLICY = StatusPolicy()


async def status_of(etcd, cluster, kvs, *, policy=DEFAULT_POLICY):
    await state.awrite(etcd.endpoints, cluster, kvs)
    store = state.store_for(etcd.endpoints, cluster)
    try:
        reader = StatusReader(store, cluster=cluster, endpoints=etcd.endpoints, policy=policy)
        _, st = await reader.sample(0)
        return st
    finally:
        await store.close()


def codes(st, severity=None):
    return sorted({p.code for p in st.problems if severity in (None, p.severity)})


async def test_healthy_cluster(shared_etcd, cluster_name):
    st = await status_of(shared_etcd, cluster_name, state.healthy_state(cluster_name))
    assert st.healthy, st.problems
    assert st.problems == ()
    assert st.etcd.quorum == "ok" and st.etcd.up == 3 and st.etcd.total == 3
    assert sum(m.is_leader for m in st.etcd.members) == 1
    assert st.leader.host == "h1" and st.leader.held_for > 100
    assert [h.host for h in st.hosts] == ["h1", "h2", "w1"]
    assert [h.role for h in st.hosts] == ["storage", "storage", "witness"]
    assert st.registry.generation == 5 and st.registry.slots_used == 3
    assert [c.slot for c in st.cards] == [0, 1, 2]
    assert {c.state for c in st.cards} == {"in"} and {c.reported for c in st.cards} == {"ok"}
    assert all(c.target.startswith("tcp://10.0.0.") for c in st.cards)
    assert [(g.id, g.lag) for g in st.gateways] == [("g1", 0), ("g2", 0)]
    # every format carries the same facts
    doc = json.loads(render(st, "json"))
    assert doc["healthy"] is True and len(doc["cards"]) == 3
    assert yaml.safe_load(render(st, "yaml")) == doc
    text = render(st, "wide")
    assert "HEALTHY" in text and "PROBLEMS  none" in text
    for c in st.cards:
        assert c.id in text and c.serial in text
    assert "quorum ok (3 of 3 members up; one more failure tolerated)" in text
    cards_doc = json.loads(render_cards(st, "json"))
    assert [c["serial"] for c in cards_doc["cards"]] == [c.serial for c in st.cards]


async def test_a_daemon_that_followed_a_new_etcd_history_is_noted(shared_etcd, cluster_name):
    kvs = state.healthy_state(cluster_name)
    cards = [state.card("h1", "card0", "SN-A1"), state.card("h1", "card1", "SN-A2"),
             state.card("h2", "card0", "SN-B1", ip="10.0.0.2")]
    note = "cluster id 1f2e -> 9a3c, revision 812 -> 40 (a quorum of 3 members agrees)"
    kvs[keys.member("h2")] = reportdoc.encode(state.replace(
        state.report("h2", cards), history_resets=2, history_note=note))
    st = await status_of(shared_etcd, cluster_name, kvs)
    assert st.healthy and st.verdict == "healthy", st.problems     # a note, exit 0
    (p,) = st.problems
    assert (p.severity, p.code, p.subject) == ("warning", "etcd_history_reset", "h2")
    assert "2 times" in p.message and note in p.message and "Restore etcd" in p.message
    assert "etcd_history_reset" in render(st, "table")
    assert json.loads(render(st, "json"))["problems"][0]["code"] == "etcd_history_reset"
    # without it (a daemon started since, or never reset) nothing is said
    kvs[keys.member("h2")] = reportdoc.encode(state.report("h2", cards))
    assert (await status_of(shared_etcd, cluster_name, kvs)).problems == ()


async def test_card_out(shared_etcd, cluster_name):
    kvs = state.healthy_state(cluster_name)
    cards = [state.card("h1", "card0", "SN-A1"),
             state.card("h1", "card1", "SN-A2", state="out", health="sick",
                        reason="read probe failed 3 polls in a row", changed=6),
             state.card("h2", "card0", "SN-B1", ip="10.0.0.2")]
    kvs[keys.REGISTRY] = regdoc.encode(state.registry(cards, 6, cluster=cluster_name))
    kvs[keys.gateway("g1")] = state.gateway("g1", generation=6)
    kvs[keys.gateway("g2")] = state.gateway("g2", generation=6)
    st = await status_of(shared_etcd, cluster_name, kvs)
    assert not st.healthy
    assert codes(st) == ["card_out"]
    (p,) = st.problems
    out = next(c for c in st.cards if c.state == "out")
    assert p.subject == out.id and "read probe failed" in p.message
    assert out.slot is not None                       # an out card keeps its slot
    assert "OUT" in render(st, "table")


async def test_conflict(shared_etcd, cluster_name):
    kvs = state.healthy_state(cluster_name)
    a = state.card("h1", "card0", "SN-A1")
    twin = state.replace(state.card("h2", "card0", "SN-A1", ip="10.0.0.2"),
                         identity="other", id=regdoc.card_id("SN-A1", "AWIDE-ACC-1", "other"),
                         conflict="serial SN-A1 is also claimed by card " + a.id, admitted=2)
    kvs[keys.REGISTRY] = regdoc.encode(state.registry([a, twin], cluster=cluster_name))
    st = await status_of(shared_etcd, cluster_name, kvs)
    assert "card_conflict" in codes(st)
    assert "card_unplaced" in codes(st)               # a conflicting newcomer gets no slot
    row = next(c for c in st.cards if c.id == twin.id)
    assert row.slot is None and "conflict" in row.unplaced
    assert "conflict: serial SN-A1" in render(st, "table")


async def test_ninth_card(shared_etcd, cluster_name):
    kvs = state.healthy_state(cluster_name)
    cards = [state.card("h1", f"card{i}", f"SN-{i}", admitted=1) for i in range(8)]
    ninth = state.card("h2", "card0", "SN-9", ip="10.0.0.2", admitted=3)
    kvs[keys.REGISTRY] = regdoc.encode(state.registry(cards + [ninth], cluster=cluster_name))
    kvs[keys.member("h1")] = reportdoc.encode(state.report("h1", cards))
    kvs[keys.member("h2")] = reportdoc.encode(state.report("h2", [ninth]))
    st = await status_of(shared_etcd, cluster_name, kvs)
    assert codes(st, "error") == ["card_unplaced"]
    p = next(p for p in st.problems if p.code == "card_unplaced")
    assert p.subject == ninth.id and "no free slot" in p.message
    assert st.registry.slots_used == 8
    assert yaml.safe_load(render(st, "yaml"))["cards"][-1]["unplaced"].startswith("no free slot")


class Mono:
    """The reader's monotonic clock, moved by the test (the reader's own clock, nothing else)."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


async def test_gateway_behind_and_catching_up(shared_etcd, cluster_name):
    """Judged by how long this reader saw the gateway behind (its monotonic clock), never by
    the leader's written_at: a registry written "an hour ago" by the leader's clock and a
    gateway that applies it within a second is no problem."""
    kvs = state.healthy_state(cluster_name)
    cards = [state.card("h1", "card0", "SN-A1"), state.card("h1", "card1", "SN-A2"),
             state.card("h2", "card0", "SN-B1", ip="10.0.0.2")]
    kvs[keys.REGISTRY] = regdoc.encode(state.registry(cards, 7, written_ago=3600,
                                                      cluster=cluster_name))
    kvs[keys.gateway("g1")] = state.gateway("g1", generation=7)
    kvs[keys.gateway("g2")] = state.gateway("g2", generation=5)
    await state.awrite(shared_etcd.endpoints, cluster_name, kvs)
    mono = Mono()
    store = state.store_for(shared_etcd.endpoints, cluster_name)
    try:
        # reports are not rewritten here: only the gateway's lag is judged
        reader = StatusReader(store, cluster=cluster_name, endpoints=shared_etcd.endpoints,
                              mono=mono, policy=StatusPolicy(stale_after=60, behind_grace=3.0))
        _, st = await reader.snapshot()            # first read: lag seen, not measured yet
        assert codes(st) == ["gateway_catching_up"] and st.verdict == "healthy"
        assert "one read only" in st.problems[0].message
        assert [(g.id, g.lag) for g in st.gateways] == [("g1", 0), ("g2", 2)]
        mono.t += 1.0
        _, st = await reader.snapshot()            # 1 s by the reader's clock: catching up
        assert codes(st) == ["gateway_catching_up"] and "1.0 s so far" in st.problems[0].message
        mono.t += 2.5
        _, st = await reader.snapshot()            # 3.5 s: behind, an error
        assert codes(st) == ["gateway_behind"] and not st.healthy
        assert "seen behind for 3.5 s by this reader" in st.problems[0].message
        # it applies generation 7: fine at once, whatever the leader's clock said
        await state.awrite(shared_etcd.endpoints, cluster_name,
                           {keys.gateway("g2"): state.gateway("g2", generation=7)})
        mono.t += 0.5
        _, st = await reader.snapshot()
        assert st.problems == ()
        # a new generation, written "an hour ago" by a leader whose clock is late: the lag
        # counts from when this reader first saw generation 8
        await state.awrite(shared_etcd.endpoints, cluster_name, {
            keys.REGISTRY: regdoc.encode(state.registry(cards, 8, written_ago=3600,
                                                        cluster=cluster_name))})
        mono.t += 0.5
        _, st = await reader.snapshot()
        assert codes(st) == ["gateway_catching_up"]
        assert "seen behind for 0.0 s so far" in st.problems[0].message
        await state.awrite(shared_etcd.endpoints, cluster_name, {
            keys.gateway("g1"): state.gateway("g1", generation=8),
            keys.gateway("g2"): state.gateway("g2", generation=8)})
        mono.t += 0.5
        _, st = await reader.snapshot()
        assert st.problems == ()
        assert st.registry.age is not None and st.registry.age.at_least < 1.0
    finally:
        await store.close()


async def test_one_shot_sample_waits_out_the_grace_when_a_gateway_lags(shared_etcd,
                                                                      cluster_name):
    """One-shot status reads again ``behind_grace`` after its first read when that read
    found a gateway behind, so the verdict rests on the reader's own clock."""
    kvs = state.healthy_state(cluster_name)
    kvs[keys.gateway("g2")] = state.gateway("g2", generation=4)
    await state.awrite(shared_etcd.endpoints, cluster_name, kvs)
    store = state.store_for(shared_etcd.endpoints, cluster_name)
    try:
        reader = StatusReader(store, cluster=cluster_name, endpoints=shared_etcd.endpoints,
                              policy=StatusPolicy(stale_after=5.0, behind_grace=0.3))
        _, st = await reader.sample(0.05)
        assert codes(st) == ["gateway_behind"], st.problems
    finally:
        await store.close()


async def test_fingerprints_differ(shared_etcd, cluster_name):
    kvs = state.healthy_state(cluster_name)
    kvs[keys.gateway("g2")] = state.gateway("g2", fingerprint="Lffffffffffffffff")
    kvs[keys.gateway("g3")] = state.gateway("g3", namespace="other-ns", fingerprint="Laaaa")
    st = await status_of(shared_etcd, cluster_name, kvs)
    assert codes(st) == ["fingerprint_mismatch"]
    (p,) = st.problems
    assert p.subject == "llama-0123456789abcdef"
    assert "g1" in p.message and "g2" in p.message and "g3" not in p.message


async def test_placement_differs_from_the_layout_record(shared_etcd, cluster_name):
    kvs = state.healthy_state(cluster_name)
    kvs[keys.gateway("g2")] = state.gateway("g2", placement="stripe")
    st = await status_of(shared_etcd, cluster_name, kvs)
    assert {"layout_mismatch", "placement_mismatch"} <= set(codes(st))


async def test_no_leader(shared_etcd, cluster_name):
    kvs = state.healthy_state(cluster_name)
    kvs[keys.LEADER] = None
    st = await status_of(shared_etcd, cluster_name, kvs)
    assert codes(st) == ["no_leader"]
    assert st.leader is None and "LEADER  none" in render(st, "table")
    assert not any(h.is_leader for h in st.hosts)


async def test_corrupt_registry_and_report(shared_etcd, cluster_name):
    kvs = state.healthy_state(cluster_name)
    kvs[keys.REGISTRY] = b'{"schema": 1, "cluster": "c1", "generation": "seven"'
    kvs[keys.member("h2")] = b'{"schema": 1, "host": "h2", "role": "queen"}'
    st = await status_of(shared_etcd, cluster_name, kvs)
    assert codes(st) == ["registry_corrupt", "report_corrupt"]
    assert st.registry.error.startswith("registry (key registry): value is not JSON")
    assert next(h for h in st.hosts if h.host == "h2").error.startswith("host report")
    assert "field role" in next(h for h in st.hosts if h.host == "h2").error
    kvs[keys.REGISTRY] = b'{"schema": 99}'
    st = await status_of(shared_etcd, cluster_name, kvs)
    assert "schema 99 is not known" in st.registry.error


async def test_card_missing_from_its_hosts_report_and_host_down(shared_etcd, cluster_name):
    kvs = state.healthy_state(cluster_name)
    kvs[keys.member("h2")] = None
    st = await status_of(shared_etcd, cluster_name, kvs)
    assert codes(st) == ["host_down"]
    row = next(c for c in st.cards if c.host == "h2")
    assert row.reported == "no report"


async def test_dev_cluster_is_loud_but_not_unhealthy(shared_etcd, cluster_name):
    kvs = state.healthy_state(cluster_name)
    cards = [state.card("h1", "card0", "SN-A1"), state.card("h1", "card1", "SN-A2")]
    kvs[keys.member("h1")] = reportdoc.encode(state.report("h1", cards, dev=True))
    st = await status_of(shared_etcd, cluster_name, kvs)
    assert st.healthy and st.dev_cluster and codes(st) == ["dev_cluster"]
    # an operator's setting: a warning that holds the verdict (exit 1) until cleared
    assert st.verdict == "warn" and st.problems[0].operator_set
    assert render(st, "table").splitlines()[0].split(": ", 1)[1].startswith(
        "WARN (1 set by an operator: dev_cluster)")
    assert "!!! DEV CLUSTER: h1" in render(st, "wide").splitlines()[2]
    assert render(st, "table").splitlines()[1].startswith("!!! DEV CLUSTER: h1")


async def test_unregistered_card_is_shown(shared_etcd, cluster_name):
    kvs = state.healthy_state(cluster_name)
    cards = [state.card("h1", "card0", "SN-A1"), state.card("h1", "card1", "SN-A2"),
             state.card("h1", "card2", "SN-NEW")]
    kvs[keys.member("h1")] = reportdoc.encode(state.report("h1", cards))
    st = await status_of(shared_etcd, cluster_name, kvs)
    assert st.healthy and codes(st) == ["card_unregistered"]
    assert [c.serial for c in st.cards if c.state == "unregistered"] == ["SN-NEW"]


@pytest.mark.parametrize("fmt", ["table", "json", "yaml"])
async def test_empty_cluster_has_no_registry_and_no_leader(shared_etcd, cluster_name, fmt):
    st = await status_of(shared_etcd, cluster_name, {})
    assert codes(st) == ["no_leader", "registry_missing"]
    assert render(st, fmt)


async def test_a_restarting_host_is_shown_with_its_deadline(shared_etcd, cluster_name):
    from awide_cluster.daemon.restart import restarting_report
    kvs = state.healthy_state(cluster_name)
    cards = [state.card("h2", "card0", "SN-B1", ip="10.0.0.2")]
    marked = restarting_report(state.report("h2", cards), grace=120,
                               wall="2026-12-03T08:00:00+00:00")
    kvs[keys.member("h2")] = reportdoc.encode(marked)
    st = await status_of(shared_etcd, cluster_name, kvs)
    assert st.healthy and st.verdict == "warn", st.problems     # loud, set by an operator
    (p,) = st.problems
    assert (p.severity, p.code, p.subject) == ("warning", "host_restarting", "h2")
    assert "until 2026-12-03T08:02:00+00:00 (grace 120 s)" in p.message
    (h2,) = [h for h in st.hosts if h.host == "h2"]
    assert h2.restarting == {"until": "2026-12-03T08:02:00+00:00", "grace": 120}
    assert "RESTARTING until 2026-12-03T08:02:00+00:00" in render(st, "wide")
    doc = json.loads(render(st, "json"))
    assert [h["restarting"] for h in doc["hosts"] if h["host"] == "h2"] == [h2.restarting]
