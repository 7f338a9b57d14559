"""The campaign's invariants: pure functions over what was recorded (``history.Recorded``).

Each checker returns a ``Result``: how many checks it made per invariant and the violations it
found. The runner calls ``check_all`` after every fault (continuous checking: a violation is
reported as soon as the fault that exposed it has healed) and once more at the end over the
whole record, with etcd's history replayed from revision 1.

1. ``fencing``: every registry revision was written while its writer held ``leader``: the
   leader key, replayed from etcd's history up to that revision, exists and names the host the
   registry document names as its ``leader``. The runner's own writes (``RunnerWrite``: poison,
   a forged registry or leader record, a deleted key) are not the cluster's: exactly their
   revisions are left out, of the leader key's replay as of the registry's.
2. ``agreement``: after each fault heals, within ``Bounds.agree``: the registry has exactly
   the expected cards in service and every gateway has applied that generation, with the same
   slot table and the same cards in service (and a renamed device found under a new name) —
   and that agreement still holds when the next fault is injected (``settled_at``).
3. ``no_partial_restore``: (a) once a registry revision has a card out, no gateway still has
   it in service ``Bounds.out`` later (until the registry has it in again); (b) every time a
   gateway puts a card (back) in service, the card itself was at its place within the last
   ``Bounds.verify`` seconds (its identity could have checked out).
4. ``identity``: when something else is at a card's place (a label swap), no gateway has the
   card in service ``Bounds.identity`` after the swap, until the card is back.
5. ``bounded``: no gateway registry poll took longer than ``Bounds.poll``; no accessor call
   (``snapshot()``, placement) took longer than ``Bounds.accessor``.
6. ``last_known_state``: while etcd has no quorum, no gateway takes a card out of service
   (unless the card itself left its place).
7. ``registry``: every registry revision the cluster wrote decodes, its generation never goes
   backwards, the key is never deleted by the cluster; no gateway's applied generation goes
   backwards. After the runner wrote the registry by hand (poison, forged, deleted), the next
   revision the cluster writes is the repair: the same slot table as the last good revision
   the cluster wrote, and a generation above every revision seen ("repaired, no slot moved").
   A card only the runner's writes name (forged) never appears in a revision the cluster
   wrote, and no gateway has one in service ``Bounds.forged`` after the forged write.
8. ``detection`` (liveness, so that a frozen registry cannot pass for a healthy one): a card
   whose store died or whose place another card took for at least ``Bounds.detect`` is out in
   the registry within ``Bounds.detect`` and out on every gateway ``Bounds.out`` later; and
   after every fault the daemon holding the leader key is leading (it can write).
9. ``write_outage``: while etcd refuses writes, and for ``Bounds.detect`` after it accepts
   them again (when a late count of "report did not advance" would show), no card that was in
   service goes out, in the registry or on any gateway: no card failed meanwhile.
"""

from __future__ import annotations

import bisect
import functools
from collections import Counter
from dataclasses import dataclass, field, replace

from awide_cluster.contract import registry as regdoc
from awide_cluster.contract.records import LeaderRecord
from tests.faults.campaign_record import (
    GatewayTable,
    KeyEvent,
    Recorded,
    RegistryRev,
    RunnerWrite,
    Truth,
    at,
)

INVARIANTS = ("fencing", "agreement", "no_partial_restore", "identity", "bounded",
              "last_known_state", "registry", "detection", "write_outage")
DETECTED_KINDS = ("store_death", "card_swap")
QUORUM_KINDS = ("etcd_quorum_loss",)
WRITE_OUTAGE_KINDS = ("etcd_refuses_writes",)


@dataclass(frozen=True, slots=True)
class Bounds:
    poll: float          # one gateway registry poll
    accessor: float      # one accessor call on the gateway's hot path
    out: float           # registry has a card out -> no gateway uses it
    identity: float      # another card at a card's place -> no gateway uses it
    verify: float        # a card put in service was itself at its place this recently
    agree: float         # a fault healed -> registry healed and every gateway agrees
    detect: float        # a card's store dead -> out in the registry
    forged: float = 0.0  # a forged registry written by hand -> no gateway uses its cards

    def as_dict(self) -> dict[str, float]:
        return {k: round(getattr(self, k), 3) for k in self.__slots__}


