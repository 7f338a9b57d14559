"""``python -m bench.probe_round [--rounds 300] [--reps 3] [--dir /dev/shm]``: the CPU of the
daemon's card probe round alone, no etcd (docs/profile-daemon.md).

``CardProbes.observe`` of 8 labelled directory cards whose store probes are TCP listeners (in
a child process, which accepts and closes), as figure 8's leader runs it once a turn: the
label reads and write probes on the probe worker thread, the TCP connects on the loop, the
metrics. Prints the process's CPU (``getrusage``: every thread, not the child) and wall time
per round for each of ``--reps`` runs of ``--rounds`` rounds. Run two trees alternately with
``PYTHONPATH`` to compare them (``strace -f -c`` on it counts the round's system calls).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import selectors
import socket
import tempfile
import time
from pathlib import Path

CARDS = 8


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _listen(socks: list[socket.socket]) -> int:
    """A child process that accepts and closes every connection; its pid."""
    pid = os.fork()
    if pid:
        return pid
    sel = selectors.DefaultSelector()
    for s in socks:
        sel.register(s, selectors.EVENT_READ)
    while True:             # until the parent is gone
        for key, _ in sel.select(1.0):
            try:
                conn, _ = key.fileobj.accept()      # type: ignore[union-attr]
                conn.close()
            except OSError:
                pass
        if os.getppid() == 1:
            os._exit(0)


async def _rounds(socks: list[socket.socket], root: Path, rounds: int, reps: int) -> None:
    from awide_cluster.api.metrics import DaemonMetrics
    from awide_cluster.cards.directory import write_label
    from awide_cluster.config.daemon import DaemonConfig
    from awide_cluster.daemon.clock import SystemClock
    from awide_cluster.daemon.probes import CardProbes

    specs = []
    for i, s in enumerate(socks):
        path = root / f"card{i}"
        path.mkdir()
        write_label(path, f"SN{i:04d}", "M")
        specs.append({"name": f"card{i}", "kind": "dir", "path": str(path),
                      "store": {"tcp": f"127.0.0.1:{s.getsockname()[1]}"}})
    cfg = DaemonConfig.model_validate({
        "cluster": "c", "host": "h1", "hosts": ["h1"],
        "etcd": {"endpoints": ["http://127.0.0.1:1"]}, "cards": specs})
    probes = CardProbes(cfg, SystemClock(), DaemonMetrics(host="h1", role="storage",
                                                          version="bench"))
    for _ in range(5):
        await probes.observe(cfg, None)
    for _ in range(reps):
        c0, w0 = _cpu(), time.perf_counter()
        for _ in range(rounds):
            obs = await probes.observe(cfg, None)
        c1, w1 = _cpu(), time.perf_counter()
        bad = [o.reason for o in obs if not o.healthy]
        if bad:
            raise SystemExit(f"unhealthy cards: {bad}")
        print(f"{1000 * (c1 - c0) / rounds:.2f} ms CPU, {1000 * (w1 - w0) / rounds:.2f} ms wall "
              f"a round ({rounds} rounds of {CARDS} cards)", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.probe_round")
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--dir", default=None, help="where the cards' directories are made")
    args = ap.parse_args(argv)
    socks = []
    for _ in range(CARDS):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(4096)
        socks.append(s)
    child = _listen(socks)
    try:
        with tempfile.TemporaryDirectory(prefix="awide-probe-round-", dir=args.dir) as root:
            asyncio.run(_rounds(socks, Path(root), args.rounds, args.reps))
    finally:
        os.kill(child, 15)
        os.waitpid(child, 0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
