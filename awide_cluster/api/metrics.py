"""The daemon's Prometheus metrics, on a per-daemon ``CollectorRegistry`` (never the global one,
so several daemons in one process, as in tests and the demo, do not mix their figures).

The daemon constructs one ``DaemonMetrics`` and calls the ``record``-style methods below from
its loop; ``/metrics`` renders ``exposition()``. Every metric is listed in docs/metrics.md.

Conventions (shared with the gateway's, ``awide_gateway_cluster.metrics``): wherever a card is
meant, ``card`` is its id and ``card_name`` its name in its host's config, so the daemons' and
the gateways' series join on ``card``; every series carries the constant label ``cluster``; no
``_created`` series (``awide_cluster.telemetry`` switches prometheus-client's off).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, ProcessCollector
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from awide_cluster.contract.registry import STATES, Registry
from awide_cluster.contract.windows import Windows
from awide_cluster.store.errors import WRITE_REFUSAL_REASONS
from awide_cluster.telemetry import ConstantLabels

# etcd calls are bounded at 0.5 s by default: buckets resolve the interesting part below it.
_ETCD_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
_POLL_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_PROBE_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0)
PROBE_CHILDREN_KEPT = 4096      # labelled probe series whose children are kept for reuse


def error_name(error: BaseException | str | None) -> str:
    """The ``error`` label: the exception's type name (e.g. ``Timeout``), a string as is."""
    if error is None:
        return ""
    if isinstance(error, BaseException):
        return type(error).__name__
    return error


class WatchReopens(Collector):
    """``awide_watch_reopened_total{watch}``: the counts ``source()`` gives at each scrape (the
    watches count their own re-openings; the daemon sums them over its watches)."""

    def __init__(self) -> None:
        self.source: Callable[[], dict[str, int]] = dict

    def collect(self) -> Iterator[Metric]:
        fam = CounterMetricFamily(
            "awide_watch_reopened", "Watch streams of this daemon re-opened after a stall (no "
            "event and no progress notification within the bound) or a broken stream, by watch",
            labels=["watch"])
        for watch, n in sorted(self.source().items()):
            fam.add_metric([watch], n)
        yield fam


