"""A set of ``bench.pollers`` processes driven as one: N simulated gateways split over them."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import cpu_seconds
from bench.proc import Worker, close_all


@dataclass
class Window:
    t0: float
    t1: float
    polls: int = 0
    lat_ms: list[float] = field(default_factory=list)
    failed: int = 0
    over: int = 0
    late_ms_max: float = 0.0
    late_over_100ms: int = 0
    load_cpu_s: float = 0.0          # CPU seconds of the load processes over the window
    requests: int = 0                # requests answered since the mark (bench.leanload only)
    gen_cpu_s: float = 0.0           # the load processes' own CPU since the mark (leanload)
    gen_sys_s: float = 0.0           # of which in the kernel (system time)
    skipped: int = 0                 # polls not sent because the gateway was behind (leanload)
    watch_bytes: int = 0             # bytes the watch streams delivered so far (leanload)
    proven: int = 0                  # poll turns due in the window left out: the watch
                                     # proved the view fresh (leanload)
    behind: int = 0                  # polls due in the window not made: the gateway was
                                     # behind (leanload)
    generators: set[str] = field(default_factory=set)   # "c" / "python" (leanload)

    @property
    def seconds(self) -> list[float]:
        return [x / 1000.0 for x in self.lat_ms]


class LoadSet:
    def __init__(self, endpoints: tuple[str, ...], cluster: str, *, procs: int, log_dir: Path,
                 name: str, rotate: bool = True, call_timeout: float = 0.5,
                 module: str = "bench.pollers", extra: dict[str, Any] | None = None,
                 seed: int = 0, program: Sequence[str] | None = None) -> None:
        """``program``: run it instead of ``python -m module`` (the C generator, which speaks
        ``bench.leanload``'s commands)."""
        self.workers = [
            Worker(module, {"endpoints": list(endpoints), "cluster": cluster,
                            "first": k * 100_000, "seed": seed * 10 + k + 1, "rotate": rotate,
                            "call_timeout": call_timeout, **(extra or {})},
                   log_dir=log_dir, name=f"{name}{k}", program=program)
            for k in range(procs)
        ]
        for w in self.workers:
            w.expect("hello", 30.0)
        self.count = 0
        self.module = module
        self.lean = module == "bench.leanload" or program is not None

    def set(self, count: int, kind: str = "follower") -> None:
        n = len(self.workers)
        for k, w in enumerate(self.workers):
            w.send({"cmd": "set", "count": count // n + (1 if k < count % n else 0),
                    "kind": kind})
        for w in self.workers:
            w.expect("set", 60.0)
        self.count = count

    def mark(self) -> None:
        """The lean generators only (a no-op for bench.pollers): start counting requests and
        the processes' own CPU."""
        if not self.lean:
            return
        for w in self.workers:
            w.send({"cmd": "mark"})
        for w in self.workers:
            w.expect("mark", 30.0)

    def cpu(self) -> float:
        total = 0.0
        for w in self.workers:
            try:
                total += cpu_seconds(w.pid)
            except OSError:
                pass
        return total

    def window(self, t0: float, t1: float, cpu_before: float) -> Window:
        """Ask every process for the polls that started in [t0, t1) (call after t1)."""
        cpu_after = self.cpu()
        for w in self.workers:
            w.send({"cmd": "window", "t0": t0, "t1": t1})
        win = Window(t0, t1, load_cpu_s=cpu_after - cpu_before)
        for w in self.workers:
            got: dict[str, Any] = w.expect("window", 60.0)
            win.polls += got["polls"]
            win.lat_ms.extend(got["lat_ms"])
            win.failed += got["failed"]
            win.over += got["over"]
            win.late_ms_max = max(win.late_ms_max, got["late_ms_max"])
            win.late_over_100ms += got["late_over_100ms"]
            win.requests += got.get("requests", 0)
            win.gen_cpu_s += got.get("gen_cpu_s", 0.0)
            win.gen_sys_s += got.get("gen_sys_s", 0.0)
            win.skipped += got.get("skipped", 0)
            win.watch_bytes += got.get("watch_bytes", 0)
            win.proven += got.get("proven", 0)
            win.behind += got.get("behind", 0)
            if "generator" in got:
                win.generators.add(got["generator"])
        return win

    def close(self) -> None:
        close_all(self.workers, bound=15.0)


def sleep_until(t: float) -> None:
    left = t - time.monotonic()
    if left > 0:
        time.sleep(left)    # pacing: a schedule, not a synchronisation
