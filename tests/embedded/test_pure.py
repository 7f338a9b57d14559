"""Pure parts of the harness: views from JSON lines, first times, agreement, the tour's
judgement and report, bounds from timing."""

from __future__ import annotations

import json
from typing import Any

import pytest

from awide_cluster.config import daemon as daemon_cfg
from awide_gateway_cluster.config import parse_config
from awide_harness.report import EventOutcome, figures, report_doc, summary
from awide_harness.scenario import stayed
from awide_harness.spec import ClusterSpec, Timing, bounds, daemon_config, gateway_config
from awide_harness.views import (
    GatewayFeed,
    card_in,
    card_out,
    disagreement,
    first_time,
    view_from_table,
)


def table(gw: str, t: float, slots: list, gen: int = 1) -> str:
    return json.dumps({"type": "table", "t": t, "gateway": gw, "generation": gen,
                       "fingerprint": "f", "layout_ok": True, "unplaced": [],
                       "slots": [None if s is None else {"slot": i, "card": s[0], "in": s[1],
                                                         "why": "" if s[1] else "registry: out"}
                                 for i, s in enumerate(slots)] + [None] * (8 - len(slots))})


def feed_of(gw: str, *lines: str) -> GatewayFeed:
    f = GatewayFeed(gw)
    for line in lines:
        f.take(line)
    return f


def test_feed_keeps_tables_and_events_and_counts_garbage():
    f = feed_of("g1", table("g1", 1.0, [("A", True)]), "not json", '{"type": "table"}',
                json.dumps({"type": "event", "t": 1.5, "gateway": "g1", "kind": "out"}),
                table("g1", 2.0, [("A", False)], gen=2))
    assert [v.generation for v in f.history] == [1, 2]
    assert f.garbage == 2 and f.events[0]["kind"] == "out"
    v = f.latest()
    assert v.slots[:2] == ("A", None) and v.in_service == {"A": False}
    assert v.why["A"] == "registry: out" and v.seen_at == 2.0


def test_first_time_counts_from_since_and_never_before():
    h = feed_of("g", table("g", 1.0, [("A", True)]), table("g", 3.0, [("A", False)]),
                table("g", 4.0, [("A", True)])).history
    assert first_time(h, card_out("A"), since=2.0) == 3.0
    assert first_time(h, card_out("A"), since=3.5) == 3.5      # already out at since
    assert first_time(h, card_in("A"), since=3.5) == 4.0
    assert first_time(h, card_out("A"), since=4.5) is None
    assert first_time([], card_in("A"), since=0.0) is None


def test_disagreement_names_what_differs():
    a = view_from_table(json.loads(table("g1", 1, [("A", True), ("B", True)])))
    b = view_from_table(json.loads(table("g2", 1, [("A", True), ("B", False)], gen=2)))
    c = view_from_table(json.loads(table("g2", 1, [("B", True), ("A", True)])))
    same = view_from_table(json.loads(table("g2", 1, [("A", True), ("B", True)], gen=5)))
    assert disagreement({"g1": a, "g2": same}) == ""         # generation may differ
    differ = disagreement({"g1": a, "g2": b})
    assert "B" in differ and "in-service" in differ
    assert "slot tables differ" in disagreement({"g1": a, "g2": c})
    assert "no view yet from g2" == disagreement({"g1": a, "g2": None})


def test_stayed_looks_at_every_view_of_the_window():
    h = feed_of("g", table("g", 1.0, [("A", True)]), table("g", 2.0, [("A", False)]),
                table("g", 3.0, [("A", True)])).history
    assert not stayed(h, card_in("A"), 1.5, 3.5)
    assert stayed(h, card_in("A"), 3.0, 9.0)
    assert stayed(h, card_in("A"), 0.0, 1.9)


def outcome(**kw: Any) -> EventOutcome:
    base: dict[str, Any] = dict(name="card_sick", what="w", expect="x", at=1.0, bound=2.0,
                                seen={"g1": 0.5, "g2": 1.0}, agreed=True, figure="detection")
    base.update(kw)
    return EventOutcome(**base)


