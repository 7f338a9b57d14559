"""2,000 idle TCP connections to a real daemon's API: the API holds at most its per-peer cap
and closes the rest at once, so the daemon's descriptors stay far under its limit, its probes
keep running (its report advances every poll), no card goes out (the registry does not
change), and its log grows by a few lines, not one per connection."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from urllib.parse import urlsplit

from awide_cluster.api.server import MAX_PEER_CONNECTIONS
from awide_cluster.contract import keys
from awide_cluster.contract import report as reportdoc
from awide_cluster.contract.registry import Registry
from awide_harness.cluster import EmbeddedCluster
from awide_harness.spec import ClusterSpec, Timing
from tests.timing import bound, wait_until_sync

from .support import etcd_or_skip

FLOOD = 2000


def _lines(path: Path) -> int:
    return sum(1 for x in path.read_text(errors="replace").splitlines() if x.strip())


def test_two_thousand_idle_connections_take_no_card_out(tmp_path):
    etcd_or_skip()
    spec = ClusterSpec(cluster="apiflood", storage_hosts=1, cards_per_host=2, witness_hosts=0,
                       gateways=0, timing=Timing.quick())
    with EmbeddedCluster(tmp_path, spec) as c:
        ids = [c.card_id(k) for k in c.cards]

        def all_in() -> Registry | None:
            r = c.registry()
            ok = r is not None and {e.id: e.state for e in r.cards} == dict.fromkeys(ids, "in")
            return r if ok else None

        reg = wait_until_sync(all_in, bound(15.0), "both cards in the registry")
        proc = c.daemon_proc("s1")
        assert proc is not None
        fds = Path(f"/proc/{proc.pid}/fd")
        log = tmp_path / "logs" / "daemon-s1.log"
        lines_before = _lines(log)

        def seq() -> int:
            kv = c.read_key(keys.member("s1"))
            assert kv is not None
            return reportdoc.decode(kv.value).seq

        seq_before = seq()
        url = urlsplit(c.api_url("s1"))
        socks: list[socket.socket] = []
        peak = 0
        try:
            for _ in range(FLOOD):
                socks.append(socket.create_connection((url.hostname, url.port), timeout=5))
                if len(socks) % 100 == 0:
                    peak = max(peak, len(os.listdir(fds)))

            def advanced() -> bool:          # 12 polls with every connection open
                nonlocal peak
                peak = max(peak, len(os.listdir(fds)))
                return seq() >= seq_before + 12

            wait_until_sync(advanced, bound(30.0), "the daemon's report advancing 12 polls")
        finally:
            for s in socks:
                s.close()
        after = c.registry()
        assert after is not None
        assert after.generation == reg.generation, "a card changed state during the flood"
        assert {e.id: e.state for e in after.cards} == dict.fromkeys(ids, "in")
    assert peak < 200 + MAX_PEER_CONNECTIONS, peak       # of a default limit of 1,024 or more
    grown = _lines(log) - lines_before
    assert grown < 300, f"{grown} log lines during the flood"
