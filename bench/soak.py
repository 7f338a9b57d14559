"""``python -m bench.soak`` (``make soak``): does etcd's database level off under the cluster's
writes, with the housekeeping the role sets?

Two phases, both on real etcd:

1. **The production mix.** An embedded cluster at production timing (poll 1 s, 3 storage hosts
   with 2 cards each, 1 witness, 2 gateways) runs for ``--mix-seconds``; a watch on its prefix
   records every write: how many per key and how many bytes. That gives the write rate per host
   at production timing, and the values to replay.
2. **The accelerated soak.** A fresh 3-member etcd started with the role's flags, except that
   the compaction retention is divided by the acceleration (1 h / ``--accel``), receives the
   same writes (the recorded values, key by key at its recorded rate) ``--accel`` times faster,
   for ``--hours`` of production writes. Every revision etcd keeps is then the same count of
   writes as in production, so the database's size is the production size, reached
   ``--accel`` times sooner. Beside it, one member **without compaction** (the naive
   alternative: what the cluster did before housekeeping) receives the same writes.

The writer paces each key on a schedule (no catching up in bursts) and reports the rate it
achieved: a soak whose writers fell more than 10 % behind says so, as the retention was scaled
for the planned rate. The report (printed, and ``bench/results-soak.json``) gives the
database's file size and size in use over the run, the steady state (median of the second
half), whether it levelled off (the last quarter's maximum within 20 % of the second
quarter's), and the uncompacted member's growth. Nothing here asserts: it reports.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from awide_cluster.store import EtcdStore, StoreConfig
from awide_cluster.store.errors import StoreError
from awide_harness.cluster import EmbeddedCluster
from awide_harness.etcd_cluster import EtcdCluster
from awide_harness.spec import ClusterSpec, Timing
from bench.common import REPO, find_bench_etcd, loadavg, machine

PRODUCTION_RETENTION_S = 3600.0   # --auto-compaction-retention=1h (the role's)
SAMPLE_EVERY = 2.0                # seconds between two database size samples


@dataclass
class KeyMix:
    """One key's writes in the production mix."""

    key: str
    writes: int = 0
    value_bytes: int = 0
    last_value: bytes = b""

    def rate(self, seconds: float) -> float:
        return self.writes / seconds


@dataclass
class Mix:
    seconds: float
    keys: dict[str, KeyMix] = field(default_factory=dict)

    @property
    def writes_per_s(self) -> float:
        return sum(k.writes for k in self.keys.values()) / self.seconds

    def by_class(self) -> dict[str, dict[str, float]]:
        """Writes and bytes per second for each kind of key (``members/s1`` -> ``members/``)."""
        out: dict[str, dict[str, float]] = defaultdict(lambda: {"keys": 0, "writes_per_s": 0.0,
                                                                "bytes_per_s": 0.0})
        for k in self.keys.values():
            cls = k.key.split("/", 1)[0] + ("/" if "/" in k.key else "")
            out[cls]["keys"] += 1
            out[cls]["writes_per_s"] += k.writes / self.seconds
            out[cls]["bytes_per_s"] += k.value_bytes / self.seconds
        return dict(out)


# ---------------------------------------------------------------- phase 1: the production mix

async def _record(store: EtcdStore, seconds: float, mix: Mix) -> None:
    start = await store.range("", prefix=True, keys_only=True)
    async with store.watch("", prefix=True, start_revision=start.revision + 1) as w:
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                batch = await asyncio.wait_for(w.__anext__(), timeout=left)
            except TimeoutError:
                break
            for ev in batch.events:
                if ev.kind != "put":
                    continue
                km = mix.keys.setdefault(ev.kv.key, KeyMix(ev.kv.key))
                km.writes += 1
                km.value_bytes += len(ev.kv.value)
                km.last_value = ev.kv.value


def production_mix(work: Path, seconds: float, etcd_binary: str) -> Mix:
    spec = ClusterSpec(cluster="soak", storage_hosts=3, cards_per_host=2, witness_hosts=1,
                       gateways=2, timing=Timing(), etcd_binary=etcd_binary)
    mix = Mix(seconds=seconds)
    with EmbeddedCluster(work / "mix", spec) as c:
        cfg = c.store_config()

        async def go() -> None:
            async with EtcdStore(cfg) as store:
                await _record(store, seconds, mix)
        asyncio.run(go())
    return mix


# ---------------------------------------------------------------- phase 2: the soak

@dataclass
class Sample:
    t: float                 # seconds since the soak started
    equivalent_h: float      # hours of production writes so far
    db_size: int             # largest backend file of the compacted members
    in_use: int | None       # largest size in use of the compacted members
    naive_db_size: int | None


async def _writer(store: EtcdStore, naive: EtcdStore, km: KeyMix, rate: float, until: float,
                  counts: dict[str, int]) -> None:
    """Put ``km``'s value at ``rate`` per second on a fixed schedule until ``until``."""
    period = 1.0 / rate
    nxt = time.monotonic()
    while nxt < until:
        delay = nxt - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)      # pacing: the write schedule
        try:
            await asyncio.gather(store.put(km.key, km.last_value),
                                 naive.put(km.key, km.last_value))
            counts["ok"] += 1
        except StoreError:
            counts["failed"] += 1
        nxt += period


