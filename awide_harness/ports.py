"""TCP ports for the harness's listeners, with no race between picking a port and binding it.

Binding port 0, closing the socket and letting a process bind the number later loses on a busy
machine: the kernel hands the same number to the next outgoing connection or to another
harness picking its own. A port from ``reserve_port``:
- lies outside the kernel's ephemeral range (``ip_local_port_range``), so no outgoing
  connection on the machine is given it;
- is reserved across processes by an exclusive ``flock`` on a file named after it in one
  shared directory (``AWIDE_PORT_DIR``, default ``<tmp>/awide-ports``): another harness (the
  suite beside a benchmark, two pytest sessions) skips it until ``release`` or until this
  process exits, when the kernel drops the lock. The descriptor is not inherited by children;
- was bindable at the time it was reserved (``SO_REUSEADDR``, as the listeners bind).

What it cannot prevent is an unrelated program binding a fixed number in that range; the
listener then fails to start, as it would have before.
"""

from __future__ import annotations

import errno
import fcntl
import os
import random
import socket
import tempfile
import threading
from collections.abc import Iterable
from pathlib import Path

EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST = 10000          # below are well-known services' habits (9090, 9100, 2379, ...)
ATTEMPTS = 500

_held: dict[int, int] = {}     # port -> the descriptor holding its lock
_lock = threading.Lock()


class NoFreePort(RuntimeError):
    """No port could be reserved."""


def port_dir() -> Path:
    return Path(os.environ.get("AWIDE_PORT_DIR") or
                os.path.join(tempfile.gettempdir(), "awide-ports"))


def candidate_range(ephemeral: tuple[int, int] | None = None) -> tuple[int, int]:
    """The widest run of ports in [LOWEST, 65535] outside the ephemeral range, inclusive."""
    if ephemeral is None:
        try:
            lo_s, hi_s = EPHEMERAL.read_text().split()[:2]
            ephemeral = (int(lo_s), int(hi_s))
        except (OSError, ValueError):
            ephemeral = (32768, 60999)          # Linux's default
    lo, hi = ephemeral
    runs = [(LOWEST, min(lo - 1, 65535)), (max(hi + 1, LOWEST), 65535)]
    best = max(runs, key=lambda r: r[1] - r[0])
    if best[1] - best[0] < 1000:                # an ephemeral range covering nearly all
        return (LOWEST, 65535)
    return best


def claim(directory: Path, port: int) -> int | None:
    path = directory / str(port)
    try:
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o644)
    except OSError:
        return None                             # not ours to lock (another user's file)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def bindable(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            # an address that lives in another network namespace: only the lock decides
            return exc.errno == errno.EADDRNOTAVAIL
    return True


def _shared_dir() -> Path:
    d = port_dir()
    try:
        d.mkdir(mode=0o1777, exist_ok=True)
        if d.stat().st_uid == os.geteuid():
            d.chmod(0o1777)                     # every user's harness shares it
    except OSError as exc:
        raise NoFreePort(f"cannot use the port directory {d}: {exc}") from exc
    return d


def reserve_port(host: str = "127.0.0.1") -> int:
    """A port free on ``host`` and reserved for this process until ``release``."""
    directory = _shared_dir()
    lo, hi = candidate_range()
    for _ in range(ATTEMPTS):
        port = random.randint(lo, hi)
        with _lock:
            if port in _held:
                continue
        fd = claim(directory, port)
        if fd is None:
            continue
        if not bindable(host, port):
            os.close(fd)
            continue
        with _lock:
            _held[port] = fd
        return port
    raise NoFreePort(f"no free port in {lo}-{hi} on {host} after {ATTEMPTS} tries "
                     f"(reservations in {directory})")


def release(ports: Iterable[int]) -> None:
    """Give the reservations back (their listeners are gone or going); unknown ports are
    ignored, so a cluster's stop can release twice."""
    for port in ports:
        with _lock:
            fd = _held.pop(port, None)
        if fd is not None:
            os.close(fd)


def held() -> frozenset[int]:
    with _lock:
        return frozenset(_held)
