"""One poll of configured cards: discovery plus every applicable probe, concurrently, each
card within its ``spec.probe_timeout``. This is what the daemon calls each turn for its cards
(``observe_cards``: a round of all of them; ``observe_card``: one alone).

Probes per kind (their order in ``CardObservation.probes``):

- nvme: discovery (sysfs by serial), device (controller live, namespace shown), identity
  (namespace NGUID/UUID/EUI-64 == known), store, listener (if ``target``).
- dir:  discovery (label read), identity (label == known), writable, store, listener.

A round starts every card's probes at once and waits for them in one place, with one timer
for the round (at the earliest deadline still open), not a task and a timeout per probe: a
directory card's label read and write probe are futures of the probe worker (one submission
for the round), a TCP probe of an IP literal is a non-blocking connect whose end is read with
one ``poll`` for the round (a loopback connect has ended by then; one still under way is
watched on the loop), and the probes that are coroutines (NVMe discovery, a systemd unit, an
HTTP or command store, a TCP probe of a host name) run as tasks bounded by their own timeouts.
A card's probes still open at its deadline (start + ``probe_timeout``) fail with their own
timeout words; a card whose coroutines are still running half a second after that fails as a
whole ("observation did not finish"), as ``daemon.reporter.each_card``'s net says.

``observe_cards`` never raises for a card's trouble: every failure is a probe with a reason.
"""

from __future__ import annotations

import asyncio
import logging
import os
import select
import socket
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from awide_cluster.cards.directory import LabelError, discover_dir
from awide_cluster.cards.model import (
    DISCOVERY,
    LISTENER,
    STORE,
    WRITABLE,
    CardObservation,
    LocalCard,
    ProbeResult,
    summarize,
)
from awide_cluster.cards.nvme import discover_nvme
from awide_cluster.cards.probes import (
    IN_PROGRESS,
    Clock,
    check_device,
    check_identity,
    host_port,
    literal_family,
    probe_listener,
    probe_store,
    start_connect,
    start_write,
    tcp_said,
    writable_said,
    write_stuck_said,
    write_timeout_said,
)
from awide_cluster.cards.spec import CardSpec
from awide_cluster.cards.units import UnitStates
from awide_cluster.cards.worker import ProbeWorker, StillStuck, shared_worker
from awide_cluster.nvme.cli import NvmeCli
from awide_cluster.nvme.runner import CommandRunner
from awide_cluster.nvme.sysfs import Sysfs

log = logging.getLogger(__name__)

NET = 0.5       # a card's coroutines still running this long after its deadline: given up


async def observe_card(spec: CardSpec, runner: CommandRunner, sysfs: Sysfs,
                       known_identity: str | None, clock: Clock, *,
                       nvme_program: str = "nvme", systemctl: str = "systemctl",
                       worker: ProbeWorker | None = None,
                       units: UnitStates | None = None) -> CardObservation:
    """Discover the card and run its probes concurrently, bounded by ``spec.probe_timeout``
    (``observe_cards`` of this card alone; the arguments are those of ``observe_cards``)."""
    return (await observe_cards(((spec, known_identity),), runner, sysfs, clock,
                                nvme_program=nvme_program, systemctl=systemctl,
                                worker=worker, units=units))[0]


async def observe_cards(cards: Sequence[tuple[CardSpec, str | None]], runner: CommandRunner,
                        sysfs: Sysfs, clock: Clock, *, nvme_program: str = "nvme",
                        systemctl: str = "systemctl", worker: ProbeWorker | None = None,
                        units: UnitStates | None = None) -> list[CardObservation]:
    """One round: each card's observation, in the order of ``cards``.

    ``cards``: each card's spec and the identity first seen for it (None: nothing known yet,
    any readable identity passes and the caller should remember ``obs.card.identity``).
    ``clock``: monotonic seconds, used for ``ProbeResult.elapsed``.
    ``worker``: where the blocking probes run (``shared_worker()`` when None); the round's
    are handed over to it together.
    ``units``: where systemd store units are asked (``cards.units``); the cards of a round
    ask with one ``systemctl``. None: each card asks alone.
    """
    loop = asyncio.get_running_loop()
    work = worker if worker is not None else shared_worker()
    rnd = _Round(loop, clock)
    connecting: list[_Connect] = []
    for spec, known in cards:
        card = _Card(rnd, spec, known)
        try:
            _start(card, runner, sysfs, nvme_program, systemctl, work, units, connecting)
        except Exception as exc:  # noqa: BLE001 - one card's trouble never stops the round
            card.fail(f"card not found: observation failed: {type(exc).__name__}: {exc}")
    _connected(loop, connecting)
    await rnd.finish()
    return [card.observation() for card in rnd.cards]


