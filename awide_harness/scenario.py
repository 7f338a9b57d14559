"""The tour: one fault after another on an embedded cluster, each measured on every gateway.

``run_tour(cluster, bounds, say)`` makes, in order (cards of the last storage host, the leader
being the first storage host when the spec says ``first_leader``):

1. ``card_sick``: a card's store service dies -> every gateway shows it out (*detection*);
2. ``card_back``: the store comes back -> in again everywhere (*return*);
3. ``card_added``: a new labelled directory, config rewritten, SIGHUP -> every gateway places
   it and uses it (*join*); placed cards keep their slots;
4. ``leader_killed``: SIGKILL of the leader daemon -> another host leads (*leader_election*,
   read from etcd) and every gateway shows the dead host's cards out (*leader_handover*); the
   other cards stay in service throughout;
5. ``leader_restarted``: the killed daemon starts again -> its cards in everywhere (*restart*);
6. ``etcd_member_frozen``: SIGSTOP of the etcd raft leader, held ``bounds.freeze_hold`` s ->
   every gateway keeps every card in service and no daemon dies;
7. ``card_sick_member_frozen``: with that member still frozen a store dies -> out everywhere
   (*detection_member_frozen*);
8. ``etcd_member_thawed``: SIGCONT, the store comes back -> in everywhere (*return_after_thaw*).

After each event it waits (``bounds.agreement``) until all gateways show the same slot table
and states. ``tour(work_dir, spec)`` starts the cluster, runs the tour, stops everything and
returns the report document (see ``report``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from awide_harness.cluster import EmbeddedCluster, EmbeddedClusterError
from awide_harness.report import EventOutcome, report_doc
from awide_harness.spec import Bounds, ClusterSpec, Timing
from awide_harness.spec import bounds as derive_bounds
from awide_harness.views import (
    GatewayView,
    Predicate,
    card_in,
    card_out,
    cards_in,
    cards_out,
)

Say = Callable[[str], None]


def tour_spec(quick: bool, etcd_binary: str | None = None, *,
              secure: bool = False) -> ClusterSpec:
    """The tour's cluster: 3 etcd, s1 and s2 with 2 directory cards each, w1, 2 gateways
    (``secure``: TLS, authentication, a least-privilege user each)."""
    return ClusterSpec(cluster="tour", storage_hosts=2, cards_per_host=2, witness_hosts=1,
                       gateways=2, timing=Timing.quick() if quick else Timing(),
                       etcd_binary=etcd_binary, first_leader="s1", secure=secure)


def stayed(history: list[GatewayView], pred: Predicate, start: float, end: float) -> bool:
    """Pure: every view current at some moment of [start, end] satisfied ``pred``."""
    current = None
    views = []
    for v in history:
        if v.seen_at <= start:
            current = v
        elif v.seen_at <= end:
            views.append(v)
    if current is not None:
        views.insert(0, current)
    return all(pred(v) for v in views)


def slots_of(view: GatewayView | None, card_ids: Iterable[str]) -> dict[str, int | None]:
    return {c: (view.slot_of(c) if view else None) for c in card_ids}


class Tour:
    def __init__(self, cluster: EmbeddedCluster, bounds: Bounds, say: Say = print) -> None:
        self.c = cluster
        self.b = bounds
        self.say = say
        self.begin = time.monotonic()
        self.events: list[EventOutcome] = []

    # ------------------------------------------------------------------ measuring

    def measure(self, name: str, what: str, expect: str, pred: Predicate | None, t: float,
                bound: float, *, figure: str | None = None,
                checks: Callable[[float], dict[str, bool]] | None = None,
                extra: dict[str, Any] | None = None,
                more_figures: dict[str, dict[str, Any]] | None = None) -> EventOutcome:
        seen: dict[str, float | None] = {}
        if pred is not None:
            abs_seen = self.c.wait_until(pred, bound, since=t)
            seen = {g: (None if x is None else max(0.0, x - t)) for g, x in abs_seen.items()}
        agreed_at = self.c.wait_agree(self.b.agreement)
        end = time.monotonic()
        outcome = EventOutcome(
            name=name, what=what, expect=expect, at=t - self.begin, bound=bound, seen=seen,
            agreed=agreed_at is not None,
            disagreement="" if agreed_at is not None else self.c.disagreement(),
            checks=checks(end) if checks else {}, figure=figure, extra=extra or {},
            more_figures=more_figures or {})
        self.events.append(outcome)
        worst = outcome.worst
        took = "n/a" if not seen else ("NOT SEEN" if worst is None else f"{worst:.2f} s")
        self.say(f"{'ok ' if outcome.ok else 'BAD'} {name}: {what}; slowest gateway {took} "
                 f"(bound {bound:g} s){'' if outcome.agreed else '; gateways DISAGREE'}")
        return outcome

    def kept(self, pred: Predicate, start: float,
             label: str = "kept the other cards in service") -> Callable[[float], dict[str, bool]]:
        """A checks() that says whether every gateway's views from ``start`` satisfied pred."""
        def check(end: float) -> dict[str, bool]:
            return {f"{g}: {label}": stayed(self.c.history(g), pred, start, end)
                    for g in self.c.gateway_ids}
        return check

    # ------------------------------------------------------------------ the events

    def run(self) -> list[EventOutcome]:
        c, b = self.c, self.b
        last = c.storage_hosts[-1]
        sick_key = c.cards_of(last)[0]
        sick = c.card_id(sick_key)
        others = [c.card_id(k) for k in c.cards if k != sick_key]

        t = c.card_store_kill(sick_key)
        self.measure("card_sick", f"store service of {sick_key} (card {sick}) killed",
                     f"card {sick} out", card_out(sick), t, b.detection, figure="detection",
                     checks=self.kept(cards_in(others), t))

        t = c.card_store_start(sick_key)
        self.measure("card_back", f"store service of {sick_key} started again",
                     f"card {sick} in service", card_in(sick), t, b.return_, figure="return")

        before = c.gateway_views()
        placed = [c.card_id(k) for k in c.cards]
        new_key = c.add_card(last)
        new = c.card_id(new_key)
        t = c.last_fault_at or time.monotonic()

        def slots_kept(_end: float) -> dict[str, bool]:
            out = {}
            for g, v in c.gateway_views().items():
                was = slots_of(before.get(g), placed)
                out[f"{g}: placed cards kept their slots"] = slots_of(v, placed) == was
                prev = before.get(g)
                free = [i for i, s in enumerate(prev.slots) if s is None] if prev else []
                out[f"{g}: new card took a free slot"] = v is not None and v.slot_of(new) in free
            return out

        self.measure("card_added", f"new directory card {new_key} (card {new}), SIGHUP to "
                     f"{last}", f"card {new} placed and in service", card_in(new), t, b.join,
                     figure="join", checks=slots_kept)

        self._leader_events()
        self._etcd_events()
        return self.events

    def _leader_events(self) -> None:
        c, b = self.c, self.b
        leader = c.leader_host() or c.hosts[0]
        dead_cards = [c.card_id(k) for k in c.cards_of(leader)]
        others = [c.card_id(k) for k in c.cards if c.card_host(k) != leader]
        t = c.kill_daemon(leader)
        elected = c.wait_leader(b.election, other_than=leader)
        election = None if elected is None else round(elected[1] - t, 3)
        extra = {"old_leader": leader, "new_leader": elected[0] if elected else None,
                 "election_seconds": election}
        more = {"leader_election": {"seconds": election, "bound": b.election}}

        def checks(end: float) -> dict[str, bool]:
            out = {"another host took the lead within its bound": elected is not None}
            out.update(self.kept(cards_in(others), t)(end))
            return out

        if dead_cards:
            self.measure("leader_killed", f"leader daemon {leader} SIGKILLed",
                         f"{leader}'s cards {', '.join(dead_cards)} out", cards_out(dead_cards),
                         t, b.handover, figure="leader_handover", checks=checks, extra=extra,
                         more_figures=more)
        else:
            self.measure("leader_killed", f"leader daemon {leader} (no cards) SIGKILLed",
                         "every card stays in service", None, t, b.handover, checks=checks,
                         extra=extra, more_figures=more)
        t = c.restart_daemon(leader)
        if dead_cards:
            self.measure("leader_restarted", f"daemon {leader} started again",
                         f"{leader}'s cards in service", cards_in(dead_cards), t, b.restart,
                         figure="restart")
        else:
            self.measure("leader_restarted", f"daemon {leader} started again",
                         "every card in service", cards_in(others), t, b.restart)

    def _etcd_events(self) -> None:
        c, b = self.c, self.b
        all_cards = [c.card_id(k) for k in c.cards]
        idx = c.etcd_leader_index()
        raft = "raft leader" if idx is not None else "member"
        idx = 0 if idx is None else idx
        member = c.etcd.member(idx).name
        t = time.monotonic()
        c.etcd.freeze(idx)
        time.sleep(b.freeze_hold)      # not a wait: the member stays frozen this long

        def held(end: float) -> dict[str, bool]:
            out = self.kept(cards_in(all_cards), t, "kept every card in service")(end)
            out["every daemon still running"] = all(c.daemon_alive(h) for h in c.hosts)
            return out

        stale = {g: sum(1 for e in c.events(g) if e.get("kind") == "stale" and e["t"] >= t)
                 for g in c.gateway_ids}
        self.measure("etcd_member_frozen", f"etcd {member} ({raft}) SIGSTOPped, held "
                     f"{b.freeze_hold:g} s", "every gateway keeps every card in service", None,
                     t, b.freeze_hold, checks=held,
                     extra={"member": member, "stale_events": stale})

        key = next(k for k in reversed(c.cards) if c.card_host(k) in c.storage_hosts)
        cid = c.card_id(key)
        others = [x for x in all_cards if x != cid]
        t = c.card_store_kill(key)
        self.measure("card_sick_member_frozen", f"store of {key} (card {cid}) killed while "
                     f"etcd {member} is frozen", f"card {cid} out", card_out(cid), t,
                     b.detection, figure="detection_member_frozen",
                     checks=self.kept(cards_in(others), t))

        c.etcd.thaw(idx)
        t = c.card_store_start(key)
        healthy = True
        try:
            c.etcd.wait_healthy(timeout=5.0)
        except Exception:  # noqa: BLE001 - reported as a failed check
            healthy = False
        self.measure("etcd_member_thawed", f"etcd {member} SIGCONTed, store of {key} started "
                     "again", "every card in service", cards_in(all_cards), t, b.return_,
                     figure="return_after_thaw",
                     checks=lambda _e: {"etcd healthy again": healthy})


