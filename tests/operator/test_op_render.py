"""The status screens: the default fits 80x24 for 3 hosts, 8 cards and 4 gateways (one line per
card, the gateways as counts with the outliers named), ``-o wide`` shows everything, problems
are wrapped or cut to what is left of the screen. Pure: built from a snapshot in memory."""

from __future__ import annotations

import time

from awide_cluster.contract import history_ring as histdoc
from awide_cluster.contract import keys
from awide_cluster.contract import registry as regdoc
from awide_cluster.contract import report as reportdoc
from awide_cluster.contract.records import iso
from awide_cluster.operator.model import Problem
from awide_cluster.operator.render import (
    HEIGHT,
    HISTORY_HEAD,
    HISTORY_NONE,
    WIDTH,
    compact,
    fit_screen,
    gateway_summary,
    problem_lines,
    redraw,
    render,
    watch_table,
)
from tests.operator import op_state as state
from tests.operator.test_op_verdicts import _answer, _down, _status

HOSTS = ("store-a", "store-b", "witness-1")
LONG = ("unit awide-store@card3.service is failed: Main process exited, code=exited, "
        "status=1/FAILURE; nvme list-subsys: controller nvme3 in state connecting")


def demo_sized(*, trouble: bool = True, answers=None):
    """The status of ``demo_kvs``."""
    kvs, cards = demo_kvs(trouble=trouble)
    return _status(kvs, hosts=HOSTS, answers=answers), cards


def demo_kvs(cluster: str = "c1", *, trouble: bool = True):
    """3 hosts (2 storage with 4 cards each, a witness), 8 cards, 4 gateways; with ``trouble``
    a card out with a long reason, a card drained by an operator (the history says who and
    why), a gateway behind, another stale, one with another fingerprint."""
    cards = [state.card(h, f"card{i}", f"SN-{h[-1].upper()}{i}",
                        ip="10.0.0.1" if h == "store-a" else "10.0.0.2")
             for h in ("store-a", "store-b") for i in range(4)]
    if trouble:
        cards[3] = state.replace(cards[3], state="out", health="sick", reason=LONG,
                                 changed_generation=6)
        cards[6] = state.replace(cards[6], state="drained", changed_generation=6)
    reg = state.registry(cards, 7, cluster=cluster)
    kvs: dict[str, bytes | None] = {
        keys.LEADER: state.leader("store-a"),
        keys.REGISTRY: regdoc.encode(reg),
        keys.member("store-a"): reportdoc.encode(state.report("store-a", cards)),
        keys.member("store-b"): reportdoc.encode(state.report("store-b", cards)),
        keys.member("witness-1"): reportdoc.encode(state.report("witness-1", [],
                                                                role="witness")),
        keys.layout("llama-0123456789abcdef"): state.layout(),
    }
    for i in range(4):
        gen, stale, fp = 7, False, "L0123456789abcdef"
        if trouble and i == 1:
            gen = 5
        if trouble and i == 2:
            stale = True
        if trouble and i == 3:
            fp = "Lfedcba9876543210"
        kvs[keys.gateway(f"gw-{i}")] = state.gateway(f"gw-{i}", generation=gen, stale=stale,
                                                     fingerprint=fp, host=f"gpu{i}")
    if trouble:
        ring = histdoc.append(histdoc.EMPTY, [histdoc.Entry(
            generation=6, kind="drained", reason="drained (was in)", card=cards[6].id,
            name=cards[6].name, host=cards[6].host, at=iso(time.time() - 600),
            by="ops@bastion", why="firmware update, ticket OPS-4711")], ring="r1")
        kvs[keys.HISTORY] = histdoc.encode(ring)
    return kvs, cards


def _fits(text: str, width: int = WIDTH, height: int = HEIGHT) -> None:
    lines = text.split("\n")
    assert len(lines) <= height, f"{len(lines)} lines:\n{text}"
    too_wide = [line for line in lines if len(line) > width]
    assert not too_wide, f"over {width} columns: {too_wide}"


def test_the_demo_sized_cluster_fits_80x24_with_one_line_per_card():
    st, cards = demo_sized()
    assert len(st.hosts) == 3 and len(st.cards) == 8 and len(st.gateways) == 4
    text = render(st, "table")
    _fits(text)
    lines = text.split("\n")
    assert lines[0].startswith("cluster c1: UNHEALTHY")
    for c in cards:     # one line per card, with its id, host/name and state
        mine = [line for line in lines if line.split()[:3] == [
            str(st.registry and next(x.slot for x in st.cards if x.id == c.id)), c.id,
            f"{c.host}/{c.name}"]]
        assert len(mine) == 1, (c.id, text)
    assert any("OUT" in line and "awide-store@card3" in line for line in lines), text
    assert any("DRAINED" in line and "drained by ops@bastion: firm" in line for line in lines), text
    for h in HOSTS:
        assert any(line.startswith(h + " ") for line in lines), (h, text)
    gws = " ".join(x.strip() for x in lines if x.startswith("GATEWAYS") or x.startswith("  "))
    assert "GATEWAYS  4: 2 at generation 7; behind: gw-1 (gen 5); stale view: gw-2; " \
           "other fingerprint: gw-3" in gws
    assert "PROBLEMS" in lines and any("card_out" in line for line in lines)


