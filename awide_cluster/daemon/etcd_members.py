"""The etcd member list, as the daemon checks it: at start, and every ``recheck_every`` s.

At start a cluster of fewer than 3 voting members is refused unless ``dev_cluster``
(``ClusterTooSmall``: exit code 3). While running, a cluster that shrank below 3 voting
members is logged, shown in ``/v1/status`` and ``awide_etcd_voting_members``; the daemon keeps
running. With authentication on, each member's etcd version is read too: a member with a
known authentication bypass (``contract/etcd_version.py``) is logged and said in the report.
Beside each read of the member list the keys under the cluster prefix are counted (one bounded
keys-only read of at most one key: etcd counts the whole range), for ``awide_prefix_keys``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from awide_cluster.contract import bounds, etcd_version
from awide_cluster.daemon.shared import DaemonShared
from awide_cluster.store.errors import StoreError
from awide_cluster.store.port import Store, StoreReader
from awide_cluster.store.types import Member

if TYPE_CHECKING:
    from awide_cluster.api.health import DaemonHealth
    from awide_cluster.api.metrics import DaemonMetrics
    from awide_cluster.api.notify import Notifier

log = logging.getLogger("awide_cluster.daemon")

# the etcd member list is read again this often while running (seconds)
MEMBERS_RECHECK = 60.0


def voting(members: tuple[Member, ...]) -> int:
    """How many of the members vote (learners do not)."""
    return sum(1 for m in members if not m.is_learner)


async def count_prefix_keys(store: StoreReader, metrics: DaemonMetrics, *,
                            timeout: float | None) -> int:
    """How many keys lie under the cluster prefix: one keys-only range read of at most one
    key (etcd answers the count of the whole range), set in ``awide_prefix_keys`` and
    ``awide_prefix_key_flood`` (over ``bounds.CLUSTER_MAX_KEYS``, what ``status`` names
    ``too_many_keys``). Raises ``StoreError``."""
    result = await store.range("", prefix=True, keys_only=True, limit=1, timeout=timeout)
    metrics.prefix_keys_counted(result.count, flood=result.count > bounds.CLUSTER_MAX_KEYS)
    return result.count


class ClusterTooSmall(RuntimeError):
    """The etcd cluster has fewer than 3 members and the config does not say dev_cluster."""


class EtcdMembers:
    def __init__(self, shared: DaemonShared, store: Store, metrics: DaemonMetrics,
                 health: DaemonHealth, notifier: Notifier) -> None:
        self.shared, self.store, self.metrics = shared, store, metrics
        self.health, self.notifier = health, notifier
        self.cluster_size: int | None = None        # voting etcd members, as last read
        self.recheck_every = MEMBERS_RECHECK        # seconds between member-list reads
        self._read_at = 0.0                         # monotonic time of the last read
        self.key_flood = False                      # the last key count was over the bound

    async def check(self) -> bool:
        """Refuse an etcd cluster of fewer than 3 members unless dev_cluster. Retries (each
        call bounded) until etcd answers or the daemon is stopped (then False)."""
        shared = self.shared
        while not shared.stop.is_set():
            cfg = shared.config
            try:
                members = await self.store.members(timeout=cfg.etcd.call_timeout)
            except StoreError as e:
                shared.note_error(f"etcd member list: {e}")
                self.health.etcd_failed(str(e))
                self.health.beat()
                self.notifier.watchdog()
                await shared.sleep(cfg.timing.poll_interval)
                continue
            n = self.cluster_size = voting(members)
            self._read_at = shared.clock.monotonic()
            self.metrics.etcd_voting_members.set(n)
            if n < 3 and not cfg.dev_cluster:
                raise ClusterTooSmall(
                    f"etcd cluster has {n} member(s): a card cluster needs 3 or more to survive "
                    "the loss of a host (set dev_cluster: true for a development cluster)")
            await self.versions()
            await self.count_keys()
            if cfg.dev_cluster:
                log.warning("DEVELOPMENT CLUSTER (dev_cluster: true): etcd has %d member(s); "
                            "this cluster is not fit for production", n)
            return True
        return False

    async def versions(self) -> None:
        """With authentication on (an etcd username): each member's etcd version (its
        status, one bounded call per endpoint); members with a known authentication bypass
        go into ``shared.etcd_note`` (the report, status), logged when the note changes."""
        cfg = self.shared.config
        if cfg.etcd.username is None:
            return
        try:
            answers = await self.store.statuses(timeout=cfg.etcd.call_timeout)
        except StoreError as e:
            self.shared.note_error(f"etcd member versions: {e}")
            return
        found = {ep: st.version for ep, st in answers.items() if not isinstance(st, StoreError)}
        line = etcd_version.note(found)
        if line and line != self.shared.etcd_note:
            log.warning("%s: %s: install a fixed etcd (docs/security.md)", cfg.host, line)
        self.shared.etcd_note = line

    async def count_keys(self) -> None:
        """The keys under the cluster prefix counted (``count_prefix_keys``, bounded; a
        failure is noted and tried at the next recheck); a flood starting or ending is logged
        once."""
        cfg = self.shared.config
        try:
            n = await count_prefix_keys(self.store, self.metrics, timeout=cfg.etcd.call_timeout)
        except StoreError as e:
            self.shared.note_error(f"etcd key count: {e}")
            return
        flood = n > bounds.CLUSTER_MAX_KEYS
        if flood and not self.key_flood:
            log.warning("%s: key flood: %d keys under the cluster prefix, over the bound of "
                        "%d (status: too_many_keys); delete the junk keys", cfg.host, n,
                        bounds.CLUSTER_MAX_KEYS)
        elif self.key_flood and not flood:
            log.info("%s: key flood over: %d keys under the cluster prefix", cfg.host, n)
        self.key_flood = flood

    async def recheck_when_due(self) -> None:
        """5. The member list again, once ``recheck_every`` seconds passed since the last."""
        if self.shared.clock.monotonic() - self._read_at >= self.recheck_every:
            await self.recheck()

    async def recheck(self) -> None:
        """The member list again (bounded; a failure is tried again a period later): a change
        of the voting members is logged, a count under 3 as a warning (not fatal: the daemon
        keeps its cards reported; docs/operations.md says how to add a member)."""
        shared, cfg = self.shared, self.shared.config
        self._read_at = shared.clock.monotonic()      # a failure waits as long (no retry storm)
        try:
            members = await self.store.members(timeout=cfg.etcd.call_timeout)
        except StoreError as e:
            shared.note_error(f"etcd member list: {e}")
            return
        await self.versions()
        await self.count_keys()
        n, was = voting(members), self.cluster_size
        self.cluster_size = n
        self.metrics.etcd_voting_members.set(n)
        if n == was:
            return
        learners = len(members) - n
        also = f" (and {learners} learner(s))" if learners else ""
        if n < 3 and not cfg.dev_cluster:
            log.warning("%s: etcd now has %d voting member(s)%s, was %s: it tolerates no "
                        "member failure; add a member (docs/operations.md)", cfg.host,
                        n, also, was)
        else:
            log.info("%s: etcd now has %d voting member(s)%s, was %s", cfg.host, n,
                     also, was)
