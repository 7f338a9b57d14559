"""A compromised storage host on a secured cluster (TLS, authentication, the roles `access`
makes): host s2's own etcd identity takes the leader key from the live leader and writes
(a) s1's card at another address, (b) a new entry with a made-up id, (c) its own card at an
address outside its allowed ones, (d) a whole self-consistent forged registry. Real daemons
and gateways (fake NVMe initiators that log every argv): no gateway runs ``nvme connect`` to
an address no host vouched for, the healthy cards stay in service, ``status`` names the
refused writes and the taken leadership, and once the attacker lets go the cluster repairs
itself with no controller left at the attacker's address (each gateway starts with one there,
as if it had followed a forged entry before, and lets go of it)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from typing import Any

import yaml

from awide_cluster.access.plan import host_user, reader_user
from awide_cluster.contract import keys, records
from awide_cluster.contract import registry as regdoc
from awide_cluster.contract.records import LeaderRecord
from awide_cluster.contract.registry import CardEntry, Registry
from awide_cluster.store import EtcdStore, StoreConfig, TlsConfig
from awide_cluster.store.errors import Conflict
from awide_harness.cluster import EmbeddedCluster
from awide_harness.spec import CardPlan, ClusterSpec, Timing
from awide_harness.views import cards_in
from tests.embedded.support import etcd_or_skip
from tests.timing import bound, wait_until

EVIL = "10.66.6.6"
SPEC = ClusterSpec(cluster="attacked", storage_hosts=2, witness_hosts=1, gateways=2,
                   cards={"s1": (CardPlan("c0", "nvme"),), "s2": (CardPlan("c0", "nvme"),)},
                   timing=Timing.quick(), secure=True, first_leader="s1",
                   allowed_addresses=True)
RUN = [sys.executable, "-c", "from awide_cluster.cli.main import main; main()"]


def refused(c: EmbeddedCluster) -> dict[str, records.GatewayRecord]:
    """Each gateway's record as etcd holds it."""
    out = {}
    for gid in c.gateway_ids:
        kv = c.read_key(keys.gateway(gid))
        if kv is not None:
            out[gid] = records.decode_gateway(kv.value, gid)
    return out


def connects_to_evil(c: EmbeddedCluster) -> list[list[str]]:
    return [argv for w in c.worlds.values() for argv in w.calls()
            if "connect" in argv and any(EVIL in a for a in argv)]


def held_at_evil(c: EmbeddedCluster) -> list[str]:
    return [n for w in c.worlds.values() for n in w.sysfs.controller_names()
            if EVIL in (w.sysfs.attr(n, "address") or "")]


