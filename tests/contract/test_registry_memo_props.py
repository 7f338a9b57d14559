"""The registry decoder's card memo (contract/registry.py ``CardMemo``): one reader decodes a
stream of documents, valid and hostile, with the memo and without it, and gets the same
registry or the same error every time."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from awide_cluster.contract import registry as regdoc
from awide_cluster.contract.registry import CardMemo, RegistryError

from .strategies import registries

# values a hostile writer may put in a card field: other JSON types, the same number as
# another type (1, 1.0 and true are equal in Python), texts a reader refuses
odd_values = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.floats(-3, 3, allow_nan=False),
    st.sampled_from(["", "in", "x\u0007", "a" * 300, "nvme", "dir"]),
    st.lists(st.integers(0, 2), max_size=2), st.dictionaries(st.sampled_from(["a", "b"]),
                                                             st.integers(0, 2), max_size=2))


def outcome(raw: bytes, memo: CardMemo | None) -> tuple[str, Any]:
    try:
        reg = regdoc.decode(raw, memo=memo)
    except RegistryError as e:
        return "refused", (type(e).__name__, str(e), e.problem)
    # repr tells 1 from true and 1.0, which == does not
    return "decoded", (reg, repr(reg), [repr(c) for c in reg.cards])


# built once, not on every draw (building a strategy costs its validation on each draw)
_hows = st.sampled_from(["same", "card_field", "card_retype", "card_extra", "card_drop",
                         "card_dup", "bytes", "slots", "top"])
_numbers = st.sampled_from(["admitted", "changed_generation"])
_slot_lists = st.lists(st.one_of(st.none(), st.just("c0")), min_size=8, max_size=8)
_tops = st.sampled_from(["generation", "cluster", "cards", "hosts", "lineage"])
_slot_hows = st.sampled_from(["same", "shuffled", "admitted", "conflict"])


@st.composite
def mutated(draw, doc: dict[str, Any]) -> bytes:
    """``doc`` as written, or changed the way a hostile or broken writer might."""
    how = draw(_hows)
    cards = doc["cards"]
    if how == "card_field" and cards:
        card = draw(st.sampled_from(cards))
        field = draw(st.sampled_from(sorted(card)))
        card[field] = draw(odd_values)
    elif how == "card_retype" and cards:
        # the same number as another type: equal in Python, refused by the decoder
        card = draw(st.sampled_from(cards))
        field = draw(_numbers)
        card[field] = draw(st.sampled_from([float(card[field])] + (
            [bool(card[field])] if card[field] in (0, 1) else [])))
    elif how == "card_extra" and cards:
        draw(st.sampled_from(cards))["extra"] = draw(odd_values)
    elif how == "card_drop" and cards:
        card = draw(st.sampled_from(cards))
        del card[draw(st.sampled_from(sorted(card)))]
    elif how == "card_dup" and cards:
        cards.append(dict(draw(st.sampled_from(cards))))
    elif how == "slots":
        doc["slots"] = draw(st.one_of(st.just(doc["slots"][:-1]),
                                      _slot_lists))
    elif how == "top":
        doc[draw(_tops)] = \
            draw(odd_values)
    raw = bytearray(json.dumps(doc).encode())
    if how == "bytes":
        for _ in range(draw(st.integers(1, 3))):
            raw[draw(st.integers(0, len(raw) - 1))] = draw(st.integers(0, 255))
    return bytes(raw)


@settings(max_examples=300, deadline=None)
@given(st.lists(registries(max_cards=4), min_size=1, max_size=3), st.data())
def test_memo_gives_what_the_decoder_gives(regs, data) -> None:
    """A stream of documents whose cards repeat (each registry is sent several times, changed
    or not): with a memo kept across the stream, each outcome is the one without it."""
    memo = CardMemo()
    for _ in range(data.draw(st.integers(2, 6))):
        doc = json.loads(regdoc.encode(data.draw(st.sampled_from(regs))))
        raw = data.draw(mutated(doc))
        assert outcome(raw, memo) == outcome(raw, None)


@given(registries(max_cards=3))
def test_unchanged_cards_come_from_the_memo(r) -> None:
    memo = CardMemo()
    raw = regdoc.encode(r)
    assert regdoc.decode(raw, memo=memo) == r
    assert regdoc.decode(raw, memo=memo) == r
    assert memo.hits == len(r.cards)


@pytest.mark.parametrize("value", [True, 1.0, "1"])
def test_same_number_of_another_type_is_refused(value) -> None:
    """A card whose ``admitted`` is 1 is in the memo; the same card with ``true``, ``1.0`` or
    ``"1"`` (equal, or equal once converted) is still refused by name."""
    r = regdoc.decode(regdoc.encode(_one_card_registry()))
    memo = CardMemo()
    doc = json.loads(regdoc.encode(r))
    doc["cards"][0]["admitted"] = 1
    assert regdoc.decode(json.dumps(doc), memo=memo).cards[0].admitted == 1
    doc["cards"][0]["admitted"] = value
    with pytest.raises(RegistryError, match=r"cards\[0\]\.admitted"):
        regdoc.decode(json.dumps(doc), memo=memo)


def _one_card_registry() -> regdoc.Registry:
    card = regdoc.CardEntry(
        id=regdoc.card_id("SN1", "M", "u1"), serial="SN1", model="M", identity="u1",
        host="h1", name="card0", kind="dir", state="in", health="ok", reason="", admitted=1,
        changed_generation=1, path="/srv/cards/a")
    reg = regdoc.Registry(cluster="c1", generation=3, leader="h1", cards=(card,))
    return regdoc.with_slots(reg)


@settings(max_examples=200, deadline=None)
@given(st.lists(registries(max_cards=4), min_size=1, max_size=4), st.data())
def test_slot_check_with_the_memo_is_the_slot_check(regs, data) -> None:
    """The memo's slot table (``check_slots(reg, memo=...)``) over a stream of registries,
    each repeated, some with a published table shuffled (version skew) or a card's admission
    or conflict changed: always what ``check_slots`` says without it."""
    memo = CardMemo()
    for _ in range(data.draw(st.integers(2, 8))):
        reg = data.draw(st.sampled_from(regs))
        how = data.draw(_slot_hows)
        if how == "shuffled":
            slots = list(reg.slots.slots)
            data.draw(st.randoms(use_true_random=False)).shuffle(slots)
            reg = replace(reg, slots=regdoc.slotfn.SlotTable(tuple(slots),
                                                                    reg.slots.unplaced))
        elif how in ("admitted", "conflict") and reg.cards:
            i = data.draw(st.integers(0, len(reg.cards) - 1))
            card = reg.cards[i]
            card = (replace(card, admitted=data.draw(st.integers(0, 5)))
                    if how == "admitted" else
                    replace(card, conflict=data.draw(st.sampled_from([None, "dup"]))))
            reg = replace(reg, cards=reg.cards[:i] + (card,) + reg.cards[i + 1:])
        assert regdoc.check_slots(reg, memo=memo) == regdoc.check_slots(reg)