class DaemonMetrics:
    """All metrics of one daemon. ``registry`` is this daemon's own CollectorRegistry."""

    def __init__(self, *, host: str, role: str, version: str, cluster: str = "") -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.labelled = ConstantLabels(self.registry, {"cluster": cluster})
        r = self.registry
        self.build = Info("awide_build", "Daemon identity", registry=r)
        # process_open_fds against process_max_fds (and CPU, memory): Linux's /proc, read at
        # each scrape by prometheus_client (docs/dependencies.md: no psutil)
        ProcessCollector(registry=r)
        self.build.info({"host": host, "role": role, "version": version})

        self.polls = Counter("awide_polls", "Main loop turns (polls), by result",
                             ["result"], registry=r)
        self.poll_duration = Histogram("awide_poll_duration_seconds",
                                       "Time one main loop turn took (excluding the sleep)",
                                       buckets=_POLL_BUCKETS, registry=r)
        self.watch_reopens = WatchReopens()
        r.register(self.watch_reopens)
        self.heartbeat_age = Gauge("awide_loop_heartbeat_age_seconds",
                                   "Seconds since the main loop last turned (at scrape time)",
                                   registry=r)

        self.probes = Counter("awide_probe_results", "Card probe results, by card, probe, result",
                              ["card", "card_name", "probe", "result"], registry=r)
        self.probe_duration = Histogram("awide_probe_duration_seconds",
                                        "Time one card probe took", ["probe"],
                                        buckets=_PROBE_BUCKETS, registry=r)
        self._probe_children: dict[tuple[str, str, str, bool], Counter] = {}
        self._probe_timers: dict[str, Histogram] = {}
        self.card_healthy = Gauge("awide_local_card_healthy",
                                  "1 if this host's latest probe of the card was healthy, else 0",
                                  ["card", "card_name"], registry=r)

        self.card_state = Gauge("awide_card_state",
                                "Registry state of each card: 1 for its current state, 0 others",
                                ["card", "card_name", "host", "state"], registry=r)
        self.cards = Gauge("awide_cards", "Cards in the registry, by state", ["state"], registry=r)
        self.cards_unplaced = Gauge("awide_cards_unplaced",
                                    "Registry cards with no slot (a 9th card, a conflict)",
                                    registry=r)
        self.cards_conflict = Gauge("awide_cards_conflict",
                                    "Registry cards in a serial conflict", registry=r)
        self.registry_generation = Gauge("awide_registry_generation",
                                         "Generation of the registry this daemon last read or "
                                         "wrote", registry=r)
        self.registry_writes = Counter("awide_registry_writes",
                                       "Registry writes attempted by this daemon as leader, by "
                                       "result (written, conflict, error)",
                                       ["result"], registry=r)
        self.registry_rejected = Counter("awide_registry_rejected",
                                         "Registry documents read and refused (corrupt, unknown "
                                         "schema), last good copy kept", ["reason"], registry=r)

        self.reports = Counter("awide_reports", "Host reports this daemon wrote, by result",
                               ["result"], registry=r)
        self.reports_rejected = Counter("awide_reports_rejected",
                                        "Peer host reports read by the leader and refused",
                                        ["host"], registry=r)

        self.writes_refused = Counter("awide_writes_refused",
                                      "Writes of this daemon that etcd refused or did not "
                                      "confirm, by write (report, registry) and reason "
                                      "(nospace, auth, timeout, unavailable, other)",
                                      ["write", "reason"], registry=r)
        for write in ("report", "registry"):      # every label set from 0: rate() sees it
            for reason in WRITE_REFUSAL_REASONS:
                self.writes_refused.labels(write=write, reason=reason)
        self.write_outage_gauge = Gauge("awide_write_outage",
                                        "1 while this daemon, as leader, judges that the hosts "
                                        "cannot write (reports that did not advance count "
                                        "against no card), else 0", registry=r)

        self.is_leader = Gauge("awide_is_leader", "1 while this daemon holds the leader key",
                               registry=r)
        self.intents_pending = Gauge("awide_intents_pending",
                                     "Keys under intents/ at this daemon's last leader cycle "
                                     "(over 64: a flood, taken 64 a cycle)",
                                     registry=r)
        self.leader_changes = Counter("awide_leader_changes",
                                      "Changes of the leader daemon seen by this daemon",
                                      registry=r)
        self.etcd_voting_members = Gauge("awide_etcd_voting_members",
                                         "Voting members of the etcd cluster, as this daemon "
                                         "last read its member list (learners not counted)",
                                         registry=r)
        self.prefix_keys = Gauge("awide_prefix_keys",
                                 "Keys under the cluster prefix, as this daemon last counted "
                                 "them (at start, then beside each member-list read)",
                                 registry=r)
        self.prefix_key_flood = Gauge("awide_prefix_key_flood",
                                      "1 while the last count of keys under the cluster prefix "
                                      "was over the bound status reads (a key flood: status "
                                      "too_many_keys), else 0", registry=r)
        self.etcd_history_resets = Counter("awide_etcd_history_resets",
                                           "New etcd histories this daemon followed (a restored "
                                           "or rebuilt etcd: lower revisions or another "
                                           "cluster id, answered by a quorum of the members)",
                                           registry=r)
        self.leader_cycles = Counter("awide_leader_cycles",
                                     "Leader cycles this daemon ran, by what started them "
                                     "(poll: its own; report: a host report that arrived; "
                                     "term: the first of a term won on the watch)",
                                     ["trigger"], registry=r)

        self.etcd_duration = Histogram("awide_etcd_call_duration_seconds",
                                       "Duration of etcd calls, by operation", ["op"],
                                       buckets=_ETCD_BUCKETS, registry=r)
        self.etcd_errors = Counter("awide_etcd_call_errors",
                                   "Failed etcd calls, by operation and error type",
                                   ["op", "error"], registry=r)
        self.loop_errors = Counter("awide_loop_errors",
                                   "Main loop turns that raised and were survived, by error type",
                                   ["error"], registry=r)
        self.values_refused = Counter("awide_etcd_values_refused",
                                      "Values read from etcd and refused (corrupt, too large, "
                                      "forged, from an unknown host), by problem code",
                                      ["problem"], registry=r)
        self.registry_repairs = Counter("awide_registry_repairs",
                                        "Registry documents the leader rewrote from its last "
                                        "good state, by what it found in etcd", ["found"],
                                        registry=r)

        self.card_silenced = Gauge("awide_card_silenced",
                                   "1 while an operator's silence of the card is in force, else "
                                   "0 (exported by the leader only; the alert rules carry it "
                                   "as the label silenced)",
                                   ["card", "card_name", "host"], registry=r)
        self.paused = Gauge("awide_paused",
                            "1 while the cluster is paused (the leader takes no card out), "
                            "else 0 (exported by the leader only)", registry=r)
        self.host_maintenance = Gauge("awide_host_maintenance",
                                      "1 while the host is in a maintenance window (exported "
                                      "by the leader only)", ["host"], registry=r)
        self._silenced_seen: set[tuple[str, str, str]] = set()
        self._maintenance_seen: set[str] = set()
        self._cards_seen: set[tuple[str, str, str]] = set()
        self._local_ids: dict[str, str] = {}        # card name on this host -> id labelled
        # card name -> (id, its health gauge child, the value last set): set again only when
        # it changes (a turn observes every card; the labels are looked up once)
        self._local_children: dict[str, tuple[str, Gauge, int]] = {}
        # what observe_silenced last exported (the same windows and cards: nothing to set)
        self._silenced_shown: tuple[object, ...] | None = None
        self._etcd_timers: dict[str, Histogram] = {}    # op -> its duration child, kept
        self._leader: str | None = None
        self._leader_known = False

    # ------------------------------------------------------------------ main loop
    def poll_done(self, seconds: float, *, ok: bool = True) -> None:
        self.polls.labels(result="ok" if ok else "error").inc()
        self.poll_duration.observe(max(0.0, seconds))

    def loop_error(self, error: str) -> None:
        self.loop_errors.labels(error=error[:64]).inc()

    def value_refused(self, problem: str) -> None:
        """``problem``: a problem code of docs/operations.md (a bounded set)."""
        self.values_refused.labels(problem=problem).inc()

    def registry_repaired(self, found: str) -> None:
        """``found``: corrupt, unknown_schema, missing, foreign, or too_large."""
        self.registry_repairs.labels(found=found).inc()

    def bind_watch_reopens(self, counts: Callable[[], dict[str, int]]) -> None:
        """Make ``awide_watch_reopened_total`` read ``counts()`` (by watch) at each scrape."""
        self.watch_reopens.source = counts

    def bind_heartbeat(self, age: Callable[[], float]) -> None:
        """Make ``awide_loop_heartbeat_age_seconds`` read ``age()`` at each scrape."""
        self.heartbeat_age.set_function(age)

    # ------------------------------------------------------------------ probes
    def probe_result(self, card: str, name: str, probe: str, ok: bool,
                     seconds: float | None = None) -> None:
        """``card``: the card's id ("" while unknown), ``name``: its name on this host."""
        # the labelled children are kept (a probe series is never removed): the labels are
        # looked up once, not for every probe of every turn
        key = (card, name, probe, ok)
        child = self._probe_children.get(key)
        if child is None:
            child = self.probes.labels(card=card, card_name=name, probe=probe,
                                       result="ok" if ok else "fail")
            if len(self._probe_children) < PROBE_CHILDREN_KEPT:
                self._probe_children[key] = child
        child.inc()
        if seconds is not None:
            timer = self._probe_timers.get(probe)
            if timer is None:
                timer = self.probe_duration.labels(probe=probe)
                if len(self._probe_timers) < PROBE_CHILDREN_KEPT:
                    self._probe_timers[probe] = timer
            timer.observe(max(0.0, seconds))

    def local_card(self, card: str, name: str, healthy: bool) -> None:
        """This host's card ``name`` (id ``card``, "" while unknown) was last seen healthy or
        not; a card whose id changed (another card under that name) leaves its old series."""
        value = 1 if healthy else 0
        kept = self._local_children.get(name)
        if kept is not None and kept[0] == card:
            if kept[2] != value:
                kept[1].set(value)
                self._local_children[name] = (card, kept[1], value)
            return
        was = self._local_ids.get(name)
        if was is not None and was != card:
            try:
                self.card_healthy.remove(was, name)
            except KeyError:
                pass
        self._local_ids[name] = card
        child = self.card_healthy.labels(card=card, card_name=name)
        child.set(value)
        if len(self._local_children) < PROBE_CHILDREN_KEPT:
            self._local_children[name] = (card, child, value)

    # ------------------------------------------------------------------ registry
    def observe_registry(self, reg: Registry) -> None:
        """Set generation and card-state gauges from a registry read or written."""
        self.registry_generation.set(reg.generation)
        now: set[tuple[str, str, str]] = set()
        counts = dict.fromkeys(STATES, 0)
        for c in reg.cards:
            now.add((c.id, c.name, c.host))
            counts[c.state] += 1
            for s in STATES:
                self.card_state.labels(card=c.id, card_name=c.name, host=c.host, state=s).set(
                    1 if s == c.state else 0)
        for card, name, host in self._cards_seen - now:   # forgotten cards leave the output
            for s in STATES:
                try:
                    self.card_state.remove(card, name, host, s)
                except KeyError:
                    pass
        self._cards_seen = now
        for s, n in counts.items():
            self.cards.labels(state=s).set(n)
        self.cards_unplaced.set(len(reg.slots.unplaced))
        self.cards_conflict.set(sum(1 for c in reg.cards if c.conflict is not None))

    def observe_silenced(self, reg: Registry | None, windows: Windows | None) -> None:
        """The operator windows in force as the leader decided them (None: this daemon does
        not lead: every series removed): ``awide_card_silenced`` per registry card,
        ``awide_paused``, ``awide_host_maintenance`` per host in a window. Nothing is set
        again when the cards and windows shown are those of the last call (each cycle)."""
        shown = self._silenced_key(reg, windows)
        if shown == self._silenced_shown:
            return
        self._silenced_shown = shown
        now: set[tuple[str, str, str]] = set()
        for c in reg.cards if reg is not None else ():
            now.add((c.id, c.name, c.host))
            on = windows is not None and c.id in windows.cards
            self.card_silenced.labels(card=c.id, card_name=c.name, host=c.host).set(
                1 if on else 0)
        for key in self._silenced_seen - now:
            try:
                self.card_silenced.remove(*key)
            except KeyError:
                pass
        self._silenced_seen = now
        self.paused.set(1 if windows is not None and windows.pause is not None else 0)
        hosts = set(windows.hosts) if windows is not None else set()
        for h in hosts:
            self.host_maintenance.labels(host=h).set(1)
        for h in self._maintenance_seen - hosts:
            try:
                self.host_maintenance.remove(h)
            except KeyError:
                pass
        self._maintenance_seen = hosts

    @staticmethod
    def _silenced_key(reg: Registry | None, windows: Windows | None) -> tuple[object, ...]:
        """What ``observe_silenced`` exports of ``reg`` and ``windows`` (equal: the same)."""
        cards = tuple((c.id, c.name, c.host, windows is not None and c.id in windows.cards)
                      for c in (reg.cards if reg is not None else ()))
        if windows is None:
            return cards, False, ()
        return cards, windows.pause is not None, tuple(sorted(windows.hosts))

    def registry_write(self, result: str) -> None:
        """``result``: written, conflict (fenced or raced) or error."""
        self.registry_writes.labels(result=result).inc()

    def registry_refused(self, reason: str) -> None:
        """``reason``: a short class, e.g. ``corrupt`` or ``unknown_schema``."""
        self.registry_rejected.labels(reason=reason).inc()

    # ------------------------------------------------------------------ reports
    def report_write(self, ok: bool) -> None:
        self.reports.labels(result="written" if ok else "error").inc()

    def write_refused(self, write: str, reason: str) -> None:
        """``write``: report or registry; ``reason``: one of
        ``store.errors.WRITE_REFUSAL_REASONS`` (bounded label values)."""
        self.writes_refused.labels(write=write, reason=reason).inc()

    def write_outage(self, on: bool) -> None:
        self.write_outage_gauge.set(1 if on else 0)

    def report_refused(self, host: str) -> None:
        self.reports_rejected.labels(host=host).inc()

    # ------------------------------------------------------------------ leadership
    def observe_leader(self, holder: str | None, *, me: bool) -> None:
        """Call with the leader key's holder (None: no leader) each turn.

        A change is counted when a leader differs from the previous leader seen; the first
        observation only sets the baseline, and a gap with no leader is not a change by itself.
        """
        self.is_leader.set(1 if me else 0)
        if not me and (self._silenced_seen or self._maintenance_seen):
            self.observe_silenced(None, None)   # only the leader says what is in force
        if holder is None:
            return
        if self._leader_known and holder != self._leader:
            self.leader_changes.inc()
        self._leader, self._leader_known = holder, True

    # ------------------------------------------------------------------ etcd
    def etcd_call(self, op: str, seconds: float, error: BaseException | str | None = None) -> None:
        timer = self._etcd_timers.get(op)
        if timer is None:
            timer = self.etcd_duration.labels(op=op)
            if len(self._etcd_timers) < PROBE_CHILDREN_KEPT:
                self._etcd_timers[op] = timer
        timer.observe(max(0.0, seconds))
        if error is not None:
            self.etcd_errors.labels(op=op, error=error_name(error)).inc()

    @contextmanager
    def etcd_timer(self, op: str, clock: Callable[[], float] = time.monotonic) -> Iterator[None]:
        """``with metrics.etcd_timer("range"): await store.range(...)`` (errors re-raised)."""
        start = clock()
        try:
            yield
        except asyncio.CancelledError:
            raise                               # shutting down: not an etcd error
        except BaseException as e:
            self.etcd_call(op, clock() - start, e)
            raise
        self.etcd_call(op, clock() - start)

    def prefix_keys_counted(self, n: int, *, flood: bool) -> None:
        """``n`` keys under the cluster prefix; ``flood``: over the bound status reads."""
        self.prefix_keys.set(n)
        self.prefix_key_flood.set(1 if flood else 0)

    # ------------------------------------------------------------------ output
    def exposition(self) -> bytes:
        return generate_latest(self.labelled)

    def families(self) -> Iterable[tuple[str, str]]:
        """(name, type) of every metric family, as exposed (for the docs test)."""
        for fam in self.registry.collect():
            yield fam.name, fam.type