async def test_a_compromised_host_cannot_steer_another_hosts_cards(tmp_path: Any) -> None:
    etcd_or_skip()
    with EmbeddedCluster(tmp_path, SPEC) as c:
        a_id, b_id = c.card_id("s1/c0"), c.card_id("s2/c0")
        assert c.pki is not None
        attacker = EtcdStore(StoreConfig(
            c.etcd.endpoints, prefix=keys.prefix(SPEC.cluster), tls=TlsConfig(c.pki.ca_file),
            call_timeout=2.0, username=host_user(SPEC.cluster, "s2"),
            password=c.password(host_user(SPEC.cluster, "s2"))))
        lease = 0
        try:
            reg = c.registry()
            assert reg is not None and c.leader_host() == "s1"
            a, b = reg.card(a_id), reg.card(b_id)
            assert a is not None and b is not None
            assert a.target is not None and b.target is not None
            # as if each gateway had followed a forged entry before: a controller of s1's
            # card's subsystem, with the gateway's host NQN, at the attacker's address; the
            # gateway lets go of it (at no target of a card it uses)
            planted = {}
            for gid, w in c.worlds.items():
                with w.sysfs.lock():
                    planted[gid] = w.sysfs.add_controller(
                        subsysnqn=a.target.subnqn, serial=a.serial, model=a.model,
                        traddr=EVIL, hostnqn=f"nqn.2024-01.io.awide:{gid}")
            assert len(planted) == 2

            # the attacker deletes the live leader's key and takes it on a lease of its own
            lease = (await attacker.grant(30)).id
            forged_key = LeaderRecord(host="s2", since="2026-01-01T00:00:00Z").encode()

            async def take() -> bool:
                await attacker.delete(keys.LEADER)
                try:
                    await attacker.create(keys.LEADER, forged_key, lease=lease)
                except Conflict:
                    return False
                return True

            # a daemon may campaign between the delete and the create: delete again
            await wait_until(take, what="the attacker holds the leader key")
            reg = c.registry()      # the last one s1 wrote (its later writes are fenced)
            assert reg is not None
            gen = reg.generation

            async def forge(cards: list[CardEntry], n: int) -> None:
                nonlocal gen
                gen += 1
                doc = Registry(cluster=SPEC.cluster, generation=gen, leader="s2",
                               cards=tuple(cards),
                               slots=regdoc.slot_table(tuple(cards), reg.slots),
                               written_at="", lineage=reg.lineage, hosts=reg.hosts)
                await attacker.put(keys.REGISTRY, regdoc.encode(doc))
                await wait_until(lambda: all(r.refused >= n for r in refused(c).values())
                                 and len(refused(c)) == 2,
                                 what=f"both gateways refused {n} entries")

            moved_a = replace(a, target=replace(a.target, traddr=EVIL))
            # (a) s1's card, serial kept, its address changed
            await forge([moved_a, b], 1)
            # (b) a new entry with a made-up id
            made_up = replace(b, id="c000000000ab", serial="FORGED1", name="c9",
                              target=replace(b.target, traddr=EVIL))
            await forge([a, b, made_up], 2)
            # (c) s2's own card outside its allowed addresses: in its report and the registry
            moved_b = replace(b, target=replace(b.target, traddr=EVIL))
            kv = await attacker.get(keys.member("s2"))
            assert kv is not None
            report = json.loads(kv.value)
            report["cards"][0]["target"]["traddr"] = EVIL
            report["seq"] += 1
            await attacker.put(keys.member("s2"), json.dumps(report))
            await forge([a, moved_b], 3)
            # (d) a whole self-consistent registry: every card at the attacker's address
            await forge([moved_a, moved_b, made_up], 5)

            views = c.wait_until(cards_in([a_id, b_id]), bound(2.0))
            assert all(t is not None for t in views.values()), views
            recs = refused(c)
            assert all(r.refusing >= 2 for r in recs.values()), recs
            assert all("written by s2" in r.last_refusal for r in recs.values()), recs

            cfg = tmp_path / "reader.yaml"
            cfg.write_text(yaml.safe_dump({"cluster": SPEC.cluster, "etcd": {
                "endpoints": list(c.etcd.endpoints), "call_timeout": 3.0,
                **(c.etcd_auth(reader_user(SPEC.cluster)) or {})}}))

            def status_naming_the_taker() -> tuple[Any, dict] | None:
                """One status read (no age checked, so --sample 0) once s1's report names
                who holds the key it lost (its next report after it reads the key)."""
                status = subprocess.run(RUN + ["status", "-o", "json", "--config", str(cfg),
                                               "--sample", "0"],
                                        capture_output=True, text=True, timeout=60)
                doc = json.loads(status.stdout)
                taken = [p["message"] for p in doc["problems"] if p["code"] == "leader_taken"]
                return (status, doc) if taken and "s2" in taken[0] else None

            status, doc = await wait_until(status_naming_the_taker, 20.0,
                                           what="status names s2 as the leader key's taker")
            problems = {(p["code"], p["subject"]): p["message"] for p in doc["problems"]}
            for gid in c.gateway_ids:
                msg = problems.get(("registry_forged", gid), "")
                assert "written by s2" in msg and " refused: " in msg, doc["problems"]
            assert status.returncode == 1, status.stdout + status.stderr
            taken = [m for (code, _), m in problems.items() if code == "leader_taken"]
            assert taken and "s1" in taken[0] and "s2" in taken[0], doc["problems"]
            assert connects_to_evil(c) == []

            # the attacker lets go: a daemon leads again and rewrites the registry from the
            # hosts' reports
            await attacker.revoke(lease)
            lease = 0

            def repaired() -> bool:
                r = c.registry()
                return r is not None and r.leader in SPEC.hosts and all(
                    (x := r.card(cid)) is not None and x.target is not None
                    and x.target.traddr != EVIL for cid in (a_id, b_id))

            await wait_until(repaired, what="a daemon rewrote the registry from the reports")
            views = c.wait_until(cards_in([a_id, b_id]), bound(3.0))
            assert all(t is not None for t in views.values()), views
            assert connects_to_evil(c) == []
            assert held_at_evil(c) == []
            for gid, name in planted.items():       # each gateway let go of its own
                assert any("disconnect" in argv and f"--device={name}" in argv
                           for argv in c.worlds[gid].calls()), c.worlds[gid].calls()
            history = subprocess.run(RUN + ["history", "--config", str(cfg)],
                                     capture_output=True, text=True, timeout=60)
            assert "taken" in history.stdout and "s2" in history.stdout, history.stdout
        finally:
            if lease:
                await attacker.revoke(lease)
            await attacker.close()