async def _sampler(store: EtcdStore, naive: EtcdStore, started: float, until: float,
                   accel: float, samples: list[Sample]) -> None:
    while time.monotonic() < until:
        st = await store.statuses(timeout=2.0)
        nv = await naive.statuses(timeout=2.0)
        good = [s for s in st.values() if not isinstance(s, StoreError)]
        ngood = [s for s in nv.values() if not isinstance(s, StoreError)]
        t = time.monotonic() - started
        if good:
            in_use = [s.db_size_in_use for s in good if s.db_size_in_use is not None]
            samples.append(Sample(
                t=round(t, 1), equivalent_h=round(t * accel / 3600.0, 2),
                db_size=max(s.db_size for s in good),
                in_use=max(in_use) if in_use else None,
                naive_db_size=max(s.db_size for s in ngood) if ngood else None))
        await asyncio.sleep(SAMPLE_EVERY)   # not a wait: the sampling period


def soak(work: Path, mix: Mix, hours: float, accel: float, etcd_binary: str
         ) -> dict[str, Any]:
    retention = PRODUCTION_RETENTION_S / accel
    wall = hours * 3600.0 / accel
    flag = f"--auto-compaction-retention={retention:.0f}s"
    compacted = EtcdCluster(work / "soak", 3, binary=etcd_binary, extra_args=[flag])
    plain = EtcdCluster(work / "naive", 1, binary=etcd_binary,
                        extra_args=["--auto-compaction-retention=0"])
    samples: list[Sample] = []
    counts = {"ok": 0, "failed": 0}
    with compacted, plain:
        async def go() -> None:
            cfg = StoreConfig(endpoints=compacted.endpoints, prefix="/awide/soak/",
                              call_timeout=2.0)
            ncfg = StoreConfig(endpoints=plain.endpoints, prefix="/awide/soak/",
                               call_timeout=2.0)
            async with EtcdStore(cfg) as store, EtcdStore(ncfg) as naive:
                started = time.monotonic()
                until = started + wall
                tasks = [_writer(store, naive, km, km.rate(mix.seconds) * accel, until, counts)
                         for km in mix.keys.values() if km.writes]
                await asyncio.gather(_sampler(store, naive, started, until, accel, samples),
                                     *tasks)
        asyncio.run(go())
    planned = mix.writes_per_s * accel * wall
    return {"retention_flag": flag, "wall_s": round(wall, 1), "planned_writes": round(planned),
            "writes": counts["ok"], "failed_writes": counts["failed"],
            "achieved": round(counts["ok"] / planned, 3) if planned else None,
            "samples": [s.__dict__ for s in samples]}


# ---------------------------------------------------------------- the report

def judge(result: dict[str, Any]) -> dict[str, Any]:
    """Steady state and levelling from the samples (None where there are too few)."""
    samples = result["samples"]
    n = len(samples)
    if n < 8:
        return {"levelled": None, "note": f"only {n} samples"}
    in_use = [s["in_use"] if s["in_use"] is not None else s["db_size"] for s in samples]
    q = n // 4
    second, last = in_use[q:2 * q], in_use[3 * q:]
    half = samples[n // 2:]
    naive = [s["naive_db_size"] for s in samples if s["naive_db_size"] is not None]
    return {
        "steady_db_size_bytes": statistics.median(s["db_size"] for s in half),
        "steady_in_use_bytes": statistics.median(in_use[n // 2:]),
        "max_db_size_bytes": max(s["db_size"] for s in samples),
        "second_quarter_max_in_use": max(second),
        "last_quarter_max_in_use": max(last),
        "levelled": max(last) <= 1.2 * max(second),
        "naive_first_bytes": naive[0] if naive else None,
        "naive_last_bytes": naive[-1] if naive else None,
        "behind": result["achieved"] is not None and result["achieved"] < 0.9,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n")[0])
    ap.add_argument("--hours", type=float, default=24.0,
                    help="hours of production writes to replay (default 24)")
    ap.add_argument("--accel", type=float, default=100.0,
                    help="how many times faster than production (default 100)")
    ap.add_argument("--mix-seconds", type=float, default=60.0,
                    help="how long to record the production mix (default 60)")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results-soak.json")
    args = ap.parse_args(argv)
    etcd = find_bench_etcd()
    before = loadavg()
    with tempfile.TemporaryDirectory(prefix="awide-soak-") as tmp:
        work = Path(tmp)
        print(f"recording the production mix for {args.mix_seconds:g} s ...", flush=True)
        mix = production_mix(work, args.mix_seconds, etcd)
        print(f"{mix.writes_per_s:.2f} writes/s; replaying {args.hours:g} h at "
              f"{args.accel:g}x ({args.hours * 3600 / args.accel:.0f} s) ...", flush=True)
        result = soak(work, mix, args.hours, args.accel, etcd)
    verdict = judge(result)
    hosts = {k: v for k, v in mix.keys.items() if k.startswith("members/")}
    out = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": " ".join(["python -m bench.soak", *(argv or sys.argv[1:])]),
        "machine": machine(), "loadavg_before": before, "loadavg_after": loadavg(),
        "hours": args.hours, "accel": args.accel,
        "mix": {"seconds": mix.seconds, "writes_per_s": round(mix.writes_per_s, 3),
                "by_class": mix.by_class(),
                "per_host": {k: {"writes_per_s": round(v.rate(mix.seconds), 3),
                                 "bytes_per_s": round(v.value_bytes / mix.seconds, 1)}
                             for k, v in sorted(hosts.items())}},
        "soak": result, "verdict": verdict,
    }
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({"mix": out["mix"], "verdict": verdict,
                      **{k: result[k] for k in ("retention_flag", "wall_s", "planned_writes",
                                                 "writes", "failed_writes", "achieved")}},
                     indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
