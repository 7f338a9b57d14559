"""What the view shows of a card's path (``view.shown``): two paths equal in it build the
same view, so the gateway builds its view again only when it changed: a good probe of a
path already good (its good streak growing) leaves it equal, a card going out changes it."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import example, given, settings
from hypothesis import strategies as st

from awide_cluster.contract import registry as regdoc
from awide_cluster.contract import slots as slotfn
from awide_cluster.contract.health import Hysteresis, tally
from awide_gateway_cluster.cardpath import Probe, advance
from awide_gateway_cluster.view import CardPath, SlotMemo, build, shown
from tests.gateway.support import make_card

CARD = make_card(1)
REG = regdoc.Registry(cluster="c1", generation=1, leader="s1", cards=(CARD,),
                      slots=regdoc.slot_table((CARD,), slotfn.EMPTY))

texts = st.sampled_from(["", "a", "b"])
paths = st.builds(
    CardPath, card_id=st.just(CARD.id), device=st.sampled_from([None, "/dev/x", "/dev/y"]),
    verified=st.booleans(), refused=texts, note=texts,
    health=st.builds(Hysteresis, up=st.booleans(), bad=st.integers(0, 3),
                     good=st.integers(0, 5), reason=texts))


def view(path: CardPath, layout_ok: bool) -> object:
    return build(REG, {CARD.id: path}, namespace="n", placement="dialog", fingerprint="f",
                 layout_ok=layout_ok, layout_problem="layout not verified")


@given(paths, paths, st.booleans())
def test_paths_equal_in_what_the_view_shows_build_the_same_view(a, b, layout_ok):
    if shown(a) == shown(b):
        assert view(a, layout_ok) == view(b, layout_ok)
    if view(a, True) != view(b, True):
        assert shown(a) != shown(b)


@given(st.integers(1, 4), st.integers(1, 3), st.integers(1, 30))
def test_a_steady_good_path_shows_the_same_at_every_probe(healthy, sick, probes):
    good = Probe(device="/dev/x", verified=True, good=True)
    path = advance(CardPath(CARD.id), good, sick_polls=sick, healthy_polls=healthy)
    first = shown(path)
    for n in range(probes):
        nxt = advance(path, good, sick_polls=sick, healthy_polls=healthy)
        # the streak grows until it reaches healthy_polls; from then on the path is kept as
        # it is (nothing built for a healthy card's probe)
        assert (nxt is path) == (n + 1 >= healthy)
        assert shown(nxt) == first                  # what the view shows does not change
        path = nxt


probes = st.builds(Probe, device=st.sampled_from([None, "/dev/x", "/dev/y"]),
                   verified=st.booleans(), refused=texts, note=texts,
                   good=st.sampled_from([None, True, False]), reason=texts)


@settings(max_examples=400)
@given(paths, st.lists(probes, max_size=12), st.integers(1, 4), st.integers(1, 3))
@example(CardPath(CARD.id, device="/dev/x", verified=True, note="",     # a reason kept: no
                  health=Hysteresis(up=True, good=2, reason="a")),      # shortcut for it
         [Probe(device="/dev/x", verified=True, note="", good=True)], 1, 1)
def test_advance_decides_as_the_plain_tally_with_the_good_streak_stopped_at_healthy_polls(
        start, seen, healthy, sick) -> None:
    """The kept path of a good probe (``advance``'s shortcut) changes no decision: over any
    probes, every field is the plain fold's (``tally`` and the probe's fields), the good
    streak at most ``healthy_polls`` where the plain one went past it."""
    ours = plain = start
    for p in seen:
        ours = advance(ours, p, sick_polls=sick, healthy_polls=healthy)
        plain = replace(plain, device=p.device, verified=p.verified, refused=p.refused,
                        note=p.note, health=tally(plain.health, p.good, sick_polls=sick,
                                                  healthy_polls=healthy, reason=p.reason))
        assert replace(ours, health=replace(ours.health, good=0)) == replace(
            plain, health=replace(plain.health, good=0))
        assert ours.health.good == plain.health.good or (
            ours.health.good >= healthy and plain.health.good > ours.health.good)
        assert shown(ours) == shown(plain)


@given(st.integers(1, 3))
def test_a_card_going_out_changes_what_the_view_shows(sick):
    good = Probe(device="/dev/x", verified=True, good=True)
    bad = Probe(device="/dev/x", verified=True, good=False, reason="controller dead")
    path = advance(CardPath(CARD.id), good, sick_polls=sick, healthy_polls=1)
    for _ in range(sick):
        path, before = advance(path, bad, sick_polls=sick, healthy_polls=1), path
    assert not path.health.up and shown(path) != shown(before)
    assert view(path, True) != view(before, True)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_a_view_built_with_the_slot_memo_is_the_view_built_without(data) -> None:
    """A gateway's builds over a stream of changes (a card's registry entry replaced, its
    path probed, the layout's state, the registry itself): with the slot memo kept across
    them, each view is the one built without it."""
    cards = [make_card(i) for i in range(1, 4)]
    local: dict[str, CardPath] = {}
    memo = SlotMemo()
    layout_ok, problem = True, ""
    for _ in range(data.draw(st.integers(1, 10))):
        how = data.draw(st.sampled_from(["card", "path", "layout", "drop", "same"]))
        k = data.draw(st.integers(0, len(cards) - 1))
        if how == "card":
            cards[k] = replace(cards[k], state=data.draw(st.sampled_from(["in", "drained"])),
                               reason=data.draw(texts))
        elif how == "path":
            local[cards[k].id] = replace(data.draw(paths), card_id=cards[k].id)
        elif how == "layout":
            layout_ok, problem = data.draw(st.booleans()), data.draw(texts)
        elif how == "drop" and len(cards) > 1:
            cards.pop(k)
        reg = regdoc.Registry(cluster="c1", generation=1, leader="s1", cards=tuple(cards),
                              slots=regdoc.slot_table(tuple(cards), slotfn.EMPTY))
        kw = dict(namespace="n", placement="dialog", fingerprint="f", layout_ok=layout_ok,
                  layout_problem=problem)
        assert build(reg, local, memo=memo, **kw) == build(reg, local, **kw)  # type: ignore[arg-type]
