"""The state of the cards' store units, asked of systemd together: one ``systemctl`` per turn.

A card whose store is a systemd unit (``store: {systemd_unit: ...}``) is probed each poll with
``systemctl is-active``. A ``systemctl`` is a program start (about 4 ms of CPU here, more with a
running systemd answering over D-Bus): eight cards meant eight a second. ``UnitStates``
gathers every unit asked for in one loop iteration (the daemon observes all its cards
concurrently, so one turn's probes ask together) into one ``systemctl is-active -- U1 U2 ...``,
which prints one state per unit, in order, and hands each caller its unit's line.

What can go wrong stays one unit's, or is said for each: a line count that does not match the
units asked makes every caller's answer a failure naming it; a call that fails or times out
fails each caller with its reason; a caller that gives up (its own bound) cancels only its own
wait. The units come from the host's config, never from etcd, and go after ``--``. The config
admits no glob character in a unit name (``cards.spec``; ``is-active`` takes patterns, and one
that matched several units would change the line count for every card of the call).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from awide_cluster.nvme.runner import CommandRunner, Completed, ProgramNotFound, RunnerError

# what ``systemctl is-active`` counts as active (its exit status 0 for a single unit)
ACTIVE_STATES = frozenset({"active", "reloading", "refreshing"})
STATE_MAX = 40          # characters of a state line kept in a reason


@dataclass(frozen=True, slots=True)
class UnitState:
    unit: str
    active: bool
    reason: str


def parse_is_active(units: tuple[str, ...], done: Completed, systemctl: str
                    ) -> dict[str, UnitState]:
    """Each unit's state from one ``systemctl is-active -- UNITS...`` (pure)."""
    lines = done.stdout.splitlines()
    if len(lines) != len(units):
        said = (done.stderr.strip().splitlines() or [""])[0][:200]
        why = (f"{systemctl} is-active printed {len(lines)} line(s) for {len(units)} unit(s) "
               f"(exit {done.rc}{': ' + said if said else ''})")
        return {u: UnitState(u, False, f"store unit {u}: {why}") for u in units}
    out: dict[str, UnitState] = {}
    for unit, line in zip(units, lines, strict=True):
        state = line.strip()[:STATE_MAX] or "unknown"
        if state in ACTIVE_STATES:
            out[unit] = UnitState(unit, True, f"store unit {unit} is {state}")
        else:
            out[unit] = UnitState(unit, False, f"store unit {unit} is {state} "
                                               f"(systemctl is-active)")
    return out


class UnitStates:
    """``await states.ask(unit, timeout)``: that unit's state, from one ``systemctl`` per loop
    iteration for every unit asked in it. One instance serves one event loop (the daemon's)."""

    def __init__(self, runner: CommandRunner, *, systemctl: str = "systemctl") -> None:
        self.runner, self.systemctl = runner, systemctl
        self.calls = 0                  # systemctl started
        self._waiting: dict[str, list[asyncio.Future[UnitState]]] = {}
        self._bound = 0.0
        self._scheduled = False
        self._tasks: set[asyncio.Task[None]] = set()

    async def ask(self, unit: str, timeout: float) -> UnitState:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[UnitState] = loop.create_future()
        self._waiting.setdefault(unit, []).append(fut)
        self._bound = max(self._bound, timeout)
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._flush)
        return await fut        # cancelling this wait cancels only this future

    def _flush(self) -> None:
        waiting, bound = self._waiting, self._bound
        self._waiting, self._bound, self._scheduled = {}, 0.0, False
        task = asyncio.get_running_loop().create_task(self._run(waiting, bound))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, waiting: dict[str, list[asyncio.Future[UnitState]]],
                   bound: float) -> None:
        units = tuple(waiting)
        self.calls += 1
        try:
            done = await self.runner.run([self.systemctl, "is-active", "--", *units], bound)
            states = parse_is_active(units, done, self.systemctl)
        except ProgramNotFound:
            states = {u: UnitState(u, False, f"store unit {u}: {self.systemctl} not found")
                      for u in units}
        except (RunnerError, OSError) as exc:
            states = {u: UnitState(u, False, f"store unit {u}: {exc}") for u in units}
        except BaseException as exc:    # cancelled (loop closing) or a bug: no waiter hangs
            for futs in waiting.values():
                for f in futs:
                    if not f.done():
                        f.set_exception(exc if isinstance(exc, Exception) else
                                        RuntimeError("unit query cancelled"))
            raise
        for unit, futs in waiting.items():
            for f in futs:
                if not f.done():
                    f.set_result(states[unit])