def cluster_facts(c: EmbeddedCluster) -> dict[str, Any]:
    return {"name": c.spec.cluster, "etcd_members": c.etcd.size, "etcd_version": c.etcd.version,
            "hosts": {h: c.spec.role(h) for h in c.hosts}, "gateways": list(c.gateway_ids),
            "cards": {k: c.card_id(k) for k in c.cards}, "work_dir": str(c.work_dir)}


def tour(work_dir: str | Path, spec: ClusterSpec, *, quick: bool, say: Say = print,
         stop_timeout: float = 2.0) -> dict[str, Any]:
    """Start the cluster, run the tour, stop everything; the report document."""
    b = derive_bounds(spec.timing)
    began = time.monotonic()
    events: list[EventOutcome] = []
    facts: dict[str, Any] = {"name": spec.cluster}
    error = ""
    cluster = EmbeddedCluster(work_dir, spec, stop_timeout=stop_timeout)
    try:
        with cluster:
            facts = cluster_facts(cluster)
            say(f"cluster up in {time.monotonic() - began:.1f} s: etcd {cluster.etcd.version} "
                f"x{cluster.etcd.size}, hosts {', '.join(cluster.hosts)}, gateways "
                f"{', '.join(cluster.gateway_ids)}, {len(cluster.cards)} cards; "
                f"leader {cluster.leader_host()}")
            t = Tour(cluster, b, say)
            try:
                t.run()
            finally:
                events = t.events
                facts = cluster_facts(cluster)     # with the cards the tour added
    except EmbeddedClusterError as e:
        error = f"the cluster did not start or failed: {e}"
    except Exception as e:  # noqa: BLE001 - the report says what broke
        error = f"the tour failed: {type(e).__name__}: {e}"
    return report_doc(events, timing=spec.timing, bounds=b, quick=quick, cluster=facts,
                      duration=time.monotonic() - began, error=error)
