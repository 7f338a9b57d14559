"""Property tests of the placement helpers (pure, over slot views)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from awide_cluster.contract import slots as slotfn
from awide_gateway_cluster import placement as pl
from awide_gateway_cluster.view import SlotState, SlotView

ids = st.text("abcdef0123456789", min_size=6, max_size=6).map(lambda s: "c" + s)
tags = st.text(min_size=1, max_size=30)


@st.composite
def views(draw, min_cards: int = 0):
    cards = draw(st.lists(ids, min_size=min_cards, max_size=8, unique=True))
    positions = draw(st.permutations(range(8)))
    slots = [None] * 8
    for cid, pos in zip(cards, positions, strict=False):   # fewer cards than slots
        slots[pos] = cid
    out_cards = draw(st.sets(st.sampled_from(cards))) if cards else set()
    ns = draw(st.sampled_from(["m-1", "m-2"]))
    return make_view(slots, out_cards, ns)


def make_view(slots, out_cards=frozenset(), ns="m-1", placement="dialog") -> SlotView:
    states = []
    for i, cid in enumerate(slots):
        if cid is None:
            states.append(SlotState(i))
        else:
            up = cid not in out_cards
            states.append(SlotState(i, cid, device=f"/dev/nvme{i}n1", in_service=up,
                                    why="" if up else "registry: out"))
    return SlotView(generation=3, slots=tuple(states),
                    table=slotfn.SlotTable(tuple(slots)), namespace=ns, placement=placement,
                    fingerprint="Lx", layout_ok=True, layout_problem="")


@given(views(), tags)
def test_dialog_is_deterministic_and_only_on_placed_slots(view, tag):
    a, b = pl.dialog(view, tag), pl.dialog(view, tag)
    assert a == b
    if not view.placed:
        assert a.card_id is None and not a.available
        return
    s = view.slots[a.slot]
    assert s.card_id == a.card_id is not None
    assert a.available == s.in_service
    assert a.data_key.startswith(view.namespace + "/")
    if not a.available:
        assert a.card_id in a.reason               # told to compute; never another card


@given(views(min_cards=2), tags, st.data())
def test_dialog_stable_when_an_unrelated_card_leaves(view, tag, data):
    before = pl.dialog(view, tag)
    others = [s.card_id for s in view.placed if s.card_id != before.card_id]
    gone = data.draw(st.sampled_from(others))
    slots = tuple(None if c == gone else c for c in view.table.slots)
    after = pl.dialog(make_view(slots, {s.card_id for s in view.slots if s.card_id
                                        and not s.in_service}, view.namespace), tag)
    assert (after.slot, after.card_id) == (before.slot, before.card_id)


@given(views(min_cards=1), tags, st.data())
def test_dialog_card_out_keeps_mapping_and_is_unavailable(view, tag, data):
    before = pl.dialog(view, tag)
    out = make_view(view.table.slots, {before.card_id}, view.namespace)
    after = pl.dialog(out, tag)
    assert after.card_id == before.card_id and not after.available


@given(views(min_cards=1), tags, st.integers(0, 40))
def test_stripe_spreads_over_all_placed_cards_and_names_unavailable_blocks(view, tag, n):
    sp = pl.stripe(view, tag, n)
    assert sp == pl.stripe(view, tag, n)
    placed = {s.card_id for s in view.placed}
    used = [b.card_id for b in sp.blocks]
    assert set(used) <= placed
    if n >= len(placed):
        assert set(used) == placed                 # one restore reads every card
    counts = [used.count(c) for c in set(used)]
    assert not counts or max(counts) - min(counts) <= 1
    assert sp.unavailable == tuple(i for i, b in enumerate(sp.blocks) if not b.available)
    for i, b in enumerate(sp.blocks):
        assert b.data_key.rsplit("/", 2)[1] == str(i) and b.desc_key.rsplit("/", 1)[1] == "desc"
        assert b.data_key.rsplit("/", 1)[0] == b.desc_key.rsplit("/", 1)[0]   # one card each


@given(views(min_cards=1), tags)
def test_namespaces_never_share_keys(view, tag):
    other = replace(view, namespace=view.namespace + "x")
    assert pl.dialog(view, tag).data_key != pl.dialog(other, tag).data_key


def test_unverified_layout_places_nothing():
    v = replace(make_view(["c1", None, None, None, None, None, None, None]))
    empty = SlotView(namespace="m", layout_ok=False, layout_problem="key layout not verified")
    assert pl.dialog(v, "t").available
    c = pl.dialog(empty, "t")
    assert not c.available and "layout" in c.reason


@settings(max_examples=50)
@given(tags)
def test_placement_object_follows_configured_placement(tag):
    v = make_view(["c1", "c2", None, None, None, None, None, None], placement="stripe")
    p = pl.Placement(lambda: v)
    assert isinstance(p.place(tag, 4), pl.StripePlacement)
    d = make_view(["c1", "c2", None, None, None, None, None, None])
    assert isinstance(pl.Placement(lambda: d).place(tag), pl.CardChoice)


# ----------------------------------------------------------------- stripe re-placement

def registry_view(slots, out_cards=frozenset(), ns="m-1", local_out=frozenset()) -> SlotView:
    """A stripe view where ``out_cards`` are out in the registry (every gateway alike) and
    ``local_out`` only on this gateway's path."""
    v = make_view(slots, set(out_cards) | set(local_out), ns, placement="stripe")
    return replace(v, slots=tuple(
        replace(s, registry_state="out" if s.card_id in out_cards else "in")
        if s.card_id else s for s in v.slots))


