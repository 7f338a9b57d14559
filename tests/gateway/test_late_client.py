"""A gateway whose own event loop reads etcd's answers ``lag`` seconds late (a start storm on
a busy host) sees every call with a shorter bound time out although etcd answered (and
applied) it. Counted in requests (no clock, no sleep): its registration never fails for good
(its calls' bound doubles after each tick whose bound passed, up to a cap, so the record lands
within a few ticks on the one lease), its registry polls likewise, and each bound comes back
to the call timeout after an answer.

``LateClient`` plays etcd (leases and keys applied as etcd would) and the client's lateness:
a call whose bound is below ``lag`` is applied, then raises ``Timeout(maybe_applied=True)``.
"""

from __future__ import annotations

import math
import random
from typing import Any, cast

from hypothesis import given
from hypothesis import strategies as st

from awide_cluster.contract import registry as regdoc
from awide_cluster.contract import slots as slotfn
from awide_cluster.contract.records import GatewayRecord
from awide_cluster.store.errors import LeaseExists, LeaseExpired, Timeout, Unavailable
from awide_cluster.store.port import Store, StoreReader
from awide_cluster.store.types import KeyValue, Lease, RangeResult
from awide_gateway_cluster.backoff import LATE_LOOP, STRETCH_MAX, Stretch, ran_late, stretched
from awide_gateway_cluster.follower import Follower
from awide_gateway_cluster.registration import Registration

CALL = 0.5
TTL = 30
MOST = min(STRETCH_MAX * CALL, TTL / 4)       # the longest bound of a registration call


class LateClient:
    """etcd's leases and keys, reached by a client that reads each answer ``lag`` seconds
    after it came: every request is applied; its caller sees the answer only when its bound
    is at least ``lag``. Every request and its bound is counted."""

    def __init__(self, lag: float, *, late: float | None = None) -> None:
        self.lag = lag
        # how late the client's loop read the deadline (``Timeout.late``): the lag, unless
        # the client kept time and etcd did not answer (0)
        self.late = lag if late is None else late
        self.leases: set[int] = set()
        self.keys: dict[str, int] = {}          # key -> lease
        self.sent: list[tuple[str, float]] = []  # (kind, bound)

    def _answer(self, kind: str, timeout: float | None) -> None:
        assert timeout is not None, "every registration call is bounded"
        self.sent.append((kind, timeout))
        if timeout < self.lag:
            raise Timeout(f"{kind}: no answer within {timeout} s", maybe_applied=True,
                          late=self.late)

    async def grant(self, ttl: int, *, lease_id: int = 0, timeout: float | None = None) -> Lease:
        if lease_id in self.leases:
            self.sent.append(("grant", timeout or 0.0))
            raise LeaseExists(f"lease {lease_id:x} already exists")
        self.leases.add(lease_id)
        self._answer("grant", timeout)
        return Lease(lease_id, ttl)

    async def keepalive(self, lease_id: int, *, timeout: float | None = None) -> int:
        if lease_id not in self.leases:
            raise LeaseExpired(f"lease {lease_id:x} has expired")
        self._answer("keepalive", timeout)
        return TTL

    async def put(self, key: str, value: bytes | str, *, lease: int = 0,
                  timeout: float | None = None) -> int:
        assert lease in self.leases
        self.keys[key] = lease
        self._answer("put", timeout)
        return 1

    async def revoke(self, lease_id: int, *, timeout: float | None = None) -> None:
        self.leases.discard(lease_id)
        self.keys = {k: v for k, v in self.keys.items() if v != lease_id}
        self._answer("revoke", timeout)

    def count(self, kind: str) -> int:
        return sum(1 for k, _ in self.sent if k == kind)


RECORD = GatewayRecord(id="gw-1", host="h", pod="p", namespace="ns", placement="dialog",
                       fingerprint="f", generation=1, engine=None, version="t")


def registration(client: LateClient) -> Registration:
    return Registration(cast(Store, client), "gw-1", ttl=TTL, call_timeout=CALL, lease_id=7,
                        rng=random.Random(0))