def bounds_for(*, gateway_poll: float, gateway_call: float, daemon_poll: float,
               lease_ttl: float, sick_polls: int, slack: float, process_start: float,
               etcd_election: float = 1.0, label_read: float = 0.5) -> Bounds:
    """The bounds, derived from the timing the cluster runs with.

    ``slack``: scheduling delay allowed on a loaded machine; ``process_start``: how long a
    restarted daemon may take to start reporting; ``label_read``: one directory label read.
    """
    poll = 1.2 * gateway_call + 0.05 + slack          # the follower's own fence + slack
    return Bounds(
        poll=poll,
        accessor=slack,
        out=gateway_poll + poll + slack,
        identity=gateway_poll + label_read + slack,
        verify=label_read + slack,
        agree=(process_start + lease_ttl + (sick_polls + 2) * daemon_poll
               + 2 * gateway_poll + poll + etcd_election + slack),
        # sick_polls bad reports, one stale report of jitter, the leader's cycle phase, the
        # probe, the write
        detect=(sick_polls + 2) * daemon_poll + daemon_poll + 2 * gateway_call + slack,
        # the leader's cycle phase, its reads, the repair's read of the gateway records and
        # the write; then every gateway applies the repaired registry within ``out``
        forged=daemon_poll + 3 * gateway_call + (gateway_poll + poll + slack),
    )


@dataclass(frozen=True, slots=True)
class Violation:
    invariant: str
    t: float
    what: str
    fault: int | None = None

    def key(self) -> tuple:
        return (self.invariant, round(self.t, 3), self.what)


@dataclass
class Result:
    checks: Counter = field(default_factory=Counter)
    violations: list[Violation] = field(default_factory=list)
    heal_times: dict[int, float | None] = field(default_factory=dict)

    def merge(self, other: Result) -> Result:
        self.checks.update(other.checks)
        self.violations.extend(other.violations)
        self.heal_times.update(other.heal_times)
        return self

    def count(self, invariant: str, n: int = 1) -> None:
        self.checks[invariant] += n

    def fail(self, invariant: str, t: float, what: str) -> None:
        self.violations.append(Violation(invariant, t, what))


# ---------------------------------------------------------------- registry documents

def registry_rev(value: bytes, revision: int, t: float) -> RegistryRev:
    """A registry revision as the checkers see it (``generation`` None: did not decode)."""
    return replace(_decoded(value), t=t, revision=revision)


@functools.lru_cache(maxsize=4096)
def _decoded(value: bytes) -> RegistryRev:
    """Decoding is the costly part of re-checking after every fault: once per document."""
    try:
        reg = regdoc.decode(value)
    except regdoc.RegistryError as e:     # the decoder's only error (a BadValue), whatever value
        return RegistryRev(t=0.0, revision=0, generation=None,
                           error=str(e)[:300].encode("utf-8", "backslashreplace").decode())
    return RegistryRev(
        t=0.0, revision=0, generation=reg.generation, leader=reg.leader,
        usable=frozenset(c.id for c in reg.cards if c.usable),
        slots=tuple(reg.slots.slots),
        states=tuple(sorted((c.id, c.state) for c in reg.cards)),
    )


def _ordered(events: tuple[KeyEvent, ...]) -> list[KeyEvent]:
    return sorted(events, key=lambda e: (e.revision, e.key != "leader"))


# ---------------------------------------------------------------- 1. fencing

@functools.lru_cache(maxsize=4096)
def _leader_host(value: bytes) -> str | None:
    rec = LeaderRecord.decode(value)
    return rec.host if rec else None


