"""Poison written straight into etcd at every key kind cannot crash, blind or reshuffle the cluster.

A whole embedded cluster (3 etcd members, 2 storage hosts and a witness, each with its daemon
process, 2 gateway processes) runs while hostile values are written into etcd by hand: at the
registry, a host report, the leader key, an intent, a gateway record, a layout record, the
history, a key under the prefix that nothing knows, one report from a host outside the cluster,
and a value near etcd's 1.5 MiB request limit. Meanwhile a card's store is killed. Then:

- every daemon is still running;
- the card goes out on every gateway within the normal detection bound;
- the registry is repaired by the leader: the same cards in the same slots, a higher
  generation, no card from the poison;
- ``awide-cluster status`` exits 1, names the bad keys, prints no traceback;
- the forged history is replaced by the leader's own with its next write (the card's out in
  it, nothing of the poison);
- no poisoned value ever reaches ``nvme`` (a fake ``nvme`` on PATH logs every argv).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

from awide_cluster.contract import keys
from awide_cluster.store import EtcdStore
from awide_harness.cluster import EmbeddedCluster
from awide_harness.procs import CLI
from awide_harness.spec import ClusterSpec, Timing, bounds
from awide_harness.views import card_out

from .support import etcd_or_skip

MARK = "POISON\nINJECTED"           # a newline: it must not forge a log line either
BIG = 1_400_000                     # under etcd's default 1.5 MiB request limit


def _fake_nvme(bin_dir: Path, log: Path) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    nvme = bin_dir / "nvme"
    nvme.write_text(f"#!{sys.executable}\nimport sys\n"
                    f"open({str(log)!r}, 'a').write(repr(sys.argv) + '\\n')\nsys.exit(1)\n")
    nvme.chmod(0o755)


def _poison(registry_cluster: str) -> dict[str, bytes]:
    deep = b"[" * 5000
    report = {"schema": 1, "host": "intruder", "role": "storage", "version": "9",
              "api": "", "run": "r1", "seq": 1, "cards": [{
                  "name": "x0", "kind": "nvme", "found": True, "serial": "EVIL",
                  "model": "evil", "identity": "uuid:evil", "device": "nvme9n1",
                  "controller_state": "live", "healthy": True, "reason": "",
                  "target": {"transport": "tcp", "traddr": "10.66.6.6", "trsvcid": 4420,
                             "subnqn": "nqn.2024-01.io.evil:x"}}]}
    return {
        keys.REGISTRY: json.dumps({"schema": 1, "cluster": registry_cluster,
                                   "generation": 1e300, "cards": deep.decode()}).encode(),
        keys.LEADER: b'{"host":"w9","since":1e300}',          # and off the leader's lease
        keys.member("w1") + "x": b'{"schema": 1, "host": ' + deep,          # not a host
        keys.member("intruder"): json.dumps(report).encode(),
        keys.INTENTS + "c0123456789a": json.dumps({"action": "forget", "by": MARK}).encode(),
        keys.gateway("gw-evil"): b'{"schema":1,"generation":' + b"9" * 5000 + b"}",
        keys.gateway("gw-bad"): b'{"schema":1,"id":"gw-bad","generation":1e999}',
        keys.layout("ns-evil"): b"\x00\xff" * 100,
        keys.HISTORY: json.dumps({"schema": 1, "ring": "evil", "entries": [{
            "seq": 1, "generation": 1, "kind": "out", "card": "c0123456789a",
            "reason": "\x1b[2J" + MARK}]}).encode(),
        "zzz/unknown": json.dumps({"note": MARK}).encode(),
        "zzz/huge": b"x" * BIG,
    }


async def _write(cfg, values: dict[str, bytes]) -> None:
    store = EtcdStore(cfg)
    try:
        for key, value in values.items():
            await store.put(key, value, timeout=5.0)
    finally:
        await store.close()


def test_poison_at_every_key_kind(tmp_path: Path) -> None:
    etcd_or_skip()
    nvme_log = tmp_path / "nvme-argv.log"
    _fake_nvme(tmp_path / "bin", nvme_log)
    os.environ["PATH"] = f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"
    spec = ClusterSpec(cluster="poison", storage_hosts=2, cards_per_host=1, witness_hosts=1,
                       gateways=2, timing=Timing.quick())
    b = bounds(spec.timing)
    with EmbeddedCluster(tmp_path / "work", spec) as c:
        before = c.registry()
        assert before is not None and len(before.cards) == 2
        victim = c.cards[0]
        asyncio.run(_write(c.store_config(), _poison(spec.cluster)))
        t0 = c.card_store_kill(victim)
        seen = c.wait_until(card_out(c.card_id(victim)), b.detection, since=t0)
        assert all(t is not None for t in seen.values()), (
            f"not out on every gateway within {b.detection} s: {seen}")
        # every daemon survived the poison
        for host in c.hosts:
            assert c.daemon_alive(host), f"daemon {host} died: {c.log_tail(host)}"
        # the registry was repaired: same slots, higher generation, nothing from the poison
        after = c.registry()
        assert after is not None and after.slots.slots == before.slots.slots
        assert after.generation > before.generation and after.lineage == before.lineage
        assert {x.id for x in after.cards} == {x.id for x in before.cards}
        entry = after.card(c.card_id(victim))
        assert entry is not None and entry.state == "out"
        # status names the bad keys, exit 2 (CRITICAL), no traceback
        eps = ",".join(c.etcd.endpoints)
        p = subprocess.run([*CLI, "status", "--endpoints", eps, "--cluster", spec.cluster,
                            "--sample", "0",
                            "-o", "json"], capture_output=True, text=True, timeout=60)
        assert p.returncode == 2, (p.returncode, p.stdout[-2000:], p.stderr[-2000:])
        assert "Traceback" not in p.stderr
        doc = json.loads(p.stdout)
        codes = {(x["code"], x["subject"]) for x in doc["problems"]}
        subjects = " ".join(f"{code}:{subject}" for code, subject in codes)
        assert "report_unknown_host" in subjects and "members/intruder" in subjects, codes
        assert "gateway_record_corrupt:gw-bad" in subjects, codes
        assert "value_too_large:gateways/gw-evil" in subjects, codes
        assert "layout_corrupt" in subjects, codes
        assert "card_out" in subjects, codes
        assert any("zzz/huge" in s for _, s in codes), codes
        # the history: the leader's next write replaced the forged ring; the out is in it
        p = subprocess.run([*CLI, "history", "--endpoints", eps, "--cluster", spec.cluster,
                            "--card", c.card_id(victim), "--json"],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, (p.returncode, p.stdout[-2000:], p.stderr[-2000:])
        kinds = [x["kind"] for x in json.loads(p.stdout)["entries"]]
        assert "out" in kinds and MARK not in p.stdout, p.stdout[-2000:]
        # nothing from the poison reached nvme (nvme cards aside, nothing calls it at all)
        text = nvme_log.read_text() if nvme_log.exists() else ""
        for needle in ("POISON", "10.66.6.6", "evil", "EVIL"):
            assert needle not in text, text[-2000:]
