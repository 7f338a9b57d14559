"""``ClusterGateway``: the library's asyncio face. See docs/gateway.md.

Tasks on the caller's event loop (all started by ``start()``, cancelled by ``stop()``):
- the registry poll, every ``poll_interval`` at a random phase, each poll bounded and
  serializable but every ``linearizable_every``-th; a watch on ``registry`` (optional) whose
  events are applied as they come, checked exactly like a polled answer (no second read),
  and whose progress notifications prove the view fresh, so that a serializable poll is left
  out while they come (the linearizable one never is);
- the etcd side (``etcd_side.EtcdSide``): layout check until done, then ``gateways/<id>``
  on a lease, after a random start-up delay of up to one poll interval (and, while the
  view is stale, up to three poll intervals from the start);
- each etcd loop backs off with jitter while its calls fail, the last known state served;
- one worker per registry card: connect/probe it once per poll, bounded; a round loop wakes
  them all at once each poll interval, so their blocking reads go to the probe worker's one
  thread together (``card_workers.CardWorkers``).

The registry watch is ``registry_watch.RegistryWatch``, the vouching's reads of the reports
``vouch_loop.VouchLoop``, the state file's use ``state_keeping.StateKeeping``, the registry's
poll and what each step of the follower does ``registry_poll.RegistryPoll`` (a base); the view
stays here.

The hot path (``snapshot()``, ``placement``, ``report_io_error``) reads one reference or bumps
one counter: no I/O, no await, no lock held across I/O. Every state change builds a new
immutable ``SlotView`` and swaps it in with one assignment.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from awide_cluster import __version__
from awide_cluster.cards.worker import ProbeWorker
from awide_cluster.contract import slots as slotfn
from awide_cluster.contract.records import (
    PLACEMENT_ALGORITHMS,
    STORAGE_FORMAT,
    GatewayRecord,
    LayoutRecord,
)
from awide_cluster.contract.registry import Registry
from awide_cluster.contract.untrusted import clean_text
from awide_cluster.store.build import store_from
from awide_cluster.store.port import Store
from awide_gateway_cluster import connector
from awide_gateway_cluster import events as ev
from awide_gateway_cluster import layout as lay
from awide_gateway_cluster import state_file as sf
from awide_gateway_cluster import view as vw
from awide_gateway_cluster.backoff import CAP_INTERVALS, Backoff
from awide_gateway_cluster.card_workers import CardWorkers
from awide_gateway_cluster.config import GatewayConfig
from awide_gateway_cluster.engine import EngineSlot
from awide_gateway_cluster.errors import NotStarted
from awide_gateway_cluster.etcd_side import SETTLE as SETTLE  # re-exported
from awide_gateway_cluster.etcd_side import EtcdSide
from awide_gateway_cluster.follower import Follower, FollowStep
from awide_gateway_cluster.placement import Placement
from awide_gateway_cluster.registration import Registration
from awide_gateway_cluster.registry_poll import RegistryPoll
from awide_gateway_cluster.registry_watch import PROOF_WINDOW as PROOF_WINDOW  # re-exported
from awide_gateway_cluster.registry_watch import RegistryWatch
from awide_gateway_cluster.state_keeping import StateKeeping
from awide_gateway_cluster.stats import GatewayStats
from awide_gateway_cluster.subscribe import Hub, Subscription

if TYPE_CHECKING:
    from awide_cluster.store.etcd import EtcdStore
    from awide_gateway_cluster.vouch_loop import VouchLoop

log = logging.getLogger("awide_gateway_cluster")




class ClusterGateway(RegistryPoll):
    """The gateway's cluster mode. ``store``/``nvme``/``clock`` are for tests and embedding:
    an ``EtcdStore``-like object, an ``NvmeCli``, and a monotonic clock returning seconds;
    ``probe_worker``: where the cards' blocking reads run (one of this gateway's own when
    None); ``storage_format``: the format of the blocks it writes (an upgrade's tests)."""

    def __init__(self, config: GatewayConfig, *, store: Store | None = None, nvme: Any = None,
                 clock: Callable[[], float] | None = None, sysfs: Any = None,
                 read_label: Callable[..., Any] | None = None,
                 rng: random.Random | None = None,
                 probe_worker: ProbeWorker | None = None,
                 storage_format: int = STORAGE_FORMAT) -> None:
        self.config = config
        self.id = config.id
        self.namespace = lay.namespace(config.model)
        self.placement_name = config.key_placement
        self._store, self._own_store = store, store is None
        self._nvme, self._sysfs, self._read_label = nvme, sysfs, read_label
        self._probe_worker = probe_worker     # None: one of its own
        self._clock = clock or time.monotonic
        self._rng = rng or random.Random()
        t = config.timing
        self._interval, self._call = t.poll_interval, config.etcd.call_timeout
        cap = CAP_INTERVALS * self._interval
        self._poll_backoff = Backoff(self._interval, cap, self._rng)
        self._tasks: list[asyncio.Task[None]] = []
        self._engine = EngineSlot(self.id, config.cluster, self.namespace, self._refused)
        self._hub = Hub()
        self._loop_errors = 0
        self._epoch = 0                           # the store's history epoch acted upon
        self._history_resets = 0
        self._history_note = ""
        self._last_loop_error = ""
        self._started = False
        self._poll_now = asyncio.Event()
        self._state = StateKeeping(config, self._call)     # the state file
        self._follower: Follower | None = None
        self._registration: Registration | None = None
        self._side = EtcdSide(
            LayoutRecord(self.namespace, self.placement_name, created_by=self.id,
                         format=storage_format),
            store=self._started_store, state=self._state, record=self._gateway_record,
            registry=self._followed,
            history_check=self._history_check, changed=self._rebuild, save=self._save_state,
            publish=self._publish, generation=lambda: self._view.generation,
            failed=self._loop_failed, interval=self._interval, call_timeout=self._call,
            clock=self._clock, rng=self._rng)
        # what the gateway uses of the registry: the entries the hosts' reports vouch for
        self._vouch = self._vouch_loop(config) if config.vouch else None
        self._cards = CardWorkers(config, rng=self._rng, registry=self._registry,
                                  view=self.snapshot, changed=self._rebuild,
                                  publish=self._publish)
        self._registry_watch = RegistryWatch(
            store=self._started_store, take=self._take, history_check=self._history_check,
            poll_now=lambda: self._poll_now.set(), interval=self._interval,
            notify_interval=t.etcd_progress_notify, stall_after=config.watch_stall_after,
            rng=self._rng)
        self._builds = 0                          # views built (stats: view_builds)
        self._fingerprint_of: tuple[tuple[str | None, ...], int] | None = None
        self._fingerprint = ""
        self._slot_memo = vw.SlotMemo()           # the last view's slot states (build)
        self._view = self._build()
        self.placement = Placement(self.snapshot)

    # ------------------------------------------------------------------ hot path

    def snapshot(self) -> vw.SlotView:
        """The current slot view (immutable). No I/O, no lock, no await."""
        return self._view

    def report_io_error(self, card_id: str) -> None:
        """The caller saw an I/O error on ``card_id``: counts as a bad observation of its path
        at the next poll (the card goes out after ``sick_polls`` bad polls in a row)."""
        self._cards.report_io_error(card_id)

    def subscribe(self, maxsize: int = 1000) -> Subscription:
        """Change events from now on, for a consumer on the gateway's event loop."""
        sub = Subscription(self._hub, maxsize)
        self._hub.add(sub)
        return sub

    def stats(self) -> GatewayStats:
        fs = self._follower.state if self._follower else None
        poll = self.poll_task
        dead = ""
        if self._started and (poll is None or poll.done()):
            dead = "registry poll task is not running: the view is stale by definition"
        saved = self._state.saved
        problem = dead or (fs.problem if fs else "not started")
        if saved is not None:
            problem = (f"serving the state file ({saved.describe(time.time())}) until etcd "
                       f"answers; {problem}")
        return GatewayStats(
            generation=self._view.generation,
            staleness=self._follower.staleness() if self._follower else None,
            stale=(bool(dead) or bool(fs and fs.problem) or fs is None or fs.last_ok is None
                   or saved is not None),
            problem=problem,
            polls=fs.polls if fs else 0, failed_polls=fs.failed_polls if fs else 0,
            registries_rejected=fs.rejected if fs else 0, version_skew=fs.skew if fs else 0,
            hostile_targets=self._cards.hostile, cards_refused=self._cards.refused,
            registration_failures=self._registration.failures if self._registration else 0,
            layout_ok=self._side.ok,
            events_dropped=sum(getattr(s, "dropped", 0) for s in self._hub._subs),
            loop_errors=self._loop_errors,
            watch_events=fs.events if fs else 0, watch_restarts=self._registry_watch.restarts,
            watch_progress=fs.progress if fs else 0, watch_moves=self._registry_watch.moves,
            watch_member=self._registry_watch.member,
            polls_skipped=self._follower.skipped if self._follower else 0,
            history_resets=self._history_resets, history_note=self._history_note,
            entries_refused=self._vouch.vouching.refused if self._vouch else 0,
            refusals=self._vouch.vouching.problems() if self._vouch else (),
            state_file_age=max(0.0, time.time() - saved.saved_at) if saved else None,
            state_note=self._state.note,
            layout_records_refused=self._side.unreadable,
            view_builds=self._builds,
        )

    # ------------------------------------------------------------------ engine and wipe

    def attach_engine(self, name: str) -> None:
        """Bind the one engine this gateway serves; a second one is refused."""
        self._engine.attach(name)

    def detach_engine(self, name: str) -> None:
        self._engine.detach(name)

    @property
    def engine(self) -> str | None:
        return self._engine.name

    def request_wipe(self) -> None:
        """Always refused in cluster mode: the cards are shared by every gateway."""
        raise self._engine.wipe_refused("on request")

    def _refused(self, msg: str) -> None:
        self._publish(ev.ChangeEvent("refused", detail=msg, generation=self._view.generation))

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Read the registry, then the key layout (each bounded), then run in the
        background. Raises WipeRefused (config asks for a wipe) or LayoutMismatch. If etcd does
        not answer, starts anyway with no cards: placement answers "compute, do not cache"
        until the registry and layout are read. A start where the layout is recorded writes
        nothing (the registration comes after a random start-up delay); the namespace's first
        gateway records its layout here, so that a gateway whose layout differs is refused
        at its start."""
        if self._started:
            return
        if self.config.wipe_on_start:
            raise self._engine.wipe_refused("at start, wipe_on_start is set", tell=False)
        if self._store is None:
            self._store = _make_store(self.config)
        store = self._store
        self._cards.connector = connector.for_config(
            self.config, nvme=self._nvme, sysfs=self._sysfs, read_label=self._read_label,
            worker=self._probe_worker)
        every = self.config.timing.linearizable_every
        # the periodic linearizable poll at a random turn of its cycle: gateways started
        # together (a rollout) do not send theirs in step for ever after
        self._follower = follower = Follower(
            store, cluster=self.config.cluster, call_timeout=self._call, clock=self._clock,
            linearizable_every=every, phase=min(every - 1, int(self._rng.random() * every)))
        self._registration = Registration(store, self.id, ttl=self.config.timing.registration_ttl,
                                          call_timeout=self._call, rng=self._rng)
        self._side.registration = self._registration
        self._poll_now = asyncio.Event()
        try:
            await self._start_in(follower)
        except BaseException:
            # a refused (or cancelled) start leaves nothing running
            await (self.stop() if self._started else self._abandon())
            raise

    async def _start_in(self, follower: Follower) -> None:
        """``start`` from the first reads on: the registry and the layout, then the loops."""
        saved = await self._state.read()
        if saved is not None:           # its cards' subsystems: strays of the previous run
            self._cards.remember(saved.registry)
        # the first registry read is never delayed; the namespace's layout record is read
        # in the same request (one read-only transaction: a start storm's reads a start less)
        first, layout_read = await self._poll_once(also=self._side.layout_read())
        if self.config.watch:
            follower.proved_at_start()
        self._poll_backoff.failures = 0 if first.outcome != "failed" else 1
        await self._side.check_layout(read=layout_read)
        if saved is not None:
            self._serve_saved(saved, first)
        if self._vouch is not None:
            await self._vouch.at_start()
        self._started = True
        loops = [self._poll_loop(), self._side.run(), self._cards.probe_round_loop()]
        if self.config.watch:
            loops.append(self._registry_watch.run(follower))
        if self._vouch is not None:
            loops.append(self._vouch.run())
        self._tasks = [asyncio.create_task(c, name=f"awide-gateway-{i}")
                       for i, c in enumerate(loops)]
        if self._cards.first_probe:
            waits = [asyncio.create_task(e.wait()) for e in self._cards.first_probe.values()]
            try:
                await asyncio.wait(waits, timeout=self.config.start_timeout)
            finally:
                for w in waits:
                    w.cancel()
        log.info("gateway %s started: namespace %s placement %s generation %d",
                 self.id, self.namespace, self.placement_name, self._view.generation)

    async def _abandon(self) -> None:
        """A start that raised before its loops ran: the tasks it started (the card workers of
        the registry it read, their connections' releases) are cancelled and awaited and the
        store closed, so that a gateway refused at its start leaves nothing running (a card
        worker left behind, cancelled only when the event loop closes, can catch its probe
        starting nvme-cli, which asyncio cannot cancel cleanly there: the loop's close then
        waits for ever). Bounded as ``stop``: a cancelled probe ends within its command's
        kill and reap."""
        await self._cancel_tasks()
        await self._close_store()

    async def _cancel_tasks(self) -> None:
        """The gateway's loops, card workers and releases cancelled, and awaited."""
        tasks, self._tasks = self._tasks + self._cards.take_tasks(), []
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def stop(self) -> None:
        if not self._started:
            await self._abandon()
            return
        self._started = False
        await self._state.flush(self._call * 3)
        await self._cancel_tasks()
        if self._registration is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(self._call * 2):
                    await self._registration.close()
        await self._close_store()
        self._hub.close_all()

    def reload_credentials(self) -> str:
        """Read the etcd CA, certificate, key and password files again (an operator rotated
        them; the CLI calls this on SIGHUP). New connections to etcd use them; calls and
        watch streams already running finish on their connection. A file that cannot be used
        raises ``CredentialError`` (a ``ValueError``) naming it, and the credentials in use
        stay. Returns what was done, one line without secrets. Before ``start`` (or with a
        store passed in that reads no files) there is nothing to reload."""
        reload = getattr(self._store, "reload_credentials", None)
        if reload is None:
            return "no etcd store with credential files (not started?)"
        what = str(reload())
        log.info("gateway %s: %s", self.id, what)
        return what

    @property
    def store(self) -> Store | None:
        """The store this gateway reads (None before start and after stop)."""
        return self._store

    @property
    def poll_task(self) -> asyncio.Task[None] | None:
        """The registry poll loop's task while the gateway runs."""
        return self._tasks[0] if self._tasks else None

    async def poll_once(self) -> None:
        """One registry poll now, outside the loop's schedule (tools and tests)."""
        await self._poll_once()

    def _started_store(self) -> Store:
        if self._store is None:
            raise NotStarted("the gateway has no store (not started, or stopped)")
        return self._store

    async def _close_store(self) -> None:
        if self._own_store and self._store is not None:
            with contextlib.suppress(Exception):
                await self._store.close()
            self._store = None

    async def __aenter__(self) -> ClusterGateway:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # ------------------------------------------------------------------ state file

    def _serve_saved(self, saved: sf.SavedState, first: FollowStep) -> None:
        """The first poll is done: serve ``saved`` if etcd did not answer it."""
        assert self._follower is not None
        if not self._state.serve(saved, first, etcd_registry=self._follower.state.registry,
                                 layout=self._side.layout, layout_ok=self._side.ok):
            return
        if self._state.layout_from_file:
            self._side.taken_from_file()
        self._tasks.extend(self._cards.applied(None, saved.registry, 0.0))
        now = time.time()
        log.warning("gateway %s serving from its state file, marked stale: %s; etcd did not "
                    "answer: %s", self.id, saved.describe(now), first.detail or first.outcome)
        self._publish(ev.ChangeEvent("stale", generation=saved.generation,
                                     detail=f"serving the state file ({saved.describe(now)})"))
        self._rebuild()

    def _save_state(self) -> None:
        """Offer the registry in use and the layout verified for the state file."""
        self._state.save(self._in_use())

    # ------------------------------------------------------------------ registry

    def _registry(self) -> Registry | None:
        """The registry the gateway uses (None: none read yet, or not started): the one the
        follower holds, with only the entries the hosts' reports vouch for; the state file's
        while it is served and nothing was read from etcd."""
        reg = self._in_use()
        if reg is None and self._state.saved is not None:
            return self._state.saved.registry
        return reg

    def _in_use(self) -> Registry | None:
        """The registry read from etcd that the gateway uses (only the vouched entries when
        vouching)."""
        return self._vouch.used if self._vouch is not None else self._followed()

    def _followed(self) -> Registry | None:
        """The registry the follower holds (None: none read yet, or not started)."""
        return self._follower.state.registry if self._follower else None

    def _vouch_loop(self, config: GatewayConfig) -> VouchLoop:
        """The vouching's loop. Imported here: only a vouching gateway reads the hosts'
        reports, and their decoder (``contract.report``, its pydantic models) is not loaded
        in one that does not (``vouch: false``)."""
        from awide_gateway_cluster.vouch_loop import VouchLoop  # noqa: PLC0415 - vouch only
        from awide_gateway_cluster.vouching import Vouching  # noqa: PLC0415 - vouch only
        return VouchLoop(
            Vouching(config.allowed()), source=self._followed, store=self._started_store,
            changed=self._vouched, failed=self._loop_failed, interval=self._interval,
            call_timeout=self._call)

    def _vouched(self, old: Registry | None, used: Registry) -> None:
        """The hosts' reports changed what the gateway uses of the registry."""
        self._tasks.extend(self._cards.applied(old, used, SETTLE * self._interval))
        self._rebuild()
        self._save_state()

    # ------------------------------------------------------------------ etcd side

    def _gateway_record(self) -> GatewayRecord:
        """This gateway's ``gateways/<id>`` record as it stands."""
        assert self._follower is not None
        v = self._view
        return GatewayRecord(
            id=self.id, host=self.config.host, pod=self.config.pod,
            namespace=self.namespace, placement=self.placement_name,
            fingerprint=v.fingerprint, generation=v.generation, engine=self._engine.name,
            version=__version__, stale=bool(self._follower.state.problem),
            algorithms=PLACEMENT_ALGORITHMS,
            **(self._vouch.record_fields() if self._vouch is not None else {}),
            **self._state.record_fields(time.time()),
        )

    def _loop_failed(self, what: str, e: BaseException) -> None:
        why = clean_text(f"{what} failed: {type(e).__name__}: {e}", 300)
        self._loop_errors += 1
        if why != self._last_loop_error:
            log.error("%s; the loop goes on", why, exc_info=e)
        self._last_loop_error = why

    # ------------------------------------------------------------------ view

    def _build(self) -> vw.SlotView:
        reg = self._registry()
        self._builds += 1
        # the fingerprint depends on the slot table and the placement algorithm only (the
        # namespace and placement are the gateway's own): computed again when they change
        table = reg.slots if reg else slotfn.EMPTY
        key = (table.slots, self._side.layout.algorithm)
        if key != self._fingerprint_of:
            self._fingerprint = lay.fingerprint(self.namespace, self.placement_name, table,
                                                key[1])
            self._fingerprint_of = key
        fp = self._fingerprint
        return vw.build(reg, self._cards.local, namespace=self._side.namespace_id,
                        placement=self.placement_name, fingerprint=fp,
                        layout_ok=self._side.ok, layout_problem=self._side.problem,
                        saved_at=self._state.saved.saved_at if self._state.saved else None,
                        memo=self._slot_memo)

    def _rebuild(self) -> None:
        old, new = self._view, self._build()
        if new == old:
            return
        self._view = new                        # the one atomic swap readers see
        for e in ev.diff(old, new):
            self._publish(e)

    def _publish(self, e: ev.ChangeEvent) -> None:
        level = logging.WARNING if e.kind in ("out", "moved", "stale", "refused",
                                              "layout_mismatch") else logging.INFO
        if log.isEnabledFor(level):         # the line is made only when it is logged
            log.log(level, "%s", e.line())
        self._hub.publish(e)


def _make_store(config: GatewayConfig) -> EtcdStore:
    return store_from(config.etcd, config.cluster)