def runner_revisions(writes: tuple[RunnerWrite, ...]) -> frozenset[int]:
    """The revisions the runner wrote itself (0: a write that was not applied)."""
    return frozenset(w.revision for w in writes if w.revision)


def check_fencing(events: tuple[KeyEvent, ...], writes: tuple[RunnerWrite, ...] = ()) -> Result:
    res = Result()
    holder: KeyEvent | None = None
    mine = runner_revisions(writes)
    for e in _ordered(events):
        if e.revision in mine:
            continue            # not the cluster's: a forged leader record is nobody's holding
        if e.key == "leader":
            holder = e if e.kind == "put" else None
            continue
        if e.key != "registry" or e.kind != "put":
            continue
        rev = registry_rev(e.value, e.revision, e.t)
        if rev.generation is None:
            continue                        # counted (and failed) by the registry invariant
        res.count("fencing")
        if holder is None or holder.revision >= e.revision:
            res.fail("fencing", e.t, f"registry revision {e.revision} (generation "
                     f"{rev.generation}, leader {rev.leader!r}) written while nobody held "
                     "the leader key")
            continue
        who = _leader_host(holder.value)
        if who != rev.leader:
            res.fail("fencing", e.t, f"registry revision {e.revision} (generation "
                     f"{rev.generation}) names leader {rev.leader!r}, but the leader key at "
                     f"that revision (created at {holder.create_revision}) is held by {who!r}")
    return res


# ---------------------------------------------------------------- 7. registry

def check_registry(events: tuple[KeyEvent, ...],
                   tables: dict[str, tuple[GatewayTable, ...]],
                   writes: tuple[RunnerWrite, ...] = ()) -> Result:
    res = Result()
    last_gen: int | None = None                 # the cluster's own writes
    top = 0                                     # every revision that decoded, whoever wrote it
    last_good: RegistryRev | None = None        # the cluster's last good revision
    by_rev = {w.revision: w for w in writes if w.revision}
    pending: RunnerWrite | None = None          # a hand-made registry write not yet repaired
    forged: dict[str, RunnerWrite] = {}         # card id -> the runner's write that named it
    naming = sorted((w for w in writes if w.revision and w.forged_cards),
                    key=lambda w: w.revision)
    for e in _ordered(events):
        while naming and naming[0].revision <= e.revision:
            w = naming.pop(0)
            forged.update({c: w for c in w.forged_cards if c not in forged})
        if e.key != "registry":
            continue
        hand = by_rev.get(e.revision)
        if hand is not None:
            if e.kind == "put":
                rev = registry_rev(e.value, e.revision, e.t)
                top = max(top, rev.generation or 0)
            pending = pending or hand
            continue
        res.count("registry")
        if e.kind == "delete":
            res.fail("registry", e.t, f"registry deleted at revision {e.revision}")
            continue
        rev = registry_rev(e.value, e.revision, e.t)
        if rev.generation is None:
            res.fail("registry", e.t, f"registry revision {e.revision} does not decode: "
                     f"{rev.error}")
            continue
        if last_gen is not None and rev.generation < last_gen:
            res.fail("registry", e.t, f"registry generation went back from {last_gen} to "
                     f"{rev.generation} at revision {e.revision}")
        if pending is not None:
            res.count("registry")
            what = (f"registry revision {e.revision} (generation {rev.generation}), the first "
                    f"the cluster wrote after the runner's {pending.kind} at revision "
                    f"{pending.revision} ({pending.note})")
            if last_good is not None and rev.slots != last_good.slots:
                res.fail("registry", e.t, f"{what}: repaired, but slots moved from "
                         f"{list(last_good.slots)} (generation {last_good.generation}) to "
                         f"{list(rev.slots)}")
            if rev.generation <= top:
                res.fail("registry", e.t, f"{what}: generation not above {top}, the highest "
                         "seen (gateways would refuse it or keep the hand-made one)")
            pending = None
        if forged:
            res.count("registry")
            named = sorted(c for c, _ in rev.states if c in forged)
            if named:
                res.fail("registry", e.t, f"registry revision {e.revision} (generation "
                         f"{rev.generation}) written by the cluster has forged card(s) "
                         f"{named} (from the runner's write at revision "
                         f"{forged[named[0]].revision}: {forged[named[0]].note})")
        last_gen = rev.generation if last_gen is None else max(last_gen, rev.generation)
        top = max(top, rev.generation)
        last_good = rev
    for gw, rows in tables.items():
        prev = 0
        for row in rows:
            res.count("registry")
            if row.generation < prev:
                res.fail("registry", row.t, f"gateway {gw} went back from generation {prev} "
                         f"to {row.generation}")
            prev = max(prev, row.generation)
    return res


