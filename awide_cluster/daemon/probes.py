"""This host's cards, observed each turn (step 2): the observer, and the identities first seen.

A probe that could not run because this daemon is out of file descriptors or memory (its
reason carries EMFILE's, ENFILE's or ENOMEM's words: a label unreadable, nvme-cli not
started, a socket not opened) says nothing about the card: that card keeps its last
observation (``starved``, pure), and the turn's report says so in ``probe_note`` (``status``
shows it), instead of counting a bad poll. The descriptors left below the soft limit are
checked each turn; under ``PROBE_FD_RESERVE`` the note says so too. The API's connection cap
and the unit's ``LimitNOFILE`` keep that reserve free.

The observer is the caller's (tests) or a ``LocalObserver`` built from the config (sysfs root,
nvme program); a reload that changes those builds a new local one, and forgets the identities
first seen (an operator reload accepts the cards as they are).
"""

from __future__ import annotations

import errno
import logging
import os
import resource
from typing import TYPE_CHECKING

from awide_cluster.cards.model import CardObservation
from awide_cluster.config.daemon import DaemonConfig
from awide_cluster.contract.registry import Registry
from awide_cluster.daemon.clock import Clock
from awide_cluster.daemon.reporter import CardObserver, LocalObserver, local_card_id, observe_all
from awide_cluster.nvme.runner import CommandRunner

if TYPE_CHECKING:
    from awide_cluster.api.metrics import DaemonMetrics

log = logging.getLogger(__name__)

PROBE_FD_RESERVE = 64       # descriptors the probes of a turn may need (64 cards: a few each)
STARVED_WORDS = tuple(os.strerror(e) for e in (errno.EMFILE, errno.ENFILE, errno.ENOMEM))


def starved(obs: CardObservation) -> str | None:
    """The reason of the first probe (or the observation) that could not run for want of
    file descriptors or memory, or None. Pure."""
    for reason in (obs.reason, *(p.reason for p in obs.probes if not p.ok)):
        if any(w in reason for w in STARVED_WORDS):
            return reason
    return None


def fd_headroom() -> tuple[int, int]:
    """(open descriptors, soft limit) of this process; open = limit when it cannot even
    list them."""
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if limit == resource.RLIM_INFINITY:
        limit = 1 << 20
    try:
        return len(os.listdir("/proc/self/fd")), limit
    except OSError:
        return limit, limit


def probe_note(starved_cards: list[tuple[str, str]], open_fds: int, limit: int,
               reserve: int = PROBE_FD_RESERVE) -> str:
    """What the report says when probes could not run, "" when all ran. Pure."""
    parts = []
    if starved_cards:
        names = ", ".join(name for name, _ in starved_cards)
        parts.append(f"probes of {names} could not run ({starved_cards[0][1]}): their last "
                     "observation is reported")
    if limit - open_fds < reserve:
        parts.append(f"{open_fds} of {limit} file descriptors open, under the probes' "
                     f"reserve of {reserve}")
    return "; ".join(parts)


class CardProbes:
    def __init__(self, config: DaemonConfig, clock: Clock, metrics: DaemonMetrics, *,
                 observer: CardObserver | None = None,
                 runner: CommandRunner | None = None) -> None:
        self.clock, self.metrics, self._runner = clock, metrics, runner
        self._own_observer = observer is None
        self.observer = observer if observer is not None else self._local_observer(config)
        self.known_identity: dict[str, str] = {}    # card name -> identity first seen
        self.last: dict[str, CardObservation] = {}  # card name -> last observation that ran
        self.note = ""                              # why probes could not run ("" if they did)

    async def observe(self, cfg: DaemonConfig,
                      registry: Registry | None) -> list[CardObservation]:
        """2. Observe the local cards (concurrently, each bounded)."""
        cards = cfg.cards
        observations = await observe_all(self.observer, cards, self.known_identity)
        hungry: list[tuple[str, str]] = []
        for i, (spec, obs) in enumerate(zip(cards, observations, strict=True)):
            why = starved(obs)
            if why is None:
                self.last[spec.name] = obs
                continue
            hungry.append((spec.name, why))
            if spec.name in self.last:          # unknown now: the last observation stands
                observations[i] = self.last[spec.name]
        note = probe_note(hungry, *fd_headroom())
        if note != self.note:
            if note:
                log.warning("%s", note)
            else:
                log.info("probes run again")
        self.note = note
        for spec, obs in zip(cards, observations, strict=True):
            cid = local_card_id(cfg.host, obs, registry)
            self.metrics.local_card(cid, spec.name, obs.healthy)
            for p in obs.probes:
                self.metrics.probe_result(cid, spec.name, p.probe, p.ok, p.elapsed)
        return observations

    def reconfigure(self, old: DaemonConfig, new: DaemonConfig) -> None:
        """A reload: the cards are accepted as they are; a new local observer when its
        settings changed."""
        self.known_identity.clear()
        self.last.clear()
        if self._own_observer and (new.sysfs_root, new.nvme_program) != \
                (old.sysfs_root, old.nvme_program):
            self.observer = self._local_observer(new)

    def _local_observer(self, cfg: DaemonConfig) -> CardObserver:
        from awide_cluster.nvme.runner import Runner
        from awide_cluster.nvme.sysfs import Sysfs
        runner = self._runner if self._runner is not None else Runner()
        return LocalObserver(runner, Sysfs(cfg.sysfs_root), self.clock,
                             nvme_program=cfg.nvme_program)
