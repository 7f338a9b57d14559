"""Write outages in the leader's decision (daemon/reconcile.py): when the hosts cannot write
(etcd's NOSPACE alarm, a role that lost write permission, a member that answers reads but
cannot commit), every report stops advancing although nothing happened to the cards. Those
cycles count against no healthy card, the cycle after them is a new freshness baseline, and a
single frozen or dead daemon is still caught within the normal bound."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from awide_cluster.daemon.reconcile import (
    ClusterSnapshot,
    LeaderMemory,
    stale_streaks,
    write_outage,
)

from .builders import Leader, card, cid, entry, report

NOSPACE = "host report: etcd: etcdserver: mvcc: database space exceeded (code 8)"


class Hosts:
    """Host reports cycle by cycle: each host's (run, seq) advances only when it wrote."""

    def __init__(self, *hosts: str, cards_per_host: int = 1) -> None:
        self.seq = {h: 1 for h in hosts}
        self.cards = {h: [card(f"c{i}", f"SN-{h}-{i}") for i in range(cards_per_host)]
                      for h in hosts}
        self.gone: set[str] = set()

    def ids(self, host: str) -> list[str]:
        return [cid(c.serial) for c in self.cards[host]]

    def all_ids(self) -> list[str]:
        return [i for h in self.seq for i in self.ids(h)]

    def reports(self, wrote=None):
        """The reports after a poll in which ``wrote`` hosts (default: all) wrote theirs."""
        for h in (self.seq if wrote is None else wrote):
            self.seq[h] += 1
        return [report(h, self.seq[h], *self.cards[h]) for h in self.seq if h not in self.gone]


def start(hosts: Hosts, sick_polls: int = 3) -> Leader:
    L = Leader(sick_polls=sick_polls)
    L.step(*hosts.reports())
    L.step(*hosts.reports())
    assert all(L.state(i) == "in" for i in hosts.all_ids())
    return L


def test_the_leaders_own_failed_write_makes_stale_reports_count_nothing() -> None:
    """The reported bug: etcd refused every write for many polls; the leader kept reading the
    same reports and counted "did not advance" against every card; its first write after the
    recovery took healthy cards out."""
    H = Hosts("h1", "h2", "h3")
    L = start(H)
    writes = L.writes
    for _ in range(10):                              # nobody can write, for 10 cycles
        d = L.step(*H.reports(wrote=()), write_failure=NOSPACE)
        assert "own writes fail" in d.memory.outage and NOSPACE in d.memory.outage
    assert L.writes == writes                        # nothing changed for any card
    d = L.step(*H.reports(wrote=["h1"]))             # writes back: the others not yet
    assert d.memory.outage                           # 2 of 3 still stale: still an outage
    d = L.step(*H.reports(wrote=["h1", "h2"]))       # h3 one poll late: a new baseline
    assert d.memory.outage == ""
    L.step(*H.reports())
    assert all(L.state(i) == "in" for i in H.all_ids()) and L.writes == writes
    assert all(entry(L.registry, i).health == "ok" for i in H.all_ids())


def test_most_reports_stopping_together_is_an_outage() -> None:
    """The leader can write but the others cannot (their role lost its write permission)."""
    H = Hosts("h1", "h2", "h3")
    L = start(H)
    for _ in range(8):
        d = L.step(*H.reports(wrote=["h1"]))
        assert "2 of 3 hosts" in d.memory.outage
    assert all(L.state(i) == "in" for i in H.all_ids()) and L.writes == 1
    d = L.step(*H.reports())
    assert d.memory.outage == "" and not d.write
    # and a host that stops alone afterwards is caught within sick_polls cycles
    for n in (1, 2, 3):
        L.step(*H.reports(wrote=["h1", "h3"]))
        assert L.state(H.ids("h2")[0]) == ("out" if n == 3 else "in")


def test_a_single_frozen_daemon_goes_out_after_exactly_sick_polls() -> None:
    for n_hosts in (2, 3, 5):
        hosts = [f"h{i + 1}" for i in range(n_hosts)]
        H = Hosts(*hosts)
        L = start(H)
        frozen = hosts[1]
        others = [h for h in hosts if h != frozen]
        for n in (1, 2, 3):
            d = L.step(*H.reports(wrote=others))
            assert d.memory.outage == ""
            assert L.state(H.ids(frozen)[0]) == ("out" if n == 3 else "in"), (n_hosts, n)
        assert all(L.state(i) == "in" for h in others for i in H.ids(h))


def test_a_frozen_daemon_with_jitter_of_the_only_other_host_is_late_by_two_cycles() -> None:
    """3 hosts: h2 freezes; in its first stale cycle h3's report also happens not to have
    advanced (polling jitter). Two of three reports stopped together: that cycle and the next
    (a new baseline) count nothing, so h2's card goes out two cycles later than without the
    jitter — never later."""
    H = Hosts("h1", "h2", "h3")
    L = start(H)
    A = H.ids("h2")[0]
    d = L.step(*H.reports(wrote=["h1"]))             # h2 frozen, h3 jitter
    assert d.memory.outage
    states = [L.state(A)]
    for _ in range(4):
        L.step(*H.reports(wrote=["h1", "h3"]))
        states.append(L.state(A))
    assert states == ["in", "in", "in", "in", "out"]


