"""A bounded subprocess runner, passed to whoever runs programs (nvme, systemctl, probes).

- argv is a list, executed with ``asyncio.create_subprocess_exec``: never a shell.
- The program is looked up on the runner's ``PATH`` (``env``), so tests swap programs by
  giving the runner a ``PATH`` with a fake first, never by patching.
- Each child runs in its own session (process group). On timeout, on too much output, or when
  the awaiting task is cancelled, the whole group gets SIGKILL and the child is reaped before
  ``run`` returns or raises: no process outlives its call.
- An argv item may be a ``SecretArg``: the program receives it, but every argv the runner
  shows (errors, ``Completed.argv``, logs) carries its ``shown`` form instead.
- stdout/stderr are capped (``max_output`` bytes each); text is decoded as UTF-8 with
  replacement characters.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

log = logging.getLogger(__name__)

_REAP_BOUND = 5.0  # seconds to wait for a SIGKILLed child to be reaped


class SecretArg(str):
    """An argv item holding a secret: passed to the program as is, shown as ``shown``.

    (The program's argv is still visible in /proc/PID/cmdline while it runs; docs/security.md
    says where that matters.)"""

    shown: str

    def __new__(cls, value: str, shown: str) -> SecretArg:
        obj = super().__new__(cls, value)
        obj.shown = shown
        return obj

    def __repr__(self) -> str:
        return repr(self.shown)


def public(argv: Sequence[str]) -> tuple[str, ...]:
    """argv as it may be shown: every SecretArg replaced by its ``shown`` form."""
    return tuple(a.shown if isinstance(a, SecretArg) else str.__str__(a) for a in argv)


@dataclass(frozen=True, slots=True)
class Completed:
    rc: int
    stdout: str
    stderr: str
    argv: tuple[str, ...] = ()


class RunnerError(Exception):
    """Base of the runner's errors; ``argv`` names the command."""

    def __init__(self, argv: Sequence[str], message: str) -> None:
        self.argv = public(argv)
        super().__init__(message)


class CommandTimeout(RunnerError):
    """The command did not finish within its timeout; it was killed and reaped."""

    def __init__(self, argv: Sequence[str], timeout: float) -> None:
        self.timeout = timeout
        super().__init__(argv, f"{_show(argv)}: no answer within {timeout:g} s (killed)")


class ProgramNotFound(RunnerError):
    """The program is not on PATH (or the path given does not exist)."""

    def __init__(self, argv: Sequence[str]) -> None:
        self.program = public(argv)[0]
        super().__init__(argv, f"program not found: {self.program!r}")


class ProgramNotRunnable(RunnerError):
    """The program exists but could not be started (permissions, bad format, ...)."""


class OutputTooLarge(RunnerError):
    """The command printed more than the runner's cap; it was killed."""


class CommandRunner(Protocol):
    async def run(self, argv: Sequence[str], timeout: float) -> Completed: ...


def _show(argv: Sequence[str]) -> str:
    text = " ".join(public(argv))
    return text if len(text) <= 120 else text[:117] + "..."


class Runner:
    """Runs one program at a time per call, bounded by ``timeout``; see the module doc."""

    def __init__(self, env: Mapping[str, str] | None = None, *, max_output: int = 1 << 20) -> None:
        self._env = dict(env) if env is not None else None
        self._max_output = max_output

    async def run(self, argv: Sequence[str], timeout: float) -> Completed:
        argv = _check_argv(argv)
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0, got {timeout!r}")
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=self._env,
                start_new_session=True,
            )
        except FileNotFoundError:
            raise ProgramNotFound(argv) from None
        except OSError as exc:
            raise ProgramNotRunnable(argv, f"cannot start {public(argv)[0]!r}: {exc}") from None

        readers = [
            asyncio.ensure_future(_read_capped(proc.stdout, self._max_output, argv, "stdout")),
            asyncio.ensure_future(_read_capped(proc.stderr, self._max_output, argv, "stderr")),
        ]
        finished = False
        try:
            try:
                async with asyncio.timeout(timeout):
                    out, err = await asyncio.gather(*readers)
                    rc = await proc.wait()
            except TimeoutError:
                raise CommandTimeout(argv, timeout) from None
            finished = True
        finally:
            if not finished:
                _kill_group(proc)
                await _drain(proc, readers)     # asyncio reaps a child once its pipes close
                await _reap(proc, argv)
        return Completed(rc, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"),
                         public(argv))


def _check_argv(argv: Sequence[str]) -> list[str]:
    if isinstance(argv, (str, bytes)) or not isinstance(argv, Sequence):
        raise TypeError("argv must be a list of strings, never one string")
    items = list(argv)
    if not items:
        raise ValueError("argv is empty")
    for item in items:
        if not isinstance(item, str):
            raise TypeError(f"argv items must be str, got {type(item).__name__}")
        if "\x00" in item:
            raise ValueError("argv item contains a NUL byte")
    return items


async def _read_capped(stream: asyncio.StreamReader | None, cap: int, argv: Sequence[str],
                       name: str) -> bytes:
    if stream is None:
        return b""
    chunks: list[bytes] = []
    total = 0
    while True:
        chunk = await stream.read(65536)
        if not chunk:
            return b"".join(chunks)
        total += len(chunk)
        if total > cap:
            raise OutputTooLarge(argv, f"{_show(argv)}: more than {cap} bytes on {name} (killed)")
        chunks.append(chunk)


async def _drain(proc: asyncio.subprocess.Process,
                 readers: Sequence[asyncio.Future[bytes]]) -> None:
    """After a kill: let the readers see EOF (every holder of the pipes is dead), so the
    transport closes; cut them after a short bound if something else still holds a pipe."""
    loop = asyncio.get_running_loop()
    until = loop.time() + 1.0
    _done, pending = await asyncio.wait(readers, timeout=1.0)
    for reader in pending:
        reader.cancel()
    await asyncio.gather(*readers, return_exceptions=True)   # nothing left unretrieved
    cut = bool(pending)
    # a reader that gave up (over the cap) left its pipe unread, paused, short of EOF: the
    # transport would never close (and warns when collected); read what is left, discarded
    rest = [s for s in (proc.stdout, proc.stderr) if s is not None and not s.at_eof()]
    if rest and not cut:
        left = max(0.0, until - loop.time())
        tasks = [asyncio.ensure_future(_discard(s)) for s in rest]
        _gone, unread = await asyncio.wait(tasks, timeout=left)
        for task in unread:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        cut = bool(unread)
    if cut:
        transport = getattr(proc, "_transport", None)
        if transport is not None:
            transport.close()


async def _discard(stream: asyncio.StreamReader) -> None:
    while await stream.read(65536):
        pass


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    """SIGKILL the child's process group (it leads its own session)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    except PermissionError:  # pragma: no cover - the group changed hands
        try:
            proc.kill()
        except ProcessLookupError:
            pass


async def _reap(proc: asyncio.subprocess.Process, argv: Sequence[str]) -> None:
    """Wait (bounded) for the killed child's exit status."""
    try:
        await asyncio.wait_for(asyncio.shield(proc.wait()), _REAP_BOUND)
    except TimeoutError:  # pragma: no cover - kernel stuck on the process
        log.warning("child %d of %r not reaped after SIGKILL", proc.pid, _show(argv))