async def ticks_until_written(reg: Registration, most: int, *, every: float = 1.0) -> int:
    """Tick (one tick every ``every`` seconds of the tick clock) until one succeeds; the
    ticks it took (``most`` + 1 when none did)."""
    for n in range(1, most + 1):
        if await reg.tick(RECORD, 100.0 + n * every):
            return n
    return most + 1


async def test_a_client_two_seconds_late_is_registered_on_its_third_tick() -> None:
    client = LateClient(lag=2.0)
    reg = registration(client)
    assert await ticks_until_written(reg, 10) == 3
    # the grant applied at once (answer lost), found again by the second tick ("already
    # exists": kept, no keepalive: granted under a second ago); the put landed with a 2 s bound
    assert client.sent == [("grant", 0.5), ("grant", 1.0), ("put", 1.0), ("put", 2.0)]
    assert client.leases == {7} and client.keys == {reg.key: 7}
    assert reg.lease == 7 and reg.failures == 2
    assert reg.bound() == CALL              # an answer brings the bound back


async def test_a_fixed_bound_never_lands_and_a_stretched_one_does() -> None:
    # the old behaviour, for contrast: the bound pinned at the call timeout
    pinned = LateClient(lag=2.0)
    reg = registration(pinned)
    reg.stretch = Stretch(CALL, CALL)
    assert await ticks_until_written(reg, 50) == 51
    assert len(pinned.leases) == 1          # one lease all the same (the same ID each time)
    assert reg.key in pinned.keys           # etcd applied a put; the gateway never knew


async def test_a_lease_granted_long_before_its_answer_came_is_kept_alive_at_once() -> None:
    client = LateClient(lag=0.8)
    reg = registration(client)
    assert not await reg.tick(RECORD, 100.0)                    # granted, answer lost
    assert await reg.tick(RECORD, 100.0 + TTL / 3)              # ttl/3 later: found again
    assert [k for k, _ in client.sent] == ["grant", "grant", "keepalive", "put"]


@given(st.floats(min_value=0.0, max_value=MOST))
async def test_any_lag_within_the_cap_is_registered_on_one_lease(lag: float) -> None:
    client = LateClient(lag=lag)
    reg = registration(client)
    # each tick whose bound passed doubles it: the bound reaches the lag after
    # ceil(log2(lag / CALL)) of them; the grant and the put may each cost one more
    late_ticks = max(0, math.ceil(math.log2(max(lag, CALL) / CALL)))
    assert await ticks_until_written(reg, 50) <= late_ticks + 3
    assert client.leases == {7} and client.keys == {reg.key: 7}
    assert max(b for _, b in client.sent) <= MOST
    assert client.count("grant") <= late_ticks + 2


@given(st.floats(min_value=MOST * 1.01, max_value=1000.0))
async def test_the_bound_stays_a_bound_whatever_the_lag(lag: float) -> None:
    client = LateClient(lag=lag)
    reg = registration(client)
    assert await ticks_until_written(reg, 30) == 31
    assert max(b for _, b in client.sent) == MOST      # capped, reached
    assert reg.tick_bound() == 3.5 * MOST
    assert client.count("grant") == 2       # "already exists" from the second on: no new lease
    assert client.leases == {7}


@given(st.lists(st.booleans(), max_size=60), st.floats(min_value=0.01, max_value=5.0),
       st.floats(min_value=1.0, max_value=64.0))
def test_a_stretch_doubles_per_late_try_up_to_its_most_and_resets_on_an_answer(
        outcomes: list[bool], call: float, most_calls: float) -> None:
    s = Stretch(call, most_calls * call)
    late = 0
    for timed_out in outcomes:
        s.note(timed_out)
        late = late + 1 if timed_out else 0
        assert call <= s.bound() <= most_calls * call + 1e-9
        assert s.bound() == stretched(late, call, most_calls * call)
        if not timed_out:
            assert s.bound() == call


