"""The records beside the registry: one codec each, writers and readers agree."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from awide_cluster.contract import records

from .strategies import names, printable

text = st.text(printable, min_size=1, max_size=40)


@given(host=names, since=st.just("2026-11-30T14:00:00+00:00"),
       api=st.text(printable, max_size=20), run=st.text(printable, max_size=20))
def test_leader_round_trip(host, since, api, run):
    rec = records.LeaderRecord(host, since, api, run)
    assert records.decode_leader(rec.encode()) == rec
    assert rec.since_ts is not None


@given(gen=st.integers(0, 2**40), engine=st.none() | text, stale=st.booleans())
def test_gateway_round_trip_and_unknown_fields_ignored(gen, engine, stale):
    rec = records.GatewayRecord(id="gw-1", host="h", pod="p", namespace="ns-1", placement="dialog",
                                fingerprint="Labc", generation=gen, engine=engine,
                                version="0.1", stale=stale)
    assert records.decode_gateway(rec.encode()) == rec
    newer = json.loads(rec.encode())
    newer["added_in_a_later_version"] = {"x": 1}
    assert records.decode_gateway(json.dumps(newer)) == rec


def test_layout_round_trip_and_describe_names_placement():
    rec = records.LayoutRecord("ns-1", "stripe", created_by="gw-1")
    back = records.decode_layout(rec.encode())
    assert back == rec and back.same_layout(records.LayoutRecord("ns-1", "stripe"))
    assert not back.same_layout(records.LayoutRecord("ns-1", "dialog"))
    assert "placement=stripe" in back.describe()


@pytest.mark.parametrize("raw,field", [
    (b"not json", "not JSON"),
    (b"[1]", "not a JSON object"),
    (b'{"host": 3}', "host"),
])
def test_leader_refusals_name_the_fault(raw, field):
    with pytest.raises(records.RecordError, match=field):
        records.decode_leader(raw)
    assert records.LeaderRecord.decode(raw) is None


@pytest.mark.parametrize("doc,field", [
    ({"host": "h", "pod": "p", "namespace": "n", "placement": "dialog", "fingerprint": "L"},
     "generation"),
    ({"host": "h", "pod": "p", "namespace": "n", "placement": "dialog", "fingerprint": "L",
      "generation": -1}, "generation"),
    ({"pod": "p", "namespace": "n", "placement": "dialog", "fingerprint": "L",
      "generation": 1}, "host"),
])
def test_gateway_refusals_name_the_field(doc, field):
    with pytest.raises(records.RecordError, match=field):
        records.decode_gateway(json.dumps(doc), "gw-1")


def test_intent_actions_are_checked_both_ways():
    assert records.decode_intent(records.IntentRecord("drain", by="ops").encode()).action == "drain"
    with pytest.raises(records.RecordError, match="action"):
        records.decode_intent(b'{"action": "wipe"}', "c1")
    with pytest.raises(records.RecordError):
        records.IntentRecord("wipe").encode()


def test_intent_reason_is_bounded_clean_and_optional():
    rec = records.IntentRecord("forget", by="alice@ops1", at="2026-11-30T14:01:00+00:00",
                         reason="card replaced (RMA 4411)")
    assert records.decode_intent(rec.encode(), "c1") == rec
    # older writers have no reason: read as ""
    old = records.decode_intent(b'{"action": "drain", "by": "ops", "at": ""}', "c1")
    assert old.reason == "" and b"reason" not in records.IntentRecord("drain").encode()
    # the writer cleans what the reader would refuse, and bounds it
    dirty = records.IntentRecord("drain", reason="a\nb\x1b[2J" + "x" * 400)
    assert "\n" not in dirty.reason and "\x1b" not in dirty.reason and len(dirty.reason) == 256
    assert records.decode_intent(dirty.encode(), "c1") == dirty
    # the reader refuses a reason with a control character or over its bound, naming it
    with pytest.raises(records.IntentRecordError, match="field reason"):
        records.decode_intent(b'{"action": "drain", "reason": "a\\u001b[2Jb"}', "c1")
    with pytest.raises(records.IntentRecordError, match="field reason"):
        records.decode_intent(('{"action": "drain", "reason": "%s"}' % ("x" * 257)).encode(), "c1")


def test_gateway_state_file_fields_round_trip_only_when_served():
    base = records.GatewayRecord(id="gw-1", host="h", pod="p", namespace="ns-1",
                                 placement="dialog", fingerprint="L", generation=3, engine=None,
                                 version="0.1")
    assert b"state_" not in base.encode()
    served = dataclasses.replace(base, state_age=120, state_since="2026-12-03T14:00:00+00:00")
    assert records.decode_gateway(served.encode()) == served
    with pytest.raises(records.GatewayRecordError, match="state_until"):
        records.decode_gateway(served.encode().replace(b'"state_until":""',
                                                       b'"state_until":"a\\u001bb"'))
    with pytest.raises(records.GatewayRecordError, match="state_age"):
        records.decode_gateway(served.encode().replace(b'"state_age":120', b'"state_age":-1'))