@st.composite
def stripe_cases(draw):
    cards = draw(st.lists(ids, min_size=2, max_size=8, unique=True))
    positions = draw(st.permutations(range(8)))
    slots = [None] * 8
    for cid, pos in zip(cards, positions, strict=False):
        slots[pos] = cid
    out = draw(st.sets(st.sampled_from(cards), min_size=1, max_size=len(cards) - 1))
    return slots, frozenset(out), draw(st.sampled_from(["m-1", "m-2"]))


@given(stripe_cases(), tags, st.integers(1, 40))
def test_stripe_moves_only_the_out_cards_blocks_to_live_cards(case, tag, n):
    slots, out, ns = case
    home = pl.stripe(registry_view(slots, ns=ns), tag, n)
    during = pl.stripe(registry_view(slots, out, ns), tag, n)
    assert during.complete                          # every block has a live card
    for h, d in zip(home.blocks, during.blocks, strict=True):
        if h.card_id in out:
            assert d.card_id not in out and d.stand_in_for == h.card_id and d.available
        else:
            assert (d.slot, d.card_id, d.stand_in_for) == (h.slot, h.card_id, None)
        assert (d.data_key, d.desc_key) == (h.data_key, h.desc_key)   # same keys, stand-in card


@given(stripe_cases(), tags, st.integers(1, 40), st.randoms(use_true_random=False))
def test_stripe_stand_ins_agree_across_gateways(case, tag, n, rnd):
    slots, out, ns = case
    mine = pl.stripe(registry_view(slots, out, ns), tag, n)
    # another gateway: same registry, views built separately, its own devices
    other_view = registry_view(slots, out, ns)
    other_view = replace(other_view, slots=tuple(
        replace(s, device=f"/dev/nvme{rnd.randrange(99)}n1") if s.card_id else s
        for s in other_view.slots))
    theirs = pl.stripe(other_view, tag, n)
    assert [(b.slot, b.card_id) for b in mine.blocks] == [
        (b.slot, b.card_id) for b in theirs.blocks]


@given(stripe_cases(), tags, st.integers(1, 40))
def test_stripe_goes_back_to_the_original_placement_on_return(case, tag, n):
    slots, out, ns = case
    before = pl.stripe(registry_view(slots, ns=ns), tag, n)
    pl.stripe(registry_view(slots, out, ns), tag, n)
    assert pl.stripe(registry_view(slots, ns=ns), tag, n) == before


@given(stripe_cases(), tags, st.integers(1, 40))
def test_stripe_a_card_out_only_here_is_not_stood_in_for(case, tag, n):
    slots, out, ns = case
    sp = pl.stripe(registry_view(slots, ns=ns, local_out=out), tag, n)
    home = pl.stripe(registry_view(slots, ns=ns), tag, n)
    assert [b.card_id for b in sp.blocks] == [b.card_id for b in home.blocks]
    assert sp.unavailable == tuple(i for i, b in enumerate(home.blocks) if b.card_id in out)
    assert all(b.stand_in_for is None for b in sp.blocks)


def test_stripe_with_every_card_out_is_unavailable():
    v = registry_view(["c1", "c2", None, None, None, None, None, None], {"c1", "c2"})
    sp = pl.stripe(v, "t", 4)
    assert sp.unavailable == (0, 1, 2, 3)
    assert all(b.stand_in_for is None for b in sp.blocks)
