"""Pure parts of the store: config validation, key ranges, answer parsing, error mapping."""

from __future__ import annotations

import asyncio

import pytest

from awide_cluster.store import (
    Alarm,
    BadResponse,
    Denied,
    InvalidRequest,
    LeaseExpired,
    NoSpace,
    StoreConfig,
    Timeout,
    TlsConfig,
    Unavailable,
)
from awide_cluster.store.codec import (
    AuthNotEnabled,
    Codec,
    TokenRejected,
    alarms,
    error_from_body,
    prefix_end,
    watch_frame,
)
from awide_cluster.store.errors import WRITE_REFUSAL_REASONS, refusal_reason
from awide_cluster.store.hedge import SUSPECT_FOR, EndpointRing, hedged


def test_config_validation():
    cfg = StoreConfig(endpoints=("http://127.0.0.1:2379/", "https://[::1]:2379"), prefix="/a/")
    assert cfg.endpoints == ("http://127.0.0.1:2379", "https://[::1]:2379")
    for bad in [dict(endpoints=()), dict(endpoints="http://x:1"), dict(endpoints=("x:1",)),
                dict(endpoints=("http://a:1", "http://a:1")), dict(endpoints=("http://a:1/v3",)),
                dict(endpoints=("http://a:1",), call_timeout=0),
                dict(endpoints=("http://a:1",), hedge_after=-1),
                dict(endpoints=("http://a:1",), username="u")]:
        with pytest.raises(ValueError):
            StoreConfig(**{"prefix": "/a/", **bad})
    with pytest.raises(ValueError):
        TlsConfig("ca.pem", cert_file="c.pem")
    # credentials in a URL are refused without echoing them; a password is not in the repr
    with pytest.raises(ValueError) as e:
        StoreConfig(endpoints=("https://root:s3cr3t-pw@a:1",), prefix="/a/")
    assert "s3cr3t-pw" not in str(e.value) and "credentials" in str(e.value)
    assert "s3cr3t-pw" not in repr(StoreConfig(endpoints=("https://a:1",), prefix="/a/",
                                               username="root", password="s3cr3t-pw"))


def test_prefix_end():
    assert prefix_end(b"/a/") == b"/a0"
    assert prefix_end(b"a\xff") == b"b"
    assert prefix_end(b"") == b"\x00" and prefix_end(b"\xff\xff") == b"\x00"


def test_keys_outside_the_prefix_and_junk_are_bad_responses():
    codec = Codec("/p/")
    with pytest.raises(BadResponse):
        codec.rel("L3EveA==")  # "/q/x"
    with pytest.raises(BadResponse):
        codec.kv({"key": "not base64!", "mod_revision": "1"})
    with pytest.raises(BadResponse):
        codec.range_result({"header": {"revision": "x"}})
    with pytest.raises(BadResponse):
        watch_frame(b"<html>")
    assert codec.range_result({"header": {"revision": "7"}, "kvs": [
        {"key": "L3AvYQ==", "value": "MQ==", "mod_revision": "5", "lease": "9"}], "count": "1"}
    ).kvs[0].key == "a"


@pytest.mark.parametrize("body,write,kind,maybe", [
    ({"error": "etcdserver: invalid auth token", "code": 16}, False, TokenRejected, False),
    ({"error": "etcdserver: permission denied", "code": 7}, True, Denied, False),
    ({"error": "etcdserver: authentication failed, invalid user ID or password", "code": 3},
     False, Denied, False),
    ({"error": "etcdserver: requested lease not found", "code": 5}, True, LeaseExpired, False),
    ({"error": "etcdserver: mvcc: required revision has been compacted", "code": 11}, False,
     InvalidRequest, False),
    ({"error": "etcdserver: no leader", "code": 14}, True, Unavailable, False),
    ({"error": "etcdserver: request timed out", "code": 14}, True, Unavailable, True),
    ({"error": "context deadline exceeded", "code": 4}, True, Timeout, True),
    ({"error": {"grpc_code": 14, "message": "etcdserver: leader changed"}}, True, Unavailable,
     True),
    ({"error": "etcdserver: mvcc: database space exceeded", "code": 8}, True, NoSpace, False),
    ({"error": "etcdserver: too many requests", "code": 8}, True, Unavailable, False),
    ({"error": "etcdserver: authentication is not enabled", "code": 9}, False, AuthNotEnabled,
     False),
    ({"error": "etcdserver: user name not found", "code": 9}, False, Denied, False),
    # etcd's strings are read only under the code etcd gives them: elsewhere the code decides
    ({"error": "etcdserver: no leader", "code": 2}, True, Unavailable, True),
    ({"error": "permission denied by a proxy", "code": 3}, True, InvalidRequest, False),
    ({"error": "etcdserver: server stopped", "code": 14}, True, Unavailable, True),
])
def test_grpc_errors_map_to_types(body, write, kind, maybe):
    err = error_from_body(body, 500, write=write)
    assert type(err) is kind
    assert err.maybe_applied is maybe


