"""Living inside someone else's process: import hygiene, the threaded wrapper, the CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from awide_gateway_cluster import ThreadedClusterGateway
from awide_harness.waits import wait_until_sync
from tests.gateway.support import config, in_service, served

pytestmark = pytest.mark.timeout(60)
ROOT = Path(__file__).resolve().parents[2]


def test_import_changes_no_process_state_and_pulls_no_grpc():
    probe = textwrap.dedent("""
        import json, logging, signal, sys, warnings, asyncio, threading
        def state():
            return {
                "path": list(sys.path),
                "root_handlers": [repr(h) for h in logging.getLogger().handlers],
                "root_level": logging.getLogger().level,
                "disabled": logging.root.manager.disable,
                "loggers_with_handlers": sorted(
                    n for n, lg in logging.root.manager.loggerDict.items()
                    if getattr(lg, "handlers", None)),
                "signals": {s.name: repr(signal.getsignal(s)) for s in signal.valid_signals()
                            if isinstance(s, signal.Signals)},
                "warnings": len(warnings.filters),
                "policy": type(asyncio.get_event_loop_policy()).__name__,
                "threads": threading.active_count(),
                "excepthook": repr(sys.excepthook),
            }
        before = state()
        import awide_gateway_cluster
        from awide_gateway_cluster import ClusterGateway, ThreadedClusterGateway
        import awide_gateway_cluster.gateway, awide_gateway_cluster.threaded
        after = state()
        bad = sorted(m for m in sys.modules if m.split(".")[0] in
                     ("grpc", "grpcio", "google", "etcd3", "etcd", "etcd3aio", "aetcd"))
        print(json.dumps({"same": before == after, "before": before, "after": after,
                          "bad": bad}))
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert res["bad"] == []
    diff = {k: (res["before"][k], res["after"][k]) for k in res["before"]
            if res["before"][k] != res["after"][k]}
    assert res["same"], diff


async def test_threaded_gateway_for_programs_without_asyncio(etcd, leader, world, cluster_name):
    import asyncio
    [a] = served(world, 1)
    await leader.publish([a])
    from awide_cluster.nvme.cli import NvmeCli
    from awide_cluster.nvme.runner import Runner
    cfg = config(cluster_name, etcd.endpoints, world)
    tg = ThreadedClusterGateway(cfg, nvme=NvmeCli(Runner(env=world.env())))

    def program() -> dict:
        # a plain threaded program: no event loop of its own
        tg.start()
        try:
            sub = tg.subscribe()
            wait_until_sync(lambda: in_service(tg, a.id), 8, "the card in service")
            tg.attach_engine("engine-1")
            refused = ""
            try:
                tg.attach_engine("engine-2")
            except Exception as e:  # noqa: BLE001
                refused = str(e)
            ev = sub.get(timeout=2.0)
            return {"in": in_service(tg, a.id), "choice": tg.placement.dialog("x"),
                    "refused": refused, "event": ev}
        finally:
            tg.stop()

    res = await asyncio.to_thread(program)
    assert res["in"] and res["choice"].available and res["choice"].card_id == a.id
    assert "engine-1" in res["refused"]
    assert res["event"] is not None
    assert not tg.running


def test_check_config_exit_codes(tmp_path: Path):
    good = tmp_path / "gw.yaml"
    good.write_text(yaml.safe_dump({
        "mode": "cluster", "cluster": "c1", "host": "h", "pod": "p",
        "etcd": {"endpoints": ["http://127.0.0.1:2379"]}, "model": {"name": "m"}}))
    ok = subprocess.run([sys.executable, "-c",
                         "from awide_cluster.cli.main import main; main()",
                         "gateway", "check-config", str(good)],
                        cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert ok.returncode == 0, ok.stderr
    assert "ok: gateway h-p" in ok.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text(good.read_text().replace("pod: p", "pod: p\ntiming: {poll_interval: 0.2}"))
    no = subprocess.run([sys.executable, "-c",
                         "from awide_cluster.cli.main import main; main()",
                         "gateway", "check-config", str(bad)],
                        cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert no.returncode == 78
    assert no.stderr.strip().startswith(f"{bad}: timing: poll_interval")


def test_watch_prints_table_and_changes_and_stops_on_sigterm(etcd, world, cluster_name,
                                                              tmp_path: Path):
    import asyncio

    from awide_cluster.contract import keys
    from awide_cluster.store import EtcdStore, StoreConfig
    from awide_harness.registry_writer import RegistryWriter

    a, b = served(world, 2)

    async def publish(cards, after=None):
        async with EtcdStore(StoreConfig(endpoints=etcd.endpoints,
                                         prefix=keys.prefix(cluster_name))) as s:
            return await RegistryWriter(s, cluster_name, after=after).publish(cards)

    first = asyncio.run(publish([a]))
    cfg = config(cluster_name, etcd.endpoints, world, pod="watch")
    doc = json.loads(cfg.model_dump_json())
    doc["nvme"]["sysfs_root"] = str(world.sysfs_root)
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump(doc))
    proc = subprocess.Popen(
        [sys.executable, "-c", "from awide_cluster.cli.main import main; main()",
         "gateway", "watch", "--config", str(path)],
        cwd=ROOT, env=world.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    try:
        def read_until(pred, bound=15.0):
            deadline = time.monotonic() + bound
            while time.monotonic() < deadline:
                line = proc.stdout.readline()
                if not line:
                    break
                lines.append(line.rstrip("\n"))
                if pred(lines[-1]):
                    return
            raise AssertionError("watch output lacks the line; got:\n" + "\n".join(lines))

        read_until(lambda line: f"slot 0: IN  {a.id}" in line)
        asyncio.run(publish([a, b], after=first))
        read_until(lambda line: line.startswith("event joined") and b.id in line)
        read_until(lambda line: f"slot 1: IN  {b.id}" in line)
        proc.send_signal(signal.SIGTERM)
        rest, err = proc.communicate(timeout=10)
        lines.extend(rest.splitlines())
        assert proc.returncode == 0, err
        assert lines[-1].endswith("stopped")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