def test_an_event_converges_only_in_time_with_every_check_held():
    assert outcome().converged and outcome().worst == 1.0
    assert not outcome(seen={"g1": 0.5, "g2": None}).converged
    assert not outcome(seen={"g1": 2.5, "g2": 0.1}).converged
    assert not outcome(checks={"x kept": False}).converged
    assert outcome(seen={}, figure=None).converged          # a hold: nothing to see
    late = outcome(seen={"g1": 2.5, "g2": None}, agreed=False, disagreement="slots")
    probs = late.problems()
    assert any("g1 took 2.500 s" in p for p in probs) and any("g2 did not show" in p for p in probs)
    assert any("disagree" in p for p in probs)


def test_report_and_summary():
    t = Timing.quick()
    good = [outcome(), outcome(name="leader_killed", figure="leader_handover",
                               more_figures={"leader_election": {"seconds": 1.2, "bound": 3.0}})]
    doc = report_doc(good, timing=t, bounds=bounds(t), quick=True, cluster={"name": "c"},
                     duration=3.0)
    assert doc["ok"] and doc["converged"] and doc["problems"] == []
    assert set(doc["figures"]) == {"detection", "leader_handover", "leader_election"}
    assert doc["figures"]["leader_election"]["within_bound"]
    assert json.loads(json.dumps(doc)) == doc
    text = "\n".join(summary(doc))
    assert "CONVERGED" in text and "detection" in text
    bad = report_doc([outcome(seen={"g1": None, "g2": 0.1})], timing=t, bounds=bounds(t),
                     quick=True, cluster={}, duration=1.0)
    assert not bad["ok"] and bad["problems"] and "NOT CONVERGED" in "\n".join(summary(bad))
    failed = report_doc([], timing=t, bounds=bounds(t), quick=True, cluster={}, duration=1.0,
                        error="no etcd")
    assert not failed["ok"] and failed["problems"] == ["no etcd"]
    assert figures([outcome(seen={"g1": None})])["detection"]["seconds"] is None


def test_bounds_grow_with_the_timing_and_cover_the_floor():
    q, d = bounds(Timing.quick()), bounds(Timing())
    for name in ("detection", "return_", "join", "election", "handover", "agreement"):
        assert getattr(q, name) < getattr(d, name)
    t = Timing()
    assert d.detection > t.sick_polls * t.poll_interval
    assert d.election > t.lease_ttl and d.handover > d.election


@pytest.mark.parametrize("timing", [Timing(), Timing.quick()])
def test_generated_configs_pass_the_real_validators(timing, tmp_path):
    spec = ClusterSpec(timing=timing)
    eps = ("http://127.0.0.1:2379", "http://127.0.0.1:2380", "http://127.0.0.1:2381")
    d = daemon_cfg.parse(daemon_config(spec, "s1", eps, 9700, [{
        "name": "c0", "kind": "dir", "path": str(tmp_path), "store": {"tcp": "127.0.0.1:1"},
        "probe_timeout": timing.probe_timeout}]), "<t>")
    assert d.role == "storage" and d.cards[0].store.tcp == "127.0.0.1:1"
    assert daemon_cfg.parse(daemon_config(spec, "w1", eps, 9701, []), "<t>").role == "witness"
    # a namespace's own address: the API in plain HTTP there is allowed explicitly
    ns = daemon_cfg.parse(daemon_config(spec, "w1", eps, 9701, [], address="10.250.0.3"), "<t>")
    assert ns.api.allow_insecure and ns.api.tls is None
    g = parse_config(gateway_config(spec, 1, eps))
    assert g.id == "gpu2-vllm-0"


def test_spec_problems_are_named():
    assert ClusterSpec().problems() == []
    assert any("lease_ttl" in p for p in ClusterSpec(timing=Timing(lease_ttl=1)).problems())
    assert any("8 cards" in p for p in ClusterSpec(storage_hosts=3, cards_per_host=3).problems())
    assert any("first_leader" in p for p in ClusterSpec(first_leader="x9").problems())


def test_demo_control_file_names():
    from awide_harness.demo import CONTROL_HELP, parse_control
    assert parse_control("kill-store-s2-c0") == ("kill-store", "s2/c0")
    assert parse_control("add-card-s2") == ("add-card", "s2")
    assert parse_control("freeze-etcd-0") == ("freeze-etcd", "0")
    assert parse_control("kill-daemon-") is None and parse_control("rm-rf") is None
    assert all(parse_control(name) for name, _ in CONTROL_HELP)
