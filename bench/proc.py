"""Load processes: a child ``python -m bench.<module> '<json spec>'`` (or a program of the
bench's own, ``<program> '<json spec>'``) speaking JSON lines.

The parent sends commands as JSON lines on the child's stdin; the child answers with JSON lines
on stdout (one reader thread per child puts them on a queue). Every wait is bounded; ``close``
ends the child (EOF on stdin, then SIGTERM, then SIGKILL) and always reaps it. A child dies
with its parent (``setpriv --pdeathsig KILL`` when available).
"""

from __future__ import annotations

import json
import queue
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common import REPO, bench_python_env


class WorkerError(RuntimeError):
    """A load process died, or did not answer within its bound."""


class Worker:
    def __init__(self, module: str, spec: dict[str, Any], *, log_dir: Path, name: str,
                 sink: queue.Queue[dict[str, Any] | None] | None = None,
                 program: Sequence[str] | None = None) -> None:
        self.name = name
        args = ([*program, json.dumps(spec)] if program
                else [sys.executable, "-m", module, json.dumps(spec)])
        setpriv = shutil.which("setpriv")
        if setpriv:
            args = [setpriv, "--pdeathsig", "KILL", "--", *args]
        log_dir.mkdir(parents=True, exist_ok=True)
        self._err = open(log_dir / f"{name}.stderr", "wb")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._err, cwd=str(REPO), env=bench_python_env())
        # lines of every kind but "applied" (those go to ``sink`` when one is given; an
        # "applied_batch" line goes there as the "applied" lines it holds)
        self.lines: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.sink = sink
        self._reader = threading.Thread(target=self._read, name=f"bench-{name}", daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            try:
                msg = json.loads(raw)
            except ValueError:
                continue
            if self.sink is not None and msg.get("kind") == "applied":
                self.sink.put(msg)
            elif self.sink is not None and msg.get("kind") == "applied_batch":
                for one in msg.get("applied") or ():
                    self.sink.put(one)
            else:
                self.lines.put(msg)
        self.lines.put(None)

    def send(self, msg: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps(msg) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as e:
            raise WorkerError(f"{self.name}: cannot send: {e}; {self.stderr_tail()}") from e

    def expect(self, kind: str, timeout: float) -> dict[str, Any]:
        """The next line whose ``kind`` is ``kind`` (others are dropped), within ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WorkerError(f"{self.name}: no {kind!r} within {timeout:g} s; "
                                  f"{self.stderr_tail()}")
            try:
                msg = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            if msg is None:
                raise WorkerError(f"{self.name}: exited ({self.proc.poll()}) before {kind!r}; "
                                  f"{self.stderr_tail()}")
            if msg.get("kind") == kind:
                return msg
            if msg.get("kind") == "error":
                raise WorkerError(f"{self.name}: {msg.get('detail')}")

    def stderr_tail(self, n: int = 15) -> str:
        try:
            self._err.flush()
            text = Path(self._err.name).read_text(errors="replace")
        except OSError:
            return ""
        return "stderr: " + " | ".join(text.strip().splitlines()[-n:])

    def close(self, bound: float = 10.0) -> None:
        p = self.proc
        if p.poll() is None:
            try:
                assert p.stdin is not None
                p.stdin.close()
            except OSError:
                pass
            try:
                p.wait(timeout=bound)
            except subprocess.TimeoutExpired:
                p.terminate()
                try:
                    p.wait(timeout=3.0)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(timeout=5.0)
        self._err.close()


def close_all(workers: list[Worker], bound: float = 10.0) -> None:
    """EOF to every worker at once, then reap each (bounded)."""
    for w in workers:
        try:
            if w.proc.stdin is not None and w.proc.poll() is None:
                w.proc.stdin.close()
        except OSError:
            pass
    for w in workers:
        w.close(bound)


# ---------------------------------------------------------------- the child's side

def poll_window(records: list[tuple[float, float, bool, float]], t0: float, t1: float,
                bound: float) -> tuple[dict[str, Any], list[tuple[float, float, bool, float]]]:
    """The polls (start, latency, ok, lateness) that started in [t0, t1), summed up, and the
    records left for later windows."""
    got = [r for r in records if t0 <= r[0] < t1]
    return {
        "polls": len(got),
        "lat_ms": [round(r[1] * 1000, 3) for r in got],
        "failed": sum(1 for r in got if not r[2]),
        "over": sum(1 for r in got if r[1] > bound),
        "late_ms_max": round(max((r[3] for r in got), default=0.0) * 1000, 1),
        "late_over_100ms": sum(1 for r in got if r[3] > 0.1),
    }, [r for r in records if r[0] >= t1]
