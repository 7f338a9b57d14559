"""Health probes of a local card. Each is bounded and returns a ProbeResult with a reason.

I/O probes (``probe_store``, ``probe_listener``, ``probe_writable``) never raise: a timeout or
an error becomes ``ok=False`` with human words. ``check_device`` and ``check_identity`` are
pure functions over what discovery found.

Blocking work (a directory card's label read, its write probe) runs on a ``ProbeWorker``
(``cards.worker``): every card's jobs of one turn go to one thread together, and a job that
hangs costs only its own card.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import ipaddress
import logging
import os
import socket
import stat
import threading
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import aiohttp

from awide_cluster.cards.model import (
    DEVICE,
    IDENTITY,
    LISTENER,
    STORE,
    WRITABLE,
    LocalCard,
    ProbeResult,
)
from awide_cluster.cards.spec import StoreProbeSpec, parse_host_port
from awide_cluster.cards.units import UnitStates
from awide_cluster.cards.worker import ProbeWorker, shared_worker
from awide_cluster.contract.target import NvmeTarget
from awide_cluster.nvme.runner import CommandRunner, CommandTimeout, RunnerError
from awide_cluster.store.transport import connect_text

log = logging.getLogger(__name__)
Clock = Callable[[], float]


async def timed(probe: str, timeout: float, clock: Clock,
                check: Callable[[], Awaitable[tuple[bool, str]]]) -> ProbeResult:
    """Run ``check`` under ``timeout``; any timeout or error becomes a failed ProbeResult."""
    start = clock()
    try:
        async with asyncio.timeout(timeout):
            ok, reason = await check()
    except TimeoutError:
        ok, reason = False, f"{probe}: no answer within {timeout:g} s"
    except CommandTimeout as exc:
        ok, reason = False, f"{probe}: {exc}"
    except Exception as exc:  # noqa: BLE001 - a probe reports, it never crashes the poll
        log.debug("probe %s failed", probe, exc_info=True)
        ok, reason = False, f"{probe}: {type(exc).__name__}: {exc}"
    return ProbeResult(probe, ok, reason, max(0.0, clock() - start))


# ------------------------------------------------------------------ store service

async def probe_store(spec: StoreProbeSpec, runner: CommandRunner, timeout: float,
                      clock: Clock, *, systemctl: str = "systemctl",
                      units: UnitStates | None = None) -> ProbeResult:
    """The card's store service answers. A systemd unit is asked through ``units`` (one
    ``systemctl`` for every unit asked in the same turn, ``cards.units``); without it, alone."""
    kind = spec.kind
    if kind == "systemd_unit":
        assert spec.systemd_unit is not None
        unit = spec.systemd_unit
        asked = units if units is not None else UnitStates(runner, systemctl=systemctl)
        check = lambda: _systemd(asked, unit, timeout)  # noqa: E731
    elif kind == "http":
        assert spec.http is not None
        url = spec.http
        check = lambda: _http(url, timeout)  # noqa: E731
    elif kind == "tcp":
        assert spec.tcp is not None
        host, port = host_port(spec.tcp)
        check = lambda: _tcp(host, port, "store")  # noqa: E731
    else:
        assert spec.command is not None
        argv = list(spec.command)
        check = lambda: _command(runner, argv, timeout)  # noqa: E731
    return await timed(STORE, timeout, clock, check)


host_port = functools.lru_cache(maxsize=256)(parse_host_port)     # the same text each poll


async def _systemd(units: UnitStates, unit: str, timeout: float) -> tuple[bool, str]:
    state = await units.ask(unit, timeout)
    return state.active, state.reason


async def _http(url: str, timeout: float) -> tuple[bool, str]:
    client_timeout = aiohttp.ClientTimeout(total=timeout)
    try:
        async with aiohttp.ClientSession(timeout=client_timeout) as session:
            async with session.get(url, allow_redirects=False) as resp:
                status = resp.status
    except aiohttp.ClientError as exc:
        return False, f"store {url}: {type(exc).__name__}: {connect_text(exc)}"
    if 200 <= status < 300:
        return True, f"store {url} answered {status}"
    return False, f"store {url} answered {status}"


def tcp_said(what: str, host: str, port: int, error: OSError | None) -> tuple[bool, str]:
    """A TCP probe's verdict and words: ``error`` None when the connect succeeded. Pure."""
    shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if error is not None:
        return False, f"{what} {shown}: {_why(error)}"
    return True, f"{what} {shown} accepts connections"


async def _tcp(host: str, port: int, what: str) -> tuple[bool, str]:
    family = literal_family(host)
    try:
        if family is not None:
            await _connect_close(family, host, port)
        else:                       # a name: resolved and tried address by address by asyncio
            _reader, writer = await asyncio.open_connection(host, port)
            writer.close()
            try:
                await writer.wait_closed()
            except OSError:
                pass
    except OSError as exc:
        return tcp_said(what, host, port, exc)
    return tcp_said(what, host, port, None)


