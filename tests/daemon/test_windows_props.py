"""The operator windows in the leader's decision (daemon/decision_windows.py), and their
documents (contract/windows.py): a pause takes no card out, a host in maintenance keeps its
cards while its report is gone or frozen (a fresh sick report still counts), a silence changes
no decision, every request is consumed, and a window past its end expires and detection is as
usual again. Pure: no etcd."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from awide_cluster.contract import keys
from awide_cluster.contract import windows as windoc
from awide_cluster.contract.records import iso
from awide_cluster.contract.registry import Registry
from awide_cluster.contract.report import HostReport
from awide_cluster.contract.windows import WindowRequest, Windows
from awide_cluster.daemon.decision_model import Poll
from awide_cluster.daemon.decision_windows import WindowAsk, hold_polls
from awide_cluster.daemon.reconcile import ClusterSnapshot, Decision, LeaderMemory, Policy, decide

from .builders import card, cid, report

HOSTS = ("h1", "h2", "h3")
T0 = 1_800_000_000.0        # the leader's wall clock at the first cycle (Unix seconds)
SICK = 3


def ask(scope: windoc.Scope, name: str, action: windoc.RequestAction = "start",
        seconds: int = 60, rev: int = 1, **kw: object) -> WindowAsk:
    req = WindowRequest(action, seconds=seconds if action == "start" else 0, by="op@x",
                        reason="test", **kw)  # type: ignore[arg-type]
    return WindowAsk(scope=scope, name=name, request=req,
                     key=keys.window_request(scope, name), mod_revision=rev)


@dataclass
class Run:
    """Drives ``decide`` cycle by cycle as the shell does: the registry and the windows it
    decided are fed back, the wall clock advances one second a cycle."""

    policy: Policy = field(default_factory=lambda: Policy(cluster="c1", leader="h1",
                                                          sick_polls=SICK,
                                                          hosts=frozenset(HOSTS)))
    memory: LeaderMemory = field(default_factory=LeaderMemory)
    registry: Registry | None = None
    windows: Windows | None = None
    wall: float = T0
    seqs: dict[str, int] = field(default_factory=dict)

    def rep(self, host: str, *cards_, advance: bool = True) -> HostReport:
        if advance:
            self.seqs[host] = self.seqs.get(host, 0) + 1
        return report(host, self.seqs.get(host, 1), *cards_)

    def step(self, *reports: HostReport, asks: tuple[WindowAsk, ...] = (),
             bad: dict[str, tuple[int, str]] | None = None) -> Decision:
        snap = ClusterSnapshot(reports={r.host: r for r in reports}, bad_reports={},
                               registry=self.registry, windows=self.windows,
                               window_requests=asks, bad_window_requests=bad or {},
                               wall=self.wall)
        d = decide(snap, self.memory, self.policy, now=iso(self.wall))
        self.memory = d.memory
        if d.write:
            self.registry = d.registry
        if d.windows_write:
            self.windows = d.windows
        self.wall += 1.0
        return d

    def state(self, card_id: str) -> str | None:
        c = self.registry.card(card_id) if self.registry is not None else None
        return c.state if c is not None else None


A, B = cid("A1"), cid("B1")


def started() -> Run:
    """h1 holds card A1, h2 card B1, both in; two cycles (baseline, then a fresh one)."""
    r = Run()
    for _ in range(2):
        r.step(r.rep("h1", card("a", "A1")), r.rep("h2", card("b", "B1")), r.rep("h3"))
    assert r.state(A) == r.state(B) == "in"
    return r


# one cycle of h2, as its card B1 is seen: healthy, sick, not found, no report, frozen
H2 = st.sampled_from(["ok", "sick", "notfound", "gone", "frozen"])


def h2_report(r: Run, how: str) -> HostReport | None:
    if how == "gone":
        return None
    if how == "frozen":
        return r.rep("h2", card("b", "B1"), advance=False)
    if how == "notfound":
        return r.rep("h2", card("b", "B1", found=False, reason="missing"))
    return r.rep("h2", card("b", "B1", healthy=how == "ok", reason="sick"))


def cycle(r: Run, how: str, asks: tuple[WindowAsk, ...] = (),
          bad: dict[str, tuple[int, str]] | None = None) -> Decision:
    reports = [r.rep("h1", card("a", "A1")), r.rep("h3")]
    h2 = h2_report(r, how)
    if h2 is not None:
        reports.append(h2)
    return r.step(*reports, asks=asks, bad=bad)


@settings(max_examples=60, deadline=None)
@given(st.lists(H2, min_size=1, max_size=12))
def test_paused_no_card_goes_out(steps: list[str]) -> None:
    r = started()
    d = cycle(r, "ok", (ask("pause", "", seconds=3600),))
    assert d.windows.pause is not None and d.windows_write
    assert (keys.window_request("pause"), 1) in d.consumed
    for how in steps:
        cycle(r, how)
        assert r.state(B) == "in", f"B1 out while paused after {steps}"
    # resumed: a card that keeps failing goes out within sick_polls cycles
    d = cycle(r, "sick", (ask("pause", "", action="end", rev=2),))
    assert d.windows.pause is None
    for _ in range(SICK):
        cycle(r, "sick")
    assert r.state(B) == "out"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["gone", "frozen", "ok"]), min_size=1, max_size=12))
def test_maintenance_keeps_cards_while_the_host_is_absent(steps: list[str]) -> None:
    r = started()
    d = cycle(r, "ok", (ask("host", "h2", seconds=3600),))
    assert set(d.windows.hosts) == {"h2"}
    for how in steps:
        cycle(r, how)
        assert r.state(B) == "in"
    assert r.state(A) == "in"


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["sick", "notfound"]))
def test_maintenance_a_fresh_sick_report_still_counts(how: str) -> None:
    r = started()
    cycle(r, "ok", (ask("host", "h2", seconds=3600),))
    for _ in range(SICK):
        cycle(r, how)
    assert r.state(B) == "out"


def test_maintenance_expires_then_detection_is_as_usual() -> None:
    r = started()
    d = cycle(r, "ok", (ask("host", "h2", seconds=5),))
    until = d.windows.hosts["h2"].until
    expired: list[str] = []
    n = 0
    while not expired:
        d = cycle(r, "gone")
        expired = [line for line in d.log if line.startswith("host h2 expired")]
        n += 1
        assert n <= 6, "the window did not expire"
        assert r.state(B) == "in"
    assert "h2" not in d.windows.hosts and d.windows_write
    assert len(expired) == 1 and expired[0].startswith("host h2 expired (was by op@x")
    assert until in expired[0]
    assert any(e.what.startswith("expired") for e in d.window_events)
    # the cycle it expired in counted its first bad poll already: as usual from there
    for _ in range(SICK - 1):
        assert r.state(B) == "in"
        cycle(r, "gone")
    assert r.state(B) == "out"


@settings(max_examples=60, deadline=None)
@given(st.lists(H2, min_size=1, max_size=10))
def test_a_silence_changes_no_decision(steps: list[str]) -> None:
    plain, muted = started(), started()
    cycle(plain, "ok")
    d = cycle(muted, "ok", (ask("card", B, seconds=3600),))
    assert set(d.windows.cards) == {B}
    for how in steps:
        cycle(plain, how)
        cycle(muted, how)
        assert plain.registry is not None and muted.registry is not None
        assert plain.registry.content() == muted.registry.content()


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["pause", "host", "card"]),
                          st.sampled_from(["h1", "h2", "nohost", "A", "B", "nocard"]),
                          st.sampled_from(["start", "end"]),
                          st.integers(1, 10)), max_size=6),
       st.dictionaries(st.sampled_from(["window-requests/x", "window-requests/card.y"]),
                       st.tuples(st.integers(1, 9), st.just("bad")), max_size=2))
def test_every_request_is_consumed_and_only_known_subjects_are_held(reqs, bad) -> None:
    r = started()
    names = {"A": A, "B": B}
    asks = []
    for i, (scope, name, action, secs) in enumerate(reqs):
        name = "" if scope == "pause" else names.get(name, name)
        asks.append(ask(scope, name, action, secs, rev=10 + i))
    d = cycle(r, "ok", tuple(asks), bad)
    for a in asks:
        assert (a.key, a.mod_revision) in d.consumed
    for k, (rev, _) in bad.items():
        assert (k, rev) in d.consumed
    assert set(d.windows.hosts) <= set(HOSTS)
    assert set(d.windows.cards) <= {A, B}
    # the last request of each subject decides it
    last = {(a.scope, a.name): a.request.action for a in
            sorted(asks, key=lambda a: (a.key, a.mod_revision))}
    for (scope, name), action in last.items():
        known = (scope == "pause" or (scope == "host" and name in HOSTS)
                 or (scope == "card" and name in (A, B)))
        assert (d.windows.get(scope, name) is not None) == (known and action == "start")
    assert windoc.decode(windoc.encode(d.windows)) == d.windows


def test_hold_polls_leaves_good_observations() -> None:
    r = started()
    d = cycle(r, "ok", (ask("pause", ""),))
    assert r.registry is not None
    snap = ClusterSnapshot(reports={}, bad_reports={}, registry=r.registry)
    polls = {A: Poll(good=True), B: Poll(good=False, reason="x")}
    held = hold_polls(polls, r.registry.by_id, snap, d.windows)
    assert held[A].good is True and held[B].good is None and held[B].held


# --------------------------------------------------------------- documents, untrusted

texts = st.text(max_size=40)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(["start", "end"]), st.integers(1, windoc.WINDOW_MAX_SECONDS), texts,
       texts, st.booleans())
def test_requests_round_trip(action, seconds, by, reason, drained) -> None:
    req = WindowRequest(action, seconds=seconds if action == "start" else 0, by=by,
                        reason=reason, drained=drained)
    assert windoc.decode_request(req.encode(), key="window-requests/pause") == req


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.binary(max_size=300), st.text(max_size=300),
                 st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                              lambda c: st.lists(c, max_size=3)
                              | st.dictionaries(st.text(max_size=8), c, max_size=4),
                              max_leaves=20).map(lambda v: __import__("json").dumps(v))))
def test_garbage_raises_only_the_typed_errors(raw) -> None:
    try:
        windoc.decode_request(raw, key="window-requests/pause")
    except windoc.WindowRequestError:
        pass
    try:
        windoc.decode(raw)
    except windoc.WindowsError:
        pass


def test_request_keys() -> None:
    assert windoc.request_scope(keys.window_request("host", "s2")) == ("host", "s2")
    assert windoc.request_scope(keys.window_request("pause")) == ("pause", "")
    for bad in ("window-requests/x", "window-requests/host.", "window-requests/card.a b"):
        try:
            windoc.request_scope(bad)
            raise AssertionError(bad)
        except windoc.WindowRequestError:
            pass
