"""This host's cards, observed each turn (step 2): the observer, and the identities first seen.

The observer is the caller's (tests) or a ``LocalObserver`` built from the config (sysfs root,
nvme program); a reload that changes those builds a new local one, and forgets the identities
first seen (an operator reload accepts the cards as they are).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from awide_cluster.cards.model import CardObservation
from awide_cluster.config.daemon import DaemonConfig
from awide_cluster.contract.registry import Registry
from awide_cluster.daemon.clock import Clock
from awide_cluster.daemon.reporter import CardObserver, LocalObserver, local_card_id, observe_all
from awide_cluster.nvme.runner import CommandRunner

if TYPE_CHECKING:
    from awide_cluster.api.metrics import DaemonMetrics


class CardProbes:
    def __init__(self, config: DaemonConfig, clock: Clock, metrics: DaemonMetrics, *,
                 observer: CardObserver | None = None,
                 runner: CommandRunner | None = None) -> None:
        self.clock, self.metrics, self._runner = clock, metrics, runner
        self._own_observer = observer is None
        self.observer = observer if observer is not None else self._local_observer(config)
        self.known_identity: dict[str, str] = {}    # card name -> identity first seen

    async def observe(self, cfg: DaemonConfig,
                      registry: Registry | None) -> list[CardObservation]:
        """2. Observe the local cards (concurrently, each bounded)."""
        cards = cfg.cards
        observations = await observe_all(self.observer, cards, self.known_identity)
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
        if self._own_observer and (new.sysfs_root, new.nvme_program) != \
                (old.sysfs_root, old.nvme_program):
            self.observer = self._local_observer(new)

    def _local_observer(self, cfg: DaemonConfig) -> CardObserver:
        from awide_cluster.nvme.runner import Runner
        from awide_cluster.nvme.sysfs import Sysfs
        runner = self._runner if self._runner is not None else Runner()
        return LocalObserver(runner, Sysfs(cfg.sysfs_root), self.clock,
                             nvme_program=cfg.nvme_program)
