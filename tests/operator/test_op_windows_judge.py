"""The operator windows in status, pure: what is in force by this reader's clock, who/when/why
shown, pending and corrupt requests named, and what a window mutes (a silenced card's and a
maintenance host's errors become warnings that say why; the window holds exit 1)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from awide_cluster.contract import keys
from awide_cluster.contract import windows as windoc
from awide_cluster.contract.records import iso
from awide_cluster.contract.windows import Window, WindowRequest, Windows
from awide_cluster.operator.judge.windows import judge_windows, mute
from awide_cluster.operator.model import (
    EXIT_CODE,
    CardView,
    HostView,
    Problem,
)
from awide_cluster.store.types import KeyValue

NOW = 1_800_000_000.0


def kv(key: str, value: bytes) -> KeyValue:
    return KeyValue(key=key, value=value, create_revision=1, mod_revision=1, version=1)


def win(until: float, reason: str = "why") -> Window:
    return Window(by="op@x", since=iso(NOW - 10), until=iso(until), reason=reason)


def card(cid: str, host: str) -> CardView:
    return CardView(id=cid, serial="S", model="m", host=host, name="c0", kind="dir", target="",
                    slot=0, state="out", health="sick", reason="gone", since="",
                    changed_generation=1, conflict="", unplaced="", reported="no report")


def host(name: str) -> HostView:
    return HostView(host=name, role="storage", version="", api="", cards=1, dev_cluster=False,
                    is_leader=False, report_age=None, error="no report")


def verdict(problems: list[Problem]) -> int:
    if any(p.severity == "error" for p in problems):
        return EXIT_CODE["unhealthy"]
    return EXIT_CODE["warn"] if any(p.holds for p in problems) else EXIT_CODE["healthy"]


def test_windows_in_force_are_shown_with_who_when_why_and_expired_ones_are_not() -> None:
    doc = Windows(pause=win(NOW + 60, "defrag"), hosts={"h2": win(NOW + 60, "kernel")},
                  cards={"c1": win(NOW - 1, "old")})
    req = WindowRequest("start", seconds=60, by="bob@y", reason="r").encode()
    (in_force, views), problems = judge_windows(
        {keys.WINDOWS: kv(keys.WINDOWS, windoc.encode(doc)),
         keys.window_request("card", "c2"): kv(keys.window_request("card", "c2"), req),
         "window-requests/junk": kv("window-requests/junk", b"{}")}, NOW)
    assert in_force.pause is not None and set(in_force.hosts) == {"h2"} and not in_force.cards
    assert [(v.scope, v.name) for v in views] == [("pause", ""), ("host", "h2")]
    codes = {p.code: p for p in problems}
    assert "defrag" in codes["cluster_paused"].message and codes["cluster_paused"].holds
    assert "kernel" in codes["host_maintenance"].message and "op@x" in codes[
        "host_maintenance"].message and iso(NOW + 60) in codes["host_maintenance"].message
    assert "bob@y" in codes["window_pending"].message and codes["window_pending"].holds
    assert codes["window_request_corrupt"].severity == "warning"
    assert "card_silenced" not in codes


def test_a_corrupt_windows_record_is_a_warning_and_nothing_in_force() -> None:
    (in_force, views), problems = judge_windows({keys.WINDOWS: kv(keys.WINDOWS, b"[1")}, NOW)
    assert in_force.empty and views == ()
    assert [p.code for p in problems] == ["windows_corrupt"]


@settings(max_examples=50, deadline=None)
@given(st.booleans(), st.booleans())
def test_what_a_window_mutes(silenced: bool, maintenance: bool) -> None:
    cards = (card("c1", "h1"), card("c2", "h2"))
    problems = [Problem("error", "card_out", "c1", "c1 out"),
                Problem("error", "card_out", "c2", "c2 out"),
                Problem("error", "host_down", "h2", "h2 down")]
    w = Windows(hosts={"h2": win(NOW + 60)} if maintenance else {},
                cards={"c1": win(NOW + 60, "known fan")} if silenced else {})
    (_, views), window_problems = judge_windows(
        {keys.WINDOWS: kv(keys.WINDOWS, windoc.encode(w))}, NOW)
    out, shown, hosts = mute(problems + window_problems, cards, (host("h1"), host("h2")), w)
    by = {(p.code, p.subject): p for p in out}
    assert (by["card_out", "c1"].severity == "warning") == silenced
    assert ("known fan" in by["card_out", "c1"].muted) == silenced
    assert (by["card_out", "c2"].severity == "warning") == maintenance
    assert (by["host_down", "h2"].severity == "warning") == maintenance
    assert (shown[0].muted != "") == silenced and (shown[1].muted != "") == maintenance
    assert (hosts[1].maintenance != "") == maintenance and hosts[0].maintenance == ""
    # the exit code: 2 while an unmuted error remains, else 1 (the windows hold it)
    assert verdict(out) == (1 if silenced and maintenance else 2)
