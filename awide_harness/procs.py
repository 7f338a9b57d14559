"""Starting and stopping the embedded cluster's host processes, leaving none behind.

``Launcher.spawn`` is the one place a host process (daemon, gateway, store service) starts:
- ``netns``: when given, the argv is prefixed with ``ip netns exec NS`` (a host that is a
  network namespace, ``awide_harness.netns``; on loopback it is None);
- ``PYTHONPATH`` names the repository root first, so ``python -m awide_harness...`` (and the
  fault campaign's ``python -m tests...``) programs start from any directory: the harness is
  not installed with the runtime package;
- the process gets a parent-death signal (SIGKILL), so it dies with the *thread* that started
  it even if the caller is SIGKILLed: call the cluster's operations from a thread that lives as
  long as the cluster (normally the main thread). A small exec shim (``python -S``, ~20 ms)
  sets it with ``prctl(PR_SET_PDEATHSIG)`` and then checks that its parent is still the caller
  before exec'ing the real program, which closes the race where the caller dies between fork
  and prctl (``setpriv --pdeathsig`` leaves that window open);
- its own session (Ctrl-C at the terminal reaches the harness, which stops everything in order);
- stdout to a pipe (for the gateways' JSON lines) or a log file, stderr to the log file.

``reap(procs, bound)`` sends SIGCONT+SIGTERM, waits ``bound`` seconds, SIGKILLs what is left and
reaps everything. Arguments are lists, never a shell.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from awide_harness.waits import WaitTimeout, wait_until_sync

# the repository this harness is part of (awide_harness/ sits at its top)
REPO_ROOT = Path(__file__).resolve().parents[1]

# how the daemon and gateway commands are run: the interpreter running the harness, so a venv
# without its bin on PATH still works
CLI = [sys.executable, "-c",
       "import sys; sys.argv[0] = 'awide-cluster'; "
       "from awide_cluster.cli.main import main; main()"]
STORE_SERVICE = [sys.executable, "-S", str(Path(__file__).with_name("store_service.py"))]

# argv: SHIM PARENT_PID PROGRAM ARGS...
PDEATHSIG_SHIM = [sys.executable, "-S", "-c", (
    "import ctypes, os, signal, sys\n"
    "try:\n"
    "    ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)\n"
    "except (OSError, AttributeError):\n"
    "    pass\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    os._exit(70)\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n")]


class LaunchError(RuntimeError):
    """A host process could not be started."""


def wait_listening(host: str, port: int, bound: float) -> bool:
    """True once something accepts connections on host:port, False after ``bound`` seconds."""
    def accepts() -> bool:
        with socket.create_connection((host, port), timeout=0.2):
            return True

    try:
        return wait_until_sync(accepts, bound, f"a listener on {host}:{port}", ignore=(OSError,))
    except WaitTimeout:
        return False


def netns_prefix(netns: str | None) -> list[str]:
    return [] if netns is None else ["ip", "netns", "exec", netns]


@dataclass
class Proc:
    """One started host process."""

    name: str
    argv: list[str]
    popen: subprocess.Popen[bytes]
    log_path: Path
    log: IO[bytes] | None = None
    started_at: float = field(default_factory=time.monotonic)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            try:
                self.popen.send_signal(sig)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        """SIGKILL and reap."""
        if self.alive():
            self.popen.kill()
        try:
            self.popen.wait(timeout=5.0)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL not delivered
            pass
        self.close_log()

    def close_log(self) -> None:
        if self.log is not None:
            self.log.close()
            self.log = None

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def reap(procs: list[Proc], bound: float) -> None:
    """SIGCONT+SIGTERM every live process, SIGKILL after ``bound`` seconds, reap all."""
    live = [p for p in procs if p.alive()]
    for p in live:
        p.signal(signal.SIGCONT)
        p.signal(signal.SIGTERM)
    deadline = time.monotonic() + bound
    for p in live:
        try:
            p.popen.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.popen.kill()
    for p in live:
        try:
            p.popen.wait(timeout=5.0)
        except subprocess.TimeoutExpired:  # pragma: no cover
            pass
    for p in procs:
        p.close_log()


class Launcher:
    """Starts host processes with logs under ``log_dir``; remembers every one it started."""

    def __init__(self, log_dir: Path, *, die_with_parent: bool = True) -> None:
        self.log_dir = log_dir
        self.procs: list[Proc] = []
        self.die_with_parent = die_with_parent

    def spawn(self, name: str, argv: list[str], *, netns: str | None = None,
              pipe_stdout: bool = False, env: dict[str, str] | None = None) -> Proc:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{name}.log"
        full = netns_prefix(netns) + list(argv)
        if self.die_with_parent:
            full = [*PDEATHSIG_SHIM, str(os.getpid()), *full]
        log = open(log_path, "ab")  # noqa: SIM115 - closed by Proc.close_log / reap
        environ = {k: v for k, v in os.environ.items() if not k.startswith("ETCD")}
        environ["PYTHONUNBUFFERED"] = "1"
        environ["PYTHONPATH"] = os.pathsep.join(
            [str(REPO_ROOT)] + [p for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p])
        environ.update(env or {})
        try:
            popen = subprocess.Popen(
                full, stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE if pipe_stdout else log, stderr=log,
                start_new_session=True, env=environ)
        except OSError as exc:
            log.close()
            raise LaunchError(f"cannot start {name} ({full[0]}): {exc}") from exc
        proc = Proc(name, full, popen, log_path, log)
        self.procs.append(proc)
        return proc

    def stop_all(self, bound: float) -> None:
        reap(self.procs, bound)
