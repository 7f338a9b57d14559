"""Figure 8: footprint at steady state.

A real ``awide-cluster run`` subprocess with 8 directory cards (store probes: TCP listeners in
this process) leads a 3-host cluster (two witness daemons complete it) on a 3-member etcd,
with one gateway following it. Over three steady windows of 30 s back to back (one of 6 s with
``--quick``), from /proc: the daemon's RSS (the peak over all of them) and its CPU share of one
core (its reaped children included; the median window's), the gateway library's added RSS (a
child that measures itself before and after importing and starting it) and CPU share (the
median window's), and etcd writes per second per host over the whole span (the cluster
revision counts every write).

Then the store-unit probes of 8 cards (``store: {systemd_unit: ...}``, the production kind)
alone, turn by turn: one ``systemctl`` per turn for all cards (``cards.units``, what the
daemon does) against one per card (the naive way), interleaved, CPU of this process and its
children per turn. The ``systemctl`` is a stand-in that starts the real one (its start-up is
most of a call's cost) and prints one state per unit; a real one also asks systemd over its
socket, which costs PID 1 and not the daemon.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import selectors
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from awide_cluster.contract import keys
from awide_cluster.contract.records import LeaderRecord
from awide_cluster.contract.registry import decode
from awide_harness.etcd_cluster import EtcdCluster
from awide_harness.presets import config_dict
from awide_harness.waits import WaitTimeout, wait_until_sync
from bench.common import (
    Context,
    Row,
    bench_python_env,
    cpu_seconds,
    etcd_settings,
    make_dir_cards,
    pct,
    rss_bytes,
    start_etcd,
    store_for,
)
from bench.proc import Worker

RUN = [sys.executable, "-c", "from awide_cluster.cli.main import main; main()"]
MB = 1024 * 1024
WINDOWS = 3             # back-to-back CPU windows (full run); each 30 s


class Listeners:
    """TCP listeners that accept and close (the cards' store services, as the probes see them)."""

    def __init__(self, n: int) -> None:
        self.sel = selectors.DefaultSelector()
        self.socks = []
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            s.listen(64)
            s.setblocking(False)
            self.sel.register(s, selectors.EVENT_READ)
            self.socks.append(s)
        self.ports = [s.getsockname()[1] for s in self.socks]
        self._stop = False
        self._t = threading.Thread(target=self._run, name="bench-listeners", daemon=True)
        self._t.start()

    def _run(self) -> None:
        while not self._stop:
            for key, _ in self.sel.select(timeout=0.2):
                try:
                    conn, _ = key.fileobj.accept()  # type: ignore[union-attr]
                    conn.close()
                except OSError:
                    pass

    def close(self) -> None:
        self._stop = True
        self._t.join(2.0)
        for s in self.socks:
            s.close()


class Daemon:
    def __init__(self, ctx: Context, name: str, cfg: dict[str, Any]) -> None:
        path = ctx.work / f"{name}.yaml"
        path.write_text(yaml.safe_dump(cfg))
        self.log = open(ctx.work / f"{name}.log", "wb")  # noqa: SIM115 - closed in stop()
        self.p = subprocess.Popen(RUN + ["run", "--config", str(path)], stdin=subprocess.DEVNULL,
                                  stdout=self.log, stderr=subprocess.STDOUT,
                                  env=bench_python_env())

    def stop(self) -> None:
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(5.0)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(5.0)
        self.log.close()


def daemon_config(endpoints: tuple[str, ...], cluster: str, host: str,
                  cards: list[dict[str, Any]]) -> dict[str, Any]:
    """A daemon of h1..h3 as deployed (the product's timing): storage with cards, else witness."""
    return config_dict(endpoints, cluster, host, cards, hosts=("h1", "h2", "h3"),
                       role="storage" if cards else "witness", product_timing=True)


async def _leader_and_cards(endpoints: tuple[str, ...], cluster: str) -> tuple[str | None, int]:
    store = store_for(endpoints, cluster)
    try:
        kv = await store.get(keys.LEADER)
        reg = await store.get(keys.REGISTRY)
    finally:
        await store.close()
    rec = LeaderRecord.decode(kv.value) if kv else None
    leader = rec.host if rec else None
    n_in = sum(1 for c in decode(reg.value).cards if c.state == "in") if reg else 0
    return leader, n_in


async def _revision(endpoints: tuple[str, ...], cluster: str) -> int:
    store = store_for(endpoints, cluster)
    try:
        return (await store.range(keys.LEADER, keys_only=True)).revision
    finally:
        await store.close()


def _wait(pred: Any, bound: float, what: str) -> None:
    try:
        wait_until_sync(pred, bound, what, poll=0.2)
    except WaitTimeout as e:
        raise RuntimeError(str(e)) from None


@dataclass(frozen=True)
class Fleet:
    """The figure's steady cluster, started: its etcd, its daemons (h1 leading with 8 cards,
    then the witnesses h2 and h3) and its gateway worker, ready."""

    etcd: EtcdCluster
    eps: tuple[str, ...]
    cluster: str
    daemons: list[Daemon]
    gw: Worker


@contextlib.contextmanager
def steady_fleet(ctx: Context, work: Path, *, etcd_name: str, cluster_prefix: str,
                 cards_dir: str, before_ready: Callable[[Worker], None] | None = None,
                 cards_root: Path | None = None) -> Iterator[Fleet]:
    """A 3-member etcd, ``awide-cluster run`` of h1 with 8 directory cards (store probes: TCP
    listeners here) until it leads with the 8 in, two witness daemons, one gateway worker
    (``before_ready``: what to read of it before its "ready"); all stopped at the exit.
    ``cards_root``: where the cards' directories are made (default ``work``; a tmpfs makes
    their write probe's fdatasync wait for no disk)."""
    etcd = start_etcd(ctx, etcd_name)
    cluster = f"{cluster_prefix}{uuid.uuid4().hex[:6]}"
    eps = etcd.endpoints
    listeners = Listeners(8)
    daemons: list[Daemon] = []
    gw: Worker | None = None
    try:
        dirs = make_dir_cards((cards_root or work) / cards_dir, 8)
        specs = [{"name": c.name, "kind": "dir", "path": c.path,
                  "store": {"tcp": f"127.0.0.1:{port}"}}
                 for c, port in zip(dirs, listeners.ports, strict=True)]
        daemons.append(Daemon(ctx, "h1", daemon_config(eps, cluster, "h1", specs)))
        _wait(lambda: asyncio.run(_leader_and_cards(eps, cluster)) == ("h1", 8), 40.0,
              "h1 leads with 8 cards in")
        daemons += [Daemon(ctx, h, daemon_config(eps, cluster, h, [])) for h in ("h2", "h3")]
        gw = Worker("bench.gwfoot", {"endpoints": list(eps), "cluster": cluster,
                                     "expect_in": 8}, log_dir=work / "logs", name="gwfoot")
        if before_ready is not None:
            before_ready(gw)
        gw.expect("ready", 60.0)
        yield Fleet(etcd, eps, cluster, daemons, gw)
    finally:
        if gw is not None:
            gw.close()
        for d in daemons:
            d.stop()
        listeners.close()
        etcd.stop()


def run(ctx: Context) -> list[Row]:
    settle, window = (2.0, 6.0) if ctx.quick else (8.0, 30.0)
    rows: list[Row] = []
    rss: dict[str, int] = {}

    def rss_before_ready(gw: Worker) -> None:
        rss["base"] = gw.expect("base", 30.0)["rss"]
        rss["imported"] = gw.expect("imported", 30.0)["rss"]

    with steady_fleet(ctx, ctx.work, etcd_name="etcd8", cluster_prefix="fp",
                      cards_dir="cards8", before_ready=rss_before_ready) as fleet:
        etcd, eps, cluster, daemons, gw = (fleet.etcd, fleet.eps, fleet.cluster, fleet.daemons,
                                           fleet.gw)
        base, imported = rss["base"], rss["imported"]
        time.sleep(settle)          # not a wait: the footprint is measured on a settled fleet
        h1 = daemons[0].p.pid
        pids = {"daemon": h1, "witness": daemons[1].p.pid, "gateway": gw.pid}
        r0, t0 = asyncio.run(_revision(eps, cluster)), time.monotonic()
        peak = {k: 0 for k in pids}
        # the CPU shares: the median of WINDOWS back-to-back windows (one window of 30 s
        # moves by about a fifth between runs: a median of three is less at one's mercy)
        each: dict[str, list[float]] = {k: [] for k in pids}
        for _ in range(1 if ctx.quick else WINDOWS):
            c0 = {k: cpu_seconds(p, children=True) for k, p in pids.items()}
            w0 = time.monotonic()
            while time.monotonic() < w0 + window:
                for k, p in pids.items():
                    peak[k] = max(peak[k], rss_bytes(p))
                time.sleep(0.5)         # not a wait: the RSS sampling period
            c1 = {k: cpu_seconds(p, children=True) for k, p in pids.items()}
            w1 = time.monotonic()
            for k in pids:
                each[k].append((c1[k] - c0[k]) / (w1 - w0) * 100.0)
        r1, t1 = asyncio.run(_revision(eps, cluster)), time.monotonic()
        span = t1 - t0
        share = {k: statistics.median(v) for k, v in each.items()}
        windows = len(each["daemon"])
        gw.send({"cmd": "rss"})
        end = gw.expect("rss", 10.0)
        leader, n_in = asyncio.run(_leader_and_cards(eps, cluster))
        hosts = len(daemons)
        writes = (r1 - r0) / span
        common = {"window_s": round(span, 1), "leader": leader, "cards_in": n_in,
                  "etcd": etcd_settings(etcd)}
        rows.append(Row(8, "daemon RSS (8 cards, leader)", round(peak["daemon"] / MB, 1), "MB",
                        int(span / 0.5), stat="max", goal="<= 60 MB",
                        met=peak["daemon"] / MB <= 60,
                        note=f"witness daemon {peak['witness'] / MB:.1f} MB",
                        extra={**common, "witness_rss_mb": round(peak["witness"] / MB, 1)}))
        per = {k: [round(v, 3) for v in each[k]] for k in pids}
        rows.append(Row(8, "daemon CPU (8 cards, leader)", round(share["daemon"], 3),
                        "% of a core", windows, stat="median" if windows > 1 else "value",
                        median=round(share["daemon"], 3), max=max(per["daemon"]),
                        goal="<= 1 %", met=share["daemon"] <= 1.0,
                        note=f"{windows} windows of {window:.0f} s, probes included: "
                             f"{per['daemon']}; witness daemon {per['witness']} (median "
                             f"{share['witness']:.2f} %)",
                        baseline=round(share["witness"], 3),
                        ratio=(round(share["daemon"] / share["witness"], 2)
                               if share["witness"] > 0 else None),
                        ratio_of="leader / witness daemon",
                        extra={**common, "window_each_s": window,
                               "witness_cpu_pct": round(share["witness"], 3),
                               "cpu_pct_each": per}))
        added = end["rss"] - base
        rows.append(Row(8, "gateway library added RSS (8 cards, watch on)",
                        round(added / MB, 1), "MB", 1, stat="value", goal="<= 30 MB",
                        met=added / MB <= 30,
                        note=f"interpreter {base / MB:.1f} MB before the import, "
                             f"{imported / MB:.1f} MB after it, {end['rss'] / MB:.1f} MB with "
                             "the gateway running",
                        extra={**common, "base_rss_mb": round(base / MB, 1),
                               "imported_rss_mb": round(imported / MB, 1),
                               "running_rss_mb": round(end["rss"] / MB, 1),
                               "in_service": end["in_service"]}))
        rows.append(Row(8, "gateway library CPU (8 cards, watch on)", round(share["gateway"], 3),
                        "% of a core", windows, stat="median" if windows > 1 else "value",
                        goal="<= 0.5 %", met=share["gateway"] <= 0.5,
                        note=f"{windows} windows of {window:.0f} s: {per['gateway']}",
                        extra=common))
        rows.append(Row(8, "etcd writes per second per host", round(writes / hosts, 3),
                        "writes/s", r1 - r0, stat="value",
                        note=f"{r1 - r0} revisions in {span:.0f} s over {hosts} daemons "
                             f"(one with 8 cards, two witnesses) and 1 gateway",
                        extra={**common, "revisions": r1 - r0, "hosts": hosts}))
    rows.append(unit_probe_row(ctx))
    rows.extend(nvme_round_rows(ctx))
    return rows


STAND_IN = """#!/bin/sh
# systemctl is-active -- UNITS...: starts the real systemctl, prints one state per unit
{real} --version >/dev/null 2>&1
shift 2
for u in "$@"; do echo active; done
"""


def _turn_cpu(turn: Any) -> float:
    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    asyncio.run(turn())
    c, d = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return (c.ru_utime + c.ru_stime - a.ru_utime - a.ru_stime +
            d.ru_utime + d.ru_stime - b.ru_utime - b.ru_stime)


def unit_probe_row(ctx: Context, cards: int = 8) -> Row:
    from awide_cluster.cards.probes import probe_store
    from awide_cluster.cards.spec import StoreProbeSpec
    from awide_cluster.cards.units import UnitStates
    from awide_cluster.nvme.runner import Runner

    real = shutil.which("systemctl") or "true"
    bin_dir = ctx.work / "unit-bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    fake = bin_dir / "systemctl"
    fake.write_text(STAND_IN.format(real=real))
    fake.chmod(0o755)
    runner = Runner(env={**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"})
    specs = [StoreProbeSpec(systemd_unit=f"awide-store@card{i}.service") for i in range(cards)]

    def turn(batched: bool) -> Any:
        async def run() -> None:
            units = UnitStates(runner) if batched else None
            got = await asyncio.gather(*(probe_store(s, runner, 2.0, time.monotonic,
                                                     units=units) for s in specs))
            if not all(r.ok for r in got):
                raise RuntimeError(f"a store unit probe failed: {[r.reason for r in got]}")
        return run

    turns = 10 if ctx.quick else 40
    one: list[float] = []
    each: list[float] = []
    for _ in range(turns):                      # interleaved: the same machine state for both
        one.append(_turn_cpu(turn(True)) * 1000)
        each.append(_turn_cpu(turn(False)) * 1000)
    med_one, med_each = pct(one, 50), pct(each, 50)
    assert med_one is not None and med_each is not None
    return Row(8, f"store-unit probes, {cards} cards: CPU per turn (one systemctl per turn vs "
                  "one per card)", round(med_one, 2), "ms", turns, stat="median",
               median=round(med_one, 2), p99=round(pct(one, 99) or 0.0, 2), max=round(max(one), 2),
               baseline=round(med_each, 2), ratio=round(med_each / med_one, 2) if med_one else None,
               ratio_of="one per card / one per turn",
               note=f"this process and its children, per turn, median of {turns}; the "
                    f"stand-in starts {real}; at one turn a second, {med_one / 10:.2f} % of a "
                    f"core against {med_each / 10:.2f} %",
               extra={"per_turn_ms": [round(v, 3) for v in one],
                      "per_card_ms": [round(v, 3) for v in each], "systemctl": real})


def nvme_round_rows(ctx: Context, cards: int = 8) -> list[Row]:
    """A probe round of ``cards`` healthy NVMe cards on a fake sysfs tree (``bench.nvme_round``),
    the gateway's and the daemon's: CPU per round, the cards sharing one read of the tree
    against each card reading it alone, interleaved in the same run."""
    from awide_cluster.cards.worker import ProbeWorker
    from awide_cluster.nvme.cli import NvmeCli
    from awide_cluster.nvme.runner import Runner
    from awide_gateway_cluster.connector import Connector
    from awide_harness.fakes.counted import CountedSysfs
    from bench.nvme_round import EachCard, daemon_rounds, gateway_rounds, world

    root = ctx.work / "nvme-round"
    card_list, paths, specs = world(root / "sys", cards)
    sysfs = CountedSysfs(root / "sys")
    batches, per_batch = (10, 5) if ctx.quick else (30, 5)
    rows = []
    for side in ("gateway", "daemon"):
        arms: dict[str, list[float]] = {"shared": [], "each": []}
        scans: dict[str, float] = {}
        workers = {"shared": ProbeWorker(name="nvme-round"), "each": EachCard()}

        def batch(arm: str, side: str = side, workers: dict[str, Any] = workers) -> Any:
            async def run() -> None:
                w = workers[arm]
                if side == "gateway":
                    conn = Connector(NvmeCli(Runner(), program="nvme", timeout=3.0), sysfs,
                                     worker=w)
                    await gateway_rounds(conn, card_list, paths, per_batch)
                else:
                    await daemon_rounds(specs, sysfs, w, per_batch)
            return run

        for _ in range(batches):                # interleaved: the same machine state for both
            for arm in ("shared", "each"):
                s0 = sysfs.scans
                arms[arm].append(_turn_cpu(batch(arm)) * 1000 / per_batch)
                scans[arm] = (sysfs.scans - s0) / per_batch
        one, each = pct(arms["shared"], 50), pct(arms["each"], 50)
        assert one is not None and each is not None
        rows.append(Row(
            8, f"NVMe probe round, {cards} cards, {side}: CPU per round (one sysfs read a "
               "round vs one per card)", round(one, 2), "ms", batches, stat="median",
            median=round(one, 2), p99=round(pct(arms["shared"], 99) or 0.0, 2),
            max=round(max(arms["shared"]), 2), baseline=round(each, 2),
            ratio=round(each / one, 2) if one else None, ratio_of="one per card / one a round",
            note=f"this process, per round of {cards} healthy cards on a fake sysfs tree "
                 f"(median of {batches} batches of {per_batch} rounds); whole-tree reads a "
                 f"round {scans['shared']:g} against {scans['each']:g}; at one round a "
                 f"second, {one / 10:.2f} % of a core against {each / 10:.2f} %",
            extra={"per_round_ms": [round(v, 3) for v in arms["shared"]],
                   "per_card_ms": [round(v, 3) for v in arms["each"]],
                   "scans_per_round": scans}))
        ctx.say(f"  {rows[-1].name}: {rows[-1].value} ms against {rows[-1].baseline} ms")
    return rows
