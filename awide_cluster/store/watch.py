"""A watch that never goes silent: progress notifications, a stall watchdog, resumption.

``Watch`` streams ``POST /v3/watch`` (``progress_notify`` on) from one member. If neither
events nor a progress notification arrive within ``stall_after`` seconds, the stream is
dropped and the watch resumes on the next member from the last delivered revision + 1, so
no event is lost and none is delivered twice. The next member is the next in the ring that is
not suspect (``EndpointRing.open_order``: one that failed, was outrun by a hedge or went
silent on a watch lately), so a stream leaving a silent member does not wait out the call
bound on a frozen one first. (etcd leaves out a watch's next progress notification after an
event, so a healthy member may be silent for up to two notify intervals after one.) Opening
a stream (until etcd says ``created``) is bounded by the store's call timeout (a stream moving
off a member: first by ``OPEN_QUICK`` per member, then by the call timeout); when every
member failed to open one in a row, the watch raises (Unavailable/Timeout) instead of waiting
silently. Compaction of the resume revision raises ``WatchCompacted``; any other cancel
``WatchCanceled`` (or ``Denied``).

A watch belongs to the etcd history its store followed when it was made (``timeline_epoch``):
once the store adopts a new history (a restored or rebuilt cluster, timeline.py), the next
``__anext__`` raises ``TimelineChanged`` and the watch is over (its revisions are of the old
history): the caller re-reads and watches again from the present. A stream that cannot be
opened because every member answers below the revision delivered makes the store take its
census at once, so a watch alone also notices a restore.

Each message (one line of the stream) is read under ``max_message_bytes``. A message over it
is refused as it streams in, never parsed: the stream is dropped, the watch learns the current
revision (one small keys-only read) and goes on from the next one, and ``__anext__`` raises
``WatchMessageTooLarge`` once, naming the watch, the bound and the revision skipped to: the
caller re-reads (bounded) and keeps iterating. A big value thus costs one bounded read, never a
watch that re-opens onto the same message forever.

etcd sends progress notifications every ``--experimental-watch-progress-notify-interval``
(default 10 min!): run members with an interval below ``stall_after`` (the embedded test
cluster and the deploy use 1 s; the daemon derives its bounds from the interval it is told,
``timing.etcd_progress_notify``), otherwise an idle watch is re-opened every ``stall_after``.

Use as ``async with store.watch("registry") as w: async for batch in w: ...`` (or close it).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import aiohttp

from awide_cluster.store import codec
from awide_cluster.store.codec import TokenRejected, WatchFrame
from awide_cluster.store.errors import (
    Denied,
    RevisionWentBack,
    StoreError,
    TimelineChanged,
    Timeout,
    Unavailable,
    WatchCanceled,
    WatchCompacted,
    WatchMessageTooLarge,
)
from awide_cluster.store.hedge import FINAL, combine
from awide_cluster.store.transport import FrameTooLarge, LineReader
from awide_cluster.store.types import WatchBatch

if TYPE_CHECKING:
    from awide_cluster.store.session import Session


# seconds a watch's stream gets to open on a member before the next is tried (then each gets
# the call timeout): a frozen member accepts the connection and never answers
OPEN_QUICK = 0.2


class _Stalled(Exception):
    pass


class Watch:
    def __init__(self, session: Session, key: str, *, prefix: bool = False,
                 start_revision: int | None = None, stall_after: float = 3.0,
                 max_message_bytes: int | None = None) -> None:
        self.stall_after = stall_after          # checked by the setter
        self._session = session
        self.max_message_bytes = session.transport.cap(max_message_bytes)
        self._key = key
        self._prefix = prefix
        self._next_rev = start_revision or None  # first revision not yet delivered
        self._resp: aiohttp.ClientResponse | None = None
        self._reader: LineReader | None = None
        self._endpoint: str | None = None
        self._created = False   # the current stream said ``created`` (reset by _drop)
        self._closed = False
        self._epoch = session.timeline_epoch
        self.reconnects = 0   # streams re-opened after a stall or a broken stream

    # ------------------------------------------------------------------ public

    @property
    def endpoint(self) -> str | None:
        """The member the current stream comes from, or is being opened on; after a stream
        is dropped, the member it came from (the next one opens after it). None before the
        first."""
        return self._endpoint

    @property
    def streaming(self) -> bool:
        """A stream is open and etcd said ``created``: every later change is delivered."""
        return self._created

    @property
    def stall_after(self) -> float:
        """Seconds of silence (no event, no progress notification) after which the stream is
        dropped and re-opened on the next member. Settable: the next wait for a message uses
        the new bound (a daemon's reload of its timing)."""
        return self._stall_after

    @stall_after.setter
    def stall_after(self, seconds: float) -> None:
        if not seconds > 0:
            raise ValueError("stall_after must be > 0")
        self._stall_after = seconds

    @property
    def revision(self) -> int:
        """Everything up to this revision has been delivered (0 before the first stream)."""
        return (self._next_rev or 1) - 1

    def __aiter__(self) -> Watch:
        return self

    async def __anext__(self) -> WatchBatch:
        while True:
            if self._closed:
                raise StopAsyncIteration
            self._check_history()
            if self._reader is None:
                await self._open()
            assert self._reader is not None
            try:
                frame = await self._next_frame()
            except FrameTooLarge as exc:
                self._drop()
                raise await self._skip_past(exc) from None
            except (_Stalled, Unavailable, Timeout):
                if self._endpoint is not None:
                    self._session.ring.suspect(self._endpoint)
                self._drop()
                self.reconnects += 1
                continue
            except BaseException:
                self._drop()
                raise
            self._check_history()
            batch = self._handle(frame)
            if batch is not None:
                return batch

    def _check_history(self) -> None:
        if self._session.timeline_epoch != self._epoch:
            self._drop()
            self._closed = True
            note = self._session.timeline_note or "a new etcd history"
            raise TimelineChanged(f"watch {self._key!r}: {note}; re-read, then watch again")

    async def close(self) -> None:
        self._closed = True
        self._drop()

    async def _skip_past(self, exc: FrameTooLarge) -> WatchMessageTooLarge:
        """After a refused message: go on after the current revision (its events are lost)."""
        session = self._session
        body = session.codec.range_request(self._key, keys_only=True, limit=1)
        ep, answer = await session.read("/v3/kv/range", body, None, f"range {self._key!r}")
        now = session.codec.range_result(answer, ep)
        skipped_to = max(now.revision, self.revision)
        self._next_rev = skipped_to + 1
        return WatchMessageTooLarge(
            f"{self._endpoint}: watch {self._key!r}: a message over the bound of "
            f"{exc.limit} bytes refused; events up to revision {skipped_to} skipped (re-read "
            f"{self._key!r}), the watch goes on from revision {skipped_to + 1}",
            what=f"watch {self._key!r}", limit=exc.limit, skipped_to=skipped_to)

    aclose = close

    async def __aenter__(self) -> Watch:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------------ frames

    async def _next_frame(self) -> WatchFrame:
        assert self._reader is not None
        try:
            async with asyncio.timeout(self._stall_after):
                line = await self._reader.next_line()
        except TimeoutError:
            raise _Stalled() from None
        if line is None:
            raise Unavailable(f"{self._endpoint}: watch stream ended")
        return codec.watch_frame(line)

    def _handle(self, frame: WatchFrame) -> WatchBatch | None:
        if frame.canceled:
            self._drop()
            self._closed = True
            raise self._cancel_error(frame)
        self._session.note_revision(frame.revision, frame.cluster_id)
        if frame.created:
            return None
        events = tuple(self._session.codec.event(e) for e in frame.events)
        floor = self._next_rev or 0
        events = tuple(e for e in events if e.kv.mod_revision >= floor)  # resumed: no repeats
        if events:
            self._next_rev = max(e.kv.mod_revision for e in events) + 1
            return WatchBatch(revision=frame.revision, events=events)
        if frame.events:
            return None  # only repeats
        if frame.revision + 1 > floor:
            self._next_rev = frame.revision + 1
        return WatchBatch(revision=frame.revision, events=(), progress=True)

    def _cancel_error(self, frame: WatchFrame) -> StoreError:
        where = f"{self._endpoint}: watch {self._key!r}"
        if frame.compact_revision:
            return WatchCompacted(
                f"{where}: revision {self._next_rev} compacted (compact revision "
                f"{frame.compact_revision})", compact_revision=frame.compact_revision)
        reason = frame.cancel_reason.lower()
        if "permission denied" in reason or "auth" in reason:
            return Denied(f"{where}: canceled: {frame.cancel_reason}")
        return WatchCanceled(f"{where}: canceled: {frame.cancel_reason or 'no reason given'}")

    # ------------------------------------------------------------------ streams

    async def open(self) -> None:
        """Open the stream now instead of at the first read."""
        await self._open()

    async def _open(self) -> None:
        """Open a stream on the next member that says ``created``. A stream moving off a
        member (not the first): first each member within ``OPEN_QUICK`` (a live member answers
        in milliseconds; a frozen one would hold the move for the whole call timeout), then,
        when one of them only ran out of that time, each within the call timeout. The first
        stream: each within the call timeout (a start storm must not multiply its opens)."""
        session = self._session
        errors: list[StoreError] = []
        moving = self._endpoint is not None
        order = session.ring.open_order(after=self._endpoint)
        loop = asyncio.get_running_loop()
        quick = max(OPEN_QUICK, session.config.hedge_after)
        for bound in ((quick, None) if moving and len(order) > 1 else (None,)):
            slow = False
            for ep in order:
                deadline = session.deadline(None)
                if bound is not None:
                    deadline = min(deadline, loop.time() + bound)
                try:
                    await self._open_on(ep, deadline)
                    return
                except (*FINAL, WatchCanceled, WatchCompacted):
                    self._drop()
                    raise
                except StoreError as exc:
                    self._drop()
                    errors.append(exc)
                    if isinstance(exc, Timeout):
                        slow = True
                        session.ring.suspect(ep)
            if not slow:
                break           # every member refused outright: more time would not help
        if await session.reconsider_timeline(session.deadline(None)):
            self._check_history()
        raise combine(errors, f"watch {self._key!r}")

    async def _open_on(self, ep: str, deadline: float) -> None:
        session = self._session
        body = session.codec.watch_request(self._key, self._prefix, self._next_rev)

        async def attempt() -> WatchFrame:
            self._drop()
            self._endpoint = ep
            self._resp = await session.transport.open_stream(ep, "/v3/watch", body)
            self._reader = LineReader(self._resp, self.max_message_bytes,
                                      f"{ep}: watch {self._key!r}")
            line = await self._reader.next_line()
            if line is None:
                raise Unavailable(f"{ep}: watch stream ended before it was created")
            frame = codec.watch_frame(line)
            reason = frame.cancel_reason.lower()
            if frame.canceled and ("invalid auth token" in reason or (
                    session.config.username is not None and "permission denied" in reason)):
                # an unknown token: "invalid auth token" (3.4) or "permission denied" (3.5)
                raise TokenRejected(f"{ep}: watch {self._key!r}: {frame.cancel_reason}")
            return frame

        try:
            async with asyncio.timeout_at(deadline):
                frame = await session.authed(attempt, deadline)
        except TimeoutError:
            raise Timeout(f"{ep}: watch not created within the deadline") from None
        if frame.canceled:
            raise self._cancel_error(frame)
        if not frame.created:
            raise Unavailable(f"{ep}: watch stream did not start with 'created'")
        delivered = (self._next_rev or 1) - 1
        sent = session.timeline
        session.check_claim(codec.Claim(frame.cluster_id, frame.revision), sent, ep)
        if frame.revision and frame.revision < delivered:
            raise RevisionWentBack(f"{ep}: watch created at revision {frame.revision}, below "
                                   f"revision {delivered} already delivered")
        if self._next_rev is None:
            self._next_rev = frame.revision + 1
        self._created = True

    def _drop(self) -> None:
        """Close the current stream; ``_endpoint`` stays: the next one starts after it."""
        if self._resp is not None:
            self._resp.close()
        self._resp = None
        self._reader = None
        self._created = False
