"""The probe worker: every card's blocking probes of one turn go to one thread in one
submission; each gets its own result; a hung probe costs only its own card (bounded)."""

from __future__ import annotations

import asyncio
import os
import threading
import time

import pytest

from awide_cluster.cards.directory import LABEL_FILE, write_label
from awide_cluster.cards.observe import observe_card
from awide_cluster.cards.spec import CardSpec
from awide_cluster.cards.worker import ProbeWorker, StillStuck
from awide_cluster.nvme.runner import Runner
from awide_cluster.nvme.sysfs import Sysfs
from tests.timing import bound, wait_until

clock = time.monotonic


def square(n: int) -> int:
    return n * n


def refuse(n: int) -> int:
    raise OSError(f"job {n} refused")


async def test_one_turn_is_one_submission_to_one_thread_each_job_its_own_result():
    worker = ProbeWorker()
    futs = [worker.run(refuse if n == 3 else square, n, bound=1.0) for n in range(8)]
    got = await asyncio.wait_for(asyncio.gather(*futs, return_exceptions=True), bound(2.0))
    assert [g for n, g in enumerate(got) if n != 3] == [n * n for n in range(8) if n != 3]
    assert isinstance(got[3], OSError) and "job 3 refused" in str(got[3])
    assert worker.submissions == 1 and worker.threads_started == 1
    assert worker.wakeups == 1                  # the results handed back together
    # the next turn: the same thread (nothing started), one more submission
    assert await asyncio.wait_for(worker.run(square, 9, bound=1.0), bound(2.0)) == 81
    assert worker.submissions == 2 and worker.threads_started == 1 and worker.wakeups == 2


@pytest.mark.parametrize("at", [1, 4])
async def test_results_before_a_hung_job_are_not_held_behind_it(at):
    """Results go back once the queue is empty; a job that hangs after others ended (in the
    middle of the queue, or last) does not keep theirs: they come back at the patience check
    (a fifth of the bound), the jobs after it on a new thread."""
    worker = ProbeWorker()
    release = threading.Event()
    try:
        futs = [worker.run(release.wait, 60.0, bound=0.5, key="hung") if n == at
                else worker.run(square, n, bound=0.5) for n in range(5)]
        others = [f for n, f in enumerate(futs) if n != at]
        start = time.monotonic()
        got = await asyncio.wait_for(asyncio.gather(*others), bound(0.5))
        assert got == [n * n for n in range(5) if n != at]
        assert time.monotonic() - start < bound(0.5)
        assert not futs[at].done()
    finally:
        release.set()
    assert await asyncio.wait_for(futs[at], bound(1.0)) is True    # its thread hands it back


async def test_a_hung_job_costs_only_itself_and_its_key_fails_at_once_while_stuck():
    worker = ProbeWorker()
    release = threading.Event()
    try:
        hung = worker.run(release.wait, 60.0, bound=0.5, key="label /hung")
        others = [worker.run(square, n, bound=0.5) for n in range(4)]
        # the others finish while the hung one still runs: within their own bound
        assert await asyncio.wait_for(asyncio.gather(*others), bound(0.5)) == [0, 1, 4, 9]
        assert not hung.done()
        assert worker.threads_started == 2          # the hung thread was left to its job
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(hung, 0.1)       # its card gives up at its own bound
        # the next turn: the same key fails at once instead of queueing behind it
        with pytest.raises(StillStuck, match="still stuck"):
            await asyncio.wait_for(worker.run(square, 1, bound=0.5, key="label /hung"),
                                   bound(0.5))
        # other jobs still run
        assert await asyncio.wait_for(worker.run(square, 5, bound=0.5), bound(0.5)) == 25
    finally:
        release.set()

    async def unstuck() -> bool:
        fut = worker.run(square, 2, bound=0.5, key="label /hung")
        try:
            return await asyncio.wait_for(fut, bound(0.5)) == 4
        except StillStuck:
            return False

    await wait_until(unstuck, 2.0, "the key is free once the hung job ended")


def dir_spec(path, name: str) -> CardSpec:
    return CardSpec.model_validate({"name": name, "kind": "dir", "path": str(path),
                                    "probe_timeout": 1.0})


