"""Schema versions across releases (contract/versions.py, docs/versions.md): a newer minor is
read with a warning, a newer major is refused (the registry's as ``NewerSchema``), garbage in
the new fields is the document's own typed error naming the key, and the leader writes the
highest registry schema every live reader reads fully."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from awide_cluster.contract import records
from awide_cluster.contract import registry as regdoc
from awide_cluster.contract import report as reportdoc
from awide_cluster.contract import versions as ver
from awide_cluster.contract.versions import Schema
from awide_cluster.daemon.leader_read import registry_found
from awide_cluster.daemon.reconcile import ClusterSnapshot, LeaderMemory, Policy, decide
from awide_cluster.operator.judge.daemons import judge_registry, schema_held
from awide_cluster.store.types import KeyValue

REPORT = reportdoc.HostReport(host="h1", role="storage", version="0.1.0", api="", run="r1",
                              seq=3)
REGISTRY = regdoc.Registry(cluster="c1", generation=4, leader="h1", cards=(), lineage="l1")
GATEWAY = records.GatewayRecord(id="g1", host="gh", pod="p", namespace="ns", placement="x",
                                fingerprint="f", generation=4, engine=None, version="0.1.0")


def doc(raw: bytes, **changes: object) -> bytes:
    d = json.loads(raw)
    d.update(changes)
    return json.dumps(d).encode()


def kv(value: bytes) -> KeyValue:
    return KeyValue(key="registry", value=value, mod_revision=7, create_revision=1, version=1)


def test_spans_and_the_choice_of_the_registry_schema() -> None:
    span = ver.MINE.reads("registry")
    assert span.fit(Schema(1, 0)) == span.fit(Schema(1, 1)) == "full"
    assert span.fit(Schema(1, 7)) == "newer_minor"
    assert span.fit(Schema(2, 0)) == "newer_major"
    assert ver.registry_to_write([]) == Schema(1, 1)
    assert ver.registry_to_write([ver.MINE, ver.MINE]) == Schema(1, 1)
    # one live reader of a release before the fields: the registry stays 1.0
    assert ver.registry_to_write([ver.MINE, ver.BEFORE]) == Schema(1, 0)
    newer = ver.versions(read={"registry": ver.Span(Schema(1, 0), Schema(1, 5))}, write={})
    assert ver.registry_to_write([newer, ver.MINE]) == Schema(1, 1)
    assert ver.from_wire(ver.to_wire(ver.MINE), error=regdoc.RegistryError, key="k") == ver.MINE


def test_this_release_writes_the_fields_and_reads_its_own_documents() -> None:
    r = reportdoc.decode(reportdoc.encode(REPORT))
    assert r == REPORT and r.schema_version == Schema(1, 1) and r.versions == ver.MINE
    g = records.decode_gateway(GATEWAY.encode(), "g1")
    assert g == GATEWAY and g.versions == ver.MINE
    reg = replace(REGISTRY, schema_minor=1, versions=ver.MINE)
    assert regdoc.decode(regdoc.encode(reg)) == reg
    # minor 0 is the document as the releases before the fields wrote it
    assert "versions" not in json.loads(regdoc.encode(REGISTRY))
    assert regdoc.decode(regdoc.encode(REGISTRY)).versions is None


def test_documents_of_a_release_before_the_fields_read_as_1_0() -> None:
    old = doc(reportdoc.encode(REPORT))
    old_d = json.loads(old)
    del old_d["schema_minor"], old_d["versions"]
    r = reportdoc.decode(json.dumps(old_d).encode())
    assert r.schema_version == Schema(1, 0) and r.versions == ver.BEFORE
    g = json.loads(GATEWAY.encode())
    del g["schema_minor"], g["versions"], g["schema"]
    assert records.decode_gateway(json.dumps(g).encode(), "g1").versions == ver.BEFORE


def test_a_newer_minor_is_read_with_a_warning() -> None:
    r = reportdoc.decode(doc(reportdoc.encode(REPORT), schema_minor=4, new_field={"x": 1}))
    assert r.schema_version == Schema(1, 4)
    assert "newer than this release reads fully" in ver.newer_note("report", r.schema_version)
    g = records.decode_gateway(doc(GATEWAY.encode(), schema_minor=9, more="x"), "g1")
    assert g.schema_minor == 9
    raw = doc(regdoc.encode(replace(REGISTRY, schema_minor=1)), schema_minor=3, extra=[1],
              versions=claim("1.0-1.3"))
    reg = regdoc.decode(raw)
    assert reg.schema_version == Schema(1, 3)
    # the leader reads it but does not fully: it keeps it as it is
    got = registry_found(kv(raw))
    assert got.found == "newer_schema" and got.registry == reg
    assert "registry schema 1.3 is newer" in got.problem
    view = judge_registry(kv(raw), None)
    assert [p.code for p in view[2]] == ["registry_schema_newer"]
    # without a writer that says it writes 1.3 it is a registry like any other (a leader
    # rewrites it when it is not the one it wrote)
    unclaimed = doc(regdoc.encode(replace(REGISTRY, schema_minor=1)), schema_minor=3)
    assert registry_found(kv(unclaimed)).found == "ok"


def claim(span: str) -> dict[str, object]:
    """A ``versions`` field whose writer writes the registry schemas of ``span``."""
    return {"read": {"registry": span}, "write": {"registry": span}}


def test_a_newer_major_is_refused() -> None:
    raw = doc(regdoc.encode(REGISTRY), schema=2, versions=claim("1.0-2.0"))
    with pytest.raises(regdoc.NewerSchema, match=r"registry \(key registry\): schema 2 is"):
        regdoc.decode(raw)
    assert registry_found(kv(raw)).found == "newer_schema"
    # a newer major that no writer says it writes (poison, or garbage): refused, repaired
    for unclaimed in (doc(regdoc.encode(REGISTRY), schema=99),
                      doc(regdoc.encode(REGISTRY), schema=2, versions=claim("1.0-1.1")),
                      doc(regdoc.encode(REGISTRY), schema=2, versions="x")):
        with pytest.raises(regdoc.UnknownSchema) as e:
            regdoc.decode(unclaimed)
        assert not isinstance(e.value, regdoc.NewerSchema)
        assert registry_found(kv(unclaimed)).found == "unknown_schema"
    with pytest.raises(reportdoc.ReportError, match="schema 2 is not known"):
        reportdoc.decode(doc(reportdoc.encode(REPORT), schema=2), key="members/h1")
    with pytest.raises(records.GatewayRecordError, match="field schema: 2 is not known"):
        records.decode_gateway(doc(GATEWAY.encode(), schema=2), "g1")


@pytest.mark.parametrize("change", [
    {"schema_minor": -1}, {"schema_minor": "1"}, {"schema_minor": 1.5}, {"schema": "1"},
    {"schema": 0}, {"versions": "1.0-1.1"}, {"versions": {"read": []}},
    {"versions": {"read": {"registry": "1.x"}}}, {"versions": {"read": {"registry": "2.0-1.0"}}},
    {"versions": {"write": {"report": 11}}},
    {"versions": {"read": {f"k{i}": "1.0-1.0" for i in range(ver.KINDS_MAX + 1)}}},
])
def test_garbage_in_the_version_fields_is_a_typed_error_naming_the_key(change) -> None:
    with pytest.raises(reportdoc.ReportError) as e:
        reportdoc.decode(doc(reportdoc.encode(REPORT), **change), key="members/h1")
    assert "members/h1" in str(e.value) and ("schema" in str(e.value)
                                             or "versions" in str(e.value))
    with pytest.raises(records.GatewayRecordError, match="gateways/g1"):
        records.decode_gateway(doc(GATEWAY.encode(), **change), "g1")
    with pytest.raises(regdoc.RegistryError, match=r"key registry"):
        regdoc.decode(doc(regdoc.encode(replace(REGISTRY, schema_minor=1)), **change))


def test_unknown_kinds_are_ignored() -> None:
    raw = doc(GATEWAY.encode(), versions={"read": {"layout": "3.0-4.2", "registry": "1.0-1.4"},
                                          "write": {}})
    g = records.decode_gateway(raw, "g1")
    assert g.versions.read == (("registry", ver.Span(Schema(1, 0), Schema(1, 4))),)


def test_the_leader_writes_the_schema_it_is_given_and_says_so() -> None:
    policy = Policy(cluster="c1", leader="h1")
    snap = ClusterSnapshot(reports={"h1": REPORT}, bad_reports={}, registry=None,
                           registry_schema=Schema(1, 0))
    d = decide(snap, LeaderMemory(), policy, now="t")
    assert d.write and d.registry.schema_version == Schema(1, 0) and d.registry.versions is None
    snap = replace(snap, registry=d.registry, registry_schema=Schema(1, 1),
                   reports={"h1": replace(REPORT, seq=4)})
    d2 = decide(snap, d.memory, policy, now="t")
    assert d2.write and d2.registry.schema_version == Schema(1, 1)
    assert d2.registry.versions == ver.MINE
    assert any("registry schema 1.0 -> 1.1" in line for line in d2.log)
    assert regdoc.decode(regdoc.encode(d2.registry)) == d2.registry


def test_status_says_when_the_leader_holds_a_registry_it_cannot_fully_read() -> None:
    newer = replace(REGISTRY, schema_minor=3)
    p = schema_held("h1", REPORT, newer)
    assert p is not None and p.code == "registry_schema_held" and "schema 1.3" in p.message
    assert schema_held("h1", REPORT, replace(REGISTRY, schema_minor=1)) is None
    # a leader of a release before the fields does not hold: nothing to say
    assert schema_held("h1", replace(REPORT, schema_minor=0, versions=ver.BEFORE), newer) is None


def test_a_gateway_applies_a_newer_minor_with_a_warning_and_keeps_its_registry_on_a_major(
        ) -> None:
    from awide_cluster.store.types import RangeResult
    from awide_gateway_cluster.follower import FollowState, step

    def answer(raw: bytes, mod: int) -> RangeResult:
        return RangeResult(revision=mod, kvs=(KeyValue("registry", raw, 2, mod, 3),), count=1)

    st, d = step(FollowState(), answer(regdoc.encode(REGISTRY), 5), 1.0, cluster="c1")
    assert d.outcome == "applied" and d.detail == ""
    minor = doc(regdoc.encode(replace(REGISTRY, generation=5, schema_minor=1)),
                schema_minor=4, extra={"x": 1}, versions=claim("1.0-1.4"))
    st, d = step(st, answer(minor, 6), 2.0, cluster="c1")
    assert d.outcome == "applied" and st.registry is not None and st.registry.generation == 5
    assert "registry schema 1.4 is newer than this release reads fully" in d.detail
    major = doc(regdoc.encode(replace(REGISTRY, generation=6)), schema=2,
                versions=claim("1.0-2.0"))
    st, d = step(st, answer(major, 7), 3.0, cluster="c1")
    assert d.outcome == "rejected" and st.registry is not None and st.registry.generation == 5
    assert "schema 2 is not known" in d.detail