@functools.lru_cache(maxsize=256)
def literal_family(host: str) -> int | None:
    """The address family of an IP literal, None for a name."""
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        return None
    return socket.AF_INET6 if addr.version == 6 else socket.AF_INET


# a socket made non-blocking by its creation (Linux): no system call to make it so after
_NONBLOCK: int = getattr(socket, "SOCK_NONBLOCK", 0)
IN_PROGRESS = (errno.EINPROGRESS, errno.EAGAIN, errno.EWOULDBLOCK, errno.EINTR)


def start_connect(family: int, host: str, port: int) -> tuple[socket.socket, int]:
    """A bare non-blocking socket connecting to an IP literal, and ``connect_ex``'s errno
    (0: connected; one of ``IN_PROGRESS``: wait until it is writable, then read ``SO_ERROR``).
    Raises OSError when no socket can be made; the caller closes the socket."""
    sock = socket.socket(family, socket.SOCK_STREAM | _NONBLOCK)
    try:
        if not _NONBLOCK:
            sock.setblocking(False)
        return sock, sock.connect_ex((host, port))
    except BaseException:
        sock.close()
        raise


async def _connect_close(family: int, host: str, port: int) -> None:
    """Connect a bare non-blocking socket on the loop and close it (no transport, no streams:
    an IP literal needs no resolution; the connect is waited for as ``loop.sock_connect``
    does, without its resolution and callbacks). Raises OSError (its errno: the connect's);
    closed on cancellation too."""
    sock, err = start_connect(family, host, port)
    try:
        if err in IN_PROGRESS:
            loop = asyncio.get_running_loop()
            writable = loop.create_future()
            fd = sock.fileno()
            loop.add_writer(fd, _settle, writable)
            try:
                await writable
            finally:
                loop.remove_writer(fd)
            err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err:
            raise OSError(err, os.strerror(err))
    finally:
        sock.close()


def _settle(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def _why(exc: OSError) -> str:
    """'Connection refused' rather than asyncio's 'Connect call failed (addr)'."""
    return os.strerror(exc.errno) if exc.errno else str(exc)


async def _command(runner: CommandRunner, argv: Sequence[str],
                   timeout: float) -> tuple[bool, str]:
    try:
        done = await runner.run(list(argv), timeout)
    except RunnerError as exc:
        if isinstance(exc, CommandTimeout):
            raise
        return False, f"store command: {exc}"
    if done.rc == 0:
        return True, f"store command {argv[0]} exited 0"
    said = (done.stderr.strip() or done.stdout.strip()).splitlines()
    return False, f"store command {argv[0]} exited {done.rc}" + (f": {said[0][:200]}" if said
                                                                  else "")


# ------------------------------------------------------------------ NVMe-oF listener

async def probe_listener(target: NvmeTarget, timeout: float, clock: Clock) -> ProbeResult:
    """The card's NVMe-oF target accepts TCP connections on traddr:trsvcid."""
    return await timed(LISTENER, timeout, clock,
                       lambda: _tcp(target.traddr, target.trsvcid, "NVMe-oF listener"))


# ------------------------------------------------------------------ pure checks

def check_device(card: LocalCard, *, namespace_missing: bool = False,
                 controller: str | None = None) -> ProbeResult:
    """NVMe: the controller is live and shows the namespace."""
    ctrl = controller or "controller"
    if namespace_missing or card.device is None:
        return ProbeResult(DEVICE, False, f"{ctrl} shows no namespace", 0.0)
    if card.controller_state != "live":
        return ProbeResult(DEVICE, False,
                           f"{card.device}: controller state {card.controller_state or 'unknown'}"
                           " (not live)", 0.0)
    return ProbeResult(DEVICE, True, f"{card.device} live", 0.0)


def check_identity(card: LocalCard, known_identity: str | None, why: str = "") -> ProbeResult:
    """The on-card identity is readable and equal to the one first seen (if any)."""
    if card.identity is None:
        return ProbeResult(IDENTITY, False,
                           f"no on-card identity readable{': ' + why if why else ''}", 0.0)
    if known_identity is None:
        return ProbeResult(IDENTITY, True, f"identity {card.identity} (first seen)", 0.0)
    if card.identity == known_identity:
        return ProbeResult(IDENTITY, True, f"identity {card.identity} unchanged", 0.0)
    return ProbeResult(IDENTITY, False,
                       f"identity changed: was {known_identity}, now {card.identity} "
                       f"(serial {card.serial}): not the same card", 0.0)


# ------------------------------------------------------------------ directory writable

_inflight: set[str] = set()
_inflight_lock = threading.Lock()


PROBE_FILE = ".awide-probe-{uid}"     # in the card's directory, one per user; it stays there
PROBE_PAYLOAD = b"awide write probe\n"
_PROBE_FLAGS = (os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY
                | os.O_CLOEXEC)


class ProbeFileRefused(OSError):
    """The probe file's name holds something that is not this user's own probe file."""


def probe_file(path: str, uid: int | None = None) -> str:
    """The write probe's file in the directory ``path`` (its name carries the user id, so a
    daemon and a gateway of different users never share it)."""
    return os.path.join(path, PROBE_FILE.format(uid=os.geteuid() if uid is None else uid))


def space_left(fs: os.statvfs_result) -> str:
    """Pure: why a file system takes no new file ("" when it does): no block free for this
    user (``f_bavail``), or no inode (``f_favail``, where the file system counts them)."""
    if fs.f_bavail == 0:
        return "file system full (no block free)"
    if fs.f_files and fs.f_favail == 0:
        return "file system full (no inode free)"
    return ""


def _is_link(name: str) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(name).st_mode)
    except OSError:
        return False


