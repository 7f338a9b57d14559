"""Liveness and readiness of the daemon, as pure verdicts over marks the daemon sets.

The daemon owns one ``DaemonHealth`` and calls, from its main loop:

- ``beat()`` once per loop turn (liveness: the loop is turning);
- ``etcd_ok()`` / ``etcd_failed(reason)`` after each etcd round of the turn;
- ``report_written()`` when its ``members/<host>`` report was written;
- ``write_refused(reason)`` when etcd refused (or did not confirm) that write.

``/healthz`` answers 503 when no beat came within ``loop_stale_after`` (a stalled loop, even
though the process and its HTTP server are alive). ``/readyz`` answers 503 unless etcd answered
and the report was written within ``report_stale_after``; while the latest report write was
refused it says so first (etcd may still answer reads: a write outage, not a dead etcd).

All times are from one monotonic clock passed in (``time.monotonic`` by default).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace


@dataclass(frozen=True, slots=True)
class HealthAnswer:
    ok: bool
    reason: str

    def to_dict(self) -> dict[str, object]:
        return {"ok": self.ok, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class HealthMarks:
    """What the loop last did, in monotonic seconds (None: never)."""

    started: float
    last_beat: float | None = None
    beats: int = 0
    last_etcd_ok: float | None = None
    etcd_error: str = ""               # "" when the latest etcd round succeeded
    last_report: float | None = None
    write_refused: str = ""            # the latest report write failed: why ("" when written)


def liveness(m: HealthMarks, now: float, *, loop_stale_after: float) -> HealthAnswer:
    if m.last_beat is None:
        waited = now - m.started
        if waited > loop_stale_after:
            return HealthAnswer(False, f"main loop has not turned once in {waited:.1f} s")
        return HealthAnswer(True, "starting: main loop not turned yet")
    return _by_age(now - m.last_beat, loop_stale_after,
                   stale="main loop stalled: last turn", fresh="main loop turning: last turn")


def readiness(m: HealthMarks, now: float, *, report_stale_after: float) -> HealthAnswer:
    if m.write_refused:
        return HealthAnswer(False, f"writes fail: host report not written ({m.write_refused})")
    if m.etcd_error:
        return HealthAnswer(False, f"etcd: {m.etcd_error}")
    if m.last_etcd_ok is None:
        return HealthAnswer(False, "etcd not reached yet")
    etcd_age = now - m.last_etcd_ok
    if etcd_age > report_stale_after:
        return HealthAnswer(False, f"no successful etcd call for {etcd_age:.1f} s")
    if m.last_report is None:
        return HealthAnswer(False, "host report not written yet")
    return _by_age(now - m.last_report, report_stale_after,
                   stale="host report not current: written",
                   fresh="connected to etcd; host report written")


def _by_age(age: float, bound: float, *, stale: str, fresh: str) -> HealthAnswer:
    """Ok while ``age`` is within ``bound``; the text says how old it is either way."""
    if age > bound:
        return HealthAnswer(False, f"{stale} {age:.1f} s ago (bound {bound:g} s)")
    return HealthAnswer(True, f"{fresh} {age:.1f} s ago")


class DaemonHealth:
    """Marks set by the daemon's loop; verdicts read by the HTTP API."""

    def __init__(
        self, *, loop_stale_after: float, report_stale_after: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if loop_stale_after <= 0 or report_stale_after <= 0:
            raise ValueError("stale bounds must be positive")
        self.loop_stale_after = loop_stale_after
        self.report_stale_after = report_stale_after
        self._clock = clock
        self._marks = HealthMarks(started=clock())

    @classmethod
    def for_timing(
        cls, poll_interval: float, call_timeout: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> DaemonHealth:
        """Bounds from the daemon's timing: a turn is one poll plus a few bounded etcd calls.

        loop stale after 3 polls + 4 call bounds; report stale after 3 polls + 2 call bounds.
        """
        return cls(
            loop_stale_after=3 * poll_interval + 4 * call_timeout,
            report_stale_after=3 * poll_interval + 2 * call_timeout,
            clock=clock,
        )

    # -- marks, from the main loop
    def beat(self) -> None:
        m = self._marks
        self._marks = replace(m, last_beat=self._clock(), beats=m.beats + 1)

    def etcd_ok(self) -> None:
        self._marks = replace(self._marks, last_etcd_ok=self._clock(), etcd_error="")

    def etcd_failed(self, reason: str) -> None:
        self._marks = replace(self._marks, etcd_error=reason or "call failed")

    def report_written(self) -> None:
        now = self._clock()
        self._marks = replace(self._marks, last_report=now, last_etcd_ok=now, etcd_error="",
                              write_refused="")

    def write_refused(self, reason: str) -> None:
        self._marks = replace(self._marks, write_refused=reason or "write refused")

    # -- reads, from the API
    def marks(self) -> HealthMarks:
        return self._marks

    def now(self) -> float:
        return self._clock()

    def beat_age(self) -> float:
        m = self._marks
        return self._clock() - (m.last_beat if m.last_beat is not None else m.started)

    def liveness(self) -> HealthAnswer:
        return liveness(self._marks, self._clock(), loop_stale_after=self.loop_stale_after)

    def readiness(self) -> HealthAnswer:
        return readiness(self._marks, self._clock(), report_stale_after=self.report_stale_after)