def test_a_fresh_sick_report_still_counts_during_an_outage() -> None:
    H = Hosts("h1", "h2", "h3")
    L = start(H)
    A = H.ids("h1")[0]
    H.cards["h1"][0] = card("c0", "SN-h1-0", healthy=False, reason="store: connection refused")
    states = []
    for _ in range(3):
        d = L.step(*H.reports(wrote=["h1"]))         # h2 and h3 cannot write
        assert d.memory.outage
        states.append(L.state(A))
    assert states == ["in", "in", "out"]
    assert entry(L.registry, A).reason == "store: connection refused"
    assert all(L.state(i) == "in" for h in ("h2", "h3") for i in H.ids(h))


def test_a_daemon_whose_report_vanished_is_counted_during_an_outage() -> None:
    """A dead daemon's lease expires during the outage (lease expiry still works while etcd
    refuses writes): "no report" is not a report that did not advance, it counts."""
    H = Hosts("h1", "h2", "h3")
    L = start(H)
    H.gone.add("h2")
    states = []
    for _ in range(3):
        L.step(*H.reports(wrote=()), write_failure=NOSPACE)
        states.append(L.state(H.ids("h2")[0]))
    assert states == ["in", "in", "out"]
    assert "no report from h2" in entry(L.registry, H.ids("h2")[0]).reason
    assert all(L.state(i) == "in" for h in ("h1", "h3") for i in H.ids(h))


def test_a_daemon_frozen_during_the_outage_goes_out_once_writes_return() -> None:
    H = Hosts("h1", "h2", "h3")
    L = start(H)
    A = H.ids("h2")[0]
    for _ in range(6):
        L.step(*H.reports(wrote=()), write_failure=NOSPACE)
    assert L.state(A) == "in"
    cycles = 0
    while L.state(A) == "in":
        L.step(*H.reports(wrote=["h1", "h3"]))       # writes back; h2 stays frozen
        cycles += 1
        assert cycles <= 10
    # one baseline cycle after the outage, then sick_polls
    assert cycles == 1 + 3
    assert all(L.state(i) == "in" for h in ("h1", "h3") for i in H.ids(h))


def test_a_failed_registry_write_alone_is_an_outage() -> None:
    """The shell passes a failed registry transaction to the next cycle as write_failure."""
    H = Hosts("h1", "h2", "h3")
    L = start(H)
    d = L.step(*H.reports(wrote=["h1", "h3"]),
               write_failure="registry write: etcd: database space exceeded")
    assert "registry write" in d.memory.outage
    assert L.state(H.ids("h2")[0]) == "in" and L.memory.health[H.ids("h2")[0]].bad == 0


def test_the_rule_itself() -> None:
    r = {h: report(h, 5) for h in ("h1", "h2", "h3", "h4", "h5")}
    mem = LeaderMemory(cycles=3, seen={h: ("run1", 5) for h in r},
                       polled={h: ("run1", 5) for h in r})
    snap = ClusterSnapshot(reports=r, bad_reports={}, registry=None)
    assert stale_streaks(snap, LeaderMemory()) == {}             # a new leader: baseline
    assert stale_streaks(snap, mem) == dict.fromkeys(r, 1)
    # a majority stopped together
    assert write_outage(snap, mem, {"h2": 1, "h3": 2, "h4": 1})
    # two of five is no majority; nor are old stale hosts plus one new one
    assert not write_outage(snap, mem, {"h2": 1, "h3": 1})
    assert not write_outage(snap, mem, {"h2": 7, "h3": 9, "h4": 1})
    # ... unless the outage is already on
    held = LeaderMemory(cycles=3, seen=mem.seen, polled=mem.polled, outage="x")
    assert write_outage(snap, held, {"h2": 7, "h3": 9, "h4": 1})
    assert not write_outage(snap, held, {"h2": 7, "h3": 9})
    # the leader's own failed write is one, whatever the reports say
    failed = ClusterSnapshot(reports=r, bad_reports={}, registry=None, write_failure="w")
    assert write_outage(failed, mem, {})


# ------------------------------------------------------------------ properties

