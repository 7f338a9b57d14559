"""Ctrl-C in a refresh loop (``status --watch``, the demo): the signal is an event raced
against the step in progress, so a step that swallows its cancellation cannot keep the loop
alive. No etcd: the steps are plain coroutines."""

from __future__ import annotations

import asyncio
import os
import signal

from awide_cluster.cli.interrupt import Interrupt
from tests.timing import bound


def _signal_soon(sig: int = signal.SIGINT) -> None:
    asyncio.get_running_loop().call_later(0.05, os.kill, os.getpid(), sig)


async def test_a_step_that_finishes_gives_its_result() -> None:
    interrupt = Interrupt()
    try:
        assert await interrupt.race(asyncio.sleep(0, "answer")) == "answer"
        assert not interrupt.requested
    finally:
        interrupt.close()


async def test_a_signal_stops_a_step_in_progress() -> None:
    interrupt = Interrupt()
    try:
        _signal_soon()
        got = await asyncio.wait_for(interrupt.race(asyncio.sleep(60, "late")), bound(5))
        assert got is None and interrupt.requested
    finally:
        interrupt.close()


async def test_a_step_that_swallows_its_cancellation_does_not_keep_the_loop_alive() -> None:
    async def stubborn() -> str:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            pass                # what a lost cancellation looks like from outside
        return "swallowed"

    interrupt = Interrupt()
    steps = 0
    try:
        _signal_soon(signal.SIGTERM)
        while not interrupt.requested:       # the loop shape of status --watch
            steps += 1
            await asyncio.wait_for(interrupt.race(stubborn()), bound(5))
        assert steps == 1
    finally:
        interrupt.close()


async def test_pause_ends_at_the_signal_not_at_its_length() -> None:
    interrupt = Interrupt()
    try:
        _signal_soon()
        assert await asyncio.wait_for(interrupt.pause(60), bound(5)) is True
        assert await interrupt.pause(0) is True         # stays requested
    finally:
        interrupt.close()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