def check_forged_unused(rec: Recorded, bounds: Bounds) -> Result:
    """No gateway has a card that only a hand-written registry named in service ``forged``
    seconds after that write (a gateway may apply the forged registry until the leader's
    repair reaches it). The write's time is when the runner's watch saw it (else when it
    was sent)."""
    res = Result()
    seen = {e.revision: e.t for e in rec.key_events}
    for w in rec.writes:
        if not (w.forged_cards and w.revision and w.key == "registry"):
            continue
        deadline = seen.get(w.revision, w.t) + bounds.forged
        fakes = frozenset(w.forged_cards)
        for g in rec.gateways:
            res.count("registry")
            rows: tuple[GatewayTable, ...] = rec.tables.get(g, ())
            state = at(rows, deadline)
            candidates = ([state] if state is not None else []) + [
                r for r in rows if r.t > deadline]
            late = [r for r in candidates if r.in_service & fakes]
            if late:
                row: GatewayTable = late[0]
                res.fail("registry", max(row.t, deadline),
                         f"gateway {g} had forged card(s) {sorted(row.in_service & fakes)} in "
                         f"service {max(row.t, deadline) - deadline + bounds.forged:.2f} s "
                         f"after the forged registry (revision {w.revision}) was written "
                         f"(bound {bounds.forged:.2f} s)")
    return res


# ---------------------------------------------------------------- 2. agreement

def _good(revs: tuple[RegistryRev, ...]) -> tuple[RegistryRev, ...]:
    return tuple(r for r in revs if r.generation is not None)


def agreed(reg: RegistryRev | None, tabs: dict[str, GatewayTable | None],
           gateways: tuple[str, ...], expected_in: frozenset[str],
           renamed: tuple[tuple[str, str, str], ...] = (),
           ahead: dict[int, RegistryRev] | None = None) -> str:
    """"" when healed and agreed, else what is not (for logs).

    ``ahead`` (generation -> revision, from the whole record): a gateway may apply a registry
    revision before the runner's watch has seen it; then that revision is the one compared."""
    newest = max((tb.generation for tb in tabs.values() if tb is not None), default=0)
    if ahead and (reg is None or (reg.generation or 0) < newest) and newest in ahead:
        reg = ahead[newest]
    if reg is None:
        return "no registry"
    if reg.usable != expected_in:
        missing = sorted(expected_in - reg.usable)
        extra = sorted(reg.usable - expected_in)
        return f"registry gen {reg.generation}: not in {missing}, unexpectedly in {extra}"
    for g in gateways:
        tb = tabs.get(g)
        if tb is None:
            return f"{g}: no table"
        if tb.generation != reg.generation:
            return f"{g}: generation {tb.generation}, registry {reg.generation}"
        if tb.table != reg.slots:
            return f"{g}: slot table differs from the registry's"
        if tb.in_service != reg.usable:
            return (f"{g}: in service {sorted(tb.in_service)}, registry has "
                    f"{sorted(reg.usable)}")
    for g, card, old in renamed:
        tb = tabs.get(g)
        s = tb.slot_of(card) if tb else None
        if s is None or s.device is None or s.device == old:
            return f"{g}: {card} not found again under a new device name (was {old})"
    return ""


