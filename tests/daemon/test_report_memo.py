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