def test_endpoint_ring_prefers_and_rotates():
    ring = EndpointRing(["a", "b", "c"])
    assert ring.order() == ["a", "b", "c"]
    ring.demote("a")
    assert ring.order() == ["b", "c", "a"]
    ring.demote("a")  # not preferred: no change
    assert ring.preferred == "b"
    ring.prefer("c")
    assert ring.order() == ["c", "a", "b"] and ring.order(after="a") == ["b", "c", "a"]


def test_a_watch_leaving_a_member_opens_on_the_unsuspected_ones_first():
    """A member that failed (demoted), was outrun by a hedge or went silent on a watch is
    suspect for SUSPECT_FOR seconds: a watch leaving another member tries it last (it would
    wait out the whole call bound on a frozen one); answering first clears it."""
    now = [100.0]
    ring = EndpointRing(["m0", "m1", "m2"], clock=lambda: now[0])
    assert ring.open_order(after="m2") == ["m0", "m1", "m2"]
    assert ring.open_order(after=None) == ["m0", "m1", "m2"]
    ring.suspect("m0")                                  # outrun by a hedge: frozen
    assert ring.open_order(after="m2") == ["m1", "m0", "m2"]
    assert ring.open_order(after="m1") == ["m2", "m0", "m1"]
    assert ring.open_order(after=None) == ["m1", "m2", "m0"]
    ring.demote("m1")
    assert ring.suspects() == {"m0", "m1"}
    assert ring.open_order(after="m2") == ["m0", "m1", "m2"]     # all suspect: ring order
    ring.prefer("m0")
    assert ring.suspects() == {"m1"} and ring.open_order(after="m2") == ["m0", "m1", "m2"]
    now[0] += SUSPECT_FOR
    assert ring.suspects() == set() and ring.open_order(after="m0") == ["m1", "m2", "m0"]


async def test_a_hedge_that_wins_makes_the_member_asked_first_suspect():
    ring = EndpointRing(["m0", "m1", "m2"])
    frozen = asyncio.Event()

    async def attempt(ep: str) -> str:
        if ep == "m0":
            await frozen.wait()                         # never answers
        return ep
    loop = asyncio.get_running_loop()
    ep, got = await hedged(attempt, ring, 0.01, loop.time() + 5.0, "read")
    assert ep == got == "m1" and ring.preferred == "m1"
    assert ring.suspects() == {"m0"}
    ep, _ = await hedged(attempt, ring, 0.01, loop.time() + 5.0, "read")
    assert ep == "m1" and ring.suspects() == {"m0"}     # asked first and answered: no one outrun


def test_alarm_lists_and_refusal_reasons():
    assert alarms({"header": {}}) == ()
    assert alarms({"alarms": [{"memberID": "12", "alarm": "NOSPACE"}, {"memberID": "7"}]}) == (
        Alarm(12, "NOSPACE"), Alarm(7, "NONE"))
    for junk in ({"alarms": "x"}, {"alarms": [{"memberID": "x"}]},
                 {"alarms": [{"alarm": "A" * 33}]}, {"alarms": [{"alarm": 3}]}):
        with pytest.raises(BadResponse):
            alarms(junk)
    assert len(alarms({"alarms": [{"alarm": "NOSPACE"}] * 100})) == 64
    got = [refusal_reason(e) for e in (NoSpace("x"), Denied("x"), Timeout("x"),
                                       Unavailable("x"), InvalidRequest("x"), ValueError())]
    assert got == ["nospace", "auth", "timeout", "unavailable", "other", "other"]
    assert set(got) <= set(WRITE_REFUSAL_REASONS)
