"""The id a daemon labels its own card's metrics with is the id the leader gives that card
(``reconcile.reported_id`` of the same report), else the registry's entry, else unknown."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from awide_cluster.cards.model import LocalCard, ProbeResult, summarize
from awide_cluster.cards.spec import CardSpec
from awide_cluster.daemon.reconcile import reported_id
from awide_cluster.daemon.reporter import build_report, local_card_id

from .builders import Leader, card, report

text = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=20)


def observed(serial: str, model: str, identity: str | None):
    found = LocalCard(name="c0", kind="dir", serial=serial, model=model, identity=identity,
                      device="/srv/c0", controller_state=None, target=None)
    return summarize("c0", found, [ProbeResult("discovery", True, "ok", 0.0)])


@given(text, text, st.none() | text)
def test_the_id_is_the_leaders(serial, model, identity):
    obs = observed(serial, model, identity)
    spec = CardSpec(name="c0", kind="dir", path="/srv/c0")
    rep = build_report(host="s1", role="storage", version="x", api="", run="r", seq=1,
                       dev_cluster=False, specs=(spec,), observations=[obs])
    assert local_card_id("s1", obs, None) == (reported_id(rep.cards[0]) or "")


def test_a_card_not_found_is_named_by_the_registry_else_unknown():
    leader = Leader()
    leader.step(report("s1", 1, card("c0", "SN1")))
    reg = leader.written
    missing = summarize("c0", None, [ProbeResult("discovery", False, "not found", 0.0)])
    assert local_card_id("s1", missing, reg) == reg.cards[0].id
    assert local_card_id("s2", missing, reg) == ""            # another host's card c0
    assert local_card_id("s1", replace(missing, spec_name="c9"), reg) == ""
    assert local_card_id("s1", missing, None) == ""
