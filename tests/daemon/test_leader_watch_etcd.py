"""The leader-key watch on real etcd: a vacated leader key is taken by a follower at once,
not at its next poll. The followers poll every 5 s here, so a take-over well inside that (and
counted as won on a watch event: ``key_wins``) is the watch's, not the poll's."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

from awide_cluster.contract import keys
from awide_cluster.contract.records import LeaderRecord
from awide_cluster.daemon.leader import CycleOutcome
from awide_cluster.daemon.leader_watch import LEADER_WATCH_MESSAGE_BYTES
from awide_cluster.daemon.service import Daemon
from awide_cluster.store import EtcdStore
from awide_harness.presets import FAST
from tests.timing import bound, wait_until

from .conftest import make_config, store_of

# a poll the safety net cannot hide behind: 5 s (the lease must outlive poll + 2 calls)
SLOW_POLL = {"poll_interval": 5.0, "lease_ttl": 6, "sick_polls": 3, "healthy_polls": 1}


def leader_and_follower(etcd, cluster: str) -> tuple[Daemon, Daemon]:
    """``a`` with fast timing, ``b`` polling every 5 s."""
    return (Daemon(make_config(etcd, cluster, "h1", timing=FAST)),
            Daemon(make_config(etcd, cluster, "h2", timing=SLOW_POLL)))


@dataclass
class Pair:
    """``a`` leading, ``b`` following, the test's store; ``crash()`` aborts ``a``."""

    a: Daemon
    b: Daemon
    store: EtcdStore
    crashed: bool = False

    async def crash(self) -> None:
        self.crashed = True
        await self.a.abort()


@contextlib.asynccontextmanager
async def running_pair(etcd, cluster: str) -> AsyncIterator[Pair]:
    """``leader_and_follower`` started (``start``); both stopped and the store closed after."""
    a, b = leader_and_follower(etcd, cluster)
    pair = Pair(a, b, store_of(etcd, cluster))
    try:
        await start(a, b)
        yield pair
    finally:
        if not pair.crashed:
            await a.stop()
        await b.stop()
        await pair.store.close()


async def start(a: Daemon, b: Daemon) -> None:
    """``a`` leads; ``b`` has made its first turn (it holds a lease)."""
    await a.start()
    await wait_until(lambda: a.is_leader, what="h1 leads")
    await b.start()
    await wait_until(lambda: b.turns >= 1 and b.lease.valid(), what="h2 made its first turn")
    assert not b.leadership.has_key


def alive(d: Daemon) -> bool:
    return d.watches_running


async def test_a_clean_stop_hands_the_key_over_on_the_watch_not_the_poll(etcd, cluster_name):
    async with running_pair(etcd, cluster_name) as pair:
        a, b, store = pair.a, pair.b, pair.store
        assert alive(b)
        a.request_stop()                    # SIGTERM: the turn ends, the lease is revoked
        await a.stop()
        # far below b's 5 s poll (bound() scales it by the machine's time factor)
        await wait_until(lambda: b.is_leader, timeout=1.0, what="h2 leads after h1's stop")
        assert bound(1.0) < SLOW_POLL["poll_interval"]
        assert b.key_wins == 1              # won on the watch event
        kv = await store.get(keys.LEADER)
        assert kv is not None and kv.lease == b.lease.id
        rec = LeaderRecord.decode(kv.value)
        assert rec is not None and rec.host == "h2"
        # its first leader cycle ran at once too (a turn started early, as leader)
        await wait_until(lambda: b.outcomes, timeout=1.0, what="h2's first leader cycle")
        assert b.turn_errors == 0


async def test_a_revoked_lease_hands_the_key_over_on_the_watch(etcd, cluster_name):
    """A crash (no revoke by the daemon) and the lease ended in etcd: etcd deletes the key,
    the follower's watch sees it."""
    async with running_pair(etcd, cluster_name) as pair:
        a, b, store = pair.a, pair.b, pair.store
        lease = a.lease.id
        assert lease is not None
        await pair.crash()
        await store.revoke(lease)
        await wait_until(lambda: b.is_leader, timeout=1.0, what="h2 leads after h1's lease ended")
        assert b.key_wins == 1


async def test_an_expired_lease_hands_the_key_over_within_ttl(etcd, cluster_name):
    """A crash: nobody revokes; etcd deletes the key when the lease expires (its TTL, plus
    etcd's expiry granularity); the follower takes it at once, not at its 5 s poll."""
    async with running_pair(etcd, cluster_name) as pair:
        a, b = pair.a, pair.b
        ttl = a.lease.granted_ttl
        assert ttl < SLOW_POLL["poll_interval"]
        await pair.crash()
        await wait_until(lambda: b.is_leader, timeout=ttl + 1.0,
                       what="h2 leads after h1's lease expired")
        assert b.key_wins == 1


