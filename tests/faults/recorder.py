"""Recording etcd's history of ``registry`` and ``leader`` while the campaign runs.

``Recorder(config, sink, names)`` runs in its own thread with its own event loop: one watch per
key from revision 1 (the store's ``Watch`` resumes on another member after a stall or a broken
stream, from the last delivered revision, so nothing is missed or repeated). Every event goes
to ``sink`` as a ``KeyEvent`` stamped with the time it was seen; every registry revision also
as a decoded ``RegistryRev`` and a line of the event log.

``replay(config, until, bound)`` reads the same history again, independently, from revision 1
up to the given revision of each key: what the final checks use.

Poison faults write hostile values at these keys (up to about 1.4 MB, not UTF-8, not JSON):
both read with an answer bound above etcd's request limit times the events of one watch
message (``RECORDER_ANSWER_BYTES``), decode with the contract's typed errors only, and never
put a raw value into a log line.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import replace

from awide_cluster.contract.records import LeaderRecord
from awide_cluster.store import EtcdStore, StoreConfig
from awide_cluster.store.errors import StoreError, WatchMessageTooLarge
from tests.faults.campaign_record import KeyEvent, LogLine
from tests.faults.invariants import registry_rev

KEYS = ("registry", "leader")
# one watch message may carry many events of the replay (etcd batches up to 1000 revisions),
# several of them near etcd's 1.5 MiB request limit: the recorder must see them all
RECORDER_ANSWER_BYTES = 256 * 1024 * 1024


def recorder_config(config: StoreConfig) -> StoreConfig:
    return replace(config, max_answer_bytes=max(config.max_answer_bytes, RECORDER_ANSWER_BYTES))


def _event(ev: object, t: float) -> KeyEvent:
    kv = ev.kv                                                   # type: ignore[attr-defined]
    return KeyEvent(revision=kv.mod_revision, key=kv.key, kind=ev.kind,  # type: ignore[attr-defined]
                    value=kv.value, create_revision=kv.create_revision, lease=kv.lease, t=t)


async def _follow(store: EtcdStore, key: str, start: int, stop: asyncio.Event,
                  take: Callable[[KeyEvent], None], until: int | None = None,
                  lost: Callable[[str], None] | None = None) -> int:
    """Deliver every event of ``key`` from ``start``; returns the next revision to read.
    Stops when ``stop`` is set or an event at revision >= ``until`` was delivered. A watch
    message over the bound (it should not happen: ``RECORDER_ANSWER_BYTES``) skips its
    events: said to ``lost``, and the history no longer matches its replay (reported)."""
    nxt = start
    while not stop.is_set():
        try:
            async with store.watch(key, start_revision=nxt, stall_after=3.0) as w:
                async for batch in w:
                    now = time.monotonic()
                    for ev in batch.events:
                        e = _event(ev, now)
                        nxt = e.revision + 1
                        take(e)
                        if until is not None and e.revision >= until:
                            return nxt
                    if stop.is_set():
                        return nxt
        except asyncio.CancelledError:
            raise
        except WatchMessageTooLarge as e:
            if lost is not None:
                lost(f"watch of {key}: events up to revision {e.skipped_to} skipped: {e}")
            nxt = max(nxt, e.skipped_to + 1)
        except StoreError:
            await asyncio.sleep(0.2)  # not a wait: the retry's back-off (every member refused)
    return nxt


class Recorder:
    def __init__(self, config: StoreConfig, sink: Callable[[object], None],
                 names: Callable[[], dict[str, str]]) -> None:
        self.config = recorder_config(config)
        self.sink = sink
        self.names = names
        self.last: dict[str, int] = {k: 0 for k in KEYS}
        self._loop = asyncio.new_event_loop()
        self._stop = asyncio.Event()          # bound to the recorder's loop on first use
        self._thread = threading.Thread(target=self._run, name="recorder", daemon=True)
        self._done = threading.Event()

    def start(self) -> Recorder:
        self._thread.start()
        return self

    def take(self, e: KeyEvent) -> None:
        """One watched event, as the watch delivers it (a test may feed it by hand)."""
        self.last[e.key] = max(self.last[e.key], e.revision)
        self.sink(e)
        names = self.names()
        if e.key == "registry" and e.kind == "put":
            rev = registry_rev(e.value, e.revision, e.t)
            self.sink(rev)
            if rev.generation is None:
                text = f"registry rev {e.revision} DOES NOT DECODE: {rev.error}"
            else:
                ins = sorted(names.get(c, c) for c in rev.usable)
                outs = sorted(names.get(c, c) for c, s in rev.states if c not in rev.usable)
                text = (f"registry gen {rev.generation} rev {e.revision} by {rev.leader}: "
                        f"in {ins} out {outs}")
        elif e.key == "leader":
            rec = LeaderRecord.decode(e.value) if e.kind == "put" else None
            text = (f"leader key -> {rec.host if rec else '?'} (rev {e.revision}, created "
                    f"{e.create_revision}, lease {e.lease:x})" if e.kind == "put"
                    else f"leader key deleted (rev {e.revision})")
        else:
            text = f"{e.key} {e.kind} rev {e.revision}"
        self.sink(LogLine(e.t, "etcd", text))

    def _lost(self, text: str) -> None:
        self.sink(LogLine(time.monotonic(), "etcd", "RECORDER LOST EVENTS: " + text))

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._main())
        finally:
            self._loop.close()
            self._done.set()

    async def _main(self) -> None:
        async with EtcdStore(self.config) as store:
            tasks = [asyncio.create_task(_follow(store, k, 1, self._stop, self.take,
                                                 lost=self._lost)) for k in KEYS]
            await self._stop.wait()
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def stop(self, bound: float = 5.0) -> None:
        """Stop watching (what was delivered stays delivered; ``last`` is final after this).
        A recorder never started just releases its loop."""
        if not self._thread.is_alive() and not self._done.is_set():
            self._loop.close()
            return
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._done.wait(bound)


def replay(config: StoreConfig, until: dict[str, int], bound: float) -> tuple[KeyEvent, ...]:
    """Every event of ``registry`` and ``leader`` from revision 1 up to ``until[key]``,
    read again on a fresh connection (TimeoutError after ``bound``)."""
    out: list[KeyEvent] = []

    async def main() -> None:
        stop = asyncio.Event()
        async with EtcdStore(recorder_config(config)) as store:
            async with asyncio.timeout(bound):
                await asyncio.gather(*(
                    _follow(store, k, 1, stop, out.append, until=until[k])
                    for k in KEYS if until.get(k)))

    asyncio.run(main())
    return tuple(sorted(out, key=lambda e: (e.revision, e.key)))
