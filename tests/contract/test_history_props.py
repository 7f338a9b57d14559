"""The history ring (contract/history_ring.py) and what status and the history command make
of it (operator/history_query.py): bounded on write, untrusted on read, a live tail that misses
nothing and repeats nothing."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from awide_cluster.contract import history_ring as h
from awide_cluster.contract.history_ring import Entry, History, HistoryError
from awide_cluster.operator.history_query import BadSince, Tail, parse_since, select
from tests.contract.strategies import names, printable

texts = st.text(printable, max_size=120)
any_texts = st.text(max_size=80)          # control characters included: the writer cleans
times = st.sampled_from(["", "2026-11-30T14:00:00+00:00", "2026-12-01T00:00:00+00:00",
                         "not a time"])


@st.composite
def entries(draw) -> Entry:
    return Entry(generation=draw(st.integers(0, 10**9)), kind=draw(st.sampled_from(h.KINDS)),
                 reason=draw(st.one_of(texts, any_texts)), at=draw(times),
                 leader=draw(st.one_of(st.just(""), names)),
                 card=draw(st.one_of(st.just(""), names)),
                 name=draw(st.one_of(st.just(""), names)),
                 host=draw(st.one_of(st.just(""), names)),
                 by=draw(any_texts), why=draw(st.one_of(texts, any_texts)))


batches = st.lists(st.lists(entries(), max_size=5), max_size=8)


@settings(max_examples=60, deadline=None)
@given(batches=batches, max_entries=st.integers(1, 20), max_bytes=st.integers(300, 6000))
def test_the_ring_stays_within_its_bounds_keeps_the_newest_and_reads_back(batches, max_entries,
                                                                          max_bytes):
    ring = h.EMPTY
    added: list[Entry] = []
    for batch in batches:
        ring = h.append(ring, batch, ring="r1", max_entries=max_entries, max_bytes=max_bytes)
        added += batch
        assert len(ring.entries) <= max_entries
        assert len(h.encode(ring)) <= max_bytes
        seqs = [e.seq for e in ring.entries]
        assert seqs == sorted(set(seqs))
        assert h.decode(h.encode(ring)) == ring
    # what is kept is the newest run of what was added, in order
    if ring.entries:
        kept = [(e.kind, e.generation) for e in ring.entries]
        assert kept == [(e.kind, e.generation) for e in added[len(added) - len(kept):]]
        assert ring.entries[-1].seq == len(added)


@settings(max_examples=60, deadline=None)
@given(batches=batches, max_entries=st.integers(0, 20), max_bytes=st.integers(100, 6000))
def test_the_ring_keeps_as_many_of_the_newest_as_its_bounds_allow(batches, max_entries,
                                                                  max_bytes):
    """Not only within the bounds: one more of the entries offered (the newest one dropped)
    would break one of them."""
    ring = h.EMPTY
    for batch in batches:
        offered = (*ring.entries, *batch)
        ring = h.append(ring, batch, ring="r1", max_entries=max_entries, max_bytes=max_bytes)
        dropped = len(offered) - len(ring.entries)
        if dropped and len(ring.entries) < max_entries:
            one_more = (offered[dropped - 1], *ring.entries)
            numbered = tuple(e if i else replace(e, seq=ring.entries[0].seq - 1 if ring.entries
                                                  else ring.seq)
                             for i, e in enumerate(one_more))
            bigger = History(ring=ring.ring, entries=numbered, seq=ring.seq)
            assert len(h.encode(bigger)) > max_bytes


def test_500_realistic_entries_fit_the_byte_bound() -> None:
    one = Entry(generation=123456, kind="out", card="c0123456789a", name="card0",
                host="storage-host-01", at="2026-11-30T14:00:00+00:00", leader="storage-host-02",
                reason="3 bad polls in a row, last: unit awide-store@card0.service is failed")
    ring = h.append(h.EMPTY, [one] * 600, ring="r1")
    assert len(ring.entries) == 500
    assert len(h.encode(ring)) <= h.bounds.HISTORY_MAX_BYTES


@settings(max_examples=300, deadline=None)
@given(raw=st.one_of(
    st.binary(max_size=300),
    st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=10)),
                 lambda inner: st.one_of(st.lists(inner, max_size=4),
                                         st.dictionaries(st.text(max_size=8), inner,
                                                         max_size=4)),
                 max_leaves=20).map(lambda v: json.dumps(v).encode()),
    st.builds(lambda ring, es: json.dumps({"schema": 1, "ring": ring, "entries": es}).encode(),
              st.text(max_size=12),
              st.lists(st.dictionaries(st.sampled_from(
                  ["seq", "generation", "kind", "reason", "card", "at", "by"]),
                  st.one_of(st.integers(-3, 3), st.text(max_size=6), st.none()),
                  max_size=7), max_size=3))))
def test_any_value_decodes_or_is_refused_naming_the_key(raw: bytes) -> None:
    try:
        ring = h.decode(raw)
    except HistoryError as e:
        assert e.problem == "history_corrupt" or e.problem == "value_too_large"
        assert "key history" in str(e)
    else:
        assert isinstance(ring, History)


def test_a_huge_or_forged_ring_is_refused() -> None:
    with pytest.raises(HistoryError, match="larger than"):
        h.decode(b"{" + b" " * (h.bounds.HISTORY_MAX_BYTES + 1) + b"}")
    good = h.append(h.EMPTY, [Entry(generation=1, kind="in", reason="x")] * 2, ring="r1")
    doc = h.to_dict(good)
    doc["entries"].reverse()                      # seq must grow
    with pytest.raises(HistoryError, match=r"entries\[1\].seq"):
        h.decode(json.dumps(doc))
    doc = h.to_dict(good)
    doc["entries"][0]["reason"] = "forged\nline"
    with pytest.raises(HistoryError, match=r"entries\[0\].reason"):
        h.decode(json.dumps(doc))
    doc = h.to_dict(good)
    doc["entries"] = doc["entries"] * 300         # 600 > 500 entries
    with pytest.raises(HistoryError, match="entries"):
        h.decode(json.dumps(doc))


@settings(max_examples=60, deadline=None)
@given(batches=batches, reads=st.lists(st.booleans(), max_size=8))
def test_the_live_tail_gives_every_new_entry_once(batches, reads) -> None:
    ring = h.EMPTY
    tail = Tail()
    tail, first = tail.step(ring)
    assert first == ()
    seen: list[int] = []
    for i, batch in enumerate(batches):
        ring = h.append(ring, batch, ring="r1")
        if i < len(reads) and reads[i]:
            tail, new = tail.step(ring)
            seen += [e.seq for e in new]
    tail, new = tail.step(ring)
    seen += [e.seq for e in new]
    assert seen == [e.seq for e in ring.entries]
    # a fresh ring (another id) is new from its first entry
    fresh = h.append(h.EMPTY, [Entry(generation=9, kind="leader", reason="h2 leads")],
                     ring="r2")
    tail, new = tail.step(fresh)
    assert [e.seq for e in new] == [1]
    assert tail.step(None) == (tail, ())


def test_select_by_card_and_time() -> None:
    es = [Entry(generation=1, kind="joined", reason="r", card="c1", name="card0", host="h1",
                at="2026-11-30T14:00:00+00:00"),
          Entry(generation=2, kind="out", reason="r", card="c2", name="card0", host="h2",
                at="2026-11-30T15:00:00+00:00"),
          Entry(generation=3, kind="leader", reason="h2 leads", host="h2", at="bad"),
          Entry(generation=4, kind="in", reason="r", card="c1", name="card0", host="h1",
                at="2026-11-30T16:00:00")]              # no zone: UTC
    ring = h.append(h.EMPTY, es, ring="r1")
    gens = lambda got: [e.generation for e in got]      # noqa: E731
    assert gens(select(ring)) == [1, 2, 3, 4]
    assert gens(select(ring, card="c1")) == [1, 4]
    assert gens(select(ring, card="h2/card0")) == [2]
    assert gens(select(ring, card="card0")) == [1, 2, 4]
    assert gens(select(ring, card="h2")) == []          # a host alone is not a card
    at = datetime(2026, 11, 30, 15, 0, tzinfo=UTC)
    assert gens(select(ring, since=at)) == [2, 4]
    assert gens(select(ring, card="c1", since=at)) == [4]


def test_since_is_a_duration_or_an_iso_time() -> None:
    now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    assert parse_since("90", now) == now - timedelta(seconds=90)
    assert parse_since("10m", now) == now - timedelta(minutes=10)
    assert parse_since("2h", now) == now - timedelta(hours=2)
    assert parse_since("1.5d", now) == now - timedelta(hours=36)
    assert parse_since("1w", now) == now - timedelta(days=7)
    assert parse_since("2026-11-30T14:00:00+01:00", now) == \
        datetime(2026, 11, 30, 13, 0, tzinfo=UTC)
    assert parse_since("2026-11-30", now) == datetime(2026, 11, 30, tzinfo=UTC)
    for bad in ("yesterday", "10x", "-5m", "", "99999999999d"):
        with pytest.raises(BadSince, match="--since"):
            parse_since(bad, now)


def test_an_entry_is_one_readable_line_and_never_forges_one() -> None:
    e = Entry(generation=7, kind="drained", reason="drained (was in)", card="c1",
              name="card1", host="h1", at="2026-11-30T14:00:00+00:00", by="ops@laptop",
              why="replace\nthe fan")
    line = e.line()
    assert "\n" not in line
    assert line.startswith("gen 7 ")
    assert "drained" in line and "card c1 (h1/card1)" in line
    assert "[by ops@laptop: replace the fan]" in line
