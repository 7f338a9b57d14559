"""Vouching (contract/vouch.py): a registry entry is accepted only as its host reports it."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from awide_cluster.contract.registry import CardEntry, card_id
from awide_cluster.contract.report import HostReport, ReportedCard
from awide_cluster.contract.target import NvmeTarget
from awide_cluster.contract.vouch import TARGET_FIELDS, address_allowed, parse_networks, vet

MODEL = "M1"
HOSTS = ("s1", "s2", "s3")
ALLOWED = {"s1": parse_networks(["10.0.1.0/24"]), "s2": parse_networks(["10.0.2.0/24"]),
           "s3": parse_networks(["10.0.3.0/24", "fd00:3::7"])}


def reported(n: int, host: str, *, traddr: str | None = None) -> ReportedCard:
    serial, identity = f"SN{n}", f"nguid:{n:032x}"
    last = HOSTS.index(host) + 1
    return ReportedCard(
        name=f"card{n}", kind="nvme", found=True, serial=serial, model=MODEL,
        identity=identity, device=f"nvme{n}n1", controller_state="live", healthy=True,
        reason="", target=NvmeTarget("tcp", traddr or f"10.0.{last}.{n % 200 + 1}", 4420,
                                     f"nqn.2024-01.io.awide:card{n}"))


def entry_of(rc: ReportedCard, host: str) -> CardEntry:
    return CardEntry(id=card_id(rc.serial, rc.model, rc.identity), serial=rc.serial,
                     model=rc.model, identity=rc.identity, host=host, name=rc.name,
                     kind=rc.kind, state="in", health="ok", reason="", admitted=1,
                     changed_generation=1, target=rc.target)


def reports_of(cards: dict[str, list[ReportedCard]]) -> dict[str, HostReport]:
    return {h: HostReport(host=h, role="storage", version="t", api="", run="r", seq=1,
                          cards=tuple(cs)) for h, cs in cards.items()}


layouts = st.dictionaries(st.sampled_from(HOSTS), st.sets(st.integers(0, 40), max_size=4),
                          min_size=1).map(
    lambda d: {h: sorted(ns) for h, ns in d.items()})


def distinct(layout: dict[str, list[int]]) -> dict[str, list[ReportedCard]]:
    seen: set[int] = set()
    out: dict[str, list[ReportedCard]] = {}
    for h in sorted(layout):
        out[h] = [reported(n, h) for n in layout[h] if n not in seen]
        seen.update(layout[h])
    return out


@given(layouts)
def test_every_entry_built_from_its_hosts_report_is_accepted(layout: dict[str, list[int]]
                                                             ) -> None:
    cards = distinct(layout)
    reports = reports_of(cards)
    for h, cs in cards.items():
        for rc in cs:
            assert vet(entry_of(rc, h), reports, ALLOWED) is None
            assert vet(entry_of(rc, h), reports, None) is None


@given(layouts, st.sampled_from(TARGET_FIELDS), st.data())
def test_a_changed_target_field_is_refused_by_name(layout: dict[str, list[int]], field: str,
                                                   data: st.DataObject) -> None:
    cards = distinct(layout)
    host = data.draw(st.sampled_from(sorted(h for h in cards if cards[h])) if any(
        cards.values()) else st.nothing())
    rc = data.draw(st.sampled_from(cards[host]))
    e = entry_of(rc, host)
    assert e.target is not None
    other: object = {"transport": "rdma", "traddr": "10.66.6.6", "trsvcid": 4421,
             "subnqn": "nqn.2024-01.io.evil:x"}[field]
    forged = replace(e, target=NvmeTarget.parse({**e.target.to_dict(), field: other}))
    why = vet(forged, reports_of(cards), None)
    assert why is not None and why.field == field and why.card == e.id and why.host == host


@given(layouts, st.data())
def test_an_entry_named_on_another_host_or_with_a_made_up_id_is_refused(
        layout: dict[str, list[int]], data: st.DataObject) -> None:
    cards = distinct(layout)
    reports = reports_of(cards)
    owners = sorted(h for h in cards if cards[h])
    if not owners:
        return
    host = data.draw(st.sampled_from(owners))
    rc = data.draw(st.sampled_from(cards[host]))
    e = entry_of(rc, host)
    thief = data.draw(st.sampled_from([h for h in HOSTS if h != host]))
    assert vet(replace(e, host=thief), reports, None) is not None
    made_up = replace(e, id="c" + "0" * 11)
    why = vet(made_up, reports, None)
    assert why is not None and why.field == "id"
    new_serial = replace(e, serial="FORGED1")        # id derived again: no host reports it
    new_serial = replace(new_serial, id=card_id("FORGED1", e.model, e.identity))
    why = vet(new_serial, reports, None)
    assert why is not None and why.field == "serial"


@given(st.integers(0, 40), st.sampled_from(HOSTS))
def test_a_host_pointing_its_own_card_outside_its_addresses_is_refused_only_with_allowed(
        n: int, host: str) -> None:
    rc = reported(n, host, traddr="10.66.6.6")      # the host's own report says so
    reports = reports_of({host: [rc]})
    e = entry_of(rc, host)
    assert vet(e, reports, None) is None            # no allowed addresses: not checked
    why = vet(e, reports, ALLOWED)
    assert why is not None and why.field == "traddr"
    assert vet(e, reports, {}) is not None          # a host not listed: nothing is allowed


@given(st.integers(0, 40))
def test_a_card_claimed_by_two_hosts_is_refused(n: int) -> None:
    mine, stolen = reported(n, "s1"), reported(n, "s2")
    why = vet(entry_of(stolen, "s2"), reports_of({"s1": [mine], "s2": [stolen]}), None)
    assert why is not None and why.field == "host" and "s1" in why.detail


def test_a_missing_report_vouches_for_nothing_and_a_host_name_is_never_allowed() -> None:
    rc = reported(1, "s1")
    assert vet(entry_of(rc, "s1"), {}, None) is not None
    assert not address_allowed("storage1.example", parse_networks(["0.0.0.0/0"]))
    assert address_allowed("fd00:3::7", ALLOWED["s3"])
    assert not address_allowed("fd00:3::8", ALLOWED["s3"])
    assert not address_allowed("10.0.4.1", ALLOWED["s3"])