def _start(card: _Card, runner: CommandRunner, sysfs: Sysfs, nvme_program: str,
           systemctl: str, worker: ProbeWorker, units: UnitStates | None,
           connecting: list[_Connect]) -> None:
    """Every probe of ``card`` started."""
    spec, rnd = card.spec, card.rnd
    bound = spec.probe_timeout
    if spec.kind == "dir":
        assert spec.path is not None
        _Job(card, worker.run(discover_dir, spec.name, spec.path, spec.target, bound=bound,
                              key=f"label {spec.path}"), _label_read, _label_late)
    else:
        card.task(_discover_nvme(spec, sysfs, card.known, rnd.clock, runner, nvme_program,
                                 worker))
    store = spec.store
    if store is not None:
        family = None
        if store.tcp is not None:
            host, port = host_port(store.tcp)
            family = literal_family(host)
        if family is not None:
            _connect(card, STORE, "store", family, host, port, connecting)
        else:
            card.task(_one(probe_store(store, runner, bound, rnd.clock, systemctl=systemctl,
                                       units=units)))
    target = spec.target
    if target is not None:
        family = literal_family(target.traddr)
        if family is not None:
            _connect(card, LISTENER, "NVMe-oF listener", family, target.traddr,
                     target.trsvcid, connecting)
        else:
            card.task(_one(probe_listener(target, bound, rnd.clock)))
    if spec.kind == "dir":
        key = str(spec.path)
        started = start_write(worker, key, bound)
        if started is None:
            card.result(WRITABLE, False, write_stuck_said(key))
        else:
            _Job(card, started, _written, _write_late)


class _Round:
    """The cards of one round and the one timer that bounds them (the I/O shell of
    ``observe_cards``; what each probe found is judged by the pure functions it calls)."""

    __slots__ = ("loop", "clock", "cards", "open", "waiter", "timer")

    def __init__(self, loop: asyncio.AbstractEventLoop, clock: Clock) -> None:
        self.loop, self.clock = loop, clock
        self.cards: list[_Card] = []
        self.open = 0                               # cards with probes still running
        self.waiter: asyncio.Future[None] | None = None
        self.timer: asyncio.TimerHandle | None = None

    async def finish(self) -> None:
        """Until every card is settled (by its probes, or its deadlines); a round given up
        (its caller cancelled) leaves nothing open."""
        if not self.open:
            return
        self.waiter = self.loop.create_future()
        self._arm()
        try:
            await self.waiter
        finally:
            if self.timer is not None:
                self.timer.cancel()
            for card in self.cards:
                card.drop()

    def closed(self) -> None:
        self.open -= 1
        if not self.open and self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    def _arm(self) -> None:
        when = min(card.due() for card in self.cards if card.open)
        self.timer = self.loop.call_at(when, self._expire)

    def _expire(self) -> None:
        self.timer = None
        now = self.loop.time() + 0.001     # a timer may run a clock tick early
        for card in self.cards:
            if card.open:
                card.expire(now)
        if self.open:
            self._arm()


