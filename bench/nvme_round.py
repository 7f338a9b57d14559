"""``python bench/nvme_round.py [--rounds 200] [--reps 3] [--cards 8]``: the CPU of one probe
round of NVMe cards, the gateway's and the daemon's, no etcd.

A fake sysfs tree (``awide_harness.fakes.FakeSysfs``, on a temporary directory) with one
controller per card, each with its namespace and identity, as a connected card shows. Two
rounds, each run ``--rounds`` times per rep:

- gateway: ``Connector.probe`` of every card at once (as a probe round wakes them), each card's
  path already verified (no nvme-cli run), so a round is what a healthy card costs each poll;
- daemon: ``observe_cards`` of the same cards (discovery by serial; no store or target probe).

Prints the process's CPU per round (``getrusage``: every thread) and how many whole-tree
reads of sysfs a round made. It imports the project's packages only, so that two trees can be
compared: ``PYTHONPATH=<tree> python bench/nvme_round.py``, each run alternately (a tree
whose harness has no ``CountedSysfs``, from before the round's shared read, was compared with
this tool's first version, commit 39aeb5e, which defined its own).
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from awide_cluster.cards.observe import observe_cards
from awide_cluster.cards.spec import CardSpec
from awide_cluster.cards.worker import ProbeWorker
from awide_cluster.contract.registry import CardEntry, card_id
from awide_cluster.contract.target import NvmeTarget
from awide_cluster.nvme.cli import NvmeCli
from awide_cluster.nvme.runner import Runner
from awide_cluster.nvme.sysfs import Sysfs
from awide_gateway_cluster.connector import Connector
from awide_gateway_cluster.view import CardPath
from awide_harness.fakes import FakeNs
from awide_harness.fakes.counted import CountedSysfs
from awide_harness.fakes.sysfs import FakeSysfs

MODEL = "AWIDE Fake NVMe Ctrl"


class EachCard(ProbeWorker):
    """The naive arm: every card reads the tree alone (a job is never shared), as each card
    did before the cards of a round shared one read."""

    def __init__(self) -> None:
        super().__init__(name="nvme-round-each")
        self._n = 0

    def run(self, fn: Any, *args: Any, bound: float, key: str = "", expire: bool = False,
            share: bool = False) -> Any:
        if share:
            self._n += 1
            key = f"{key}#{self._n}"
        return super().run(fn, *args, bound=bound, key=key, expire=expire)


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def world(root: Path, n: int) -> tuple[list[CardEntry], dict[str, CardPath], list[CardSpec]]:
    fake = FakeSysfs(root)
    cards, paths, specs = [], {}, []
    for k in range(n):
        serial, nguid = f"AWIDESN{k:04d}", f"{k + 1:032x}"
        nqn = f"nqn.2024-01.io.awide:card{k}"
        name = fake.add_controller(subsysnqn=nqn, serial=serial, model=MODEL,
                                   traddr="10.200.0.11", trsvcid=4420 + k,
                                   namespaces=[FakeNs(nsid=1, nguid=nguid)])
        identity = f"nguid:{nguid}"
        card = CardEntry(id=card_id(serial, MODEL, identity), serial=serial, model=MODEL,
                         identity=identity, host="s1", name=f"card{k}", kind="nvme",
                         state="in", health="ok", reason="", admitted=1, changed_generation=1,
                         target=NvmeTarget("tcp", "10.200.0.11", 4420 + k, nqn))
        cards.append(card)
        paths[card.id] = CardPath(card.id, device=f"/dev/{name}n1", verified=True)
        specs.append(CardSpec.model_validate({"name": f"card{k}", "kind": "nvme",
                                              "serial": serial, "probe_timeout": 2.0}))
    return cards, paths, specs


async def gateway_rounds(conn: Connector, cards: list[CardEntry], paths: dict[str, CardPath],
                         rounds: int) -> None:
    for _ in range(rounds):
        got = await asyncio.gather(*(conn.probe(c, paths[c.id]) for c in cards))
        bad = [p for p in got if not p.good]
        if bad:
            raise SystemExit(f"a probe was not good: {bad[0]}")


async def daemon_rounds(specs: list[CardSpec], sysfs: Sysfs, worker: ProbeWorker,
                        rounds: int) -> None:
    runner = Runner()
    known: list[str | None] = [None] * len(specs)
    for _ in range(rounds):
        obs = await observe_cards(list(zip(specs, known, strict=True)), runner, sysfs,
                                  time.monotonic, worker=worker)
        if not all(o.card is not None for o in obs):
            raise SystemExit(f"a card was not found: {[o.reason for o in obs]}")
        known = [o.card.identity if o.card else None for o in obs]


async def main_async(args: argparse.Namespace, root: Path) -> None:
    cards, paths, specs = world(root / "sys", args.cards)
    sysfs = CountedSysfs(root / "sys")
    worker = ProbeWorker(name="nvme-round")
    conn = Connector(NvmeCli(Runner(), program="nvme", timeout=3.0), sysfs, worker=worker)
    for name, run in (("gateway", lambda: gateway_rounds(conn, cards, paths, args.rounds)),
                      ("daemon", lambda: daemon_rounds(specs, sysfs, worker, args.rounds))):
        per = []
        for _ in range(args.reps):
            s0, c0 = sysfs.scans, _cpu()
            await run()
            per.append((_cpu() - c0) / args.rounds)
            scans = (sysfs.scans - s0) / args.rounds
        print(f"{name}: {args.cards} NVMe cards, CPU per round {statistics.median(per) * 1e3:.3f}"
              f" ms (median of {args.reps}: {', '.join(f'{p * 1e3:.3f}' for p in per)}); "
              f"whole-tree sysfs reads per round {scans:g}")


def main() -> None:
    ap = argparse.ArgumentParser(prog="python bench/nvme_round.py")
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--cards", type=int, default=8)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="awide-nvme-round-"))
    try:
        asyncio.run(main_async(args, root))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
