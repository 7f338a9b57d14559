"""What the embedded cluster reads and waits for: etcd, daemons, gateway views."""

from __future__ import annotations

import json
import time
import urllib.request
from typing import Any

from awide_cluster.contract import keys
from awide_cluster.contract import registry as regdoc
from awide_cluster.contract.records import LeaderRecord
from awide_cluster.store import KeyValue
from awide_cluster.store.errors import StoreError
from awide_harness.cluster_base import ClusterBase
from awide_harness.procs import Proc
from awide_harness.views import GatewayView, Predicate, disagreement, first_time
from awide_harness.waits import WaitTimeout, wait_until_sync


class ClusterReads(ClusterBase):
    """Reads of etcd, the daemons' APIs and the gateways' lines; waits on them."""

    def daemon_alive(self, host: str) -> bool:
        proc = self._host(host).proc
        return proc is not None and proc.alive()

    def daemon_proc(self, host: str) -> Proc | None:
        return self._host(host).proc

    def daemon_status(self, host: str, bound: float = 0.5) -> dict[str, Any] | None:
        """The daemon's ``/v1/status`` (None when it does not answer within ``bound``, or
        ``host`` is no host of the cluster: a forged leader record may name anything)."""
        if host not in self._hosts:
            return None
        try:
            with urllib.request.urlopen(self.api_url(host) + "/v1/status",  # noqa: S310
                                        timeout=bound) as resp:
                doc = json.loads(resp.read(1 << 20))
        except (OSError, ValueError):
            return None
        return doc if isinstance(doc, dict) else None

    def registry(self, bound: float = 2.0) -> regdoc.Registry | None:
        kv = self._read(lambda s: s.get(keys.REGISTRY), bound)
        return regdoc.decode(kv.value) if kv is not None else None

    def leader_host(self, bound: float = 2.0) -> str | None:
        kv = self._read(lambda s: s.get(keys.LEADER), bound)
        rec = LeaderRecord.decode(kv.value) if kv is not None else None
        return rec.host if rec is not None else None

    def leader_or_none(self, bound: float = 1.0) -> str | None:
        """Who holds the leader key; None when nobody does, etcd does not answer, or the key
        holds no leader record of a host of the cluster (written by hand)."""
        try:
            host = self.leader_host(bound)
        except (StoreError, TimeoutError):
            return None
        return host if host in self._hosts else None

    def etcd_leader_index(self, bound: float = 2.0) -> int | None:
        """Index (into ``etcd``) of the etcd member that is raft leader, None if unknown."""
        from awide_cluster.store.types import EndpointStatus
        answers = self._read(lambda s: s.statuses(timeout=bound), bound)
        ok = [a for a in answers.values() if isinstance(a, EndpointStatus)]
        leader = next((a.leader for a in ok if a.leader), 0)
        for i, url in enumerate(self.etcd.client_urls):
            a = answers.get(url)
            if isinstance(a, EndpointStatus) and leader and a.member_id == leader:
                return i
        return None

    def wait_leader(self, bound: float, *,
                    other_than: str | None = None) -> tuple[str, float] | None:
        """(host, time) once some host other than ``other_than`` holds ``leader``."""
        def leader() -> str | None:
            host = self.leader_or_none(bound=min(1.0, self.spec.timing.call_timeout * 2))
            return host if host != other_than else None

        try:
            return wait_until_sync(leader, bound, "a leader"), time.monotonic()
        except WaitTimeout:
            return None

    def reports(self, bound: float = 1.0) -> tuple[int, dict[str, int]] | None:
        """(etcd revision, {host: mod_revision of its report}); None when etcd does not
        answer within ``bound``."""
        try:
            res = self._read(lambda s: s.range(keys.MEMBERS, prefix=True, keys_only=True),
                             bound)
        except (StoreError, TimeoutError):
            return None
        return res.revision, {keys.tail(kv.key, keys.MEMBERS): kv.mod_revision for kv in res.kvs}

    def read_key(self, key: str, bound: float = 1.0) -> KeyValue | None:
        """The key's current value (relative to the cluster prefix; None: absent). Raises
        StoreError/TimeoutError."""
        kv: KeyValue | None = self._read(lambda s: s.get(key), bound)
        return kv

    def gateway_views(self) -> dict[str, GatewayView | None]:
        return {gid: g.feed.latest() for gid, g in self._gateways.items()}

    def history(self, gateway: str) -> list[GatewayView]:
        return self._gateway(gateway).feed.snapshot()

    def events(self, gateway: str) -> list[dict[str, Any]]:
        feed = self._gateway(gateway).feed
        with feed.changed:
            return list(feed.events)

    def metrics_url(self, name: str) -> str:
        """The ``/metrics`` URL of a daemon host or a gateway (a gateway's is served by the
        default gateway command, ``--metrics``)."""
        if name in self._gateways:
            return f"http://{self._gateways[name].metrics}/metrics"
        return self.api_url(name) + "/metrics"

    def gateway_proc(self, gid: str) -> Proc | None:
        return self._gateway(gid).proc

    def wait_until(self, predicate: Predicate, bound: float,
                   since: float | None = None) -> dict[str, float | None]:
        """{gateway id: first time it satisfied ``predicate`` at or after ``since`` (default
        now), None when not within ``bound`` of ``since``}."""
        start = time.monotonic() if since is None else since
        deadline = start + bound

        def seen() -> dict[str, float | None]:
            return {gid: first_time(g.feed.snapshot(), predicate, start)
                    for gid, g in self._gateways.items()}

        def every() -> dict[str, float | None] | None:
            s = seen()
            return s if all(t is not None for t in s.values()) else None

        try:
            times = wait_until_sync(every, max(0.0, deadline - time.monotonic()),
                                    "every gateway's view") if self._gateways else {}
        except WaitTimeout:
            times = seen()
        return {gid: (t if t is not None and t <= deadline else None)
                for gid, t in times.items()}

    def disagreement(self) -> str:
        return disagreement(self.gateway_views())

    def agree(self) -> bool:
        return self.disagreement() == ""

    def wait_agree(self, bound: float) -> float | None:
        try:
            wait_until_sync(self.agree, bound, "every gateway agrees")
        except WaitTimeout:
            return None
        return time.monotonic()

    def pids(self) -> dict[str, int]:
        """name -> pid of every live process this cluster started (etcd members included)."""
        out = {p.name: p.pid for p in self.launcher.procs if p.alive()}
        if self._etcd is None:
            return out
        for i in range(self._etcd.size):
            try:
                m = self._etcd.member(i)
            except IndexError:
                continue
            if m.pid is not None:
                out[m.name] = m.pid
        return out

    def log_tail(self, name: str, lines: int = 15) -> str:
        path = self.work_dir / "logs" / f"{name}.log"
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""