def test_healthy_demo_sized_cluster_fits_and_says_no_problems():
    st, _ = demo_sized(trouble=False)
    text = render(st, "table")
    _fits(text)
    assert text.split("\n")[0].startswith("cluster c1: HEALTHY")
    assert "GATEWAYS  4: 4 at generation 7" in text.split("\n")
    assert text.endswith("PROBLEMS  none")


def test_a_member_down_and_many_problems_still_fit():
    st, _ = demo_sized(answers=(_answer(1), _answer(2), _down(3)))
    _fits(render(st, "table"))
    assert any("down: m3" in line for line in render(st, "table").split("\n"))
    for width, height in ((80, 24), (100, 30)):
        _fits("\n".join(compact(st, width, height)), width, height)
    small = compact(st, 60, 12)      # too small: every host and card keeps its line, cut
    assert all(len(line) <= 60 for line in small)
    assert small[-2:] == ["PROBLEMS", "  +6 more: awide-cluster status -o wide"]


def test_wide_shows_everything():
    st, cards = demo_sized()
    text = render(st, "wide")
    for section in ("ETCD  quorum", "MEMBER", "LEADER  store-a", "REGISTRY  generation 7",
                    "HOSTS", "CARDS", "GATEWAYS", "PROBLEMS"):
        assert section in text, section
    for c in cards:
        assert c.serial in text and c.target.traddr in text
    for p in st.problems:       # every problem's whole message, uncut
        assert p.message in text, p.message
    for g in st.gateways:
        assert g.id in text and g.pod in text


def test_problem_lines_wrap_when_they_fit_and_cut_when_not():
    ps = [Problem("warning", f"code{i}", "s", "word " * 40) for i in range(5)]
    whole = problem_lines(ps, 80, 100)
    assert len(whole) > 5 and all(len(x) <= 80 for x in whole)
    assert "".join(whole).count("word") == 200          # nothing lost
    one_each = problem_lines(ps, 80, 5)
    assert len(one_each) == 5 and all(x.endswith("...") for x in one_each)
    some = problem_lines(ps, 80, 7)
    assert len(some) == 7 and all(len(x) <= 80 for x in some)
    few = problem_lines(ps, 80, 3)
    assert len(few) == 3 and few[-1] == "  +3 more: awide-cluster status -o wide"


def test_gateway_summary_names_no_outlier_when_all_agree():
    st, _ = demo_sized(trouble=False)
    assert gateway_summary(st.gateways, 7) == "GATEWAYS  4: 4 at generation 7"
    assert gateway_summary((), 7) == "GATEWAYS  none"


def test_the_watch_screen_fits_with_the_newest_history_under_it():
    st, _ = demo_sized(trouble=False)
    recent = [f"gen {g:<6} 2026-12-03T11:00:00+00:00 out      card c{g:011d} (store-a/card0): "
              "3 bad polls in a row, last: unit awide-store@card0.service is failed"
              for g in range(10)]
    whole = watch_table(st, recent, WIDTH, HEIGHT)
    assert whole[-1].endswith("is failed")     # to a pipe: the entries whole
    screen = fit_screen(whole, WIDTH, HEIGHT)   # on a terminal: cut to it
    _fits("\n".join(screen))
    assert len(screen) == HEIGHT            # the history takes what the status leaves
    at = screen.index(HISTORY_HEAD)
    assert screen[-1].startswith("  gen 9 ")   # the newest last
    assert len(screen) - at - 1 < len(recent)
    assert watch_table(st, [], WIDTH, HEIGHT)[-1] == HISTORY_NONE
    troubled, _ = demo_sized(answers=(_answer(1), _answer(2), _down(3)))
    screen = watch_table(troubled, recent, WIDTH, HEIGHT)
    _fits("\n".join(fit_screen(screen, WIDTH, HEIGHT)))
    assert len(screen) <= HEIGHT
    assert "PROBLEMS" in screen and HISTORY_HEAD in screen


def test_any_frame_is_cut_to_the_screen_and_drawn_over_the_last():
    st, _ = demo_sized()
    wide_lines = render(st, "wide").split("\n")
    assert len(wide_lines) > HEIGHT or max(map(len, wide_lines)) > WIDTH
    frame = fit_screen(wide_lines, WIDTH, HEIGHT)
    _fits("\n".join(frame))
    assert frame[-1].startswith("... ") and "more lines" in frame[-1]
    drawn = redraw(frame)
    assert drawn.startswith("\x1b[H") and drawn.endswith("\x1b[K\x1b[J")
    assert drawn.count("\n") == len(frame) - 1      # no newline after the last line


def test_a_wrapped_line_never_breaks_inside_a_command() -> None:
    from awide_cluster.operator.render import wrap_keeping_commands
    text = "card_drained: it serves nothing until `awide-cluster undrain cfb4f291bbd3` is run"
    for width in range(40, 81):
        lines = wrap_keeping_commands(text, width, subsequent_indent="  ")
        assert all(len(line) <= width for line in lines), (width, lines)
        assert any("`awide-cluster undrain cfb4f291bbd3`" in line for line in lines), lines