def settled_at(rec: Recorded, t_from: float, t_until: float,
               renamed: tuple[tuple[str, str, str], ...] = ()) -> float | None:
    """When the agreement that still held at ``t_until`` began (not before ``t_from``), or
    None when it did not hold at ``t_until``: the heal time of a fault is measured to the start
    of the agreement the campaign moved on with, so a late effect of the fault (cards taken
    out after it healed) is not missed."""
    revs = _good(rec.registry)
    reg = at(revs, t_from)
    tabs = {g: at(rec.tables.get(g, ()), t_from) for g in rec.gateways}
    changes: list[tuple[float, int, RegistryRev | GatewayTable]] = []
    rev_times = [r.t for r in revs]
    lo, hi = bisect.bisect_right(rev_times, t_from), bisect.bisect_right(rev_times, t_until)
    changes.extend((r.t, 0, r) for r in revs[lo:hi])
    for g in rec.gateways:
        rows = rec.tables.get(g, ())
        times = [r.t for r in rows]
        lo, hi = bisect.bisect_right(times, t_from), bisect.bisect_right(times, t_until)
        changes.extend((row.t, 1, row) for row in rows[lo:hi])
    changes.sort(key=lambda c: (c[0], c[1]))
    ahead = {r.generation: r for r in revs if r.generation is not None}
    ok = not agreed(reg, tabs, rec.gateways, rec.expected_in, renamed, ahead)
    since: float | None = t_from if ok else None
    for t, _, item in changes:
        if isinstance(item, RegistryRev):
            reg = item
        else:
            tabs[item.gateway] = item
        ok = not agreed(reg, tabs, rec.gateways, rec.expected_in, renamed, ahead)
        if not ok:
            since = None
        elif since is None:
            since = t
    return since


def check_agreement(rec: Recorded, bounds: Bounds, end: float) -> Result:
    res = Result()
    faults = [f for f in rec.faults if not f.skipped and f.t_heal is not None]
    for i, f in enumerate(faults):
        nxt = faults[i + 1].t_inject if i + 1 < len(faults) else end
        heal = f.t_heal
        assert heal is not None
        res.count("agreement")
        t = settled_at(rec, heal, nxt, f.renamed)
        res.heal_times[f.index] = None if t is None else t - heal
        if t is None:
            res.fail("agreement", nxt, f"fault #{f.index} {f.kind} ({f.target}): not healed "
                     "and agreed when the campaign moved on")
        elif t - heal > bounds.agree:
            res.fail("agreement", heal, f"fault #{f.index} {f.kind} ({f.target}): agreed "
                     f"{t - heal:.2f} s after healing, bound {bounds.agree:.2f} s")
    return res


# ---------------------------------------------------------------- 3. no partial restore

def check_out_bound(rec: Recorded, bounds: Bounds) -> Result:
    """A gateway row counts as late when it still has the card in service ``Bounds.out``
    after the registry took it out, and was not built from a later registry generation that
    has the card in again (a gateway may apply that one before the runner's watch sees it)."""
    res = Result()
    revs = _good(rec.registry)
    times = {g: [r.t for r in rec.tables.get(g, ())] for g in rec.gateways}
    for i in range(1, len(revs)):
        gone = revs[i - 1].usable - revs[i].usable
        t_r = revs[i].t
        for card in sorted(gone):
            back = next((r for r in revs[i + 1:] if card in r.usable), None)
            back_t = back.t if back is not None else float("inf")
            back_gen = back.generation if back is not None else None
            deadline = t_r + bounds.out
            for g in rec.gateways:
                res.count("no_partial_restore")
                if back_t <= deadline:
                    continue
                rows = rec.tables.get(g, ())
                lo = bisect.bisect_left(times[g], deadline)
                hi = bisect.bisect_left(times[g], back_t + bounds.out)
                state = at(rows, deadline)
                candidates = ([state] if state is not None else []) + list(rows[lo:hi])
                late = [row for row in candidates
                        if card in row.in_service
                        and (back_gen is None or row.generation < back_gen)]
                if late:
                    first = late[0]
                    res.fail("no_partial_restore", deadline,
                             f"gateway {g} still had card {card} in service at generation "
                             f"{first.generation} {max(first.t, deadline) - t_r:.2f} s after "
                             f"registry generation {revs[i].generation} took it out (bound "
                             f"{bounds.out:.2f} s)")
    return res


