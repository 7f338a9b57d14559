"""The blocking worker: file and sysfs reads of every card, off the event loop, on one thread.

The jobs every card asks for in one loop iteration (one turn of the daemon, one probe round of
a gateway) are handed over together (one submission) to one thread that stays for the next
turns; nothing starts a thread per card per poll. A job that hangs keeps its thread: once the
worker is busy with one job for ``SPILL_SHARE`` of the shortest waiting job's bound, that
thread is given up (it ends after its job) and a new one takes the queue, so a hung probe
costs only its own card. Results go back to the loop once the worker's queue is empty (one
wake-up of the loop per submission, not one per job: a loop woken while the worker still runs
makes the two threads trade the GIL for every system call of the jobs left), and at the
latest at the next patience check while a job runs long. A job asked for with ``expire`` fails
with ``TimeoutError`` once its bound has passed, by one timer for the jobs of a submission (not
one ``asyncio.timeout`` per job: a caller that awaits several reads a turn, as a gateway's
card probes do, would set and cancel a timer for each). A worker serves the event loop of its
callers (one loop: the daemon's, or one gateway's). Used by the daemon's probes
(``cards.probes``, ``cards.observe``) and the gateway's card probes
(``awide_gateway_cluster.connector``).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")

SPILL_SHARE = 0.2       # a queued job waits at most this share of its bound behind a hung one
IDLE_EXIT = 30.0        # a worker thread with nothing to do for this long ends


class StillStuck(RuntimeError):
    """A job with the same key is still running (it hung); this one is not queued behind it."""


@dataclass(eq=False)
class _Job:
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    future: asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop
    bound: float
    key: str
    deadline: float | None = None       # loop time it fails at (``expire``), else None
    joined: list[asyncio.Future[Any]] = field(default_factory=list)   # callers sharing it

    def futures(self) -> list[asyncio.Future[Any]]:
        return [self.future, *self.joined]


_Ended = tuple[_Job, Any, BaseException | None]     # a job, its result, its error


@dataclass(eq=False)
class _Thread:
    job: _Job | None = None
    since: float = 0.0
    given_up: bool = False


class ProbeWorker:
    """Blocking probe jobs off the event loop: the jobs asked for in one loop iteration (every
    card's, in one turn) go to the worker thread as one submission and run one after the
    other, each to its end (its cleanup always runs, even when its task gave up); one that
    hangs is left to its thread while a new thread takes the queue (see the module doc). A job
    whose ``key`` is still queued or running (it hung in an earlier turn) fails at once with
    ``StillStuck`` instead of queueing behind it."""

    def __init__(self, *, name: str = "awide-probes") -> None:
        self.name = name
        self.submissions = 0            # batches handed to the thread (one per turn)
        self.threads_started = 0
        self._cond = threading.Condition()
        self._queue: collections.deque[_Job] = collections.deque()
        self._active: _Thread | None = None     # the thread that takes the queue
        self._running: dict[str, _Job] = {}     # jobs queued or running, by key
        self._batch: list[_Job] = []
        self._flush_at: asyncio.AbstractEventLoop | None = None
        # results not yet handed back, per loop; loops already told to take theirs
        self._done: dict[asyncio.AbstractEventLoop, list[_Ended]] = {}
        self._waking: set[asyncio.AbstractEventLoop] = set()
        self.wakeups = 0                # hand-backs of results to a loop (about one per turn)
        self.expiry_timers = 0          # timers set to fail expiring jobs (about one per turn)
        self.joins = 0                  # callers that joined a queued or running job (``share``)

    def run(self, fn: Callable[..., T], *args: Any, bound: float,
            key: str = "", expire: bool = False, share: bool = False) -> asyncio.Future[T]:
        """``fn(*args)`` on the worker; its result (or exception) in the future. ``bound``
        is what the caller waits at most (it decides when a hung job is left behind).
        ``expire``: the future fails with ``TimeoutError`` once ``bound`` has passed (the job
        runs on to its end; its result is dropped), so the caller needs no timer of its own.
        ``share`` (with a ``key``): a job of that key still queued or running (asked for
        earlier in this turn, or running now) is joined instead of run again: one run, its
        result (the same object) in each caller's future, each future cancelled on its own;
        a joiner takes the job's bound (an expiring job whose bound has passed is not joined:
        ``StillStuck``, as for any key still stuck)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[T] = loop.create_future()
        with self._cond:
            same = self._running.get(key) if key else None
            if same is not None:
                if share and same.loop is loop and (same.deadline is None
                                                    or loop.time() < same.deadline):
                    same.joined.append(fut)
                    self.joins += 1
                    return fut
                fut.set_exception(StillStuck(f"{key}: previous probe still stuck"))
                return fut
            job = _Job(fn, args, fut, loop, bound, key, loop.time() + bound if expire else None)
            if key:
                self._running[key] = job
        self._batch.append(job)
        if self._flush_at is not loop:
            self._flush_at = loop
            loop.call_soon(self._flush)
        return fut

    def _flush(self) -> None:
        batch, self._batch, self._flush_at = self._batch, [], None
        if not batch:
            return
        with self._cond:
            self._queue.extend(batch)
            self.submissions += 1
            if self._active is None:
                self._start()
            else:
                self._cond.notify()
        loop = batch[0].loop
        patience = SPILL_SHARE * min(j.bound for j in batch)
        loop.call_later(patience, self._check, patience)
        expiring = [j for j in batch if j.deadline is not None]
        if expiring:
            self._expire_later(loop, expiring)

    def _expire_later(self, loop: asyncio.AbstractEventLoop, jobs: list[_Job]) -> None:
        """One timer, at the earliest deadline of ``jobs``."""
        self.expiry_timers += 1
        loop.call_at(min(j.deadline for j in jobs if j.deadline is not None), self._expire,
                     loop, jobs)

    def _expire(self, loop: asyncio.AbstractEventLoop, jobs: list[_Job]) -> None:
        """Fail the jobs of ``jobs`` whose deadline has passed and that have no result yet;
        a timer again for those whose deadline is later."""
        now = loop.time()
        left = []
        for job in jobs:
            waiting = [f for f in job.futures() if not f.done()]
            if not waiting or job.deadline is None:
                continue
            if now >= job.deadline:
                for f in waiting:
                    f.set_exception(TimeoutError(
                        f"{job.key or getattr(job.fn, '__name__', 'probe')}: no answer "
                        f"within {job.bound:g} s"))
            else:
                left.append(job)
        if left:
            self._expire_later(loop, left)

    def _start(self) -> None:
        """A new active thread (called with the lock held)."""
        me = _Thread()
        self._active = me
        self.threads_started += 1
        threading.Thread(target=self._work, args=(me,), name=self.name, daemon=True).start()

    def _check(self, patience: float) -> None:
        """Jobs wait behind one that runs for longer than ``patience``: leave that thread to
        it and let a new one take the queue. Again every ``patience`` while jobs wait. Results
        held back (the queue was not empty when they ended) are taken at each check."""
        loop = asyncio.get_running_loop()
        self._deliver(loop)
        again = patience
        with self._cond:
            if not self._queue:
                return
            me = self._active
            busy = time.monotonic() - me.since if me is not None and me.job is not None else 0.0
            if me is not None and me.job is not None and busy >= patience:
                me.given_up = True
                log.warning("%s: a blocking probe (%s) runs for over %.2f s; %d queued "
                            "probe(s) go to a new thread", self.name, me.job.key or "unkeyed",
                            patience, len(self._queue))
                self._start()
            elif busy > 0:
                again = max(0.001, patience - busy)     # when that job reaches patience
        loop.call_later(again, self._check, patience)

    def _work(self, me: _Thread) -> None:
        while True:
            with self._cond:
                while not self._queue and not me.given_up:
                    if not self._cond.wait(IDLE_EXIT) and not self._queue:
                        if self._active is me:
                            self._active = None
                        return
                if me.given_up:
                    return
                job = self._queue.popleft()
                me.job, me.since = job, time.monotonic()
            try:        # even when its task gave up: a job's own cleanup always runs
                result, error = job.fn(*job.args), None
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting task
                result, error = None, exc
            with self._cond:
                me.job = None
                if self._running.get(job.key) is job:
                    del self._running[job.key]
                self._done.setdefault(job.loop, []).append((job, result, error))
                # hand back once the queue is empty; a thread given up hands back its own
                if self._queue and not me.given_up:
                    continue
                wake = [lp for lp in self._done if lp not in self._waking]
                self._waking.update(wake)
            for lp in wake:
                try:
                    lp.call_soon_threadsafe(self._deliver, lp)
                except RuntimeError:        # the loop is gone; nobody waits any more
                    with self._cond:
                        self._done.pop(lp, None)
                        self._waking.discard(lp)
            if me.given_up:                 # a new thread took the queue meanwhile
                return

    def _deliver(self, loop: asyncio.AbstractEventLoop) -> None:
        """On ``loop``: settle every result held for it (a future whose task gave up is
        left alone)."""
        with self._cond:
            done = self._done.pop(loop, None)
            self._waking.discard(loop)
        if not done:
            return
        self.wakeups += 1
        for job, result, error in done:
            for fut in job.futures():
                if fut.done():
                    continue
                if error is None:
                    fut.set_result(result)
                else:
                    fut.set_exception(error)


_shared = ProbeWorker()


def shared_worker() -> ProbeWorker:
    """The worker of callers that pass none (one per process)."""
    return _shared
