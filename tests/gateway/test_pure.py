"""Pure parts: config validation, namespace/fingerprint, follower decisions, view, events."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from awide_cluster.config.daemon import ETCD_PROGRESS_NOTIFY
from awide_cluster.contract import records
from awide_cluster.contract import registry as regdoc
from awide_cluster.contract import slots as slotfn
from awide_cluster.contract.health import Hysteresis
from awide_cluster.store.errors import Timeout
from awide_cluster.store.types import KeyValue, RangeResult
from awide_gateway_cluster import layout as lay
from awide_gateway_cluster.cardpath import Probe, advance
from awide_gateway_cluster.config import ConfigError, load_config, parse_config
from awide_gateway_cluster.events import diff
from awide_gateway_cluster.follower import FollowState, step
from awide_gateway_cluster.registry_watch import NOTIFY_MARGIN, PROOF_WINDOW, proof_window
from awide_gateway_cluster.view import CardPath, build
from tests.gateway.support import make_card

BASE = {
    "mode": "cluster", "cluster": "c1", "host": "gpu1", "pod": "vllm-0",
    "etcd": {"endpoints": ["http://127.0.0.1:2379"]},
    "model": {"name": "meta-llama/Llama-3.1-8B"},
}


def cfg(**over):
    doc = {**BASE}
    for k, v in over.items():
        doc[k] = {**doc.get(k, {}), **v} if isinstance(v, dict) else v
    return parse_config(doc, "gw.yaml")


def test_plain_http_to_another_host_needs_the_loud_opt_out():
    c = cfg(etcd={"endpoints": ["http://10.0.0.1:2379"], "allow_plaintext": True})
    assert c.etcd.allow_plaintext
    assert "NOT encrypted" in c.etcd.plaintext_warning()
    assert cfg().etcd.plaintext_warning() is None          # loopback: nothing to say


def test_config_defaults():
    c = cfg()
    assert c.id == "gpu1-vllm-0" and c.key_placement == "dialog" and c.watch
    assert (c.timing.poll_interval, c.timing.sick_polls, c.timing.healthy_polls) == (1.0, 3, 1)
    assert c.etcd.call_timeout == 0.5
    assert c.timing.linearizable_every == 10 and c.watch_stall_after == 30.0
    assert c.timing.registration_ttl == 30    # gateways/<id> outlives a crash by 30 s at most
    # the gateway's notify interval is the deploy's; its proof window at the default poll
    # interval leaves the notifications a quarter of their interval to spare (they arrive
    # 1.40-1.54 s apart at 1.4 s): each one stands in for a poll
    assert c.timing.etcd_progress_notify == ETCD_PROGRESS_NOTIFY
    window = proof_window(c.timing.poll_interval, c.timing.etcd_progress_notify)
    assert window >= ETCD_PROGRESS_NOTIFY * NOTIFY_MARGIN >= ETCD_PROGRESS_NOTIFY + 0.3


def test_the_proof_window_is_never_below_the_notify_interval_with_its_margin():
    assert proof_window(1.0, 1.4) == pytest.approx(1.75)
    assert proof_window(4.0, 1.4) == PROOF_WINDOW * 4.0          # the poll interval's share
    assert proof_window(0.1, 1.4) == pytest.approx(1.75)         # a fast poll: never below
    assert proof_window(1.0, 1.4, measured=2.0) == pytest.approx(2.5)   # a slower member
    assert proof_window(1.0, 1.4, measured=1.0) == pytest.approx(1.75)  # never narrower


def test_a_dumped_config_loads_back_with_the_keys_a_file_takes():
    c = cfg(timing={"lease_ttl": 40})
    doc = json.loads(c.model_dump_json())
    assert doc["timing"]["lease_ttl"] == 40 and "registration_ttl" not in doc["timing"]
    assert parse_config(doc, "gw.yaml") == c


@pytest.mark.parametrize("over,field,words", [
    ({"mode": "local"}, "mode", "cluster"),
    ({"key_placement": "random"}, "key_placement", "dialog"),
    ({"timing": {"poll_interval": 0.4}}, "timing", "call_timeout"),
    ({"timing": {"lease_ttl": 2}}, "timing", "lease_ttl"),
    ({"timing": {"sick_polls": 0}}, "timing.sick_polls", "greater"),
    ({"timing": {"linearizable_every": 0}}, "timing.linearizable_every", "greater"),
    ({"watch_stall_after": 1.0}, "watch_stall_after", "greater"),
    ({"cluster": "bad name/"}, "cluster", "not a valid name"),
    ({"etcd": {"endpoints": ["10.0.0.1:2379"]}}, "etcd.endpoints", "http"),
    ({"model": {"dtype": "float7"}}, "model.dtype", "float7"),
    ({"nvme": {"hostnqn": "nqn.bad,x"}}, "nvme.hostnqn", "NQN"),
    ({"bogus": 1}, "bogus", "Extra"),
    ({"etcd": {"endpoints": ["http://10.0.0.1:2379"]}}, "etcd.endpoints.0",
     "plain http to another host"),
    ({"etcd": {"endpoints": ["http://127.0.0.1:2379"], "username": "u", "password": "pw"}},
     "etcd.password", "every endpoint must be https://"),
    ({"etcd": {"endpoints": ["http://u:pw@10.0.0.1:2379"]}}, "etcd.endpoints", "***@10.0.0.1"),
])
def test_config_refusals_name_the_field(over, field, words):
    with pytest.raises(ConfigError) as err:
        cfg(**over)
    assert err.value.field == field
    assert words.lower() in err.value.reason.lower()
    assert str(err.value).startswith("gw.yaml: ")


def test_config_file_errors(tmp_path: Path):
    p = tmp_path / "g.yaml"
    p.write_text("mode: cluster\ncluster: [unclosed\n")
    with pytest.raises(ConfigError) as err:
        load_config(p)
    assert err.value.field.startswith("line")
    with pytest.raises(ConfigError):
        load_config(tmp_path / "missing.yaml")


def test_namespace_per_model_configuration():
    base = cfg().model
    ns = lay.namespace(base)
    assert ns.startswith("llama-3-1-8b-") and len(ns) <= 63
    assert lay.namespace(base) == ns
    for change in ({"revision": "v2"}, {"dtype": "float16"}, {"block_tokens": 32},
                   {"extra": {"tensor_parallel": "2"}}, {"name": "meta-llama/Llama-3.1-70B"}):
        assert lay.namespace(cfg(model=change).model) != ns


def test_fingerprint_covers_namespace_placement_and_table():
    t1 = slotfn.SlotTable(("c1",) + (None,) * 7)
    t2 = slotfn.SlotTable((None, "c1") + (None,) * 6)
    fp = lay.fingerprint("ns", "dialog", t1)
    assert fp == lay.fingerprint("ns", "dialog", t1)
    assert len({fp, lay.fingerprint("ns2", "dialog", t1), lay.fingerprint("ns", "stripe", t1),
                lay.fingerprint("ns", "dialog", t2)}) == 4


def test_layout_record_roundtrip_and_compare():
    mine = records.LayoutRecord("ns", "dialog", created_by="g1")
    assert records.decode_layout(mine.encode()) == mine
    assert lay.compare(mine, records.LayoutRecord("ns", "dialog", created_by="g2")) is None
    m = lay.compare(mine, records.LayoutRecord("ns", "dialog", algorithm=2, created_by="g2"))
    assert m is not None and "placement-algorithm=1" in str(m) and "placement-algorithm=2" in str(m)
    with pytest.raises(records.LayoutRecordError):
        records.decode_layout(b"[]")


def _rr(value: bytes | None, mod: int = 5, count: int = 1) -> RangeResult:
    kvs = (KeyValue("registry", value, 2, mod, 3),) if value is not None else ()
    return RangeResult(revision=mod, kvs=kvs, count=count)


def _reg(cards, gen=1, prev=slotfn.EMPTY):
    return regdoc.Registry(cluster="c1", generation=gen, leader="s1", cards=tuple(cards),
                           slots=regdoc.slot_table(tuple(cards), prev))


def test_follow_step_applies_keeps_and_never_empties():
    a = make_card(1)
    reg = _reg([a])
    st, d = step(FollowState(), _rr(regdoc.encode(reg)), 10.0, cluster="c1")
    assert d.outcome == "applied" and st.registry == reg and st.seen_revision == 5
    st2, d = step(st, _rr(None), 11.0, cluster="c1")
    assert d.outcome == "unchanged" and st2.registry == reg and st2.last_ok == 11.0
    st3, d = step(st2, Timeout("frozen"), 12.0, cluster="c1")
    assert d.outcome == "failed" and st3.registry == reg and st3.last_ok == 11.0
    assert "frozen" in st3.problem
    st4, d = step(st3, _rr(None, count=0), 13.0, cluster="c1")
    assert d.outcome == "failed" and st4.registry == reg and "absent" in st4.problem
    st5, d = step(st4, _rr(b"garbage", mod=9), 14.0, cluster="c1")
    assert d.outcome == "rejected" and st5.registry == reg and st5.seen_revision == 9
    assert st5.applied_revision == 5 and "keeping generation 1" in st5.problem
    st6, d = step(st5, _rr(None, mod=9), 15.0, cluster="c1")
    assert d.outcome == "unchanged" and st6.problem        # still on the refused document


def test_view_reasons_in_order():
    a = make_card(1)
    reg = _reg([a])
    up = CardPath(a.id, device="/dev/nvme0n1", verified=True, note="")
    v = build(reg, {a.id: up}, namespace="n", placement="dialog", fingerprint="f",
              layout_ok=True)
    assert v.card(a.id).in_service and v.card(a.id).why == ""
    assert "layout" in build(reg, {a.id: up}, namespace="n", placement="dialog",
                             fingerprint="f", layout_ok=False,
                             layout_problem="layout mismatch").card(a.id).why
    sick = CardPath(a.id, device="/dev/nvme0n1", verified=True,
                     health=Hysteresis(up=False, bad=3, reason="state resetting"))
    why = build(reg, {a.id: sick}, namespace="n", placement="dialog", fingerprint="f",
                layout_ok=True).card(a.id).why
    assert why == "local: state resetting (3 bad polls)"


def test_advance_uses_hysteresis_and_refusal_is_immediate():
    loc = CardPath("c", device="/dev/nvme0n1", verified=True)
    bad = Probe(device="/dev/nvme0n1", verified=True, good=False, reason="io")
    loc = advance(loc, bad, sick_polls=2, healthy_polls=1)
    assert loc.health.up
    loc = advance(loc, Probe(device="/dev/nvme0n1", verified=True), sick_polls=2,
                  healthy_polls=1)                         # no observation: no change
    assert loc.health.up and loc.health.bad == 1
    loc = advance(loc, bad, sick_polls=2, healthy_polls=1)
    assert not loc.health.up
    loc = advance(loc, Probe(refused="wrong serial"), sick_polls=2, healthy_polls=1)
    assert loc.refused == "wrong serial"


def test_diff_moves_name_both_cards_and_both_slots():
    a, b, c = make_card(1), make_card(2, admitted=2), make_card(3, admitted=3)
    up = {x.id: CardPath(x.id, device="/dev/x", verified=True) for x in (a, b, c)}
    kw = dict(namespace="n", placement="dialog", fingerprint="f", layout_ok=True)
    t_old = slotfn.SlotTable((a.id, b.id) + (None,) * 6)
    t_new = slotfn.SlotTable((c.id, a.id) + (None,) * 6)
    old = build(regdoc.Registry("c1", 1, "s1", (a, b), t_old), up, **kw)
    new = build(regdoc.Registry("c1", 2, "s1", (a, c), t_new), up, **kw)
    evs = diff(old, new)
    kinds = [(e.kind, e.card_id) for e in evs]
    assert ("moved", a.id) in kinds and ("moved", b.id) in kinds and ("joined", c.id) in kinds
    mv = next(e for e in evs if e.kind == "moved" and e.card_id == a.id)
    assert (mv.old_slot, mv.slot) == (0, 1)
    assert b.id in mv.detail and c.id in mv.detail          # who held slot 1, who holds slot 0
    assert "slot=0->1" in mv.line()
    left = next(e for e in evs if e.card_id == b.id)
    assert left.slot is None and "no slot" in left.detail


def test_follow_step_refuses_a_registry_that_went_back_and_says_why():
    from dataclasses import replace
    a, b = make_card(1), make_card(2, admitted=2)
    reg5 = replace(_reg([a]), generation=5, lineage="L1")
    st, d = step(FollowState(), _rr(regdoc.encode(reg5), mod=5), 1.0, cluster="c1")
    assert d.outcome == "applied"
    # a lower generation of the same lineage (a registry re-created from scratch at 1, or an
    # old copy written back): refused, the applied one kept
    low = replace(_reg([a, b]), generation=1, lineage="L1")
    st2, d = step(st, _rr(regdoc.encode(low), mod=6), 2.0, cluster="c1")
    assert d.outcome == "rejected" and st2.registry == reg5
    assert "went back" in d.detail and "keeping generation 5" in d.detail
    # the same number with another content: refused too
    same = replace(_reg([a, b]), generation=5, lineage="L1")
    st3, d = step(st2, _rr(regdoc.encode(same), mod=7), 3.0, cluster="c1")
    assert d.outcome == "rejected" and st3.registry == reg5
    # a higher generation applies; another lineage applies whatever its number, and says so
    other = replace(_reg([a, b]), generation=1, lineage="L2")
    st4, d = step(st3, _rr(regdoc.encode(other), mod=8), 4.0, cluster="c1")
    assert d.outcome == "applied" and st4.registry == other
    assert "lineage changed from L1 to L2" in d.detail


def test_a_new_etcd_history_forgets_the_revisions_and_keeps_the_registry():
    """After a restore the registry comes back at lower mod_revisions: without the rebase they
    would be old news forever; with it, an older generation of the lineage is refused (the
    held one kept) and the republished, higher one applied."""
    from dataclasses import replace

    from awide_gateway_cluster.follower import rebase
    a, b = make_card(1), make_card(2, admitted=2)
    held = replace(_reg([a, b]), generation=9, lineage="L1")
    st, d = step(FollowState(), _rr(regdoc.encode(held), mod=500), 1.0, cluster="c1")
    assert d.outcome == "applied"
    snapshot = replace(_reg([a, b]), generation=6, lineage="L1")
    stuck, d = step(st, _rr(regdoc.encode(snapshot), mod=40), 2.0, cluster="c1")
    assert d.outcome == "unchanged"                         # old news by revision
    new = rebase(st, epoch=1)
    assert new.registry == held and new.history_resets == 1
    assert (new.seen_revision, new.applied_revision, new.known_revision) == (0, 0, 0)
    assert rebase(new, epoch=1) is new                      # once per epoch
    new, d = step(new, _rr(regdoc.encode(snapshot), mod=40), 2.0, cluster="c1")
    assert d.outcome == "rejected" and new.registry == held and "went back" in d.detail
    again = replace(held, generation=10)
    new, d = step(new, _rr(regdoc.encode(again), mod=45), 3.0, cluster="c1")
    assert d.outcome == "applied" and new.registry == again and not new.problem
