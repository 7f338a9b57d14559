"""Values read from etcd are untrusted (contract/untrusted.py): every decoder of a value read
from etcd gives a valid result or raises its own typed error (a ``BadValue`` naming the key,
the reason and a problem code), and nothing else, whatever the bytes hold.

A structural fuzz over every decoder (random bytes, random JSON, every field of a valid
document replaced by a hostile value, deep nesting, huge numbers, NaN/Infinity, control
characters, over-long strings), the explicit regressions, and the writers' side: whatever a
writer of this project encodes decodes.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from awide_cluster.cards.model import (
    DISCOVERY,
    PROBE_ORDER,
    CardObservation,
    LocalCard,
    ProbeResult,
    summarize,
)
from awide_cluster.cards.spec import CardSpec
from awide_cluster.contract import keys, records
from awide_cluster.contract import registry as regdoc
from awide_cluster.contract import report as reportdoc
from awide_cluster.contract import untrusted as u
from awide_cluster.contract.report import HostReport, ProbeLine, ReportedCard
from awide_cluster.contract.target import NvmeTarget
from awide_cluster.daemon import reporter

from .strategies import names, printable, registries

# AWIDE_FUZZ_EXAMPLES=5000 runs a deeper fuzz (by hand; the default keeps the suite quick)
FUZZ = settings(max_examples=int(os.environ.get("AWIDE_FUZZ_EXAMPLES", "150")), deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

PROBLEMS = {u.REGISTRY_CORRUPT, u.REPORT_CORRUPT, u.LEADER_CORRUPT, u.GATEWAY_RECORD_CORRUPT,
            u.LAYOUT_CORRUPT, u.INTENT_CORRUPT, u.VALUE_TOO_LARGE}
TARGET = NvmeTarget("tcp", "10.0.0.1", 4420, "nqn.2024-01.io.awide:sub1")


# ---------------------------------------------------------------- the decoders

@dataclass(frozen=True)
class Decoder:
    name: str
    decode: Callable[[Any], Any]
    error: type[u.BadValue]
    problem: str
    key: str                        # the key the error must name ("" if the decoder has none)


DECODERS = (
    Decoder("registry", lambda raw: regdoc.decode(raw), regdoc.RegistryError,
            u.REGISTRY_CORRUPT, "registry"),
    Decoder("report", lambda raw: reportdoc.decode(raw, key="members/h1"), reportdoc.ReportError,
            u.REPORT_CORRUPT, "members/h1"),
    Decoder("leader", lambda raw: records.decode_leader(raw), records.LeaderRecordError,
            u.LEADER_CORRUPT, "leader"),
    Decoder("gateway", lambda raw: records.decode_gateway(raw, "gw-1"),
            records.GatewayRecordError, u.GATEWAY_RECORD_CORRUPT, "gateways/gw-1"),
    Decoder("gateway without id", lambda raw: records.decode_gateway(raw),
            records.GatewayRecordError, u.GATEWAY_RECORD_CORRUPT, ""),
    Decoder("layout", lambda raw: records.decode_layout(raw, "ns-1"),
            records.LayoutRecordError, u.LAYOUT_CORRUPT, "layouts/ns-1"),
    Decoder("gateway layout", lambda raw: records.decode_layout(raw, key="layouts/ns-1"),
            records.LayoutRecordError, u.LAYOUT_CORRUPT, "layouts/ns-1"),
    Decoder("intent", lambda raw: records.decode_intent(raw, "c0123456789a"),
            records.IntentRecordError, u.INTENT_CORRUPT, "intents/c0123456789a"),
)
BY_NAME = {d.name: d for d in DECODERS}


def check(d: Decoder, raw: Any) -> Any:
    """``d`` on ``raw``: the result, or None when refused with its typed error. Any other
    exception fails the test."""
    try:
        return d.decode(raw)
    except d.error as e:
        assert isinstance(e, u.BadValue)
        assert e.problem in (d.problem, u.VALUE_TOO_LARGE)
        text = str(e)
        assert text and e.reason
        assert u.FORBIDDEN.search(text) is None, text
        assert len(text) < 1000
        assert e.key == d.key and (not d.key or f"(key {d.key})" in text)
        return None


def check_all(raw: Any) -> None:
    for d in DECODERS:
        check(d, raw)
    # the daemon's and the gateway's view of the leader: None for anything not a record
    try:
        records.LeaderRecord.decode(raw)
    except Exception as e:  # noqa: BLE001 - the assertion names what escaped
        raise AssertionError(f"LeaderRecord.decode raised {type(e).__name__}: {e}") from e


# ---------------------------------------------------------------- valid documents

@st.composite
def host_reports(draw) -> HostReport:
    cards = []
    for i in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["nvme", "dir"]))
        probes = tuple(ProbeLine(p, draw(st.booleans()), draw(st.text(printable, max_size=20)),
                                 draw(st.floats(0, 30)))
                       for p in PROBE_ORDER[: draw(st.integers(0, 6))])
        cards.append(ReportedCard(
            name=f"card{i}", kind=kind, found=True, serial=f"SN{i}", model="M",
            identity=f"nguid:{i:032x}", device="nvme0n1", controller_state="live",
            healthy=draw(st.booleans()), reason=draw(st.text(printable, max_size=30)),
            target=TARGET if kind == "nvme" else None,
            path=f"/srv/cards/card{i}" if kind == "dir" else None, probes=probes))
    return HostReport(host=draw(names), role=draw(st.sampled_from(["storage", "witness"])),
                      version="0.1.0", api="http://127.0.0.1:9700", run="5f0c2a9e41d7",
                      seq=draw(st.integers(0, 2**40)), cards=tuple(cards),
                      dev_cluster=draw(st.booleans()))


def leader_records() -> st.SearchStrategy[records.LeaderRecord]:
    return st.builds(records.LeaderRecord, host=names,
                     since=st.just("2026-11-30T14:00:00+00:00"),
                     api=st.just("http://127.0.0.1:9700"), run=st.text("0123456789abcdef"))


def gateway_records() -> st.SearchStrategy[records.GatewayRecord]:
    return st.builds(records.GatewayRecord, id=st.just("gw-1"), host=names, pod=names,
                     namespace=st.just("llama-0123456789abcdef"),
                     placement=st.sampled_from(["dialog", "stripe"]),
                     fingerprint=st.just("L0123456789abcdef"),
                     generation=st.integers(0, 2**40),
                     engine=st.none() | st.text(printable, max_size=20),
                     version=st.just("0.1.0"), stale=st.booleans())


def layout_records() -> st.SearchStrategy[records.LayoutRecord]:
    return st.builds(records.LayoutRecord, namespace=st.just("ns-1"),
                     placement=st.sampled_from(["dialog", "stripe"]), created_by=names)


def intent_records() -> st.SearchStrategy[records.IntentRecord]:
    return st.builds(records.IntentRecord, action=st.sampled_from(records.INTENT_ACTIONS),
                     by=st.text(printable, max_size=30),
                     at=st.just("2026-11-30T14:01:00+00:00"),
                     reason=st.text(printable, max_size=30))


VALID: dict[str, st.SearchStrategy[bytes]] = {
    "registry": registries(max_cards=3).map(regdoc.encode),
    "report": host_reports().map(reportdoc.encode),
    "leader": leader_records().map(lambda r: r.encode()),
    "gateway": gateway_records().map(lambda r: r.encode()),
    "gateway without id": gateway_records().map(lambda r: r.encode()),
    "layout": layout_records().map(lambda r: r.encode()),
    "gateway layout": layout_records().map(lambda r: r.encode()),
    "intent": intent_records().map(lambda r: r.encode()),
}


def paths(doc: Any, at: tuple = ()) -> list[tuple]:
    """Every place in a decoded JSON document: each object field and list item, nested."""
    out = [at] if at else []
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += paths(v, at + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += paths(v, at + (i,))
    return out


PLACEHOLDER = "@@hostile@@"

# values only JSON text can carry (json.dumps refuses or cannot build them)
RAW_HOSTILE = [
    "NaN", "Infinity", "-Infinity", "1e400", "-1e400", "1e300", "9007199254740992",
    "-9007199254740993", "1" * 5000, "0." + "0" * 5000 + "1", "1" * 17, "1E+999999999",
    "[" * 2000 + "]" * 2000, "{\"a\":" * 2000 + "1" + "}" * 2000, "[" * 2000,
    '"' + "\\u0000" * 10 + '"', '"\\ud800"', '"\\udfff\\ud800"', '"a\\nb"', '"\\u001b[31m"',
]

hostile_values = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False),
    st.sampled_from(["", "a\nb", "a\rb", "\x1b[31mred", "\x85", "\u2028", "\u202e", "\x00",
                     "card0\n2026-01-01 forged log line", "h1\n", "é" * 70, "x" * 5000,
                     "nqn.2024-01.io.awide:sub1,hostnqn=x", "-1", "4420", "in", "nvme"]),
    st.text(max_size=80), st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
)


def put(doc: Any, at: tuple, value: Any) -> Any:
    parent = doc
    for p in at[:-1]:
        parent = parent[p]
    parent[at[-1]] = value
    return doc


# ---------------------------------------------------------------- the fuzz

@pytest.mark.parametrize("d", DECODERS, ids=lambda d: d.name)
@FUZZ
@given(raw=st.binary(max_size=600))
def test_random_bytes(d, raw) -> None:
    check(d, raw)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**80), 2**80) | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=20)


@FUZZ
@given(value=json_values, fields=st.lists(st.sampled_from(
    ["schema", "host", "cards", "slots", "since", "action", "placement", "generation", "id",
     "target", "probes", "namespace", "algorithm", "run", "seq"]), max_size=4))
def test_random_json(value, fields) -> None:
    check_all(json.dumps(value).encode())
    obj = {"schema": 1, **{f: value for f in fields}}
    check_all(json.dumps(obj).encode())


@pytest.mark.parametrize("name", list(VALID))
@FUZZ
@given(data=st.data())
def test_every_field_of_a_valid_document_replaced(name, data) -> None:
    d = BY_NAME[name]
    raw = data.draw(VALID[name])
    assert check(d, raw) is not None, "the writer's own encoding must decode"
    doc = json.loads(raw)
    places = paths(doc)
    assume(places)
    at = data.draw(st.sampled_from(places))
    how = data.draw(st.sampled_from(["value", "raw", "delete", "extra"]))
    if how == "value":
        mutated = json.dumps(put(doc, at, data.draw(hostile_values)))
    elif how == "raw":
        text = json.dumps(put(doc, at, PLACEHOLDER))
        mutated = text.replace(json.dumps(PLACEHOLDER), data.draw(st.sampled_from(RAW_HOSTILE)))
    elif how == "delete":
        parent = doc
        for p in at[:-1]:
            parent = parent[p]
        del parent[at[-1]]
        mutated = json.dumps(doc)
    else:
        mutated = json.dumps({**doc, data.draw(st.text(max_size=10)): data.draw(hostile_values)})
    check(d, mutated.encode())
    check(d, mutated)                       # text, as tests and tools pass it


@pytest.mark.parametrize("name", list(VALID))
@FUZZ
@given(data=st.data())
def test_valid_document_bytes_corrupted_or_cut(name, data) -> None:
    d = BY_NAME[name]
    raw = bytearray(data.draw(VALID[name]))
    for _ in range(data.draw(st.integers(1, 4))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    check(d, bytes(raw))
    check(d, bytes(raw[: data.draw(st.integers(0, len(raw)))]))


# ---------------------------------------------------------------- the regressions

def test_leader_record_with_since_1e300_is_refused_not_a_crash() -> None:
    raw = b'{"host":"w9","since":1e300}'
    assert len(raw) == 27
    with pytest.raises(records.LeaderRecordError) as e:
        records.decode_leader(raw)
    assert e.value.problem == u.LEADER_CORRUPT and e.value.key == "leader"
    assert "1e300 is out of range" in e.value.reason
    assert records.LeaderRecord.decode(raw) is None


@pytest.mark.parametrize("since", [1e15, -1.0, 9007199254740991, 253402300800])
def test_leader_record_with_a_time_out_of_range_has_no_since(since) -> None:
    rec = records.decode_leader(json.dumps({"host": "w9", "since": since}))
    assert rec.host == "w9" and rec.since == "" and rec.since_ts is None


@pytest.mark.parametrize("value", [
    b"[" * 2000, b"[" * 2000 + b"]" * 2000, b'{"a":' * 2000 + b"1" + b"}" * 2000,
    b'{"host":"w9","x":' + b"[" * 2000 + b"]" * 2000 + b"}",
])
def test_2000_nested_brackets_are_refused_by_every_decoder(value) -> None:
    for d in DECODERS:
        # a record's byte bound (4 KiB) refuses the longer ones first
        with pytest.raises(d.error, match="nested deeper|do not balance|larger than 4096"):
            d.decode(value)
    with pytest.raises(regdoc.RegistryError, match="nested deeper|do not balance"):
        regdoc.decode(value)
    assert records.LeaderRecord.decode(value) is None


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    rec = records.decode_leader(json.dumps({"host": "w9", "run": "[" * 40 + "{\\\"" * 3}))
    assert rec.run.startswith("[[[")


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1" * 5000, "1e400",
                                    "9007199254740992", "0." + "0" * 100 + "1"])
def test_numbers_out_of_bounds_are_refused(number) -> None:
    raw = '{"host":"w9","pod":"p","namespace":"n","placement":"dialog","fingerprint":"L",' \
          f'"generation":{number}}}'
    with pytest.raises(records.GatewayRecordError):
        records.decode_gateway(raw, "gw-1")


def test_oversized_values_are_value_too_large_before_parsing() -> None:
    big = b'{"host":"w9","run":"' + b"a" * (5 * u.KiB) + b'"}'
    with pytest.raises(records.LeaderRecordError) as e:
        records.decode_leader(big)
    assert e.value.problem == u.VALUE_TOO_LARGE
    with pytest.raises(regdoc.RegistryError) as e2:
        regdoc.decode(b" " * (u.REGISTRY_LIMITS.max_bytes + 1))
    assert e2.value.problem == u.VALUE_TOO_LARGE and "(key registry)" in str(e2.value)


def test_pathological_strings_scan_in_one_pass() -> None:
    # an unterminated string of escaped quotes: a backtracking string pattern would take
    # quadratic time on it; both parse attempts end with the typed error
    for raw in (b'{"a":"' + b'\\"' * 500_000, b'"' + b'\\"' * 500_000 + b'"'):
        with pytest.raises(regdoc.RegistryError):
            regdoc.decode(raw)


@pytest.mark.parametrize("text", ["a\nb", "a\rb", "\x1b[2J", "tab\there", "\x7f", "\x85",
                                  "\u2028", "\u202e", "\ud800"])
def test_control_characters_in_a_reason_are_refused(text) -> None:
    r = regdoc.Registry(cluster="c1", generation=1, leader="h1", cards=())
    doc = json.loads(regdoc.encode(r))
    doc["cards"] = [{"id": "c0123456789a", "serial": "SN1", "model": "M", "identity": "u",
                     "host": "h1", "name": "card0", "kind": "dir", "state": "in",
                     "health": "sick", "reason": text, "admitted": 1,
                     "changed_generation": 1, "path": "/srv/c"}]
    with pytest.raises(regdoc.RegistryError, match=r"cards\[0\]\.reason: ") as e:
        regdoc.decode(json.dumps(doc))
    # pydantic refuses a lone surrogate itself ("unable to parse ... as a unicode string")
    assert "control character" in str(e.value) or text == "\ud800"
    doc["cards"][0]["reason"] = "unit awide-store@card0.service is failed — élan ✓ 卡"
    assert regdoc.decode(json.dumps(doc)).cards[0].reason.endswith("卡")


@pytest.mark.parametrize("field,value", [
    ("host", "h1\n"), ("host", "h1\nforged"), ("name", "card0\r"), ("id", "c01\n"),
    ("serial", "SN1\nx"), ("model", "\x1b[31m"), ("identity", "u\x00"),
    ("changed_at", "2026\n"), ("conflict", "x\ny"), ("path", "/srv/\n"),
])
def test_registry_card_fields_with_a_newline_are_refused(field, value) -> None:
    doc: dict[str, Any] = {
           "schema": 1, "cluster": "c1", "generation": 1, "leader": "h1", "slot_algorithm": 1,
           "slots": [None] * 8, "cards": [{
               "id": "c0123456789a", "serial": "SN1", "model": "M", "identity": "u",
               "host": "h1", "name": "card0", "kind": "dir", "state": "in", "health": "ok",
               "reason": "", "admitted": 1, "changed_generation": 1, "path": "/srv/c"}]}
    regdoc.decode(json.dumps(doc))
    doc["cards"][0][field] = value
    with pytest.raises(regdoc.RegistryError, match=field):
        regdoc.decode(json.dumps(doc))


@pytest.mark.parametrize("field", ["name", "serial", "reason", "device", "controller_state"])
def test_report_fields_with_a_newline_are_refused(field) -> None:
    r = HostReport(host="h1", role="storage", version="0.1.0", api="", run="r1", seq=1,
                   cards=(ReportedCard("card0", "dir", True, "SN1", "M", "label:u", "/srv/c",
                                       "live", True, "", path="/srv/c"),))
    doc = json.loads(reportdoc.encode(r))
    doc["cards"][0][field] = "x\ny"
    with pytest.raises(reportdoc.ReportError, match=field):
        reportdoc.decode(json.dumps(doc))


def test_names_with_a_trailing_newline_are_not_names() -> None:
    with pytest.raises(keys.BadName):
        keys.check_name("host", "h1\n")
    with pytest.raises(records.GatewayRecordError, match="key"):
        records.decode_gateway(records.GatewayRecord(
            "gw-1", "h", "p", "ns", "dialog", "L", 1, None, "0.1").encode(), "gw-1\n")


def test_error_names_key_reason_and_problem() -> None:
    e = reportdoc.ReportError("field x: bad", key="members/h\x1b1")
    assert (e.key, e.reason, e.problem) == ("members/h?1", "field x: bad", u.REPORT_CORRUPT)
    assert str(e) == "host report (key members/h?1): field x: bad"
    assert isinstance(regdoc.UnknownSchema("s"), regdoc.RegistryError)
    for cls in (regdoc.RegistryError, reportdoc.ReportError, records.RecordError,
                records.LeaderRecordError, records.LayoutRecordError):
        assert issubclass(cls, u.BadValue) and issubclass(cls, ValueError)
    with pytest.raises(regdoc.UnknownSchema) as s:
        regdoc.decode(b'{"schema": 2}')
    assert s.value.problem == u.REGISTRY_CORRUPT
    assert str(regdoc.RegistryError("x" * 5000)).endswith("...")


@settings(deadline=None)
@given(st.one_of(st.floats(), st.integers(-(2**70), 2**70), st.text(max_size=40),
                 st.booleans(), st.none(), st.datetimes().map(lambda t: t.isoformat())))
def test_times_never_raise(value) -> None:
    ts = records.parse_time(value)
    assert ts is None or (math.isfinite(ts) and u.TIME_MIN <= ts <= u.TIME_MAX)
    text = records.iso(ts)
    if ts is None:
        assert text == ""
    else:
        back = records.parse_time(text)
        assert back is not None and abs(back - ts) < 1.0    # iso() keeps whole seconds
    assert isinstance(records.iso(value), str)             # iso() of anything: a text


# the bracket scan agrees with the depth of the parsed value
def depth(v: Any) -> int:
    if isinstance(v, list):
        return 1 + max((depth(x) for x in v), default=0)
    if isinstance(v, dict):
        return 1 + max((depth(x) for x in v.values()), default=0)
    return 0


@settings(deadline=None)
@given(value=st.recursive(st.none() | st.text(alphabet='[]{}"\\ab'),
                          lambda inner: st.lists(inner, max_size=3)
                          | st.dictionaries(st.text(alphabet='[]{}"\\a', max_size=3), inner,
                                            max_size=3), max_leaves=30),
       limit=st.integers(0, 12), ascii_only=st.booleans())
def test_nesting_scan_agrees_with_the_parser(value, limit, ascii_only) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only)
    assert (u.nesting_problem(text, limit) is None) == (depth(value) <= limit)
    # cut anywhere inside its brackets, it does not balance (or is too deep): never parsed
    if depth(value) > 0:
        assert u.nesting_problem(text[:-1], limit) is not None


# ---------------------------------------------------------------- writers' side

@settings(deadline=None, max_examples=60)
@given(registries(), st.text(max_size=3000), st.text(max_size=5000))
def test_registry_written_with_any_reason_decodes(r, reason, conflict) -> None:
    from dataclasses import replace
    cards = tuple(replace(c, reason=reason, conflict=conflict or None) for c in r.cards)
    r2 = regdoc.with_slots(replace(r, cards=cards))
    assert regdoc.decode(regdoc.encode(r2)) == r2


hostile_text = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["line1\nline2", "\x1b[31mred\x1b[0m", "é" * 3000, "\U0001f600" * 2000,
                     "x" * 100_000, "\ud800 lone", "\u2028\u202e"]))


def observation(name: str, kind: Literal["dir", "nvme"], healthy: bool, reason: str,
                probe_reason: str, path: str | None) -> CardObservation:
    card = LocalCard(name=name, kind=kind, serial="SN1", model="M", identity="nguid:" + "0" * 32,
                     device=path if kind == "dir" else "nvme0n1",
                     controller_state=None if kind == "dir" else "live\nforged",
                     target=TARGET if kind == "nvme" else None)
    probes = [ProbeResult(p, healthy, probe_reason, 0.01) for p in PROBE_ORDER]
    obs = summarize(name, card, probes)
    return CardObservation(obs.card, name, obs.probes, healthy, reason)


@settings(deadline=None, max_examples=40)
@given(reason=hostile_text, probe_reason=hostile_text, healthy=st.booleans(),
       n=st.integers(0, 4), resets=st.integers(0, 2**40))
def test_host_report_written_from_any_probe_text_decodes(reason, probe_reason, healthy, n,
                                                         resets):
    specs = tuple(CardSpec(name=f"card{i}", kind="dir", path=f"/srv/cards/card{i}")
                  for i in range(n))
    obs = [observation(s.name, "dir", healthy, reason, probe_reason, str(s.path))
           for s in specs]
    obs.append(summarize("nvme0", None, [ProbeResult(DISCOVERY, False, reason, math.nan)]))
    specs += (CardSpec(name="nvme0", kind="nvme", serial="SN9", target=TARGET.to_dict()),)
    r = reporter.build_report(host="h1", role="storage", version="0.1.0\n",
                              api="http://127.0.0.1:9700", run="r1", seq=1,
                              dev_cluster=False, specs=specs, observations=obs,
                              history_resets=resets, history_note=reason)
    back = reportdoc.decode(reportdoc.encode(r), key="members/h1")
    assert back == r
    assert back.history_resets == min(resets, reportdoc.HISTORY_RESETS_MAX)
    assert bool(back.history_note) == bool(resets and reason)


def test_largest_host_report_the_writer_can_make_fits() -> None:
    """64 cards (the config's bound), paths of 1024 bytes that escape to 3 KiB each, every
    reason and probe text at its longest in characters that escape to 12 bytes each."""
    path = "/" + "\u00e9" * 511                         # 1023 bytes of UTF-8
    specs = tuple(CardSpec(name=f"card{i}", kind="dir", path=Path(path + str(i % 10)))
                  for i in range(64))
    worst = "\U0001f600" * 5000
    obs = [observation(s.name, "dir", False, worst, worst, str(s.path)) for s in specs]
    r = reporter.build_report(host="h1", role="storage", version="0.1.0", api="", run="r1",
                              seq=1, dev_cluster=False, specs=specs, observations=obs,
                              history_resets=2**31, history_note=worst)
    raw = reportdoc.encode(r)
    assert len(raw) <= u.REPORT_LIMITS.max_bytes
    assert reportdoc.decode(raw) == r
    assert all(c.reason for c in r.cards)              # each card still says what is wrong
    assert len(r.cards[0].reason) in (256, 64)          # a shrink step made it fit
    # the last step (reasons of 64 characters, no probe lines) is what the bound relies on
    last = reporter.fit(r, max_bytes=1)
    assert all(len(c.reason) == 64 and not c.probes for c in last.cards)
    assert len(reportdoc.encode(last)) <= u.REPORT_LIMITS.max_bytes


def test_card_spec_refuses_paths_readers_would_refuse() -> None:
    with pytest.raises(ValueError, match="control character"):
        CardSpec(name="d0", kind="dir", path=Path("/srv/a\nb"))
    with pytest.raises(ValueError, match="1024 bytes"):
        CardSpec(name="d0", kind="dir", path=Path("/" + "a" * 1024))
    assert CardSpec(name="d0", kind="dir", path=Path("/srv/é")).path == Path("/srv/é")


@given(by=hostile_text, engine=hostile_text)
@settings(deadline=None, max_examples=60)
def test_records_written_with_any_text_decode(by, engine) -> None:
    intent = records.IntentRecord("drain", by=by, at="2026-11-30T14:01:00+00:00",
                                  reason=engine)
    assert records.decode_intent(intent.encode(), "c0123456789a") == intent
    gw = records.GatewayRecord("gw-1", "h", "p", "ns-1", "dialog", "Labc", 3, engine, "0.1")
    assert records.decode_gateway(gw.encode(), "gw-1") == gw
    leader = records.LeaderRecord("h1", "2026-11-30T14:00:00+00:00", "http://[::1]:9700", "r1")
    assert records.decode_leader(leader.encode()) == leader
