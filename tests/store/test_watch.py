"""Watches: events in order, history replay, progress, the stall watchdog, compaction."""

from __future__ import annotations

import asyncio

import pytest

from awide_cluster.store import WatchBatch, WatchCompacted
from tests.timing import bound, wait_until

from .helpers import admin
from .test_faults import leader_and_followers


async def created(watch) -> None:
    """Until the watch's stream is created: every later write is delivered."""
    await wait_until(lambda: watch.revision > 0, 5, "the watch stream created")


async def collect(watch, n_events: int, *, progress: list | None = None
                  ) -> list[tuple[str, str, bytes, int]]:
    got: list[tuple[str, str, bytes, int]] = []
    async for batch in watch:
        assert isinstance(batch, WatchBatch)
        if batch.progress:
            assert batch.events == ()
            if progress is not None:
                progress.append(batch.revision)
        for e in batch.events:
            got.append((e.kind, e.kv.key, e.kv.value, e.kv.mod_revision))
        if len(got) >= n_events:
            return got
    raise AssertionError("watch ended")


async def test_events_in_order_with_prefix(store):
    async with store.watch("cards/", prefix=True) as watch:
        task = asyncio.create_task(collect(watch, 5))
        await created(watch)
        r1 = await store.put("cards/a", b"1")
        await store.put("other", b"not watched")
        r2 = await store.put("cards/b", b"2")
        r3 = await store.put("cards/a", b"3")
        assert await store.delete("cards/", prefix=True) == 2
        r4 = store.last_revision
        got = await asyncio.wait_for(task, bound(5))
    assert got == [("put", "cards/a", b"1", r1), ("put", "cards/b", b"2", r2),
                   ("put", "cards/a", b"3", r3), ("delete", "cards/a", b"", r4),
                   ("delete", "cards/b", b"", r4)]
    assert watch.revision >= r4


async def test_start_revision_replays_history(store):
    r1 = await store.put("registry", b"g1")
    await store.put("registry", b"g2")
    await store.delete("registry")
    async with store.watch("registry", start_revision=r1) as watch:
        got = await asyncio.wait_for(collect(watch, 3), bound(5))
    assert [(k, v) for k, _, v, _ in got] == [("put", b"g1"), ("put", b"g2"), ("delete", b"")]


async def test_idle_watch_gets_progress_and_does_not_reconnect(store):
    rev = await store.put("idle", b"x")
    progress: list[int] = []
    async with store.watch("idle", stall_after=3.0) as watch:
        with pytest.raises(TimeoutError):
            # time passing is the test: idle past one progress interval (1.4 s), short of
            # stall_after; not scaled, a longer wait would cross stall_after
            await asyncio.wait_for(collect(watch, 1, progress=progress), 2.4)
    assert progress and progress[-1] >= rev  # the test cluster notifies every 1.4 s
    assert watch.reconnects == 0


async def test_watch_survives_its_member_being_frozen(cluster, make_store):
    leader, followers = await leader_and_followers(cluster, make_store)
    watched = make_store([followers[0], followers[1], leader])  # the stream opens on a follower
    writer = make_store([leader, followers[1]], prefix=watched.config.prefix)
    async with watched.watch("reg/", prefix=True, stall_after=1.0) as watch:
        task = asyncio.create_task(collect(watch, 6))
        await created(watch)
        revs = [await writer.put("reg/0", b"0")]
        assert watch.endpoint == followers[0]
        cluster.freeze(cluster.endpoints.index(followers[0]))
        for i in range(1, 6):     # written while the stream's member is frozen
            revs.append(await writer.put(f"reg/{i}", str(i).encode()))
        got = await asyncio.wait_for(task, bound(10))
    assert got == [("put", f"reg/{i}", str(i).encode(), revs[i]) for i in range(6)]  # none lost
    assert watch.reconnects >= 1 and watch.endpoint != followers[0]