def _write_probe(path: str) -> None:
    """Overwrite the directory's probe file in place and fdatasync it (runs on the worker;
    always to its end, even when the awaiting task gave up). Raises OSError (``ProbeFileRefused``
    naming the file when its name holds a symbolic link, something other than a regular file, a
    file with other hard links or of another owner), and when the directory does not let this
    user create files or its file system has no block or inode left (an overwrite in place
    needs neither, so the probe asks)."""
    try:
        uid = os.geteuid()
        name = probe_file(path, uid)
        try:
            fd = os.open(name, _PROBE_FLAGS, 0o600)
        except OSError as exc:
            if exc.errno == errno.ELOOP and _is_link(name):     # not a loop above it
                raise ProbeFileRefused(f"{name} is a symbolic link (refused)") from None
            if exc.errno in (errno.ENXIO, errno.EISDIR):
                raise ProbeFileRefused(f"{name} is not a regular file (refused)") from None
            raise
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise ProbeFileRefused(f"{name} is not a regular file (refused)")
            if st.st_nlink != 1:
                raise ProbeFileRefused(f"{name} has {st.st_nlink} hard links (refused: "
                                       "only the probe's own file is written)")
            if st.st_uid != uid:
                raise ProbeFileRefused(f"{name} is owned by uid {st.st_uid}, not {uid} "
                                       "(refused)")
            os.pwrite(fd, PROBE_PAYLOAD, 0)
            os.fdatasync(fd)
            fs = os.fstatvfs(fd)
        finally:
            os.close(fd)
        full = space_left(fs)
        if full:
            raise ProbeFileRefused(full)
        if not os.access(path, os.W_OK | os.X_OK, effective_ids=True):
            raise ProbeFileRefused("this user cannot create files in it")
    finally:
        with _inflight_lock:
            _inflight.discard(path)


async def probe_writable(path: Path | str, timeout: float, clock: Clock, *,
                         worker: ProbeWorker | None = None) -> ProbeResult:
    """The directory takes a small synced write (its probe file overwritten in place,
    ``_write_probe``), on the worker (``shared_worker()`` when none is passed). A write stuck
    in the kernel keeps its thread; while it is stuck, later probes of the same path fail at
    once instead of piling up."""
    key = str(path)
    work = worker if worker is not None else shared_worker()

    async def check() -> tuple[bool, str]:
        started = start_write(work, key, timeout)
        if started is None:
            return False, write_stuck_said(key)
        try:
            await started
        except OSError as exc:
            return writable_said(key, exc)
        return writable_said(key, None)

    result = await timed(WRITABLE, timeout, clock, check)
    if not result.ok and "no answer within" in result.reason:
        return ProbeResult(WRITABLE, False, write_timeout_said(key, timeout), result.elapsed)
    return result


def start_write(worker: ProbeWorker, key: str, timeout: float) -> asyncio.Future[None] | None:
    """The write probe of the directory ``key`` handed to ``worker`` (its future), or None
    when the last one is still running there (it hung): no second one queues behind it."""
    with _inflight_lock:
        if key in _inflight:
            return None
        _inflight.add(key)
    try:
        return worker.run(_write_probe, key, bound=timeout)
    except BaseException:
        with _inflight_lock:
            _inflight.discard(key)
        raise


def writable_said(key: str, error: OSError | None) -> tuple[bool, str]:
    """The write probe's verdict and words: ``error`` None when it succeeded. Pure."""
    if error is not None:
        return False, f"directory {key} not writable: {_why(error)}"
    return True, f"directory {key} writable"


def write_stuck_said(key: str) -> str:
    return f"directory {key}: previous write probe still stuck"


def write_timeout_said(key: str, timeout: float) -> str:
    return f"directory {key}: write+fdatasync did not finish within {timeout:g} s"