def check_restore_identity(rec: Recorded, truth: Truth, bounds: Bounds) -> Result:
    res = Result()
    for g in rec.gateways:
        prev: frozenset[str] = frozenset()
        for row in rec.tables.get(g, ()):
            for card in sorted(row.in_service - prev):
                res.count("no_partial_restore")
                if not truth.present_during(card, row.t - bounds.verify, row.t):
                    res.fail("no_partial_restore", row.t,
                             f"gateway {g} put card {card} in service while another card was "
                             f"at its place (for more than {bounds.verify:.2f} s)")
            prev = row.in_service
    return res


# ---------------------------------------------------------------- 4. identity

def check_identity(rec: Recorded, truth: Truth, bounds: Bounds, end: float) -> Result:
    res = Result()
    for card in sorted(truth.changes):
        for a, b in truth.absences(card, end):
            deadline = a + bounds.identity
            for g in rec.gateways:
                res.count("identity")
                if deadline >= b:
                    continue
                rows = rec.tables.get(g, ())
                state = at(rows, deadline)
                bad = state is not None and card in state.in_service
                bad = bad or any(deadline < row.t < b and card in row.in_service for row in rows)
                if bad:
                    res.fail("identity", deadline,
                             f"gateway {g} used card {card} {bounds.identity:.2f} s after "
                             "another card took its place (its serial/identity differ)")
    return res


# ---------------------------------------------------------------- 5. bounded

def check_bounded(rec: Recorded, bounds: Bounds) -> Result:
    res = Result()
    for p in rec.polls:
        res.count("bounded")
        if p.duration > bounds.poll:
            res.fail("bounded", p.t, f"gateway {p.gateway}: a registry poll took "
                     f"{p.duration:.3f} s (bound {bounds.poll:.3f} s, ok={p.ok})")
    for a in rec.access:
        res.count("bounded")
        if a.accessor_max > bounds.accessor:
            res.fail("bounded", a.t, f"gateway {a.gateway}: an accessor call blocked "
                     f"{a.accessor_max:.3f} s (bound {bounds.accessor:.3f} s)")
    return res


# ---------------------------------------------------------------- 6. last known state

def check_last_known(rec: Recorded, truth: Truth) -> Result:
    res = Result()
    for f in rec.faults:
        if f.kind not in QUORUM_KINDS or f.skipped:
            continue
        end = f.t_restored or f.t_heal
        if end is None:
            continue
        for g in rec.gateways:
            res.count("last_known_state")
            rows = rec.tables.get(g, ())
            base = at(rows, f.t_inject)
            had = base.in_service if base is not None else frozenset()
            for row in rows:
                if not f.t_inject < row.t <= end:
                    continue
                lost = [c for c in had - row.in_service if truth.present(c, row.t)]
                if lost:
                    res.fail("last_known_state", row.t,
                             f"gateway {g} dropped {sorted(lost)} during quorum loss "
                             f"(fault #{f.index})")
                    break
    return res


# ---------------------------------------------------------------- 8. detection

