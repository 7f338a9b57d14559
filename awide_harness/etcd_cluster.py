"""Start N real etcd members, inject faults into them, stop them without orphans.

Used by the tests, the demo, the benchmarks and the fault campaign (no pytest here)::

    with EtcdCluster(tmp_dir) as cluster:          # 3 members, `etcd` from PATH
        cfg = StoreConfig(endpoints=tuple(cluster.client_urls), prefix="/awide/c1/")
        cluster.freeze(0)                           # SIGSTOP member 0
        cluster.thaw(0)                             # SIGCONT

Timers are tuned for quick tests (heartbeat 50 ms, election 300 ms, pre-vote, watch progress
notifications every second). Every wait is bounded; ``stop()`` kills every member at once
(test clusters: no graceful leader transfer to wait out) and reaps it. Members are started with
a parent-death signal (``setpriv --pdeathsig KILL`` when available), so they die with the
thread that started them even if the caller is SIGKILLed: start a cluster from a thread that
lives as long as the cluster.

Members listen on ``host`` (loopback by default). ``addresses`` gives each member its own
address instead and ``prefixes`` an argv prefix each member's command starts with (a network
namespace host: ``addresses=[net.ip(h) ...]``, ``prefixes=[net.exec_prefix(h) ...]``, see
``awide_harness.netns``). ``unsafe_no_fsync`` (default on, etcd 3.5 and later) trades
durability for speed: these are test clusters only.

Housekeeping flags are those of the ansible role (``HOUSEKEEPING``: periodic compaction keeping
one hour, a 2 GiB backend quota); a flag of the same name in ``extra_args`` replaces the
default (e.g. ``--quota-backend-bytes=16777216`` for a test that fills the quota).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import ssl
import subprocess
import time
import urllib.request
import uuid
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal

from awide_cluster.config.daemon import ETCD_PROGRESS_NOTIFY
from awide_harness.etcd_tools import (
    HOUSEKEEPING,
    QUOTA_BACKEND_BYTES,
    EtcdClusterError,
    etcd_version,
    find_etcd,
    restore_tool,
    version_tuple,
    with_housekeeping,
)
from awide_harness.ports import release, reserve_port
from awide_harness.waits import WaitTimeout, wait_until_sync

__all__ = ["HOUSEKEEPING", "QUOTA_BACKEND_BYTES", "ClusterTls", "EtcdCluster", "EtcdClusterError",
           "MemberInfo", "etcd_version", "find_etcd", "restore_tool", "version_tuple",
           "with_housekeeping"]

@dataclass(frozen=True)
class ClusterTls:
    """TLS on the client port. Peers talk plain HTTP on loopback."""

    ca_file: str
    cert_file: str
    key_file: str
    client_cert_auth: bool = True
    # client certificate the launcher's own health probe presents (default: the server's)
    probe_cert_file: str | None = None
    probe_key_file: str | None = None


@dataclass(frozen=True)
class MemberInfo:
    index: int
    name: str
    pid: int | None          # None when the member is not running
    client_url: str
    peer_url: str
    data_dir: str
    state: Literal["running", "frozen", "stopped"]


class _Member:
    def __init__(self, index: int, name: str, client_port: int, peer_port: int, host: str,
                 scheme: str, data_dir: Path) -> None:
        self.index = index
        self.name = name
        self.client_port = client_port
        self.peer_port = peer_port
        h = f"[{host}]" if ":" in host else host
        self.client_url = f"{scheme}://{h}:{client_port}"
        self.peer_url = f"http://{h}:{peer_port}"
        self.data_dir = data_dir
        self.proc: subprocess.Popen[bytes] | None = None
        self.log: IO[bytes] | None = None
        self.frozen = False


def _reap(procs: list[subprocess.Popen[bytes]], bound: float) -> None:
    """Kill every member at once and reap it. Used by stop() and the finalizer.

    A member's SIGTERM is a graceful stop that, with its peers stopping too, waits out a leader
    transfer to them: over 1 s a cluster, every time (measured). These are test clusters: what a
    member wrote is on disk as after a crash (etcd recovers from that). ``bound`` (at least 5 s)
    bounds the wait for each member's exit. ``kill(i)`` and ``restart(i)`` are per-member
    faults."""
    live = [p for p in procs if p.poll() is None]
    for p in live:
        try:
            p.kill()
        except ProcessLookupError:
            pass
    for p in live:
        try:
            p.wait(timeout=max(bound, 5.0))
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL not delivered
            pass


class EtcdCluster:
    def __init__(
        self,
        work_dir: str | Path,
        size: int = 3,
        *,
        binary: str | None = None,
        host: str = "127.0.0.1",
        tls: ClusterTls | None = None,
        ports: Sequence[tuple[int, int]] | None = None,
        ready_timeout: float = 15.0,
        stop_timeout: float = 1.0,
        heartbeat_ms: int = 50,
        election_ms: int = 300,
        progress_notify_interval: float = ETCD_PROGRESS_NOTIFY,
        extra_args: Sequence[str] = (),
        die_with_parent: bool = True,
        log_level: str = "warn",
        addresses: Sequence[str] | None = None,
        prefixes: Sequence[Sequence[str]] | None = None,
        unsafe_no_fsync: bool = True,
    ) -> None:
        if size < 1:
            raise ValueError("size must be >= 1")
        if ports is not None and len(ports) != size:
            raise ValueError("ports needs one (client_port, peer_port) pair per member")
        if addresses is not None and len(addresses) != size:
            raise ValueError("addresses needs one address per member")
        if prefixes is not None and len(prefixes) != size:
            raise ValueError("prefixes needs one argv prefix per member")
        found = binary or find_etcd()
        if not found:
            raise EtcdClusterError("no etcd binary: pass binary= or put etcd on PATH")
        self.binary = found
        self.version = etcd_version(found)
        self.work_dir = Path(work_dir)
        self.size = size
        self.host = host
        self.tls = tls
        self._fixed_ports = list(ports) if ports is not None else None
        self._reserved: list[int] = []          # ports this cluster reserved (ports.py)
        self.ready_timeout = ready_timeout
        self.stop_timeout = stop_timeout
        self.heartbeat_ms = heartbeat_ms
        self.election_ms = election_ms
        self.progress_notify_interval = progress_notify_interval
        self.extra_args = tuple(extra_args)
        self.die_with_parent = die_with_parent
        self.log_level = log_level
        self.addresses = tuple(addresses) if addresses is not None else (host,) * size
        self.prefixes = tuple(tuple(p) for p in prefixes) if prefixes is not None else \
            ((),) * size
        self.unsafe_no_fsync = unsafe_no_fsync
        self.token = f"awide-{uuid.uuid4().hex[:12]}"
        self._members: list[_Member] = []
        # every process ever started, for the finalizer
        self._procs: list[subprocess.Popen[bytes]] = []
        self._finalizer = weakref.finalize(self, _reap, self._procs, stop_timeout)
        self._probe_ssl = self._make_probe_ssl()

    # ----------------------------------------------------------------- lifecycle

    def start(self) -> EtcdCluster:
        """Start every member and wait until all are healthy (bounded by ready_timeout)."""
        attempts = 1 if self._fixed_ports else 3
        last: EtcdClusterError | None = None
        for _ in range(attempts):
            self._layout()
            for m in self._members:
                self._spawn(m)
            try:
                self.wait_healthy()
                return self
            except EtcdClusterError as exc:  # e.g. a port taken between probe and bind
                last = exc
                self.stop()
                for m in self._members:  # a data dir remembers its peers: start afresh
                    shutil.rmtree(m.data_dir, ignore_errors=True)
        assert last is not None
        raise last

    def stop(self) -> None:
        """SIGKILL every member at once and reap it (see ``_reap``); release the ports."""
        _reap([m.proc for m in self._members if m.proc is not None], self.stop_timeout)
        for m in self._members:
            m.frozen = False
            if m.log is not None:
                m.log.close()
                m.log = None
        release(self._reserved)
        self._reserved = []

    def __enter__(self) -> EtcdCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ----------------------------------------------------------------- accessors

    @property
    def client_urls(self) -> list[str]:
        return [m.client_url for m in self._members]

    @property
    def endpoints(self) -> tuple[str, ...]:
        return tuple(self.client_urls)

    @property
    def ports(self) -> list[tuple[int, int]]:
        """(client_port, peer_port) per member; pass back as ``ports=`` to reuse them."""
        return [(m.client_port, m.peer_port) for m in self._members]

    def member(self, i: int) -> MemberInfo:
        m = self._members[i]
        running = m.proc is not None and m.proc.poll() is None
        state: Literal["running", "frozen", "stopped"] = (
            "stopped" if not running else "frozen" if m.frozen else "running")
        return MemberInfo(index=i, name=m.name, pid=m.proc.pid if running and m.proc else None,
                          client_url=m.client_url, peer_url=m.peer_url,
                          data_dir=str(m.data_dir), state=state)

    def log_tail(self, i: int, lines: int = 20) -> str:
        path = self.work_dir / f"{self._members[i].name}.log"
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    # ----------------------------------------------------------------- faults

    def freeze(self, i: int) -> None:
        """SIGSTOP member i (returns once it is stopped): its sockets stay open and accept
        connections, nothing answers."""
        self._signal(i, signal.SIGSTOP)
        self._members[i].frozen = True
        self._await_state(i, stopped=True)

    def thaw(self, i: int) -> None:
        """SIGCONT member i (returns once it runs again)."""
        self._signal(i, signal.SIGCONT)
        self._members[i].frozen = False
        self._await_state(i, stopped=False)

    def kill(self, i: int) -> None:
        """SIGKILL member i and reap it."""
        m = self._members[i]
        if m.proc is not None and m.proc.poll() is None:
            m.proc.kill()
            m.proc.wait(timeout=5.0)
        m.frozen = False

    def restart(self, i: int, *, wait: bool = True) -> None:
        """Stop member i if it runs, start it again on the same data dir and ports."""
        m = self._members[i]
        if m.proc is not None:
            _reap([m.proc], self.stop_timeout)
        m.frozen = False
        self._spawn(m)
        if wait:
            self.wait_healthy([i])

    def heal(self) -> None:
        """Thaw frozen members, restart stopped ones, wait until all are healthy."""
        for m in self._members:
            if m.frozen:
                self.thaw(m.index)
            if m.proc is None or m.proc.poll() is not None:
                self.restart(m.index, wait=False)
        self.wait_healthy()

    def rebuild(self, snapshot: str | Path | None = None, *, new_token: bool = True,
                bound: float = 60.0) -> None:
        """Disaster and recovery on the same addresses: stop every member, wipe its data, then
        either restore every member from ``snapshot`` (etcd's own restore: ``etcdutl``, or
        ``etcdctl`` where there is no working ``etcdutl``) or start an empty cluster (no
        snapshot: every member lost). ``new_token``: a new ``--initial-cluster-token``, hence a
        new cluster id (the operations runbook does this); without it the cluster id stays and
        only the revisions go back. Waits until every member is healthy."""
        self.stop()
        if new_token:
            self.token = f"awide-{uuid.uuid4().hex[:12]}"
        for m in self._members:
            shutil.rmtree(m.data_dir, ignore_errors=True)
        if snapshot is not None:
            ctl = restore_tool(self.binary)
            initial = ",".join(f"{o.name}={o.peer_url}" for o in self._members)
            for m in self._members:
                argv = [*ctl, "snapshot", "restore", str(snapshot), "--name", m.name,
                        "--data-dir", str(m.data_dir), "--initial-cluster", initial,
                        "--initial-cluster-token", self.token,
                        "--initial-advertise-peer-urls", m.peer_url]
                env = {k: v for k, v in os.environ.items() if not k.startswith("ETCD")}
                done = subprocess.run(argv, capture_output=True, timeout=bound,
                                      env={**env, "ETCDCTL_API": "3"}, check=False)
                if done.returncode != 0:
                    raise EtcdClusterError(f"{' '.join(argv)} failed: "
                                           f"{done.stderr.decode(errors='replace')[-600:]}")
        for m in self._members:
            self._spawn(m)
        self.wait_healthy(timeout=bound)

    def wait_healthy(self, indexes: Sequence[int] | None = None,
                     timeout: float | None = None) -> None:
        """Wait until each member's ``/health`` says true and all running members agree on one
        leader and term; raise EtcdClusterError after the bound."""
        deadline = time.monotonic() + (self.ready_timeout if timeout is None else timeout)
        self._wait_health(set(range(self.size) if indexes is None else indexes), deadline)

        def one_leader() -> bool:
            views = {self._leader_view(m) for m in self._members
                     if m.proc is not None and m.proc.poll() is None and not m.frozen}
            return len(views) == 1 and None not in views

        try:
            wait_until_sync(one_leader, max(0.0, deadline - time.monotonic()),
                            "etcd members agree on one leader", poll=0.05)
        except WaitTimeout as e:
            raise EtcdClusterError(f"etcd members do not agree on a leader: {e}") from None

    def _wait_health(self, todo: set[int], deadline: float) -> None:
        def all_healthy() -> bool:
            for i in sorted(todo):
                m = self._members[i]
                if m.proc is None or m.proc.poll() is not None:
                    raise EtcdClusterError(
                        f"etcd member {m.name} exited ({m.proc.returncode if m.proc else None}):\n"
                        f"{self.log_tail(i)}")
                if self._healthy(m):
                    todo.discard(i)
            return not todo

        try:
            wait_until_sync(all_healthy, max(0.0, deadline - time.monotonic()),
                            "etcd members healthy", poll=0.05)
        except WaitTimeout:
            names = ", ".join(self._members[i].name for i in sorted(todo))
            tail = self.log_tail(min(todo))
            raise EtcdClusterError(f"etcd members not healthy in time: {names}\n{tail}") \
                from None

    # ----------------------------------------------------------------- internals

    def _signal(self, i: int, sig: signal.Signals) -> None:
        m = self._members[i]
        if m.proc is None or m.proc.poll() is not None:
            raise EtcdClusterError(f"etcd member {m.name} is not running")
        m.proc.send_signal(sig)

    def _await_state(self, i: int, *, stopped: bool, bound: float = 2.0) -> None:
        """Wait (bounded) until /proc shows member i stopped ("T") or not; no-op without /proc."""
        m = self._members[i]
        assert m.proc is not None
        pid = m.proc.pid

        def reached() -> bool:
            try:
                with open(f"/proc/{pid}/stat", "rb") as f:
                    state = f.read().rsplit(b")", 1)[1].split()[0]
            except (OSError, IndexError):
                return True                 # no /proc, or gone: nothing to wait for
            return (state in (b"T", b"t")) == stopped

        try:
            wait_until_sync(reached, bound, f"etcd member {m.name} stopped={stopped}",
                            poll=0.002)
        except WaitTimeout:
            raise EtcdClusterError(
                f"etcd member {m.name} did not {'stop' if stopped else 'resume'}") from None

    def _layout(self) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        scheme = "https" if self.tls else "http"
        release(self._reserved)
        self._reserved = []
        if self._fixed_ports:
            ports = self._fixed_ports
        else:
            ports = [(reserve_port(a), reserve_port(a)) for a in self.addresses]
            self._reserved = [p for pair in ports for p in pair]
        self._members = [
            _Member(i, f"etcd{i}", cp, pp, self.addresses[i], scheme,
                    self.work_dir / f"etcd{i}.data")
            for i, (cp, pp) in enumerate(ports)
        ]

    def _args(self, m: _Member) -> list[str]:
        initial = ",".join(f"{o.name}={o.peer_url}" for o in self._members)
        args = [
            *self.prefixes[m.index],
            self.binary,
            "--name", m.name,
            "--data-dir", str(m.data_dir),
            "--listen-client-urls", m.client_url,
            "--advertise-client-urls", m.client_url,
            "--listen-peer-urls", m.peer_url,
            "--initial-advertise-peer-urls", m.peer_url,
            "--initial-cluster", initial,
            "--initial-cluster-token", self.token,
            "--initial-cluster-state", "new",
            f"--heartbeat-interval={self.heartbeat_ms}",
            f"--election-timeout={self.election_ms}",
            "--pre-vote=true",
            "--logger=zap",
            f"--log-level={self.log_level}",
            f"--experimental-watch-progress-notify-interval={self.progress_notify_interval}s",
        ]
        if self.unsafe_no_fsync and version_tuple(self.version) >= (3, 5):
            args.append("--unsafe-no-fsync=true")  # test clusters only: speed over durability
        if self.tls:
            args += ["--cert-file", self.tls.cert_file, "--key-file", self.tls.key_file,
                     f"--client-cert-auth={'true' if self.tls.client_cert_auth else 'false'}"]
            if self.tls.client_cert_auth:
                # etcd demands client certificates whenever a trusted CA is given
                args += ["--trusted-ca-file", self.tls.ca_file]
        args += with_housekeeping(self.extra_args)
        return args

    def _spawn(self, m: _Member) -> None:
        args = self._args(m)
        setpriv = shutil.which("setpriv") if self.die_with_parent else None
        if setpriv:
            args = [setpriv, "--pdeathsig", "KILL", "--", *args]
        if m.log is None:
            m.log = open(self.work_dir / f"{m.name}.log", "ab")  # noqa: SIM115 - closed in stop()
        m.proc = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=m.log, stderr=subprocess.STDOUT,
            start_new_session=True,
            env={k: v for k, v in os.environ.items() if not k.startswith("ETCD")},
        )
        m.frozen = False
        self._procs.append(m.proc)

    def _make_probe_ssl(self) -> ssl.SSLContext | None:
        if not self.tls:
            return None
        ctx = ssl.create_default_context(cafile=self.tls.ca_file)
        cert = self.tls.probe_cert_file or self.tls.cert_file
        key = self.tls.probe_key_file or self.tls.key_file
        ctx.load_cert_chain(cert, key)
        return ctx

    def _leader_view(self, m: _Member) -> tuple[str, str] | None:
        """(leader id, raft term) as member m sees them, None when it has no leader."""
        req = urllib.request.Request(f"{m.client_url}/v3/maintenance/status", data=b"{}",
                                     method="POST", headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=0.5, context=self._probe_ssl) as resp:
                body = json.loads(resp.read(65536))
        except (OSError, ValueError):
            return None
        leader, term = body.get("leader"), body.get("raftTerm")
        return (str(leader), str(term)) if leader and leader != "0" else None

    def _healthy(self, m: _Member) -> bool:
        try:
            with urllib.request.urlopen(f"{m.client_url}/health", timeout=0.5,
                                        context=self._probe_ssl) as resp:
                body = resp.read(4096)
        except (OSError, ValueError):
            return False
        return b'"health":"true"' in body
