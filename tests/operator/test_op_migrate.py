"""``awide-cluster namespace migrate`` on a real etcd, through the real command: refused with
nothing written while a live gateway does not list the algorithm (or a record cannot be read),
done once every one does; a gateway of this release then refuses the migrated namespace, and a
namespace not migrated is untouched. The gateway records are written as gateways of this
release and of a (future) release that runs algorithms 1 and 2 would write them."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from dataclasses import replace
from pathlib import Path

from awide_cluster.contract import keys, records
from awide_cluster.contract.records import GatewayRecord, LayoutRecord
from awide_gateway_cluster import layout as lay
from awide_gateway_cluster.registration import check_layout
from tests.operator.op_fixtures import cluster_name, shared_etcd  # noqa: F401
from tests.operator.op_state import store_for
from tests.timing import bound

CLI = str(Path(sys.executable).with_name("awide-cluster"))
ROOT = Path(__file__).resolve().parents[2]
GW = GatewayRecord(id="g1", host="gh1", pod="p1", namespace="ns-a", placement="dialog",
                   fingerprint="f", generation=1, engine=None, version="0.2.0")
LAYOUT = LayoutRecord("ns-a", "dialog", created_by="g1", cards=("c1", "c2"),
                      cards_lineage="L1", cards_generation=3)


async def cli(etcd, cluster: str, *args: str) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWIDE_")}
    env |= {"AWIDE_ETCD_ENDPOINTS": ",".join(etcd.endpoints), "AWIDE_CLUSTER": cluster,
            "PYTHONPATH": str(ROOT)}
    p = await asyncio.create_subprocess_exec(
        CLI, *args, "--call-timeout", str(bound(1.0)), env=env,
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(p.communicate(), 60)
    assert p.returncode is not None
    return p.returncode, out.decode(), err.decode()


async def test_namespace_migrate(shared_etcd, cluster_name):
    store = store_for(shared_etcd.endpoints, cluster_name)
    migrate = ("namespace", "migrate", "ns-a", "--algorithm", "2")
    try:
        code, out, err = await cli(shared_etcd, cluster_name, *migrate)
        assert code == 1 and "layouts/ns-a is absent" in err, (out, err)

        await store.put(keys.layout("ns-a"), LAYOUT.encode(), timeout=2.0)
        await store.put(keys.layout("ns-b"), replace(LAYOUT, namespace="ns-b").encode(),
                        timeout=2.0)
        await store.put(keys.gateway("g1"), GW.encode(), timeout=2.0)      # this release
        await store.put(keys.gateway("g2"), replace(GW, id="g2", algorithms=(1, 2)).encode(),
                        timeout=2.0)
        before = await store.get(keys.layout("ns-a"), timeout=2.0)
        assert before is not None

        # g1 runs algorithm 1 only: refused, named, nothing written
        code, out, err = await cli(shared_etcd, cluster_name, *migrate)
        assert code == 1 and "g1 (runs 1)" in err and "upgrade them first" in err, (out, err)
        after = await store.get(keys.layout("ns-a"), timeout=2.0)
        assert after is not None and after.mod_revision == before.mod_revision

        # a gateway record that cannot be read: refused, naming its key and field
        doc = json.loads(GW.encode()) | {"id": "g3", "algorithms": "1,2"}
        await store.put(keys.gateway("g3"), json.dumps(doc), timeout=2.0)
        await store.put(keys.gateway("g1"), replace(GW, algorithms=(1, 2)).encode(),
                        timeout=2.0)
        code, out, err = await cli(shared_etcd, cluster_name, *migrate)
        assert code == 1 and "gateways/g3" in err and "algorithms" in err, (out, err)
        await store.delete(keys.gateway("g3"), timeout=2.0)

        # every live gateway runs 2: migrated, the rest of the record kept
        code, out, err = await cli(shared_etcd, cluster_name, *migrate)
        assert code == 0 and "placement algorithm 1 -> 2" in out, (out, err)
        kv = await store.get(keys.layout("ns-a"), timeout=2.0)
        assert kv is not None
        assert records.decode_layout(kv.value, key="layouts/ns-a") == replace(LAYOUT,
                                                                              algorithm=2)
        code, out, err = await cli(shared_etcd, cluster_name, *migrate)
        assert code == 0 and "already" in out, (out, err)
        code, out, err = await cli(shared_etcd, cluster_name, "namespace", "migrate", "ns-a",
                                   "--algorithm", "1")
        assert code == 1 and "newer one only" in err, (out, err)

        # a gateway of this release (runs 1) refuses the migrated namespace, and uses the
        # namespace not migrated as it was (same record, nothing written)
        refused = await check_layout(store, LAYOUT, timeout=bound(1.0))
        assert isinstance(refused, lay.AlgorithmUnknown), refused
        ns_b = await store.get(keys.layout("ns-b"), timeout=2.0)
        mine_b = replace(LAYOUT, namespace="ns-b")
        assert await check_layout(store, mine_b, timeout=bound(1.0)) == "ok"
        again = await store.get(keys.layout("ns-b"), timeout=2.0)
        assert ns_b is not None and again is not None
        assert again.mod_revision == ns_b.mod_revision
    finally:
        await store.close()