async def test_a_stream_moving_off_a_silent_member_skips_a_frozen_one_quickly(cluster,
                                                                            make_store):
    """The stream's member is healthy but silent (after an event etcd leaves out the next
    progress notification; the bound is 0.5 s), and the next member in the ring is frozen:
    the move gives the frozen one OPEN_QUICK (0.2 s), not the call timeout (3 s here), before
    the third member; a write made once the stream moved arrives well inside the call
    timeout."""
    leader, followers = await leader_and_followers(cluster, make_store)
    frozen = followers[0]
    watched = make_store([leader, frozen, followers[1]], call_timeout=3.0)
    writer = make_store([leader, followers[1]], prefix=watched.config.prefix)
    async with watched.watch("idle/", prefix=True, stall_after=10.0) as watch:
        task = asyncio.create_task(collect(watch, 2))
        await created(watch)
        assert watch.endpoint == leader
        cluster.freeze(cluster.endpoints.index(frozen))
        watch.stall_after = 0.5             # the wait after the next message uses it
        revs = [await writer.put("idle/a", b"a")]
        await wait_until(lambda: watch.reconnects >= 1, 5, "the stream silent on the leader")
        revs.append(await writer.put("idle/k", b"k"))
        # the open on the frozen member gives up after 0.2 s, the third member's is quick
        got = await asyncio.wait_for(task, bound(0.6))
    assert got == [("put", "idle/a", b"a", revs[0]), ("put", "idle/k", b"k", revs[1])]
    assert watch.endpoint == followers[1]


async def test_compacted_start_revision_is_a_typed_error(cluster, store):
    r1 = await store.put("c", b"1")
    r2 = await store.put("c", b"2")
    await store.put("c", b"3")
    admin(cluster.endpoints[0], "/v3/kv/compaction", {"revision": str(r2), "physical": True})
    with pytest.raises(WatchCompacted) as err:
        async with store.watch("c", start_revision=r1) as watch:
            await asyncio.wait_for(collect(watch, 1), bound(5))
    assert err.value.compact_revision >= r2


async def test_closed_watch_stops(store):
    watch = store.watch("x")
    task = asyncio.create_task(collect(watch, 1))
    await created(watch)                # closed while the iteration waits on the stream
    await watch.close()
    await store.put("x", b"1")
    with pytest.raises(AssertionError, match="watch ended"):
        await asyncio.wait_for(task, bound(5))


async def test_the_stall_bound_of_an_open_watch_can_be_changed(store):
    """``Watch.stall_after`` is read at each wait for a message: an open watch takes a new
    bound (a daemon's reload of its timing); a bound that is not positive is refused."""
    async with store.watch("idle", stall_after=3.0) as watch:
        assert watch.stall_after == 3.0
        watch.stall_after = 30.0
        assert watch.stall_after == 30.0
        for bad in (0.0, -1.0):
            with pytest.raises(ValueError, match="stall_after must be > 0"):
                watch.stall_after = bad
        assert watch.stall_after == 30.0


async def test_streaming_only_once_a_stream_is_created(cluster, make_store):
    """``endpoint`` names the member a stream is being opened on; ``streaming`` waits for
    etcd's ``created``: a first open on a frozen member is not a stream (it gives up after the
    call timeout and opens on the next member)."""
    leader, followers = await leader_and_followers(cluster, make_store)
    frozen = followers[0]
    watched = make_store([frozen, followers[1], leader], call_timeout=1.0)
    writer = make_store([leader], prefix=watched.config.prefix)
    cluster.freeze(cluster.endpoints.index(frozen))
    try:
        async with watched.watch("s/", prefix=True, stall_after=5.0) as watch:
            assert not watch.streaming
            task = asyncio.create_task(collect(watch, 1))
            await wait_until(lambda: watch.endpoint == frozen, 2, "the open on the frozen one")
            assert not watch.streaming
            await wait_until(lambda: watch.streaming, 3, "a stream created on the next member")
            assert watch.endpoint == followers[1]
            rev = await writer.put("s/a", b"a")
            got = await asyncio.wait_for(task, bound(3))
            assert got == [("put", "s/a", b"a", rev)]
            await watch.close()
            assert not watch.streaming
    finally:
        cluster.thaw(cluster.endpoints.index(frozen))
        cluster.wait_healthy()
