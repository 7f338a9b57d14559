"""Property tests of the leader's decision (daemon/reconcile.py) over random cluster histories."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from awide_cluster.contract import registry as regdoc
from awide_cluster.contract.registry import Registry, card_id
from awide_cluster.contract.report import HostReport, ReportedCard
from awide_cluster.contract.slots import SLOT_COUNT
from awide_cluster.daemon.reconcile import ClusterSnapshot, Intent, LeaderMemory, Policy, decide

HOSTS = ("h1", "h2", "h3")
# (serial, identity): SN1 appears with two identities (a duplicate serial)
POOL = [("SN1", "u1"), ("SN1", "u1b"), ("SN2", "u2"), ("SN3", "u3"), ("SN4", "u4"),
        ("SN5", "u5"), ("SN6", "u6"), ("SN7", "u7"), ("SN8", "u8"), ("SN9", "u9"),
        ("SN10", "u10")]


def cid(i: int) -> str:
    s, u = POOL[i]
    return card_id(s, "m", u)


@st.composite
def host_step(draw):
    kind = draw(st.sampled_from(["report", "report", "report", "missing", "corrupt"]))
    advance = draw(st.booleans()) or draw(st.booleans())
    cards = draw(st.lists(st.tuples(st.integers(0, len(POOL) - 1), st.booleans(),
                                    st.sampled_from([True, True, False])),
                          max_size=4, unique_by=lambda t: t[0]))
    return kind, advance, cards


@st.composite
def histories(draw):
    steps = []
    for _ in range(draw(st.integers(1, 8))):
        hosts = {h: draw(host_step()) for h in HOSTS}
        intents = draw(st.lists(st.tuples(st.integers(0, len(POOL) - 1),
                                          st.sampled_from(["drain", "undrain", "forget"])),
                                max_size=2, unique_by=lambda t: t[0]))
        new_leader = draw(st.integers(0, 9)) == 0
        steps.append((hosts, intents, new_leader))
    return steps


HostStep = tuple[str, bool, list[tuple[int, bool, bool]]]


def build(hosts: dict[str, HostStep],
          seqs: dict[str, int]) -> tuple[dict[str, HostReport], dict[str, str], set[str]]:
    reports: dict[str, HostReport] = {}
    bad: dict[str, str] = {}
    fresh_healthy: set[str] = set()
    places: dict[str, int] = {}
    for h, (kind, advance, cards) in hosts.items():
        if kind == "missing":
            continue
        if kind == "corrupt":
            bad[h] = "not JSON"
            continue
        if advance:
            seqs[h] = seqs.get(h, 0) + 1
        rcs = []
        for i, found, healthy in cards:
            s, u = POOL[i]
            rcs.append(ReportedCard(
                name=f"n{i}", kind="dir", found=found, serial=s if found else "",
                model="m" if found else "", identity=u if found else "", device="/d",
                controller_state="", healthy=found and healthy,
                reason="" if found and healthy else "sick", path=f"/d/{i}"))
            if found:
                places[cid(i)] = places.get(cid(i), 0) + 1
            if found and healthy and advance:
                fresh_healthy.add(cid(i))
        reports[h] = HostReport(host=h, role="storage", version="v", api="", run="r",
                                seq=seqs.get(h, 0), cards=tuple(rcs))
    # a card reported by two hosts at once is a conflict: which report counts is not asserted
    return reports, bad, {c for c in fresh_healthy if places[c] == 1}


@settings(max_examples=60, deadline=None)
@given(histories())
def test_decisions_keep_the_registry_sound(history) -> None:
    policy = Policy(cluster="c1", leader="h1", sick_polls=2, healthy_polls=1)
    memory = LeaderMemory()
    reg: Registry | None = None
    seqs: dict[str, int] = {}
    for hosts, intents, new_leader in history:
        if new_leader:
            memory = LeaderMemory()
        reports, bad, fresh_healthy = build(hosts, seqs)
        its = tuple(Intent(cid(i), a, 100 + i) for i, a in intents)
        snap = ClusterSnapshot(reports=reports, bad_reports=bad, registry=reg, intents=its)
        baseline = memory.cycles == 0
        d = decide(snap, memory, policy, now="t")
        new = d.registry
        # decodes, and carries the table the shared slot function gives
        assert regdoc.decode(regdoc.encode(new)) == new
        assert regdoc.check_slots(new) is None
        # written only on change, generation + 1
        if reg is None:
            assert d.write and new.generation == 1
        elif d.write:
            assert new.content() != reg.content() and new.generation == reg.generation + 1
        else:
            assert new is reg
        # every intent is consumed
        assert {k for k, _ in d.consumed} == {f"intents/{i.card_id}" for i in its}
        forgotten = {i.card_id for i in its
                     if i.action == "forget" and reg is not None and reg.card(i.card_id)}
        undrained = {i.card_id for i in its if i.action == "undrain"}
        reported = {card_id(rc.serial, rc.model, rc.identity)
                    for r in reports.values() for rc in r.cards if rc.found}
        for c in new.cards:
            assert c.id == card_id(c.serial, c.model, c.identity)      # never merged
            assert c.id not in forgotten
            old = reg.card(c.id) if reg is not None else None
            assert old is not None or c.id in reported                 # nothing invented
            if reg is not None and old is not None:
                if old.state == "drained" and c.id not in undrained:
                    assert c.state == "drained"
                if baseline and old.state == "in" and c.state == "out":
                    raise AssertionError("a new leader's first cycle took a card out")
                if reg.slots.slot_of(c.id) is not None:                # never displaced
                    assert new.slots.slot_of(c.id) == reg.slots.slot_of(c.id)
            if c.id in fresh_healthy and c.state != "drained":
                assert c.state == "in"                                 # back at once
            others = [o for o in new.cards if o.serial == c.serial and o.id != c.id]
            if others:
                assert c.conflict is not None and all(o.id in c.conflict for o in others)
        placed = [s for s in new.slots.slots if s is not None]
        assert len(placed) <= SLOT_COUNT
        assert set(placed) | {u for u, _ in new.slots.unplaced} == {c.id for c in new.cards}
        memory, reg = d.memory, (new if d.write else reg)


@settings(max_examples=60, deadline=None)
@given(histories(), st.lists(st.tuples(st.booleans(), st.integers(0, 50)), min_size=8,
                             max_size=8))
def test_outsiders_never_count_and_repairs_never_move_a_slot(history, repairs) -> None:
    """A host outside ``Policy.hosts`` reports cards (never admitted); now and then the
    registry in etcd is bad and the cycle repairs from the last good one with a generation
    floor (as the shell does): the repair is written, above the floor, in the same lineage,
    and no placed card changes slot."""
    policy = Policy(cluster="c1", leader="h1", sick_polls=2, healthy_polls=1,
                    hosts=frozenset({"h1", "h2"}))
    memory = LeaderMemory()
    reg: Registry | None = None
    seqs: dict[str, int] = {}
    for (hosts, _intents, new_leader), (repair, floor_up) in zip(history, repairs,
                                                                  strict=False):
        if new_leader:
            memory = LeaderMemory()
        reports, bad, _ = build(hosts, seqs)
        inside = {card_id(rc.serial, rc.model, rc.identity)
                  for h, r in reports.items() if h != "h3" for rc in r.cards if rc.found}
        floor = (reg.generation if reg is not None else 0) + floor_up
        snap = ClusterSnapshot(reports=reports, bad_reports=bad, registry=reg,
                        repair="registry corrupt: test" if repair and reg is not None else "",
                        generation_floor=floor if repair else 0, lineage="L0")
        d = decide(snap, memory, policy, now="t")
        new = d.registry
        assert regdoc.decode(regdoc.encode(new)) == new
        assert new.lineage == (reg.lineage if reg is not None else "L0")
        assert set(new.hosts) == {"h1", "h2"}
        for c in new.cards:       # h3 is no host of the cluster: nothing only it reports
            assert c.id in inside or (reg is not None and reg.card(c.id) is not None)
            if reg is not None and reg.slots.slot_of(c.id) is not None:
                assert new.slots.slot_of(c.id) == reg.slots.slot_of(c.id)
        if snap.repair:
            assert reg is not None and d.write
            assert new.generation == max(reg.generation, floor) + 1
        memory, reg = d.memory, (new if d.write else reg)