class _Card:
    """One card's probes in a round: the results so far, what still runs."""

    __slots__ = ("rnd", "spec", "known", "start", "deadline", "found", "results", "waits",
                 "tasks", "why", "open")

    def __init__(self, rnd: _Round, spec: CardSpec, known: str | None) -> None:
        self.rnd, self.spec, self.known = rnd, spec, known
        self.start = rnd.clock()
        self.deadline = rnd.loop.time() + spec.probe_timeout
        self.found: LocalCard | None = None
        self.results: list[ProbeResult] = []
        self.waits: list[_Job | _Connect] = []      # probes the round's timer bounds
        self.tasks: list[asyncio.Task[tuple[LocalCard | None, list[ProbeResult]]]] = []
        self.why = ""                   # not "": the observation failed as a whole
        self.open = True
        rnd.cards.append(self)
        rnd.open += 1

    def elapsed(self) -> float:
        return max(0.0, self.rnd.clock() - self.start)

    def result(self, probe: str, ok: bool, reason: str) -> None:
        self.results.append(ProbeResult(probe, ok, reason, self.elapsed()))

    def settled(self, wait: _Job | _Connect) -> None:
        self.waits.remove(wait)
        self._close_if_done()

    def task(self, coro: Awaitable[tuple[LocalCard | None, list[ProbeResult]]]) -> None:
        task = asyncio.ensure_future(coro, loop=self.rnd.loop)
        self.tasks.append(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[tuple[LocalCard | None, list[ProbeResult]]]
                   ) -> None:
        if task.cancelled():
            self.fail("card not found: observation failed: cancelled")
            return
        exc = task.exception()          # retrieved even when the card was given up
        if not self.open:
            return
        if exc is not None:
            self.fail(f"card not found: observation failed: {type(exc).__name__}: {exc}")
            return
        found, results = task.result()
        if found is not None:
            self.found = found
        self.results.extend(results)
        self.tasks.remove(task)
        self._close_if_done()

    def _close_if_done(self) -> None:
        if self.open and not self.waits and not self.tasks:
            self.open = False
            self.rnd.closed()

    def due(self) -> float:
        """When the round's timer next has something to do for this card."""
        return self.deadline if self.waits else self.deadline + NET

    def expire(self, now: float) -> None:
        if now >= self.deadline + NET:
            self.fail("card not found: observation did not finish within "
                      f"{self.spec.probe_timeout:g} s")
        elif now >= self.deadline:
            for wait in tuple(self.waits):
                wait.expire()

    def fail(self, why: str) -> None:
        """The observation failed as a whole; what still runs is given up."""
        if self.open:
            self.why = why
            self.drop()

    def drop(self) -> None:
        """Give up what still runs (sockets closed, futures and tasks cancelled)."""
        if not self.open:
            return
        self.open = False
        waits, tasks, self.waits, self.tasks = self.waits, self.tasks, [], []
        for wait in waits:
            wait.drop()
        for task in tasks:
            task.cancel()
        if not self.why:
            self.why = "card not found: observation given up"
        self.rnd.closed()

    def observation(self) -> CardObservation:
        if self.why:
            return summarize(self.spec.name, None, [ProbeResult(DISCOVERY, False, self.why, 0.0)])
        obs = summarize(self.spec.name, self.found, self.results)
        if not obs.healthy:
            log.debug("card %s unhealthy: %s", self.spec.name, obs.reason)
        return obs


class _Job:
    """A blocking probe on the worker: its future, what its outcome says, what its deadline
    says."""

    __slots__ = ("card", "future", "read", "late", "open")

    def __init__(self, card: _Card, future: asyncio.Future[Any],
                 read: Callable[[_Card, asyncio.Future[Any]], None],
                 late: Callable[[_Card], None]) -> None:
        self.card, self.future, self.read, self.late = card, future, read, late
        self.open = True
        card.waits.append(self)
        future.add_done_callback(self._done)

    def _done(self, future: asyncio.Future[Any]) -> None:
        if not self.open:
            if not future.cancelled():
                future.exception()      # retrieved: the card gave up on it
            return
        self.open = False
        self.read(self.card, future)
        self.card.settled(self)

    def expire(self) -> None:
        self.drop()
        self.late(self.card)
        self.card.settled(self)

    def drop(self) -> None:
        self.open = False
        self.future.cancel()            # the worker leaves a cancelled future alone


def _label_read(card: _Card, future: asyncio.Future[Any]) -> None:
    spec = card.spec
    try:
        found = future.result()
    except (StillStuck, LabelError) as exc:
        card.result(DISCOVERY, False, f"card not found: {exc}")
        return
    except Exception as exc:  # noqa: BLE001 - reported, never raised into the poll loop
        log.warning("card %s: discovery failed", spec.name, exc_info=True)
        card.result(DISCOVERY, False, f"card not found: discovery failed: "
                                      f"{type(exc).__name__}: {exc}")
        return
    assert isinstance(found, LocalCard)
    card.found = found
    card.result(DISCOVERY, True, f"label of {found.serial} found in {spec.path}")
    card.results.append(check_identity(found, card.known))


def _label_late(card: _Card) -> None:
    card.result(DISCOVERY, False, "card not found: discovery did not finish within "
                                  f"{card.spec.probe_timeout:g} s")


def _written(card: _Card, future: asyncio.Future[Any]) -> None:
    key = str(card.spec.path)
    try:
        future.result()
    except OSError as exc:
        card.result(WRITABLE, *writable_said(key, exc))
    except Exception as exc:  # noqa: BLE001 - a probe reports, it never crashes the poll
        log.debug("probe %s failed", WRITABLE, exc_info=True)
        card.result(WRITABLE, False, f"{WRITABLE}: {type(exc).__name__}: {exc}")
    else:
        card.result(WRITABLE, *writable_said(key, None))


