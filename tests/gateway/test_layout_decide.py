"""The layout record's card set and storage format, and what a gateway does with them (pure)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from awide_cluster.contract import records
from awide_cluster.contract.records import LayoutRecord, LayoutRecordError
from awide_gateway_cluster import layout as lay

ids = st.text("abcdef0123456789", min_size=6, max_size=6).map(lambda s: "c" + s)
card_sets = st.lists(ids, max_size=8, unique=True).map(lambda x: tuple(sorted(x)))


def rec(cards=("c1", "c2"), fmt=1, gen=5, lineage="L1", placement="dialog", by="gw-a"):
    return LayoutRecord("ns-1", placement, created_by=by, format=fmt, cards=cards,
                        cards_lineage=lineage, cards_generation=gen)


@given(card_sets, st.integers(1, 9), st.integers(0, 2**40))
def test_round_trip_with_cards_and_format(cards, fmt, gen):
    r = rec(cards, fmt, gen)
    back = records.decode_layout(r.encode(), key="layouts/ns-1")
    assert back == r and back.card_set == records.card_set_fingerprint(list(cards))


def test_a_record_of_an_older_release_reads_as_format_1_without_cards():
    old = json.dumps({"schema": 1, "namespace": "ns-1", "placement": "dialog",
                      "algorithm": 1, "slot_algorithm": 1, "created_by": "gw-old"})
    r = records.decode_layout(old, key="layouts/ns-1")
    assert r.format == 1 and r.cards is None and r.card_set == ""
    assert lay.decide(r, rec()) == "unrecorded"


@pytest.mark.parametrize("change, field", [
    ({"cards": "c1"}, "cards"),
    ({"cards": ["c1", "c1"]}, "cards"),
    ({"cards": ["bad id!"]}, "cards"),
    ({"cards": [f"c{i}" for i in range(9)]}, "cards"),
    ({"card_set": "S0000000000000000"}, "card_set"),
    ({"format": 0}, "format"),
    ({"format": "2"}, "format"),
    ({"cards_generation": -1}, "cards_generation"),
])
def test_a_bad_layout_record_is_refused_naming_key_and_field(change, field):
    doc = json.loads(rec().encode()) | change
    with pytest.raises(LayoutRecordError) as err:
        records.decode_layout(json.dumps(doc), key="layouts/ns-1")
    assert "layouts/ns-1" in str(err.value) and field in str(err.value)


def test_same_cards_ok_out_cards_do_not_count_and_order_does_not_count():
    assert lay.decide(rec(("c1", "c2")), rec(("c2", "c1"), gen=9, by="gw-b")) == "ok"


@given(card_sets, card_sets)
def test_a_forgotten_card_is_refused_naming_the_difference_new_cards_grow_the_record(
        recorded, mine):
    step = lay.decide(rec(recorded, gen=5), rec(mine, gen=6, by="gw-b"))
    if set(recorded) == set(mine):
        assert step == "ok"
    elif set(recorded) <= set(mine):
        assert step == "grown"
    else:
        assert isinstance(step, lay.CardSetMismatch)
        msg = str(step)
        for c in set(recorded) ^ set(mine):
            assert c in msg
        assert "re-seed" in msg and "layouts/ns-1" in msg


def test_a_lagging_registry_waits_and_no_registry_waits():
    assert lay.decide(rec(("c1", "c2"), gen=5), rec(("c1",), gen=4, by="gw-b")) == "wait"
    assert lay.decide(rec(), rec(cards=None, by="gw-b")) == "wait"
    # another lineage (a restored registry): judged by its cards
    assert isinstance(lay.decide(rec(("c1", "c2"), gen=5),
                                 rec(("c1",), gen=1, lineage="L2", by="gw-b")),
                      lay.CardSetMismatch)


def test_formats_newer_refused_older_starts_cold():
    step = lay.decide(rec(fmt=2), rec(fmt=1, by="gw-b"))
    assert isinstance(step, lay.FormatTooNew) and "format 2" in str(step)
    assert "format 1" in str(step)
    assert lay.decide(rec(fmt=1), rec(fmt=2, by="gw-b")) == "cold"
    # the placement still counts within one format
    assert isinstance(lay.decide(rec(), rec(placement="stripe")), lay.LayoutMismatch)


def test_namespace_ids():
    assert lay.namespace_id("m-1", 1) == "m-1"
    assert lay.namespace_id("m-1", 2) == "m-1.f2"
    assert lay.namespace_id("m-1", 2) != lay.namespace_id("m-1", 3)


def test_card_set_of_a_registry_is_its_slotted_cards():
    from awide_cluster.contract import slots as slotfn
    from awide_cluster.contract.registry import Registry
    reg = Registry(cluster="c", generation=7, lineage="L9", leader="h1", cards=(),
                   slots=slotfn.SlotTable(("cb", None, "ca", None, None, None, None, None)))
    assert lay.card_set(reg) == lay.CardSet(("ca", "cb"), "L9", 7)
    assert lay.with_cards(rec(cards=None), lay.card_set(reg)).cards == ("ca", "cb")
