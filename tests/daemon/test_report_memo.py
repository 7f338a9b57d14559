"""The leader decodes each report once (contract/report.py ``ReportMemo``): the members/
watch's event and the cycle's read of the same value share one decoding; anything else is
decoded as before, and a bad value raises every time."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from awide_cluster.contract import keys
from awide_cluster.contract.report import ReportError, ReportMemo, decode, encode
from awide_cluster.daemon.arrivals import arrival_news
from awide_cluster.daemon.leader_read import sort_reports
from awide_cluster.store.types import KeyValue, PrefixRead

from .builders import card, report

HOSTS = frozenset({"h1", "h2"})


def test_the_same_value_is_decoded_once_a_new_one_afresh():
    memo = ReportMemo(max_keys=2)
    k1, k2, k3 = (keys.MEMBERS + h for h in ("h1", "h2", "h3"))
    v1 = encode(report("h1", 1, card("c0", "SN-1")))
    first = memo.decode(k1, v1)
    assert first == decode(v1) and memo.hits == 0
    assert memo.decode(k1, bytes(v1)) is first and memo.hits == 1     # equal bytes: kept
    v1b = encode(report("h1", 2, card("c0", "SN-1")))
    assert memo.decode(k1, v1b).seq == 2 and memo.hits == 1           # changed: decoded
    assert memo.decode(k1, v1).seq == 1 and memo.hits == 1            # one value per key
    memo.decode(k2, encode(report("h2", 1)))
    memo.decode(k3, encode(report("h3", 1)))                          # over max_keys
    memo.decode(k3, encode(report("h3", 1)))
    assert memo.hits == 1                                             # not kept
    memo.decode(k2, encode(report("h2", 1)))
    assert memo.hits == 2


def test_a_bad_value_raises_every_time_and_is_not_kept():
    memo = ReportMemo(max_keys=4)
    k = keys.MEMBERS + "h1"
    good = encode(report("h1", 1))
    memo.decode(k, good)
    for _ in range(2):
        with pytest.raises(ReportError):
            memo.decode(k, b"{not json")
    assert memo.decode(k, good) == decode(good) and memo.hits == 1


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["h1", "h2", "h9"]), st.integers(1, 5),
       st.one_of(st.none(), st.binary(max_size=200)))
def test_with_the_memo_the_leader_judges_as_without(host, seq, junk):
    memo = ReportMemo(max_keys=8)
    key = keys.MEMBERS + host
    value = junk if junk is not None else encode(report(host, seq, card("c0", "SN-1")))
    for _ in range(2):          # the watch's event, then the cycle's read of the same value
        assert arrival_news(key, value, None, {}, {}, HOSTS, memo.decode) == \
            arrival_news(key, value, None, {}, {}, HOSTS)
        read = PrefixRead(prefix=keys.MEMBERS, revision=7,
                          kvs=(KeyValue(key=key, value=value, create_revision=1,
                                        mod_revision=7, version=1, lease=0),),
                          refused={}, count=1, more=False, max_keys=8)
        assert sort_reports(read, HOSTS, memo.decode) == sort_reports(read, HOSTS)


# ---------------------------------------------------------------- the daemon's own report

_hostile = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["line1\nline2", "\x1b[31mred\x1b[0m", "é" * 3000, "\U0001f600" * 2000,
                     "x" * 100_000, "\ud800 lone", "\u2028\u202e", '"seq":1,', "\\u0000"]))
_elapsed = st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                     st.floats(min_value=0, max_value=30))


@settings(deadline=None, max_examples=60)
@given(text=_hostile, probe_text=_hostile, healthy=st.booleans(), n=st.integers(0, 3),
       seq=st.integers(0, 2**63), resets=st.integers(0, 2**40), elapsed=_elapsed,
       notes=st.tuples(_hostile, _hostile, _hostile, _hostile))
def test_the_report_a_daemon_builds_is_what_its_bytes_decode_to(text, probe_text, healthy, n,
                                                                seq, resets, elapsed, notes):
    """What ``ReportMemo.remember`` relies on: the turn's report and its bytes
    (``build_encoded``) are such that decoding the bytes gives that very report, whatever
    its probes, notes and texts say."""
    from awide_cluster.cards.model import (
        PROBE_ORDER,
        CardObservation,
        LocalCard,
        ProbeResult,
        summarize,
    )
    from awide_cluster.cards.spec import CardSpec
    from awide_cluster.daemon.reporter import build_encoded

    specs = tuple(CardSpec(name=f"card{i}", kind="dir", path=f"/srv/cards/card{i}")
                  for i in range(n))
    obs = []
    for s in specs:
        local = LocalCard(name=s.name, kind="dir", serial="SN1", model="M",
                          identity="label:" + "0" * 32, device=str(s.path),
                          controller_state=None, target=None)
        got = summarize(s.name, local, [ProbeResult(p, healthy, probe_text, elapsed)
                                        for p in PROBE_ORDER])
        obs.append(CardObservation(got.card, s.name, got.probes, healthy, text))
    history_note, probe_note, leader_note, etcd_note = notes
    r, raw = build_encoded(host="h1", role="storage", version=text, api=text, run="r1",
                           seq=seq, dev_cluster=healthy, specs=specs, observations=obs,
                           history_resets=resets, history_note=history_note,
                           probe_note=probe_note, leader_note=leader_note, etcd_note=etcd_note)
    assert raw == encode(r)
    memo = ReportMemo(max_keys=2)
    memo.remember("members/h1", raw, r)
    if seq >= 2**53:                    # readers refuse it: not kept, decoded and refused
        with pytest.raises(ReportError):
            decode(raw, key="members/h1")
        with pytest.raises(ReportError):
            memo.decode("members/h1", raw)
        return
    assert decode(raw, key="members/h1") == r
    assert memo.decode("members/h1", bytes(raw)) is r and memo.hits == 1
    other = encode(report("h1", 1))
    assert memo.decode("members/h1", other) == decode(other)      # another value: decoded
