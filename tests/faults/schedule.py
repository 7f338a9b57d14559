"""The fault schedule: which faults, in which order, held how long — a pure function of a seed.

``make_schedule(seed, count, quick=...)`` gives the same tuple of ``Fault`` for the same
arguments on every machine (``random.Random(seed)``, nothing else). Targets that depend on the
running cluster (the leader, "another daemon", a card) are not resolved here: each fault
carries ``pick``, a random integer the runner reduces modulo the candidates it has at
injection time, so a replay with the same seed picks the same candidate from the same list.

Every kind appears at least once whenever ``count`` allows it (the first ``len(KINDS)`` faults
are a seeded permutation of all kinds; a quick schedule is exactly that permutation).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

# kind -> what it does (the runner implements each; docs/reliability.md lists them too)
KINDS: dict[str, str] = {
    "daemon_kill_leader": "SIGKILL the leader daemon, start it again after the hold",
    "daemon_kill": "SIGKILL a daemon that is not the leader, start it again",
    "daemon_stop_leader": "SIGSTOP the leader daemon, SIGCONT after the hold",
    "daemon_stop": "SIGSTOP a daemon that is not the leader, SIGCONT after the hold",
    "etcd_stop_member": "SIGSTOP one etcd member, SIGCONT after the hold",
    "etcd_quorum_loss": "SIGKILL two etcd members (quorum lost), restart them",
    "partition_leader_host": "cut the leader's host off the network (netns link down; "
                             "SIGSTOP of all its processes on loopback), then heal",
    "store_death": "SIGKILL a card's store service, start it again",
    "card_swap": "put another card's label in a directory card's place, then the original back",
    "device_rename": "an NVMe card's controller vanishes on the gateways' hosts: they must "
                     "reconnect it under a new device name, found by serial",
    "card_flap": "a card alternates failed/healthy (its directory away and back, its "
                 "controller connecting/live) faster than the sick-poll hysteresis",
    "read_burst": "a burst of concurrent registry reads from many extra gateway followers",
    "etcd_refuses_writes": "etcd refuses every write, reads still answered (its NOSPACE "
                           "alarm raised, as a full backend quota does), disarmed after the "
                           "hold",
    "poison_key": "a hostile value written by hand at one key kind (registry, a host's report, "
                  "the leader key, an intent, a gateway or layout record, an unknown key; or "
                  "a 1.4 MB value); what is not the cluster's own is deleted after the hold",
    "registry_deleted": "the registry key deleted by hand",
    "registry_forged": "a well-formed registry written by hand: the real cards, forged cards "
                       "(loopback targets only) and a generation far ahead",
    "report_unknown_host": "a well-formed report under members/<a host not in the cluster> "
                           "listing a card nobody configured, deleted after the hold",
}

# relative frequency in the random part of a long schedule
WEIGHTS: dict[str, int] = {
    "daemon_kill_leader": 3, "daemon_kill": 2, "daemon_stop_leader": 3, "daemon_stop": 2,
    "etcd_stop_member": 3, "etcd_quorum_loss": 2, "partition_leader_host": 3,
    "store_death": 3, "card_swap": 2, "device_rename": 2, "card_flap": 2, "read_burst": 2,
    "etcd_refuses_writes": 2,
    "poison_key": 3, "registry_deleted": 1, "registry_forged": 2, "report_unknown_host": 1,
}

# hold ranges in seconds (uniform), for a lease TTL of 2 s (``make_schedule(scale=)`` adapts
# them to another timing): some holds are shorter and some longer than the lease TTL and the
# sick-poll window, and both outcomes must keep the invariants. A quick schedule holds each
# fault the longest, so that each kind's one fault has its full effect (cards out, leader
# replaced).
HOLDS: dict[str, tuple[float, float]] = {
    "daemon_kill_leader": (0.3, 3.5),
    "daemon_kill": (0.3, 3.5),
    "daemon_stop_leader": (0.3, 3.5),
    "daemon_stop": (0.3, 3.5),
    "etcd_stop_member": (0.2, 1.5),
    "etcd_quorum_loss": (0.5, 3.0),
    "partition_leader_host": (0.3, 3.5),
    "store_death": (0.3, 4.0),
    "card_swap": (0.3, 4.0),
    "device_rename": (0.0, 0.0),
    "card_flap": (0.0, 0.0),           # its length is flaps x period
    "read_burst": (0.3, 1.0),
    "etcd_refuses_writes": (0.5, 3.5),  # longer than sick_polls polls at its longest
    "poison_key": (0.3, 2.0),           # the cluster repairs what it owns during the hold
    "registry_deleted": (0.3, 2.0),
    "registry_forged": (0.3, 2.0),
    "report_unknown_host": (0.3, 3.0),
}


class ScheduleError(ValueError):
    """The schedule cannot be made from these arguments (the message says why)."""


@dataclass(frozen=True, slots=True)
class Fault:
    index: int                  # 0-based position in the campaign
    kind: str
    hold: float                 # seconds between inject and heal
    pick: int                   # chooses among candidates at injection (modulo their count)
    flaps: int = 0              # card_flap: dead/alive alternations
    readers: int = 0            # read_burst: concurrent followers

    def describe(self) -> str:
        extra = f" flaps={self.flaps}" if self.flaps else ""
        extra += f" readers={self.readers}" if self.readers else ""
        return f"#{self.index} {self.kind} hold={self.hold:.2f}s pick={self.pick}{extra}"


def _fault(rng: random.Random, index: int, kind: str, quick: bool, scale: float) -> Fault:
    lo, hi = (x * scale for x in HOLDS[kind])
    hold = round(rng.uniform(lo, hi), 3)
    if quick:                   # the quick campaign: the longest hold (the full effect)
        hold = hi
    pick = rng.randrange(1 << 30)
    flaps = rng.randint(3, 6) if kind == "card_flap" else 0
    readers = rng.choice((64, 128, 200)) if kind == "read_burst" else 0
    if quick and kind == "read_burst":
        readers = 64
    return Fault(index=index, kind=kind, hold=hold, pick=pick, flaps=flaps, readers=readers)


def make_schedule(seed: int, count: int, *, quick: bool = False,
                  kinds: tuple[str, ...] | None = None, scale: float = 1.0) -> tuple[Fault, ...]:
    """``count`` faults from ``seed``. Quick: every kind exactly once (``count`` is then the
    minimum, raised to the number of kinds). Otherwise every kind once, then weighted draws.
    ``scale`` multiplies the hold ranges (they are written for a 2 s lease TTL)."""
    use = tuple(kinds) if kinds is not None else tuple(KINDS)
    unknown = [k for k in use if k not in KINDS]
    if unknown:
        raise ScheduleError(f"unknown fault kind(s) {unknown}; known: {', '.join(KINDS)}")
    if not use:
        raise ScheduleError("no fault kinds to schedule")
    if count < 1:
        raise ScheduleError(f"--faults must be at least 1, not {count}")
    rng = random.Random(seed)
    first = list(use)
    rng.shuffle(first)
    order = first[:count] if not quick else first
    if not quick and count > len(first):
        weights = [WEIGHTS[k] for k in use]
        order += rng.choices(use, weights=weights, k=count - len(first))
    if quick and count > len(first):
        order += [rng.choice(use) for _ in range(count - len(first))]
    return tuple(_fault(rng, i, kind, quick, scale) for i, kind in enumerate(order))


def kinds_missing(schedule: tuple[Fault, ...], kinds: tuple[str, ...] | None = None) -> list[str]:
    """Kinds that the schedule never injects (empty when every kind is covered)."""
    have = {f.kind for f in schedule}
    return [k for k in (kinds or tuple(KINDS)) if k not in have]