async def test_cards_observed_together_share_one_submission_and_a_hung_label_costs_one_card(
        tmp_path):
    runner, sysfs = Runner(), Sysfs(tmp_path / "sys")
    worker = ProbeWorker()
    specs = []
    for i in range(4):
        d = tmp_path / f"c{i}"
        d.mkdir()
        write_label(d, f"DIR-{i}", "m")
        specs.append(dir_spec(d, f"c{i}"))
    obs = await asyncio.gather(*(observe_card(s, runner, sysfs, None, clock, worker=worker)
                                 for s in specs))
    assert [o.card.serial for o in obs] == [f"DIR-{i}" for i in range(4)]
    assert all(o.healthy for o in obs), [o.reason for o in obs]
    assert worker.submissions == 1                  # 4 label reads + 4 write probes
    assert worker.threads_started == 1

    # a label read that hangs: a FIFO with no writer (open() blocks in the kernel)
    stuck = tmp_path / "stuck"
    stuck.mkdir()
    fifo = stuck / LABEL_FILE
    os.mkfifo(fifo)
    specs.append(dir_spec(stuck, "stuck"))
    try:
        start = time.monotonic()
        obs = await asyncio.gather(*(observe_card(s, runner, sysfs, None, clock, worker=worker)
                                     for s in specs))
        assert time.monotonic() - start < bound(1.5)
        assert all(o.healthy for o in obs[:4]), [o.reason for o in obs[:4]]
        assert obs[4].card is None and "did not finish within 1 s" in obs[4].reason
        # the next turn: that card fails at once, the others are as before
        obs = await asyncio.gather(*(observe_card(s, runner, sysfs, None, clock, worker=worker)
                                     for s in specs))
        assert all(o.healthy for o in obs[:4])
        assert obs[4].card is None and "still stuck" in obs[4].reason
    finally:
        def writer_opened() -> bool:
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))    # EOF for the reader
                return True
            except OSError:
                return False
        await wait_until(writer_opened, 2.0, "the hung label read released")


async def test_expiring_jobs_fail_at_their_bound_by_one_timer_a_turn_and_the_rest_answer():
    """``expire``: a job with no answer at its bound fails with TimeoutError (the caller sets
    no timer of its own); the jobs of one turn share one timer; the ones that answered keep
    their results, and the hung one's key stays stuck until its thread is done with it."""
    worker = ProbeWorker()
    release = threading.Event()
    try:
        loop = asyncio.get_running_loop()
        start = loop.time()
        hung = worker.run(release.wait, 60.0, bound=0.3, key="label /hung", expire=True)
        others = [worker.run(square, n, bound=0.3, key=f"label /c{n}", expire=True)
                  for n in range(7)]
        assert await asyncio.wait_for(asyncio.gather(*others), bound(0.5)) == [
            n * n for n in range(7)]
        with pytest.raises(TimeoutError, match=r"label /hung: no answer within 0.3 s"):
            await asyncio.wait_for(hung, bound(1.0))
        assert loop.time() - start >= 0.3             # not before its bound
        assert worker.expiry_timers == 1              # one timer for the turn's 8 jobs
        with pytest.raises(StillStuck):
            await worker.run(square, 1, bound=0.3, key="label /hung", expire=True)
    finally:
        release.set()


async def test_expiring_jobs_of_one_turn_with_different_bounds_each_fail_at_their_own():
    worker = ProbeWorker()
    release = threading.Event()
    try:
        loop = asyncio.get_running_loop()
        start = loop.time()
        short = worker.run(release.wait, 60.0, bound=0.1, key="short", expire=True)
        long = worker.run(release.wait, 60.0, bound=0.4, key="long", expire=True)
        with pytest.raises(TimeoutError, match="short"):
            await asyncio.wait_for(short, bound(1.0))
        assert loop.time() - start >= 0.1 and not long.done()
        with pytest.raises(TimeoutError, match="long"):
            await asyncio.wait_for(long, bound(1.0))
        assert loop.time() - start >= 0.4
        assert worker.expiry_timers == 2            # the first, then again for the later one
    finally:
        release.set()


async def test_shared_jobs_run_once_for_their_turn_and_for_a_caller_while_running():
    """``share``: callers of the same key in one turn join the first one's job (one run,
    each its own future: one cancelled leaves the others); a caller while it runs joins it
    too; a caller once it ended runs it again; past an expiring job's bound it is not
    joined (StillStuck, as any key still stuck)."""
    worker = ProbeWorker()
    runs: list[int] = []
    gate = threading.Event()

    def scan() -> tuple[int, ...]:
        runs.append(1)
        gate.wait(bound(5.0))
        return (len(runs),)

    try:
        a = worker.run(scan, bound=2.0, key="sysfs", expire=True, share=True)
        b = worker.run(scan, bound=2.0, key="sysfs", expire=True, share=True)
        c = worker.run(scan, bound=2.0, key="sysfs", expire=True, share=True)
        c.cancel()
        await wait_until(lambda: bool(runs), 2.0, "the scan running")
        d = worker.run(scan, bound=2.0, key="sysfs", expire=True, share=True)  # while running
        assert not d.done()
        gate.set()
        got = await asyncio.wait_for(asyncio.gather(a, b, d), bound(2.0))
        assert got[0] is got[1] is got[2] and got[0] == (1,) and runs == [1]
        assert worker.joins == 3 and worker.submissions == 1
        # ended: the next caller runs it again
        assert await asyncio.wait_for(
            worker.run(scan, bound=2.0, key="sysfs", expire=True, share=True),
            bound(2.0)) == (2,)
    finally:
        gate.set()
    # an expiring job past its bound is not joined: a caller fails at once
    hang = threading.Event()
    try:
        first = worker.run(hang.wait, 60.0, bound=0.1, key="stuck", expire=True, share=True)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(first, bound(1.0))
        with pytest.raises(StillStuck):
            await worker.run(hang.wait, 60.0, bound=0.1, key="stuck", expire=True, share=True)
    finally:
        hang.set()
