"""``read_many``'s reading of a transaction's answer (pure, no etcd: a store that is never
connected lends its key codec and refusal memory). Whatever the answer holds, it yields the
plain reads or a typed error (``BadResponse``, a StoreError), never another exception; and on
well-formed answers it takes from the transaction exactly the reads that are plain, each as a
read alone would give it, leaving the others to be read alone."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from awide_cluster.store import EtcdStore, StoreConfig
from awide_cluster.store.bounded import MAX_PAGE_KEYS
from awide_cluster.store.bounded_many import _many_answers
from awide_cluster.store.codec import b64
from awide_cluster.store.errors import BadResponse
from awide_cluster.store.types import FolderRead, KeyRead, KeyValue, ManyRead, PrefixRead

PREFIX = "/t/"
STORE = EtcdStore(StoreConfig(endpoints=("http://127.0.0.1:9",), prefix=PREFIX))

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=4),
    max_leaves=20)

READS: list[ManyRead] = [FolderRead("members/", 8, 64), KeyRead("registry", 64),
                         KeyRead("leader"), FolderRead("intents/", 2, 16)]


def kv_doc(key: str, value: bytes, mod: int = 5) -> dict[str, Any]:
    return {"key": b64((PREFIX + key).encode()), "create_revision": "3",
            "mod_revision": str(mod), "version": "1", "value": b64(value)}


def field_junk() -> st.SearchStrategy[Any]:
    """A kv document with any field replaced by anything."""
    return st.builds(lambda base, field, junk: {**base, field: junk},
                     st.sampled_from([kv_doc("members/h1", b"x"), kv_doc("registry", b"{}")]),
                     st.sampled_from(["key", "value", "mod_revision", "create_revision",
                                      "version", "lease"]),
                     json_values)


@settings(max_examples=300, deadline=None)
@given(answer=st.dictionaries(st.sampled_from(["header", "responses", "succeeded"]),
                              json_values, max_size=3))
def test_any_answer_gives_reads_or_a_typed_error(answer):
    try:
        got = _many_answers(STORE, tuple(READS), list(range(len(READS))), answer)
    except BadResponse:
        return
    assert set(got) <= set(range(len(READS)))


@settings(max_examples=300, deadline=None)
@given(items=st.lists(st.one_of(json_values, st.fixed_dictionaries(
    {"response_range": st.fixed_dictionaries({"kvs": st.lists(field_junk(), max_size=3)})})),
    min_size=len(READS), max_size=len(READS)))
def test_hostile_responses_give_reads_or_a_typed_error(items):
    answer = {"header": {"revision": "9"}, "responses": items}
    try:
        got = _many_answers(STORE, tuple(READS), list(range(len(READS))), answer)
    except BadResponse:
        return
    for i, g in got.items():
        assert isinstance(g, PrefixRead) if isinstance(READS[i], FolderRead) else \
            g is None or isinstance(g, KeyValue)


sizes = st.lists(st.integers(min_value=0, max_value=100), max_size=MAX_PAGE_KEYS + 2)


@settings(max_examples=200, deadline=None)
@given(members=sizes, intents=sizes, registry=st.none() | st.integers(0, 100),
       leader=st.none() | st.integers(0, 5000))
def test_plain_reads_are_taken_the_others_left_to_read_alone(members, intents, registry,
                                                             leader):
    def folder(name: str, sizes: list[int], page: int) -> dict[str, Any]:
        kvs = [kv_doc(f"{name}k{i:03d}", b"v" * n) for i, n in enumerate(sizes)][:page]
        return {"response_range": {"kvs": kvs, "count": str(len(sizes)),
                                   "more": len(sizes) > page}}

    def one(key: str, size: int | None) -> dict[str, Any]:
        return {"response_range": {"kvs": [] if size is None else [kv_doc(key, b"r" * size)]}}

    answer = {"header": {"revision": "42"}, "responses": [
        folder("members/", members, 9), one("registry", registry), one("leader", leader),
        folder("intents/", intents, 3)]}
    got = _many_answers(STORE, tuple(READS), list(range(len(READS))), answer)
    # members: plain when no value is over 64 and the page of 9 is not full
    if all(n <= 64 for n in members[:9]) and len(members) < 9:
        m = got[0]
        assert isinstance(m, PrefixRead) and m.revision == 42 and not m.more
        assert [kv.value for kv in m.kvs] == [b"v" * n for n in members]
        assert (m.count, m.refused, m.max_keys) == (len(members), {}, 8)
    else:
        assert 0 not in got
    if registry is not None and registry > 64:
        assert 1 not in got
    else:
        r = got[1]
        assert (r.value if isinstance(r, KeyValue) else r) == \
            (None if registry is None else b"r" * registry)
    g = got[2]                          # no bound: any size is taken
    assert (g.value if isinstance(g, KeyValue) else g) == (None if leader is None
                                                            else b"r" * leader)
    if all(n <= 16 for n in intents[:3]) and len(intents) < 3:
        assert isinstance(got[3], PrefixRead) and got[3].count == len(intents)
    else:
        assert 3 not in got


def test_an_answer_naming_other_keys_is_refused():
    answer = {"header": {"revision": "1"}, "responses": [
        {"response_range": {"kvs": [kv_doc("gateways/g1", b"x")]}},
        {"response_range": {"kvs": [kv_doc("leader", b"x")]}},
        {"response_range": {}}, {"response_range": {}}]}
    for batch in ([0, 1, 2, 3],):
        try:
            _many_answers(STORE, tuple(READS), batch, answer)
        except BadResponse as e:
            assert "other keys" in str(e)
        else:
            raise AssertionError("an answer naming keys outside the reads was taken")
    short = {"header": {"revision": "1"}, "responses": [{"response_range": {}}]}
    try:
        _many_answers(STORE, tuple(READS), [0, 1, 2, 3], short)
    except BadResponse as e:
        assert "4 ranges asked" in str(e)
    else:
        raise AssertionError("an answer with too few ranges was taken")
