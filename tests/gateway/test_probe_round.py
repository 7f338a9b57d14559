"""The gateway's card probes: one round per poll interval for every card, their blocking reads
handed to the probe worker together, and a read that hangs costing only its own card."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from awide_cluster.cards.directory import read_label, write_label
from awide_cluster.cards.worker import ProbeWorker
from awide_cluster.contract.registry import CardEntry, card_id
from awide_cluster.contract.target import NvmeTarget
from awide_cluster.nvme.cli import NvmeCli
from awide_cluster.nvme.runner import Runner
from awide_gateway_cluster import ClusterGateway
from awide_gateway_cluster.connector import Connector
from awide_gateway_cluster.view import CardPath
from awide_harness.fakes import CountedSysfs
from tests.gateway.support import config, gateway, in_service, make_card, serve
from tests.timing import bound, wait_until

pytestmark = pytest.mark.timeout(60)


class CountingWorker(ProbeWorker):
    """A probe worker that counts the jobs it is given (``submissions`` counts the batches)."""

    def __init__(self) -> None:
        super().__init__(name="test-probes")
        self.jobs = 0

    def run(self, fn: Any, *args: Any, bound: float, **kw: Any) -> Any:
        self.jobs += 1
        return super().run(fn, *args, bound=bound, **kw)


def dir_card(root: Path, n: int) -> CardEntry:
    path = root / f"card{n}"
    path.mkdir(parents=True)
    label = write_label(path, f"DIRSN{n:04d}", "AWIDE Dir Card")
    return CardEntry(id=card_id(label.serial, label.model, label.identity), serial=label.serial,
                     model=label.model, identity=label.identity, host="s1", name=f"card{n}",
                     kind="dir", state="in", health="ok", reason="", admitted=1,
                     changed_generation=1, target=None, path=str(path))



async def four_cards_in(etcd, leader, world, cluster_name
                        ) -> tuple[list[CardEntry], CountingWorker, ClusterGateway]:
    """Four served cards published, a gateway started with a counting probe worker, and the
    four in service (the gateway is the caller's to stop)."""
    cards = [make_card(n, admitted=n) for n in range(1, 5)]
    for c in cards:
        serve(world, c)
    await leader.publish(cards)
    worker = CountingWorker()
    gw = gateway(config(cluster_name, etcd.endpoints, world), world, probe_worker=worker)
    await gw.start()
    try:
        await wait_until(lambda: all(in_service(gw, c.id) for c in cards), what="4 cards in")
    except BaseException:
        await gw.stop()
        raise
    return cards, worker, gw


async def test_every_card_of_a_round_goes_to_the_worker_in_one_submission(
        etcd, leader, world, cluster_name):
    cards, worker, gw = await four_cards_in(etcd, leader, world, cluster_name)
    try:
        jobs0, subs0, timers0 = worker.jobs, worker.submissions, worker.expiry_timers
        await wait_until(lambda: worker.submissions >= subs0 + 4, what="four more probe rounds")
        jobs, subs = worker.jobs - jobs0, worker.submissions - subs0
        timers = worker.expiry_timers - timers0
        # each round's four sysfs reads in one batch (a card woken alone, by a change, would
        # make a batch of one; nothing changes here). One job per card per batch before the
        # round loop: a ratio of about 1.
        assert jobs >= 3 * subs, (jobs, subs)
        # the reads' bound: one timer a round (the worker's), not one per read
        assert 1 <= timers <= subs + 1, (timers, subs)
        assert all(in_service(gw, c.id) for c in cards)
    finally:
        await gw.stop()


async def test_the_nvme_cards_of_a_round_share_one_read_of_sysfs(
        etcd, leader, world, cluster_name):
    """Each card's probe needs every controller sysfs shows; the cards probed together (a
    round) read the tree once, not once each."""
    cards = [make_card(n, admitted=n) for n in range(1, 5)]
    for c in cards:
        serve(world, c)
    await leader.publish(cards)
    sysfs = CountedSysfs(world.sysfs_root)
    worker = CountingWorker()
    gw = gateway(config(cluster_name, etcd.endpoints, world), world, probe_worker=worker,
                 sysfs=sysfs)
    await gw.start()
    try:
        await wait_until(lambda: all(in_service(gw, c.id) for c in cards), what="4 cards in")
        scans0, subs0, joins0 = sysfs.scans, worker.submissions, worker.joins
        await wait_until(lambda: worker.submissions >= subs0 + 4, what="four more probe rounds")
        scans, subs = sysfs.scans - scans0, worker.submissions - subs0
        assert scans <= subs + 1, (scans, subs)         # before: four a round
        assert worker.joins - joins0 >= 3 * (subs - 1), (worker.joins - joins0, subs)
        assert all(in_service(gw, c.id) for c in cards)
    finally:
        await gw.stop()


async def test_a_hung_label_read_costs_only_its_card_and_piles_up_no_thread(tmp_path: Path):
    hung_card, other = dir_card(tmp_path, 1), dir_card(tmp_path, 2)
    release = threading.Event()
    calls: dict[str, int] = {}

    def label(path: Path) -> Any:
        calls[str(path)] = calls.get(str(path), 0) + 1
        if str(path) == hung_card.path:
            release.wait(bound(20.0))            # a file system that does not answer
        return read_label(path)

    worker = ProbeWorker(name="test-hang")
    conn = Connector(nvme=None, sysfs=None, read_label=label,  # type: ignore[arg-type]
                     sysfs_timeout=0.3, worker=worker)
    try:
        first = await conn.probe(hung_card, CardPath(hung_card.id))
        assert first.good is None and "timed out" in first.note      # no observation
        # the same card again while its read still hangs: at once, nothing queued behind it
        again = await conn.probe(hung_card, CardPath(hung_card.id))
        assert again.good is None and "timed out" in again.note
        assert calls[str(hung_card.path)] == 1
        # another card is served meanwhile, by a new thread (the hung one is left to its read)
        ok = await conn.probe(other, CardPath(other.id))
        assert ok.good is True and ok.verified and ok.device == other.path
        assert worker.threads_started == 2
    finally:
        release.set()
    # the read came back: a later probe of the card reads its label again and sees it

    async def observed() -> Any:
        p = await conn.probe(hung_card, CardPath(hung_card.id))
        return p if p.good is not None else None

    back = await wait_until(observed, what="the stuck read ended and the card is seen again")
    assert back.good is True and calls[str(hung_card.path)] == 2


def test_each_gateway_has_a_worker_of_its_own_by_default() -> None:
    """A worker serves one event loop; gateways may run on several (threaded ones)."""
    a = Connector(nvme=None, sysfs=None)  # type: ignore[arg-type]
    b = Connector(nvme=None, sysfs=None)  # type: ignore[arg-type]
    assert a.worker is not b.worker and a.worker.threads_started == 0


async def test_a_gateway_with_steady_healthy_cards_builds_no_view(
        etcd, leader, world, cluster_name):
    """Every round probes every card and each good probe grows its good streak, but the view
    shows nothing new: it is not built again (``stats().view_builds`` stays); a card going
    out builds it."""
    cards, worker, gw = await four_cards_in(etcd, leader, world, cluster_name)
    try:
        await wait_until(lambda: gw.stats().layout_ok, what="layout verified")
        subs0 = worker.submissions
        await wait_until(lambda: worker.submissions >= subs0 + 2, what="two probe rounds")
        builds, subs0 = gw.stats().view_builds, worker.submissions
        await wait_until(lambda: worker.submissions >= subs0 + 4, what="four probe rounds")
        assert gw.stats().view_builds == builds, (builds, gw.stats().view_builds)
        assert all(in_service(gw, c.id) for c in cards)
        # a change the view shows still builds it: I/O errors take a card out

        def report_then_out() -> bool:
            gw.report_io_error(cards[0].id)
            return not in_service(gw, cards[0].id)

        await wait_until(report_then_out, what="out after reported I/O errors")
        assert gw.stats().view_builds > builds
    finally:
        await gw.stop()


class HungConnect(NvmeCli):
    """An nvme-cli whose connect to one target never returns, past every bound of its own
    (the probe's outer bound is then the only one left)."""

    def __init__(self, hung: str, **kw: Any) -> None:
        super().__init__(**kw)
        self.hung = hung

    async def connect(self, target: NvmeTarget, *args: Any, **kw: Any) -> str:
        if target.subnqn == self.hung:
            await asyncio.Event().wait()
        return await super().connect(target, *args, **kw)


async def test_a_probe_past_its_bound_is_cut_and_delays_no_other_card(
        etcd, leader, world, cluster_name):
    hung, other = make_card(1), make_card(2, admitted=2)
    for c in (hung, other):
        serve(world, c)
    await leader.publish([hung, other])
    cfg = config(cluster_name, etcd.endpoints, world, nvme={"command_timeout": 0.2})
    assert hung.target is not None
    nvme = HungConnect(hung.target.subnqn, runner=Runner(env=world.env()), program="nvme",
                       timeout=cfg.nvme.command_timeout)
    gw = ClusterGateway(cfg, nvme=nvme)
    t0 = time.monotonic()
    start = asyncio.create_task(gw.start())
    try:
        await wait_until(lambda: in_service(gw, other.id), what="the other card in")
        other_in = time.monotonic() - t0
        assert not in_service(gw, hung.id)

        def cut() -> bool:
            s = gw.snapshot().card(hung.id)
            return s is not None and "over its bound" in s.why

        await wait_until(cut, timeout=bound(15.0), what="the hung probe cut at its bound")
        cut_at = time.monotonic() - t0
        limit = 3 * 0.2 + 4 * 1.0               # 3 commands and 4 sysfs reads
        assert other_in < cut_at and limit * 0.9 < cut_at, (other_in, cut_at)
        await start
        assert in_service(gw, other.id) and not in_service(gw, hung.id)
    finally:
        start.cancel()
        await gw.stop()
