"""Property tests of the slot function (contract/slots.py), shared by leader and gateways."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from awide_cluster.contract.slots import EMPTY, SLOT_COUNT, SlotClaim, SlotTable, assign, moves

ids = st.text(alphabet="abcdef0123456789", min_size=4, max_size=6).map(lambda s: "c" + s)


@st.composite
def claim_sets(draw, max_cards: int = 12) -> list[SlotClaim]:
    cards = draw(st.lists(ids, min_size=0, max_size=max_cards, unique=True))
    out = []
    for cid in cards:
        out.append(SlotClaim(
            card_id=cid,
            admitted=draw(st.integers(0, 20)),
            claim=draw(st.one_of(st.none(), st.integers(-1, SLOT_COUNT))),
            eligible=draw(st.sampled_from([True, True, True, False])),
        ))
    return out


def _reclaim(claims: list[SlotClaim], table: SlotTable) -> list[SlotClaim]:
    held = table.as_mapping()
    return [SlotClaim(c.card_id, c.admitted, held.get(c.card_id), c.eligible) for c in claims]


@given(claim_sets(), st.randoms(use_true_random=False))
def test_order_independent(claims, rnd: random.Random) -> None:
    shuffled = list(claims)
    rnd.shuffle(shuffled)
    assert assign(shuffled) == assign(claims)


@given(claim_sets())
def test_fixed_point(claims) -> None:
    t = assign(claims)
    assert assign(_reclaim(claims, t)) == t


@given(claim_sets())
def test_table_shape(claims) -> None:
    t = assign(claims)
    placed = [s for s in t.slots if s is not None]
    assert len(t.slots) == SLOT_COUNT
    assert len(set(placed)) == len(placed)
    unplaced = {cid for cid, _ in t.unplaced}
    assert unplaced.isdisjoint(placed)
    # every card is either placed or reported unplaced, with a reason
    assert unplaced | set(placed) == {c.card_id for c in claims}
    assert all(why for _, why in t.unplaced)
    # ineligible cards are never placed
    assert not {c.card_id for c in claims if not c.eligible} & set(placed)


@given(claim_sets(max_cards=8), ids, st.integers(0, 30))
def test_join_never_displaces_while_a_slot_is_free(claims, newcomer, admitted) -> None:
    claims = [c for c in claims if c.card_id != newcomer]
    before = assign(claims)
    settled = _reclaim(claims, before)
    after = assign(settled + [SlotClaim(newcomer, admitted)])
    for cid, slot in before.as_mapping().items():
        assert after.slot_of(cid) == slot
    if None in before.slots:
        assert after.slot_of(newcomer) is not None


@given(st.lists(ids, min_size=SLOT_COUNT + 1, max_size=SLOT_COUNT + 4, unique=True))
def test_ninth_card_unplaced_with_reason(cards) -> None:
    claims = [SlotClaim(cid, i) for i, cid in enumerate(cards)]
    t = assign(claims)
    assert None not in t.slots
    assert {cid for cid, _ in t.unplaced} == set(cards[SLOT_COUNT:])
    assert all("no free slot" in why for _, why in t.unplaced)


@given(claim_sets(max_cards=8), st.data())
def test_leaving_card_frees_only_its_own_slot(claims, data) -> None:
    """A card that leaves the registry (forget) frees its slot; nobody else moves."""
    t = assign(claims)
    settled = _reclaim(claims, t)
    if not settled:
        return
    gone = data.draw(st.sampled_from(settled))
    rest = [c for c in settled if c.card_id != gone.card_id]
    t2 = assign(rest)
    for cid, slot in t.as_mapping().items():
        if cid != gone.card_id:
            assert t2.slot_of(cid) == slot
    assert [m for m in moves(t, t2) if m.card_id != gone.card_id] == []


@settings(max_examples=50)
@given(claim_sets())
def test_moves_describe_every_change(claims) -> None:
    t = assign(claims)
    ms = moves(EMPTY, t)
    assert {m.card_id for m in ms} == set(t.as_mapping())
    assert all(m.old is None and m.new == t.slot_of(m.card_id) for m in ms)
    assert moves(t, t) == ()