def check_detection(rec: Recorded, bounds: Bounds) -> Result:
    res = Result()
    revs = _good(rec.registry)
    for f in rec.faults:
        if f.skipped:
            continue
        if f.leader_ok is not None:
            res.count("detection")
            if not f.leader_ok:
                res.fail("detection", f.t_agreed or f.t_heal or f.t_inject,
                         f"fault #{f.index} {f.kind}: the daemon holding the leader key was "
                         "not leading once the fault had healed (no registry write possible)")
        if f.kind not in DETECTED_KINDS or f.hold < bounds.detect:
            continue
        for card in f.cards:
            res.count("detection")
            by = f.t_inject + bounds.detect
            seen = [r.t for r in revs if f.t_inject <= r.t <= by and card not in r.usable]
            if not seen:
                res.fail("detection", by, f"fault #{f.index} {f.kind} ({f.target}): the "
                         f"registry did not take card {card} out within {bounds.detect:.2f} s")
                continue
            for g in rec.gateways:
                res.count("detection")
                gone = seen[0] + bounds.out
                rows = rec.tables.get(g, ())
                state = at(rows, f.t_inject)
                out = state is not None and card not in state.in_service
                out = out or any(f.t_inject <= row.t <= gone and card not in row.in_service
                                 for row in rows)
                if not out:
                    res.fail("detection", gone, f"fault #{f.index} {f.kind} ({f.target}): "
                             f"gateway {g} kept card {card} in service {bounds.out:.2f} s "
                             "after the registry took it out")
    return res


# ---------------------------------------------------------------- 9. write outage

def check_write_outage(rec: Recorded, bounds: Bounds, end: float) -> Result:
    res = Result()
    revs = _good(rec.registry)
    injected = sorted(f.t_inject for f in rec.faults if not f.skipped)
    for f in rec.faults:
        if f.kind not in WRITE_OUTAGE_KINDS or f.skipped or f.t_heal is None:
            continue
        later = [t for t in injected if t > f.t_inject]
        until = min([f.t_heal + bounds.detect, end] + later[:1])   # not the next fault's effect
        base = at(revs, f.t_inject)
        had = base.usable if base is not None else frozenset()
        res.count("write_outage")
        for r in revs:
            if f.t_inject < r.t <= until and had - r.usable:
                res.fail("write_outage", r.t,
                         f"fault #{f.index} {f.kind}: registry generation {r.generation} took "
                         f"{sorted(had - r.usable)} out while etcd refused writes or just "
                         "after (no card had failed)")
                break
        for g in rec.gateways:
            res.count("write_outage")
            rows = rec.tables.get(g, ())
            row0: GatewayTable | None = at(rows, f.t_inject)
            using = row0.in_service if row0 is not None else frozenset()
            for row in rows:
                if f.t_inject < row.t <= until and using - row.in_service:
                    res.fail("write_outage", row.t,
                             f"fault #{f.index} {f.kind}: gateway {g} took "
                             f"{sorted(using - row.in_service)} out of service while etcd "
                             "refused writes or just after (no card had failed)")
                    break
    return res


# ---------------------------------------------------------------- all

def fault_at(rec: Recorded, t: float) -> int | None:
    """The fault in force (or healing) at time t: the last one injected at or before t."""
    idx = None
    for f in rec.faults:
        if f.t_inject <= t:
            idx = f.index
    return idx


def check_all(rec: Recorded, bounds: Bounds, end: float | None = None) -> Result:
    truth = Truth.of(rec.truth)
    if end is None:
        times = [r.t for r in rec.registry] + [f.t_inject for f in rec.faults]
        end = max(times, default=0.0) + bounds.agree
    res = Result()
    for inv in INVARIANTS:
        res.checks[inv] += 0
    res.merge(check_fencing(rec.key_events, rec.writes))
    res.merge(check_registry(rec.key_events, rec.tables, rec.writes))
    res.merge(check_forged_unused(rec, bounds))
    res.merge(check_agreement(rec, bounds, end))
    res.merge(check_out_bound(rec, bounds))
    res.merge(check_restore_identity(rec, truth, bounds))
    res.merge(check_identity(rec, truth, bounds, end))
    res.merge(check_bounded(rec, bounds))
    res.merge(check_last_known(rec, truth))
    res.merge(check_detection(rec, bounds))
    res.merge(check_write_outage(rec, bounds, end))
    res.violations = [Violation(v.invariant, v.t, v.what, fault_at(rec, v.t))
                      for v in sorted(res.violations, key=lambda v: v.t)]
    return res