def test_only_a_deadline_read_late_is_the_clients_lateness() -> None:
    assert ran_late(Timeout("t", late=LATE_LOOP)) and ran_late(Timeout("t", late=3.0))
    assert not ran_late(Timeout("t", late=LATE_LOOP / 2)) and not ran_late(Timeout("t"))
    assert ran_late(TimeoutError())         # the caller's own fence: the store's bound ran late
    assert not ran_late(Unavailable("no member")) and not ran_late(None)
    assert not ran_late(RangeResult(kvs=(), count=0, revision=1))


async def test_polls_a_member_does_not_answer_stay_at_the_call_timeout() -> None:
    # etcd not answering (a frozen member, no quorum) while this client keeps time: every
    # poll keeps the call timeout, so the one after etcd is back leaves a frozen member as
    # soon as the first did
    store = LatePolls(lag=100.0, registry=registry_kv(), late=0.0)
    f = Follower(cast(StoreReader, store), cluster="c1", call_timeout=CALL,
                 clock=lambda: 0.0)
    for _ in range(6):
        assert (await f.poll()).outcome == "failed"
    assert store.bounds == [CALL] * 6
    store.lag = 0.0
    assert (await f.poll()).outcome == "applied" and store.bounds[-1] == CALL


async def test_registration_ticks_etcd_does_not_answer_stay_at_the_call_timeout() -> None:
    client = LateClient(lag=100.0, late=0.0)
    reg = registration(client)
    for n in range(1, 6):
        assert not await reg.tick(RECORD, 100.0 + n)
    assert {b for _, b in client.sent} == {CALL} and reg.failures == 5


def test_a_short_ttl_caps_the_bound_at_a_quarter_of_it() -> None:
    reg = Registration(cast(Store, LateClient(0.0)), "gw-2", ttl=4, call_timeout=CALL)
    for _ in range(10):
        reg.timed_out()
    assert reg.bound() == 1.0 and reg.failures == 10


class LatePolls:
    """The registry read by a client that reads each answer ``lag`` seconds after it came:
    a poll whose bound is below ``lag`` times out. Every poll's bound is counted."""

    timeline_epoch = 0

    def __init__(self, lag: float, registry: KeyValue, *, late: float | None = None) -> None:
        self.lag, self.registry = lag, registry
        # how late the client's loop read the deadline (``Timeout.late``): the lag, unless
        # the client kept time and the member did not answer (0)
        self.late = lag if late is None else late
        self.bounds: list[float] = []

    async def range(self, key: str, **kw: Any) -> RangeResult:
        timeout = kw["timeout"]
        self.bounds.append(timeout)
        if timeout < self.lag:
            raise Timeout(f"range {key!r}: no answer within {timeout} s", late=self.late)
        return RangeResult(kvs=(self.registry,), count=1, revision=self.registry.mod_revision)


def registry_kv() -> KeyValue:
    reg = regdoc.Registry(cluster="c1", generation=1, leader="s1", cards=(),
                          slots=regdoc.slot_table((), slotfn.EMPTY), lineage="L1")
    return KeyValue("registry", regdoc.encode(reg), 5, 5, 1)


async def test_polls_of_a_late_client_stretch_until_one_lands_then_come_back() -> None:
    store = LatePolls(lag=2.5, registry=registry_kv())
    clock = [0.0]
    f = Follower(cast(StoreReader, store), cluster="c1", call_timeout=CALL,
                 clock=lambda: clock[0])
    outcomes = [(await f.poll()).outcome for _ in range(4)]
    assert outcomes == ["failed", "failed", "failed", "applied"]
    assert store.bounds == [0.5, 1.0, 2.0, 4.0]
    assert f.state.registry is not None and not f.state.problem
    store.lag = store.late = 0.0
    await f.poll()
    assert store.bounds[-1] == CALL          # answered: back to the call timeout
    # the first failure of a fresh view still comes within the call timeout
    store.lag = store.late = 100.0
    assert (await f.poll()).outcome == "failed" and store.bounds[-1] == CALL
    for _ in range(10):
        await f.poll()
    assert max(store.bounds) == STRETCH_MAX * CALL