def _write_late(card: _Card) -> None:
    card.result(WRITABLE, False, write_timeout_said(str(card.spec.path),
                                                    card.spec.probe_timeout))


class _Connect:
    """A TCP probe of an IP literal: a non-blocking connect; its end read from the socket's
    ``SO_ERROR`` once it is writable."""

    __slots__ = ("card", "probe", "what", "host", "port", "sock", "watched", "open")

    def __init__(self, card: _Card, probe: str, what: str, host: str, port: int,
                 sock: socket.socket) -> None:
        self.card, self.probe, self.what, self.host, self.port = card, probe, what, host, port
        self.sock = sock
        self.watched = False
        self.open = True
        card.waits.append(self)

    def watch(self) -> None:
        """Not connected yet: read it when the loop sees it writable."""
        self.card.rnd.loop.add_writer(self.sock.fileno(), self.check)
        self.watched = True

    def check(self) -> None:
        if not self.open:
            return
        error: OSError | None = None
        try:
            err = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                error = OSError(err, os.strerror(err))
        except OSError as exc:
            error = exc
        finally:
            self.drop()
        self.card.result(self.probe, *tcp_said(self.what, self.host, self.port, error))
        self.card.settled(self)

    def expire(self) -> None:
        self.drop()
        self.card.result(self.probe, False, f"{self.probe}: no answer within "
                                            f"{self.card.spec.probe_timeout:g} s")
        self.card.settled(self)

    def drop(self) -> None:
        self.open = False
        if self.watched:
            self.watched = False
            self.card.rnd.loop.remove_writer(self.sock.fileno())
        self.sock.close()


def _connect(card: _Card, probe: str, what: str, family: int, host: str, port: int,
             connecting: list[_Connect]) -> None:
    try:
        sock, err = start_connect(family, host, port)
    except OSError as exc:
        card.result(probe, *tcp_said(what, host, port, exc))
        return
    if err in IN_PROGRESS:
        connecting.append(_Connect(card, probe, what, host, port, sock))
        return
    sock.close()
    card.result(probe, *tcp_said(what, host, port, OSError(err, os.strerror(err)) if err
                                 else None))


def _connected(loop: asyncio.AbstractEventLoop, connecting: list[_Connect]) -> None:
    """The round's connects that have ended, read at once (one ``poll`` for all); the others
    watched on the loop."""
    if not connecting:
        return
    poller = select.poll()
    for c in connecting:
        poller.register(c.sock.fileno(), select.POLLOUT)
    try:
        ready = {fd for fd, _ in poller.poll(0)}
    except OSError:
        ready = set()
    for c in connecting:
        if not c.open:
            continue
        if c.sock.fileno() in ready:
            c.check()
        else:
            c.watch()


async def _one(probe: Awaitable[ProbeResult]) -> tuple[None, list[ProbeResult]]:
    return None, [await probe]


async def _discover_nvme(spec: CardSpec, sysfs: Sysfs, known_identity: str | None,
                         clock: Clock, runner: CommandRunner, nvme_program: str,
                         worker: ProbeWorker) -> tuple[LocalCard | None, list[ProbeResult]]:
    bound = spec.probe_timeout
    start = clock()

    def found(ok: bool, reason: str) -> ProbeResult:
        return ProbeResult(DISCOVERY, ok, reason, max(0.0, clock() - start))

    try:
        async with asyncio.timeout(bound):
            assert spec.serial is not None
            # nvme id-ns (only when sysfs shows no identity) gets most of the bound, so a
            # hung command is reported as such, not as a card that was not found
            cli = NvmeCli(runner, program=nvme_program, timeout=bound)
            d = await discover_nvme(spec.name, spec.serial, spec.nsid, spec.target, sysfs, cli,
                                    timeout=bound * 0.8, worker=worker)
            if d.card is None:
                return None, [found(False, d.reason)]
            return d.card, [
                found(True, d.reason),
                check_device(d.card, namespace_missing=d.namespace_missing,
                             controller=d.controller),
                check_identity(d.card, known_identity, d.identity_reason),
            ]
    except TimeoutError:
        return None, [found(False, f"card not found: discovery did not finish within {bound:g} s")]
    except Exception as exc:  # noqa: BLE001 - reported, never raised into the poll loop
        log.warning("card %s: discovery failed", spec.name, exc_info=True)
        return None, [found(False, f"card not found: discovery failed: "
                                   f"{type(exc).__name__}: {exc}")]
