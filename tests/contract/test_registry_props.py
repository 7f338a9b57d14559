"""Property tests of the registry document (contract/registry.py)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from awide_cluster.contract import registry as regdoc
from awide_cluster.contract.registry import RegistryError, UnknownSchema, slot_table

from .strategies import registries, states


@given(registries())
def test_round_trip(r) -> None:
    back = regdoc.decode(regdoc.encode(r))
    assert back == r
    assert back.content() == r.content()
    assert regdoc.encode(back) == regdoc.encode(r)
    assert regdoc.check_slots(back) is None


# integers within what any value read from etcd may hold (|n| < 2**53, contract/untrusted.py);
# a larger one is refused before its schema is looked at (test_untrusted.py)
@given(registries(), st.one_of(st.none(), st.integers(-(2**53) + 1, 2**53 - 1),
                               st.text(max_size=3)))
def test_unknown_schema_refused(r, schema) -> None:
    doc = json.loads(regdoc.encode(r))
    if schema == regdoc.SCHEMA_VERSION:
        return
    doc["schema"] = schema
    with pytest.raises(UnknownSchema):
        regdoc.decode(json.dumps(doc))


@settings(max_examples=200)
@given(registries(max_cards=3), st.data())
def test_corruption_is_refused_or_still_valid(r, data) -> None:
    raw = bytearray(regdoc.encode(r))
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(raw) - 1))
        raw[i] = data.draw(st.integers(0, 255))
    try:
        back = regdoc.decode(bytes(raw))
    except RegistryError as e:
        assert str(e)
        return
    # a mutation that still decodes gives a document that encodes and decodes again
    assert regdoc.decode(regdoc.encode(back)) == back


@given(registries(max_cards=3), st.sampled_from(["cards", "slots", "generation", "cluster"]))
def test_missing_or_wrong_type_field_named(r, name) -> None:
    doc = json.loads(regdoc.encode(r))
    doc[name] = {"wrong": "type"}
    with pytest.raises(RegistryError) as e:
        regdoc.decode(json.dumps(doc))
    assert name in str(e.value)


@given(registries(), st.data())
def test_out_or_drained_card_keeps_its_slot(r, data) -> None:
    """Card state is not an input of the slot table."""
    changed = tuple(replace(c, state=data.draw(states)) for c in r.cards)
    assert slot_table(changed, r.slots) == r.slots


@given(registries())
def test_slot_table_order_independent(r) -> None:
    assert slot_table(tuple(reversed(r.cards)), r.slots) == slot_table(r.cards, r.slots)