async def test_garbage_in_the_leader_key_is_repaired_not_taken_over(etcd, cluster_name):
    """A value that is no leader record, put over the leader's key (and off its lease): the
    watch crashes nothing, no follower campaigns (the key is held), the leader rewrites its
    record on its lease with the same fencing token (the existing repair rule). A value over
    the watch's message bound is refused unread and only makes the daemons read the key."""
    a = Daemon(make_config(etcd, cluster_name, "h1", timing=FAST))
    b = Daemon(make_config(etcd, cluster_name, "h2", timing=FAST))
    store = store_of(etcd, cluster_name)
    try:
        await a.start()
        await wait_until(lambda: a.is_leader, what="h1 leads")
        await b.start()
        await wait_until(lambda: b.turns >= 1 and b.lease.valid(), what="h2 made its first turn")
        token = a.leadership.revision

        async def repaired() -> bool:
            kv = await store.get(keys.LEADER)
            return (kv is not None and kv.lease == a.lease.id and kv.create_revision == token
                    and LeaderRecord.decode(kv.value) == a.leadership.record)

        for garbage in (b"\x00\xff not json", b'{"host": 7}', b"[]"):
            await store.put(keys.LEADER, garbage)
            await wait_until(repaired, timeout=3.0, what="h1 rewrote its leader record")
            assert a.is_leader and a.leadership.revision == token
            assert not b.leadership.has_key
        assert b.key_wins == 0 and "campaign" not in b.key_steps    # a put: the key is held
        assert a.key_steps.get("verify", 0) >= 3       # the holder re-read its key
        # a value over the watch's message bound: refused unread, the key read instead (the
        # follower's read finds it held: no campaign succeeds), repaired as before
        await store.put(keys.LEADER, b"x" * (LEADER_WATCH_MESSAGE_BYTES + 1024))
        await wait_until(repaired, timeout=3.0, what="h1 rewrote its leader record")
        await wait_until(lambda: b.key_steps.get("campaign", 0) >= 1, timeout=3.0,
                       what="h2 read the key after the refused message")
        assert a.is_leader and a.leadership.revision == token
        assert not b.leadership.has_key and b.key_wins == 0
        assert a.turn_errors == b.turn_errors == 0
        assert alive(a) and alive(b)
    finally:
        await a.stop()
        await b.stop()
        await store.close()


async def test_the_new_term_writes_before_its_hosts_probes_end(etcd, cluster_name, cards):
    """The hand-over's first fenced write comes right after the campaign won on the watch, not
    after the new leader's own turn: here h2's card probes hang (its store probe blocks while
    a file exists, up to its 14 s probe bound) and h2 still makes its first write as leader."""
    block = cards.root / "block"
    cards.make("c0", "SNBLOCK0")
    spec = cards.spec("c0", probe_timeout=14.0)
    spec["store"] = {"command": ["/bin/sh", "-c", f'while [ -e "{block}" ]; do sleep 0.02; done']}
    a = Daemon(make_config(etcd, cluster_name, "h1", timing=FAST))
    b = Daemon(make_config(etcd, cluster_name, "h2", [spec], timing=SLOW_POLL))
    store = store_of(etcd, cluster_name)
    try:
        await start(a, b)
        block.write_text("")                # h2's probes now hang until the test ends
        assert bound(3.0) < spec["probe_timeout"]
        a.request_stop()
        await a.stop()
        await wait_until(lambda: b.is_leader, timeout=3.0, what="h2 leads after h1's stop")

        # its first cycle wrote (the new term's entry, fenced on its leader key) while its
        # turn is still held in the probes
        await wait_until(lambda: CycleOutcome.WROTE in b.outcomes, timeout=3.0,
                       what="h2's first fenced write")
        assert block.exists() and b.key_wins == 1
        assert b.metrics.leader_cycles.labels(trigger="term")._value.get() == 1
    finally:
        block.unlink(missing_ok=True)
        await a.stop()
        await b.stop()
        await store.close()


async def test_a_vacated_key_is_taken_in_one_transaction_unless_a_key_is_there(etcd,
                                                                             cluster_name):
    """``campaign_vacant``: created when the leader and switchover keys are both absent; else
    nothing written and both keys as read by the refused transaction."""
    from awide_cluster.daemon.clock import SystemClock
    from awide_cluster.daemon.lease import HostLease, Leadership
    store = store_of(etcd, cluster_name)
    clock = SystemClock()
    lease = HostLease(store, clock, ttl=5, call_timeout=2.0)
    ld = Leadership(store, lease, clock, host="h1", run="r1", call_timeout=2.0)
    try:
        await lease.renew()
        await store.put(keys.SWITCHOVER, b"not a record")
        won, kv, other = await ld.campaign_vacant()
        assert (won, kv) == (False, None) and other is not None
        assert other.value == b"not a record" and not ld.has_key
        assert await store.get(keys.LEADER) is None
        await store.delete(keys.SWITCHOVER)
        assert await ld.campaign_vacant() == (True, None, None) and ld.has_key
        held = await store.get(keys.LEADER)
        assert held is not None and held.lease == lease.id
        assert held.create_revision == ld.revision
        ld.step_down("test")
        won, kv, other = await ld.campaign_vacant()
        assert not won and other is None and kv is not None
        assert kv.create_revision == held.create_revision   # nothing written
    finally:
        await lease.revoke()
        await store.close()
