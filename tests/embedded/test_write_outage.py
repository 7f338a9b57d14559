"""A write outage of etcd on a whole embedded cluster: etcd's backend quota fills up (the
NOSPACE alarm: every write refused, reads still answered), is held for several polls, and is
recovered by the documented procedure (delete, compact, defragment each member, disarm).

- no card goes out on any gateway, during the outage or after it; status names the alarm
  (exit 2, ``etcd_alarm_nospace``, ``writes_refused``); each daemon says its writes are
  refused (``/v1/status``, ``/readyz``, ``/metrics``); after the recovery the registry is
  written again and a card killed then goes out within the normal bound;
- a daemon frozen during the outage still loses its cards once writes return.

On every installed etcd series (3.5, 3.4); the recovery runs the ``etcdctl`` next to it.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from awide_cluster.store import EtcdStore, StoreConfig
from awide_cluster.store.errors import NoSpace
from awide_harness.cluster import EmbeddedCluster
from awide_harness.procs import CLI
from awide_harness.spec import ClusterSpec, Timing
from awide_harness.views import card_out, cards_in, cards_out
from awide_harness.waits import wait_until_sync

QUOTA = 16 * 1024 * 1024          # etcd's own example of a small quota
FILL = "/awide-test-fill/"        # outside every cluster's prefix
TIMING = Timing.quick()           # poll 0.25 s, call 0.2 s, lease TTL 2 s, 3 sick polls
SICK = TIMING.sick_polls
BOUND = 60.0                      # generous deadline of every wait (a loaded 2-core machine)

pytestmark = pytest.mark.timeout(400)


def spec(etcd: str, cluster: str) -> ClusterSpec:
    return ClusterSpec(cluster=cluster, storage_hosts=2, cards_per_host=2, witness_hosts=1,
                       gateways=2, timing=TIMING, etcd_binary=etcd, first_leader="s1",
                       etcd_args=(f"--quota-backend-bytes={QUOTA}",))


def etcdctl_for(etcd: str) -> str:
    ctl = Path(etcd).with_name("etcdctl")
    if not os.access(ctl, os.X_OK):
        pytest.skip(f"no etcdctl next to {etcd}")
    return str(ctl)


def wait(pred, what: str, bound: float = BOUND):
    return wait_until_sync(pred, bound, what, poll=0.05)


# ------------------------------------------------------------------ etcd

def every_host_reported(c: EmbeddedCluster) -> bool:
    """Every daemon holds a lease and its report is in etcd (the cluster is "ready" once the
    gateways show every card; a witness may still be getting its lease then, and a lease is
    refused under NOSPACE like any write)."""
    got = c.reports()
    return got is not None and set(c.hosts) <= set(got[1])


def fill_quota(c: EmbeddedCluster) -> int:
    """Put 1 MiB values outside the cluster's prefix until etcd refuses (NoSpace): how many
    were written, once every daemon has reported on its lease. Bounded: 64 puts of 5 s at
    most."""
    wait(lambda: every_host_reported(c), "every daemon reported before the quota fills")

    async def main() -> int:
        cfg = StoreConfig(endpoints=c.etcd.endpoints, prefix="", call_timeout=5.0)
        async with EtcdStore(cfg) as s:
            blob = os.urandom(1024 * 1024)
            for i in range(64):
                try:
                    await s.put(f"{FILL}{i}", blob)
                except NoSpace:
                    return i
        raise AssertionError(f"64 MiB written and etcd still accepts writes (quota {QUOTA})")
    return asyncio.run(main())


def alarms(c: EmbeddedCluster) -> list[str]:
    async def main():
        cfg = StoreConfig(endpoints=c.etcd.endpoints, prefix="", call_timeout=5.0)
        async with EtcdStore(cfg) as s:
            return [a.alarm for a in await s.alarms()]
    return asyncio.run(main())


def etcdctl(ctl: str, c: EmbeddedCluster, *args: str, each: bool = False) -> str:
    eps = ",".join(c.etcd.endpoints) if each else c.etcd.endpoints[0]
    p = subprocess.run([ctl, f"--endpoints={eps}", *args], capture_output=True, text=True,
                       timeout=60, env={**os.environ, "ETCDCTL_API": "3"})
    assert p.returncode == 0, (args, p.stdout[-2000:], p.stderr[-2000:])
    return p.stdout


def recover(ctl: str, c: EmbeddedCluster) -> None:
    """The runbook of docs/operations.md, step by step."""
    etcdctl(ctl, c, "del", "--prefix", FILL)                      # 1. free what filled it
    status = json.loads(etcdctl(ctl, c, "endpoint", "status", "--write-out=json"))
    rev = status[0]["Status"]["header"]["revision"]
    etcdctl(ctl, c, "compact", str(rev))                          # 2. compact
    etcdctl(ctl, c, "defrag", each=True)                          # 3. defragment each member
    etcdctl(ctl, c, "alarm", "disarm")                            # 4. disarm
    assert etcdctl(ctl, c, "alarm", "list").strip() == ""


# ------------------------------------------------------------------ daemons

def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=2.0) as r:
            return r.status, r.read(1 << 20).decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read(1 << 20).decode()
    except OSError:
        return 0, ""


def view(c: EmbeddedCluster, host: str) -> dict:
    code, body = get(c.api_url(host) + "/v1/status")
    return json.loads(body) if code == 200 else {}


def refused_in_a_row(c: EmbeddedCluster, host: str) -> int:
    err = view(c, host).get("write_error") or {}
    return err.get("in_a_row", 0) if err.get("reason") == "nospace" else 0


def report_seq(c: EmbeddedCluster, host: str) -> int:
    rep = view(c, host).get("report") or {}
    return int(rep.get("seq", 0))


def refused_metric(c: EmbeddedCluster, host: str) -> float:
    _, text = get(c.api_url(host) + "/metrics")
    m = re.search(r'^awide_writes_refused_total\{cluster="[^"]*",reason="nospace",'
                  r'write="report"\} (\S+)$', text, re.M)
    return float(m.group(1)) if m else 0.0


def status(c: EmbeddedCluster, *sample: str) -> tuple[int, dict]:
    """``status -o json``; ``sample`` ("--sample", "0"): one read, no report ages."""
    p = subprocess.run(CLI + ["status", "--endpoints", ",".join(c.etcd.endpoints),
                              "--cluster", c.spec.cluster, "-o", "json", *sample],
                       capture_output=True, text=True, timeout=60)
    return p.returncode, json.loads(p.stdout)


def named(got: tuple[int, dict], codes: set[str]) -> tuple[int, dict] | None:
    """The status answer when its problems include ``codes``, else None."""
    return got if codes <= {p["code"] for p in got[1]["problems"]} else None


def ever_out(c: EmbeddedCluster, ids: list[str], since: float) -> list[str]:
    """Cards some gateway had out of service at any moment since ``since``."""
    out = set()
    for gw in c.gateway_ids:
        for v in c.history(gw):
            if v.seen_at >= since:
                out |= {i for i in ids if not v.card_in(i)}
    return sorted(out)


# ------------------------------------------------------------------ tests

def test_a_full_quota_takes_no_card_out_and_detection_works_after(tmp_path, etcd_binary):
    ctl = etcdctl_for(etcd_binary)
    with EmbeddedCluster(tmp_path, spec(etcd_binary, "quota1")) as c:
        ids = [c.card_id(k) for k in c.cards]
        gen0 = c.registry().generation
        t_fill = time.monotonic()
        assert fill_quota(c) > 0
        assert "NOSPACE" in alarms(c)
        # every daemon's report write is refused, poll after poll: the outage is held for
        # more than sick_polls polls
        wait(lambda: all(refused_in_a_row(c, h) >= SICK + 2 for h in c.hosts),
             f"every daemon's report refused {SICK + 2} times in a row")
        lead = view(c, "s1")
        assert lead["is_leader"] and "own writes fail" in (lead["write_outage"] or ""), lead
        code, body = get(c.api_url("s2") + "/readyz")
        assert code == 503 and "writes fail" in body and "nospace" in body, body
        assert refused_metric(c, "s2") >= SICK + 2
        # status names the alarm and the refused writes (a status whose reads a loaded
        # machine did not answer in time says "unread" instead: it is asked again); both
        # come from etcd's alarm, not from report ages: one read
        code, st = wait(lambda: named(status(c, "--sample", "0"),
                                      {"etcd_alarm_nospace", "writes_refused"}),
                        "status names the alarm and the refused writes")
        assert code == 2
        assert st["etcd"]["alarms"] and st["etcd"]["alarms"][0]["alarm"] == "NOSPACE"
        assert c.registry().generation == gen0
        assert ever_out(c, ids, t_fill) == []

        recover(ctl, c)
        t_back = time.monotonic()
        wait(lambda: all(not view(c, h).get("write_error") for h in c.hosts)
             and not view(c, "s1").get("write_outage"), "reports written again")
        seqs = {h: report_seq(c, h) for h in c.hosts}
        # sick_polls + 2 more polls of every daemon: any late count would have shown by now
        wait(lambda: all(report_seq(c, h) >= seqs[h] + SICK + 2 for h in c.hosts),
             "more polls after the recovery")
        assert ever_out(c, ids, t_fill) == [], "a healthy card went out"
        reg = c.registry()
        assert reg.generation == gen0 and all(reg.card(i).state == "in" for i in ids)
        assert all(get(c.api_url(h) + "/readyz")[0] == 200 for h in c.hosts)
        wait(lambda: status(c)[0] == 0, "status healthy after the recovery")
        assert t_back > t_fill

        # detection works as before: a card killed now goes out, and the registry is written
        key = c.cards_of("s2")[0]
        t_kill = c.card_store_kill(key)
        seen = c.wait_until(card_out(c.card_id(key)), BOUND, since=t_kill)
        assert all(t is not None for t in seen.values()), seen
        reg = c.registry()
        assert reg.generation > gen0 and reg.card(c.card_id(key)).state == "out"
        others = [i for i in ids if i != c.card_id(key)]
        assert all(reg.card(i).state == "in" for i in others)
        print(f"etcd {c.etcd.version}: card out on every gateway "
              f"{max(seen.values()) - t_kill:.2f} s after its store was killed "
              f"(normal bound about {(SICK + 3) * TIMING.poll_interval:.2f} s + slack)")


def test_a_daemon_frozen_during_the_outage_loses_its_cards_once_writes_return(tmp_path,
                                                                              etcd_binary):
    ctl = etcdctl_for(etcd_binary)
    with EmbeddedCluster(tmp_path, spec(etcd_binary, "quota2")) as c:
        ids = [c.card_id(k) for k in c.cards]
        frozen = [c.card_id(k) for k in c.cards_of("s2")]
        alive = [i for i in ids if i not in frozen]
        t_fill = time.monotonic()
        fill_quota(c)
        wait(lambda: all(refused_in_a_row(c, h) >= 2 for h in c.hosts), "outage seen")
        c.daemon_signal("s2", signal.SIGSTOP)
        try:
            base = {h: refused_in_a_row(c, h) for h in ("s1", "w1")}
            wait(lambda: all(refused_in_a_row(c, h) >= base[h] + SICK + 1 for h in base),
                 "the outage held for sick_polls + 1 polls with s2 frozen")
            assert ever_out(c, ids, t_fill) == []
            recover(ctl, c)
            t_back = time.monotonic()
            seen = c.wait_until(cards_out(frozen), BOUND, since=t_back)
            assert all(t is not None for t in seen.values()), seen
            reg = c.registry()
            assert all(reg.card(i).state == "out" for i in frozen)
            assert all(reg.card(i).state == "in" for i in alive)
            assert ever_out(c, alive, t_fill) == [], "a card of a live host went out"
            print(f"etcd {c.etcd.version}: frozen host's cards out on every gateway "
                  f"{max(seen.values()) - t_back:.2f} s after the recovery")
        finally:
            c.daemon_signal("s2", signal.SIGCONT)
        back = c.wait_until(cards_in(frozen), BOUND)
        assert all(t is not None for t in back.values()), back
