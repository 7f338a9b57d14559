"""The placement algorithm recorded per namespace (pure): what a gateway record says it runs,
what a gateway does with the algorithm recorded in ``layouts/<namespace>``, and the operator's
migration decision (``operator/migrate.decide``)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from awide_cluster.contract import records, slots
from awide_cluster.contract.records import (
    PLACEMENT_ALGORITHMS,
    GatewayRecord,
    GatewayRecordError,
    LayoutRecord,
    LayoutRecordError,
)
from awide_cluster.operator import migrate
from awide_gateway_cluster import layout as lay

GW = GatewayRecord(id="g1", host="gh", pod="p", namespace="ns-1", placement="dialog",
                   fingerprint="f", generation=4, engine=None, version="0.2.0")
LAYOUT = LayoutRecord("ns-1", "dialog", created_by="g1", cards=("c1", "c2"),
                      cards_lineage="L1", cards_generation=5)


def gw(gid: str, algorithms: tuple[int, ...]) -> tuple[str, GatewayRecord]:
    return f"gateways/{gid}", replace(GW, id=gid, algorithms=algorithms)


# ------------------------------------------------------------------ gateway record

def test_this_release_runs_algorithm_1_and_says_so() -> None:
    assert PLACEMENT_ALGORITHMS == (1,)
    doc = json.loads(GW.encode())
    assert doc["algorithms"] == [1]
    assert records.decode_gateway(GW.encode(), key="gateways/g1").algorithms == (1,)


@given(st.lists(st.integers(1, 9999), min_size=1, max_size=records.ALGORITHMS_MAX))
def test_algorithms_round_trip(algorithms: list[int]) -> None:
    r = replace(GW, algorithms=tuple(algorithms))
    back = records.decode_gateway(r.encode(), key="gateways/g1")
    assert back.algorithms == tuple(sorted(set(algorithms)))


def test_a_record_without_the_field_runs_algorithm_1() -> None:
    doc = json.loads(GW.encode())
    del doc["algorithms"]
    assert records.decode_gateway(json.dumps(doc), key="gateways/g1").algorithms == (1,)
    # a record of schema 1.0 (no version fields) is written without it, as before
    old = replace(GW, schema_minor=0)
    assert "algorithms" not in json.loads(old.encode())


@pytest.mark.parametrize("bad", ["1", [], [0], [1.5], [True], ["2"], [10000],
                                 list(range(1, records.ALGORITHMS_MAX + 2)), {"1": 1}])
def test_bad_algorithms_are_refused_naming_key_and_field(bad: object) -> None:
    doc = json.loads(GW.encode()) | {"algorithms": bad}
    with pytest.raises(GatewayRecordError) as err:
        records.decode_gateway(json.dumps(doc), key="gateways/g1")
    assert "gateways/g1" in str(err.value) and "algorithms" in str(err.value)
    assert err.value.problem == "gateway_record_corrupt"


# ------------------------------------------------------------------ gateway side

def test_a_namespace_not_migrated_keeps_its_keys_and_fingerprint() -> None:
    assert lay.namespace_id("m-1", 1, 1) == lay.namespace_id("m-1", 1) == "m-1"
    assert lay.namespace_id("m-1", 2, 1) == "m-1.f2"
    t = slots.assign([slots.SlotClaim("c1", 1), slots.SlotClaim("c2", 2)])
    assert lay.fingerprint("ns", "dialog", t, 1) == lay.fingerprint("ns", "dialog", t)
    assert lay.adopt(LAYOUT, LAYOUT, runs=(1, 2)) is LAYOUT
    assert lay.decide(LAYOUT, LAYOUT, runs=(1, 2)) == "ok"


def test_a_migrated_namespace_takes_a_new_key_prefix() -> None:
    assert lay.namespace_id("m-1", 1, 2) == "m-1.a2"
    assert lay.namespace_id("m-1", 3, 2) == "m-1.f3.a2"
    ids = {lay.namespace_id("m-1", f, a) for f in (1, 2, 3) for a in (1, 2, 3)}
    assert len(ids) == 9                # no two (format, algorithm) share keys
    t = slots.assign([slots.SlotClaim("c1", 1)])
    assert lay.fingerprint("ns", "dialog", t, 2) != lay.fingerprint("ns", "dialog", t, 1)


def test_a_gateway_takes_a_recorded_algorithm_it_runs() -> None:
    recorded = replace(LAYOUT, algorithm=2)
    mine = lay.adopt(recorded, LAYOUT, runs=(1, 2))
    assert mine.algorithm == 2 and replace(mine, algorithm=1) == LAYOUT
    assert lay.decide(recorded, mine, runs=(1, 2)) == "ok"


def test_a_gateway_refuses_a_recorded_algorithm_it_does_not_run() -> None:
    recorded = replace(LAYOUT, algorithm=2, created_by="g9")
    mine = lay.adopt(recorded, LAYOUT)          # this release: runs 1 only
    assert mine is LAYOUT
    step = lay.decide(recorded, mine)
    assert isinstance(step, lay.AlgorithmUnknown)
    assert "placement algorithm 2" in str(step) and "runs 1" in str(step)
    # an algorithm 0 (no writer writes it) is refused the same way
    assert isinstance(lay.decide(replace(LAYOUT, algorithm=0), LAYOUT),
                      lay.AlgorithmUnknown)


# ------------------------------------------------------------------ operator decision

def test_migrate_needs_every_live_gateway_to_run_it() -> None:
    d = migrate.decide("ns-1", 2, LAYOUT, [gw("g1", (1, 2)), gw("g2", (1,)), gw("g3", (1, 2))])
    assert d.outcome == "refused" and d.record is None
    assert "g2 (runs 1)" in d.message and "g1" not in d.message
    d = migrate.decide("ns-1", 2, LAYOUT, [gw("g1", (1, 2)), gw("g3", (2, 3))])
    assert d.outcome == "migrate" and d.record == replace(LAYOUT, algorithm=2)
    assert "cold" in d.message


def test_migrate_refusals() -> None:
    ok = [gw("g1", (1, 2))]
    absent = migrate.decide("ns-1", 2, None, ok)
    assert absent.outcome == "refused" and "layouts/ns-1 is absent" in absent.message
    corrupt = LayoutRecordError("field algorithm: missing", key="layouts/ns-1")
    bad = migrate.decide("ns-1", 2, corrupt, ok)
    assert bad.outcome == "refused" and "layouts/ns-1" in bad.message
    assert migrate.decide("ns-1", 1, LAYOUT, ok).outcome == "already"
    back = migrate.decide("ns-1", 1, replace(LAYOUT, algorithm=2), ok)
    assert back.outcome == "refused" and "newer one only" in back.message
    assert "no live gateway" in migrate.decide("ns-1", 2, LAYOUT, []).message
    unreadable = GatewayRecordError("field algorithms: not a list", key="gateways/g7")
    d = migrate.decide("ns-1", 2, LAYOUT, [*ok, ("gateways/g7", unreadable)])
    assert d.outcome == "refused" and "gateways/g7" in d.message


def test_many_lacking_gateways_are_named_bounded() -> None:
    many = [gw(f"g{i:02d}", (1,)) for i in range(25)]
    d = migrate.decide("ns-1", 2, LAYOUT, many)
    assert d.outcome == "refused" and "and 15 more" in d.message and "g24" not in d.message