@st.composite
def outage_histories(draw: st.DrawFn) -> tuple[list[str], list[tuple[tuple[str, ...], str]]]:
    """Cycles of a cluster of 3..5 hosts (h1 leads) whose cards are all healthy:
    - normal cycles: every host writes, except at most an isolated jitter (a host whose
      report did not advance this cycle; never two cycles in a row);
    - write-failure episodes (NOSPACE): nobody writes and the leader's write fails; in the
      first cycle after, each other host may still be one poll late;
    - partial episodes: a majority (2 or more) of the other hosts stop writing together, the
      rest go on; in the first cycle after, each of them may be one poll late. A partial
      episode starts only once every host that was late has written again (a host stale from
      one partial episode into the next is indistinguishable from a frozen host while another
      host jitters: docs/decisions.md)."""
    n = draw(st.integers(3, 5))
    hosts = [f"h{i + 1}" for i in range(n)]
    others = hosts[1:]
    cycles: list[tuple[tuple[str, ...], str]] = []     # (hosts that wrote, write_failure)
    late: set[str] = set()                              # stale last cycle: must write now
    lagged: set[str] = set()                            # late after an episode
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["normal", "normal", "nospace", "partial"]))
        if kind == "partial" and lagged:
            kind = "normal"
        lagged = set()
        if kind == "normal":
            for _ in range(draw(st.integers(1, 4))):
                jitter = draw(st.sampled_from([None] + [h for h in others if h not in late]))
                cycles.append((tuple(h for h in hosts if h != jitter), ""))
                late = {jitter} if jitter else set()
            continue
        if kind == "nospace":
            stop = set(hosts)
            for _ in range(draw(st.integers(1, 6))):
                cycles.append(((), "nospace"))
        else:
            k = draw(st.integers(n // 2 + 1, len(others)))      # a strict majority of n
            stop = set(draw(st.permutations(others))[:k])
            for _ in range(draw(st.integers(1, 6))):
                cycles.append((tuple(h for h in hosts if h not in stop), ""))
        lagging = {h for h in sorted(stop - {"h1"}) if draw(st.booleans())}
        cycles.append((tuple(h for h in hosts if h not in lagging), ""))
        late = lagged = lagging
    for _ in range(2):
        cycles.append((tuple(hosts), ""))
    return hosts, cycles


@settings(max_examples=200, deadline=None)
@given(outage_histories(), st.integers(2, 4))
def test_no_healthy_card_goes_out_because_of_a_write_outage(history, sick_polls) -> None:
    hosts, cycles = history
    H = Hosts(*hosts, cards_per_host=2)
    L = start(H, sick_polls=sick_polls)
    for wrote, failure in cycles:
        L.step(*H.reports(wrote=wrote), write_failure=failure and NOSPACE)
        out = [i for i in H.all_ids() if L.state(i) != "in"]
        assert not out, (wrote, failure, L.memory.outage)
    assert L.memory.outage == ""
    assert all(entry(L.registry, i).health == "ok" for i in H.all_ids())


@settings(max_examples=200, deadline=None)
@given(st.integers(3, 5), st.integers(2, 4), st.data())
def test_a_single_frozen_daemon_is_caught_within_two_cycles_of_the_bound(n, sick_polls,
                                                                         data) -> None:
    """One daemon freezes; every other host writes each poll but for isolated jitter (at
    most one host per cycle). Its cards go out within sick_polls + 2 cycles; with no jitter
    in its first two stale cycles, after exactly sick_polls."""
    hosts = [f"h{i + 1}" for i in range(n)]
    frozen = data.draw(st.sampled_from(hosts[1:]))
    H = Hosts(*hosts)
    L = start(H, sick_polls=sick_polls)
    A = H.ids(frozen)[0]
    late: str | None = None
    early_jitter = False
    for cycle in range(1, sick_polls + 3):
        candidates = [None] + [h for h in hosts[1:] if h not in (frozen, late)]
        jitter = data.draw(st.sampled_from(candidates))
        early_jitter |= jitter is not None and cycle <= 2
        L.step(*H.reports(wrote=[h for h in hosts if h not in (frozen, jitter)]))
        late = jitter
        if L.state(A) == "out":
            break
    assert L.state(A) == "out"
    if not early_jitter:
        assert cycle == sick_polls
    others = [i for h in hosts if h != frozen for i in H.ids(h)]
    assert all(L.state(i) == "in" for i in others)


@settings(max_examples=100, deadline=None)
@given(st.integers(3, 5), st.integers(2, 4), st.integers(1, 8), st.data())
def test_a_daemon_frozen_in_an_outage_is_caught_after_it(n, sick_polls, length, data) -> None:
    """A daemon freezes while etcd refuses writes; once writes are back (the other hosts one
    poll late or not), its cards go out within sick_polls + 2 cycles."""
    hosts = [f"h{i + 1}" for i in range(n)]
    frozen = data.draw(st.sampled_from(hosts[1:]))
    H = Hosts(*hosts)
    L = start(H, sick_polls=sick_polls)
    A = H.ids(frozen)[0]
    for _ in range(length):
        L.step(*H.reports(wrote=()), write_failure=NOSPACE)
    assert L.state(A) == "in"
    lagging = {h for h in hosts[1:] if h != frozen and data.draw(st.booleans())}
    L.step(*H.reports(wrote=[h for h in hosts if h != frozen and h not in lagging]))
    cycles = 1
    while L.state(A) == "in" and cycles < sick_polls + 2:
        L.step(*H.reports(wrote=[h for h in hosts if h != frozen]))
        cycles += 1
    assert L.state(A) == "out"
    assert all(L.state(i) == "in" for h in hosts if h != frozen for i in H.ids(h))
