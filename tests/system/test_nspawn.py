"""The rollout for real: three Debian bookworm hosts booted with systemd in systemd-nspawn
containers (one network namespace each, on a bridge with a private /24 used only by them),
sshd inside, and ansible/site.yml and ansible/upgrade.yml run over SSH against them.

Checked: the etcd quorum forms (3 members, Debian's etcd.service masked, the progress-notify
flag used) with TLS on the client and peer ports and authentication on (plain http to either
port fails; a gateway's own etcd user reads the registry and is refused writing it; no
credentials read nothing); the daemons are active under systemd (Type=notify reached READY),
each with its own etcd user; `awide-cluster status` is healthy with one directory card per
storage host; a second site.yml changes nothing; rotate-certs.yml gives every member a new
certificate without a restart and the cluster stays healthy;
upgrade.yml upgrades one host at a time, the leader last, to a new version; a daemon
killed with SIGKILL is restarted by systemd and the cluster is healthy again; upgrade.yml
refuses an unhealthy cluster and changes nothing; a build that cannot start stops upgrade.yml
at its first host; site.yml limited to that host repairs it.
A GPU host g1 (inventory group gateways) is deployed by site.yml's gateway play: its gateway
(awide-gateway.service) is ready, in status at the registry's generation with its own etcd
user, its slot table holds every card in its slot and every card is in service there (each
storage host's card is a directory of the machine running the test, bind-mounted into its
storage host and, at the same path, into g1); upgrade.yml upgrades it after the storage hosts,
its batch agreeing in status, its cards in service again.

Membership, backup and restore (on the same cluster, with a 4th host booted with the others):
add-host.yml makes it a 4th etcd member (a learner, promoted) running its daemon,
remove-host.yml retires it, backup.yml takes a snapshot now and restore.yml rebuilds etcd from
it; after each, status is healthy with the expected members and every card in service in its
slot, and after the restore the registry is at its generation or above without any daemon
restarting. Then replace-host.yml: refused while the witness h3 still answers (nothing
changed); with h3 powered off, its member is removed first and the 4th host joins in its place
(3 voting members, healthy, every card in its slot).
It adds several minutes: in `make system-test` always, in `make test` only with
AWIDE_SYSTEM_LONG=1.

In `make test` when root (as CI runs it) and debootstrap, systemd-nspawn, ip and ssh are
installed (`make deps` installs them); skipped otherwise, with the reason. AWIDE_SYSTEM_TESTS=0
opts out (`make system-test` runs it alone). About 4.5-5.5 minutes on a 2-core machine with the
root filesystem cached (8 before the roles wrote several files per module call). The root
filesystem is built once with debootstrap (~2 min, ~310 MB) and cached in AWIDE_SYSTEST_CACHE
(default /var/cache/awide-systest), keyed by its recipe (the package list); a recipe that
cannot be built fails the test. Traffic goes only to these namespaces. The wheels' dependencies
come from the package index once per dependency list and are cached beside the root filesystem
(deps-<hash>, keyed by pyproject's dependencies and the Python version); every build (the new
and the broken version's wheelhouses, site.yml's own from the source) runs offline from them,
with the venv's setuptools. Containers, namespaces and the bridge are removed at the end, also
when a step fails; those of an earlier run that died without its teardown are removed before a
new lab starts. Each host's journal, each playbook's output and the card directories are kept
in the test's temp directory; phase timings, with the CPU time spent in each, are printed (-s).
"""

from __future__ import annotations

import fcntl
import hashlib
import ipaddress
import json
import os
import re
import resource
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ANSIBLE = ROOT / "ansible"
BIN = Path(sys.executable).parent
CACHE = Path(os.environ.get("AWIDE_SYSTEST_CACHE", "/var/cache/awide-systest"))
# One directory per running lab: its lock (held while the lab lives) and ansible's SSH
# control sockets. Labs are named aws<4 hex>: namespaces aws….-h1, bridge aws….br, veths
# aws….v0.
LABS = Path("/run/awide-systest")
LAB_NS = re.compile(r"(aws[0-9a-f]{4})-[a-z]\d+")       # a host's: -h1 ... -h4, -g1
LAB_LINK = re.compile(r"(aws[0-9a-f]{4})(?:br|v\d)")
PACKAGES = ["systemd", "systemd-sysv", "dbus", "python3", "python3-venv", "python3-apt",
            "openssh-server", "iproute2", "etcd-server", "etcd-client", "procps"]
# The part of the root filesystem's recipe that, when changed, needs a new one.
RECIPE = "bookworm minbase " + ",".join(PACKAGES) + " v1"
HOSTS = ("h1", "h2", "h3")                   # h1, h2 storage (one dir card each), h3 witness
SPARE = "h4"                                 # booted with the others, joins in the membership test
LAB_HOSTS: tuple[str, ...] = (*HOSTS, SPARE)
# A GPU host (inventory group gateways): the gateway role and the gateway half of upgrade.yml.
# Booted with the storage and witness hosts.
GPU = "g1"
LAB_HOSTS = (*LAB_HOSTS, GPU)
GATEWAY_MODEL = {"name": "systest/model-1b", "num_layers": 2, "num_kv_heads": 2, "head_dim": 64}
STORAGE = ("h1", "h2")
# Each storage host's one directory card, at a path of its own: a directory of the machine
# running the test (Lab.cards), bind-mounted into its storage host and, at the same path, into
# the GPU host, whose gateway reaches every card there as a directory card.
CARD_PATHS = {h: f"/srv/awide/{h}-dev0" for h in STORAGE}
CLUSTER = "systest"
GATEWAY = "gw1"                              # a gateway given its own etcd user
NEW_VERSION = "0.2.0.post1"                  # what upgrade.yml rolls out
BROKEN_VERSION = "0.2.0.post2"               # a build that cannot start

# The whole test, root filesystem build included: a bound, not an estimate (seen: 4.5-5.5
# minutes on a 2-core machine with the root filesystem cached; 7-9, and 13.5 once under heavy
# load with the debootstrap, before the roles wrote several files per module call).
pytestmark = [pytest.mark.slow, pytest.mark.system, pytest.mark.timeout(1500)]
DEBOOTSTRAP_TIMEOUT = 600
PLAYBOOK_TIMEOUT = 600


def _why_not() -> str | None:
    if os.environ.get("AWIDE_SYSTEM_TESTS") == "0":
        return "opted out with AWIDE_SYSTEM_TESTS=0"
    if os.geteuid() != 0:
        return "needs root (network namespaces, systemd-nspawn): runs in `make test` as root, " \
               "as in CI"
    for prog in ("debootstrap", "systemd-nspawn", "ip", "ssh", "ssh-keygen"):
        if shutil.which(prog) is None:
            return f"{prog} is not installed (apt-get install debootstrap systemd-container " \
                   "iproute2 openssh-client)"
    if not (BIN / "ansible-playbook").exists():
        return f"ansible-playbook is not in {BIN} (pip install ansible-core)"
    return None


def _long_why_not() -> str | None:
    """Why the membership, backup and restore scenario (several minutes more) is left out: it
    runs in `make system-test` (AWIDE_SYSTEM_TESTS=1) and, with AWIDE_SYSTEM_LONG=1, in
    `make test`."""
    if "1" in (os.environ.get("AWIDE_SYSTEM_TESTS"), os.environ.get("AWIDE_SYSTEM_LONG")):
        return None
    return "the membership, backup and restore scenario runs in `make system-test`; " \
           "AWIDE_SYSTEM_LONG=1 adds it to `make test`"


# --- small helpers -------------------------------------------------------------------------

def _machine_cpu() -> float:
    """CPU seconds this machine has been busy (every core; /proc/stat, not idle nor iowait)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def _own_cpu() -> float:
    """CPU seconds of this process and every child it waited for (ansible-playbook, its
    workers and ssh clients, pip): the controller's side."""
    me, kids = (resource.getrusage(who) for who in (resource.RUSAGE_SELF,
                                                     resource.RUSAGE_CHILDREN))
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


class Timings:
    """Each phase's wall time, with the CPU time the machine spent in it (all cores) and the
    share of this test's own processes (the controller: ansible-playbook, pip): where a slow
    phase went."""

    def __init__(self) -> None:
        self.phases: list[tuple[str, float]] = []
        self._t, self._cpu, self._own = time.monotonic(), _machine_cpu(), _own_cpu()

    def lap(self, name: str) -> None:
        now, cpu, own = time.monotonic(), _machine_cpu(), _own_cpu()
        self.phases.append((name, now - self._t))
        print(f"[systest] {name}: {now - self._t:.1f} s (machine CPU {cpu - self._cpu:.1f} s, "
              f"controller {own - self._own:.1f} s)", flush=True)
        self._t, self._cpu, self._own = now, cpu, own


def _run(argv: list[str], timeout: float, check: bool = True, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)
    if check and r.returncode != 0:
        raise AssertionError(f"{shlex.join(argv)} exited {r.returncode}:\n"
                             f"{r.stdout[-4000:]}\n{r.stderr[-4000:]}")
    return r


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return _run(["ip", *args], timeout=15, check=check)


def _wait(what: str, predicate, timeout: float, every: float = 0.5):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"{what}: not within {timeout:g} s (last: {last!r})")


# --- the root filesystem, built once -------------------------------------------------------

def _ssh_key() -> Path:
    key = CACHE / "ssh" / "id_ed25519"
    if not (key.exists() and Path(str(key) + ".pub").exists()):
        key.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        key.unlink(missing_ok=True)
        Path(str(key) + ".pub").unlink(missing_ok=True)
        _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "awide-systest",
              "-f", str(key)], timeout=30)
    return key


def rootfs() -> Path:
    """The cached bookworm root filesystem (built with debootstrap under a lock)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    tag = hashlib.sha256(RECIPE.encode()).hexdigest()[:12]
    root = CACHE / f"rootfs-{tag}"
    key = _ssh_key()
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / ".awide-systest-ready").exists():
            tmp = CACHE / f"rootfs-{tag}.tmp"
            # root filesystems of other recipes (an older package list): ~310 MB each
            for old in CACHE.glob("rootfs-*"):
                if old.name not in (root.name, tmp.name):
                    shutil.rmtree(old, ignore_errors=True)
            if not (tmp / ".awide-debootstrap-done").exists():
                shutil.rmtree(tmp, ignore_errors=True)
                try:
                    r = subprocess.run(["debootstrap", "--variant=minbase",
                                        "--include=" + ",".join(PACKAGES), "bookworm", str(tmp)],
                                       capture_output=True, text=True,
                                       timeout=DEBOOTSTRAP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    shutil.rmtree(tmp, ignore_errors=True)
                    raise AssertionError(f"debootstrap did not finish within "
                                         f"{DEBOOTSTRAP_TIMEOUT} s") from None
                if r.returncode != 0:
                    shutil.rmtree(tmp, ignore_errors=True)
                    raise AssertionError(
                        f"debootstrap could not build the root filesystem (no access to "
                        f"Debian's package archive? AWIDE_SYSTEM_TESTS=0 opts out): exit "
                        f"{r.returncode}\n{r.stdout[-1500:]}\n{r.stderr[-1500:]}")
                (tmp / ".awide-debootstrap-done").touch()
            (tmp / "etc" / "hostname").unlink(missing_ok=True)   # nspawn -M names the host
            wants = tmp / "etc/systemd/system/multi-user.target.wants"
            wants.mkdir(parents=True, exist_ok=True)
            if not (wants / "ssh.service").is_symlink():
                (wants / "ssh.service").symlink_to("/lib/systemd/system/ssh.service")
            (tmp / "etc/ssh/sshd_config.d/awide-systest.conf").write_text(
                "UseDNS no\nPermitRootLogin prohibit-password\n")
            for deb in (tmp / "var/cache/apt/archives").glob("*.deb"):
                deb.unlink()                                   # ~100 MB not needed
            (tmp / ".awide-systest-ready").write_text(RECIPE + "\n")
            tmp.rename(root)
        # no DNS in the lab: names are in /etc/hosts, and nothing is looked up outside
        (root / "etc" / "hosts").write_text("127.0.0.1 localhost\n::1 localhost ip6-localhost\n")
        resolv = root / "etc" / "resolv.conf"
        if resolv.is_symlink() or resolv.exists():
            resolv.unlink()
        resolv.write_text("# no name servers in the awide system test\n")
        ssh_dir = root / "root" / ".ssh"
        ssh_dir.mkdir(mode=0o700, exist_ok=True)
        (ssh_dir / "authorized_keys").write_text(Path(str(key) + ".pub").read_text())
        (ssh_dir / "authorized_keys").chmod(0o600)
    return root


# --- network namespaces on a bridge ---------------------------------------------------------

def _free_subnet() -> ipaddress.IPv4Network:
    used = _ip("-4", "-o", "addr").stdout + _ip("-4", "route").stdout
    nets = [ipaddress.ip_network(m, strict=False)
            for m in re.findall(r"(\d+\.\d+\.\d+\.\d+/\d+)", used)]
    for third in range(200, 255):
        cand = ipaddress.IPv4Network(f"10.251.{third}.0/24")
        if not any(cand.overlaps(n) for n in nets):
            return cand
    raise AssertionError("no free /24 under 10.251.200.0-10.251.254.0")


def _labs_here() -> dict[str, tuple[list[str], list[str]]]:
    """The namespaces and links of every lab on this machine (running or left over), by tag."""
    found: dict[str, tuple[list[str], list[str]]] = {}
    for line in _ip("netns", "list").stdout.splitlines():
        if (m := LAB_NS.fullmatch(line.split(" ", 1)[0])):
            found.setdefault(m.group(1), ([], []))[0].append(m.group(0))
    for line in _ip("-o", "link").stdout.splitlines():
        name = line.split(":", 2)[1].strip().split("@", 1)[0] if line.count(":") >= 2 else ""
        if (m := LAB_LINK.fullmatch(name)):
            found.setdefault(m.group(1), ([], []))[1].append(m.group(0))
    return found


def _kill_in(namespaces: list[str]) -> None:
    """SIGKILL every process in these network namespaces (the containers: killing a
    container's init ends its nspawn) and any systemd-nspawn started on them."""
    paths = {f"--network-namespace-path=/run/netns/{ns}" for ns in namespaces}
    pids = [pid for ns in namespaces
            for pid in _ip("netns", "pids", ns, check=False).stdout.split()]
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and paths & set((proc / "cmdline").read_bytes()
                                                   .decode(errors="replace").split("\0")):
                pids.append(proc.name)
        except OSError:
            pass
    for pid in pids:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass


def _remove_network(tag: str, bound: float = 20.0) -> list[str]:
    """Kill what is left in lab ``tag``'s namespaces, then delete them, its veths and its
    bridge, again until none is listed or ``bound`` seconds passed: a namespace whose last
    processes are still exiting can refuse its deletion for a moment. What ``ip`` said of each
    deletion it refused in the last round (empty: the lab's network is gone)."""
    deadline = time.monotonic() + bound
    while True:
        namespaces, links = _labs_here().get(tag, ([], []))
        if not namespaces and not links:
            return []
        _kill_in(namespaces)
        refused = [f"ip netns delete {ns}: {r.stderr.strip()}" for ns in namespaces
                   if (r := _ip("netns", "delete", ns, check=False)).returncode != 0]
        for link in sorted(links, key=lambda n: n.endswith("br")):   # veths, then bridge
            if (r := _ip("link", "delete", link, check=False)).returncode != 0:
                refused.append(f"ip link delete {link}: {r.stderr.strip()}")
        if tag not in _labs_here():
            return []
        if time.monotonic() >= deadline:
            return refused
        time.sleep(0.5)                 # not a wait for a condition: the next round's pace


def _clear_leftovers() -> list[str]:
    """Remove the labs of earlier runs that died without their teardown (killed, or stopped
    hard): their containers, namespaces, veths and bridge. A lab whose run is alive holds its
    lock and is left alone."""
    LABS.mkdir(parents=True, exist_ok=True)
    cleared = []
    for tag in sorted(_labs_here()):
        with open(LABS / f"{tag}.lock", "a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue                             # a run in progress
            _remove_network(tag)
            shutil.rmtree(LABS / tag, ignore_errors=True)
            (LABS / f"{tag}.lock").unlink(missing_ok=True)
        cleared.append(tag)
    if cleared:
        print(f"[systest] removed labs left over by earlier runs: {' '.join(cleared)}", flush=True)
    left = sorted(set(_labs_here()) & set(cleared))
    assert not left, f"leftovers of earlier runs could not be removed: {left}"
    return cleared


@dataclass
class Lab:
    tag: str
    subnet: ipaddress.IPv4Network
    root: Path
    logs: Path
    cards: Path                              # the card directories, one per storage host
    bridge: str = ""
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    refused: list[str] = field(default_factory=list)     # what ip said of a refused deletion

    def ns(self, host: str) -> str:
        return f"{self.tag}-{host}"

    def addr(self, host: str) -> str:
        return str(self.subnet.network_address + 11 + LAB_HOSTS.index(host))

    @property
    def control_dir(self) -> Path:
        """The SSH control sockets, ansible's and the test's own (short path: a socket path
        has ~100 bytes)."""
        return LABS / self.tag

    def mux(self, host: str) -> list[str]:
        """ssh options for the test's own commands on host: one connection (a master kept
        for the lab's life), each command a new session on it rather than a new handshake."""
        return ["-o", "ControlMaster=auto", "-o", f"ControlPath={self.control_dir}/t-{host}",
                "-o", "ControlPersist=1800"]

    def up(self) -> None:
        self.bridge = f"{self.tag}br"
        gw = self.subnet.network_address + 1
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{gw}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for i, host in enumerate(LAB_HOSTS):
            ns, veth = self.ns(host), f"{self.tag}v{i}"
            _ip("netns", "add", ns)
            _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip("link", "set", veth, "master", self.bridge, "up")
            _ip("-n", ns, "addr", "add", f"{self.addr(host)}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")

    def card_dir(self, host: str) -> Path:
        """The directory behind a storage host's card (CARD_PATHS), on this machine."""
        return self.cards / Path(CARD_PATHS[host]).name

    def binds(self, host: str) -> list[str]:
        """nspawn's bind mounts of the card directories: a storage host gets its own, the GPU
        host every storage host's (at the same paths), a witness none."""
        seen = STORAGE if host == GPU else (host,) if host in STORAGE else ()
        return [f"--bind={self.card_dir(h)}:{CARD_PATHS[h]}" for h in seen]

    def boot(self, host: str) -> None:
        log = open(self.logs / f"{host}.console.log", "w")
        self.procs[host] = subprocess.Popen(
            ["systemd-nspawn", "-D", str(self.root), "-M", host, "--volatile=overlay",
             "--register=no", "--keep-unit", f"--network-namespace-path=/run/netns/{self.ns(host)}",
             "--resolv-conf=off", "--console=read-only", *self.binds(host), "-b"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True)
        log.close()

    def power_off(self, host: str) -> None:
        """Power one container off (SIGTERM to its nspawn halts its systemd) and wait until
        it is gone: a failed host."""
        proc = self.procs[host]
        _run(["ssh", "-S", f"{self.control_dir}/t-{host}", "-O", "exit", "lab"], timeout=10,
             check=False)                     # the test's connection to it: none to hang on
        proc.terminate()
        proc.wait(timeout=60)

    def down(self) -> None:
        """Power the containers off (SIGTERM to nspawn halts the container's systemd), kill
        what is left in our namespaces by pid, then remove namespaces, veths and bridge."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + 20
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        self.refused = _remove_network(self.tag)
        for sock in self.control_dir.glob("*"):   # the SSH masters (ControlPersist)
            _run(["ssh", "-S", str(sock), "-O", "exit", "lab"], timeout=10, check=False)
        shutil.rmtree(self.control_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Lab, Timings]]:
    why = _why_not()
    if why:
        pytest.skip(why)
    t = Timings()
    _clear_leftovers()                       # first: their containers use the root filesystem
    root = rootfs()
    t.lap("root filesystem (debootstrap, or cached)")
    logs = tmp_path_factory.mktemp("systest-logs")
    tag = next(cand for cand in ("aws" + secrets.token_hex(2) for _ in range(100))
               if cand not in _labs_here() and not (LABS / f"{cand}.lock").exists())
    cards = tmp_path_factory.mktemp("systest-cards")
    # nspawn's --bind= takes "source:destination" with backslash escapes
    assert not set(str(cards)) & {":", "\\"}, f"{cards}: no ':' or '\\' in a bind mount's path"
    lab = Lab(tag=tag, subnet=_free_subnet(), root=root, logs=logs, cards=cards)
    for host in STORAGE:                     # owned by root here; site.yml gives each its owner
        lab.card_dir(host).mkdir()
    lock = open(LABS / f"{tag}.lock", "w")   # held while the lab lives (see _clear_leftovers)
    fcntl.flock(lock, fcntl.LOCK_EX)
    print(f"[systest] lab {lab.tag} on {lab.subnet}, logs in {logs}", flush=True)
    try:
        lab.control_dir.mkdir(mode=0o700)
        lab.up()
        # the spare only when the membership test runs
        booted = LAB_HOSTS if _long_why_not() is None else (*HOSTS, GPU)
        for host in booted:
            lab.boot(host)
        for host in booted:
            _wait(f"sshd of {host}", lambda h=host: _port_open(lab.addr(h), 22), timeout=90)
            _wait(f"ssh into {host}", lambda h=host: _ssh(lab, h, "true", check=False)
                  .returncode == 0, timeout=60)
        t.lap(f"bridge, namespaces, {len(booted)} containers booted, sshd answering")
        yield lab, t
    finally:
        t.lap("(until teardown)")
        try:
            print(f"[systest] CPU (own+reaped): {_cpu_report(lab)}", flush=True)
        except (OSError, AssertionError, subprocess.SubprocessError) as e:
            print(f"[systest] CPU report failed: {e}", flush=True)
        def journal(host: str) -> None:      # for the post-mortem: each host's journal
            try:
                r = _ssh(lab, host, "journalctl", "-b", "--no-pager", "-o", "short-precise",
                         check=False, timeout=20)
                (logs / f"{host}.journal").write_text(r.stdout + r.stderr)
            except (subprocess.TimeoutExpired, OSError):
                pass
        with ThreadPoolExecutor(len(LAB_HOSTS)) as pool:     # all hosts at once
            list(pool.map(journal, list(lab.procs)))
        try:
            lab.down()
        finally:
            (LABS / f"{lab.tag}.lock").unlink(missing_ok=True)
            lock.close()
        t.lap("teardown")
        print("[systest] timings: " + ", ".join(f"{n} {s:.1f}s" for n, s in t.phases),
              flush=True)
        assert lab.tag not in _labs_here(), \
            f"left behind: {_labs_here()[lab.tag]}; ip said: {lab.refused}"


def _cpu_of(pid: str) -> tuple[str, float, float] | None:
    """(name, CPU seconds of the process, of its children it reaped), from /proc."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    name, rest = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
    tick = os.sysconf("SC_CLK_TCK")
    return name, (int(rest[11]) + int(rest[12])) / tick, (int(rest[13]) + int(rest[14])) / tick


def _cpu_report(lab: Lab) -> str:
    """Where the containers' CPU went: per host, each long-lived program's own CPU seconds,
    and what the processes each one reaped used (sshd: the commands ansible ran there; systemd:
    the units and helpers that ended); then the SSH masters on this side."""
    lines = []
    for host in lab.procs:
        by: dict[str, list[float]] = {}
        for pid in _ip("netns", "pids", lab.ns(host), check=False).stdout.split():
            if (got := _cpu_of(pid)) is not None:
                own, reaped = by.setdefault(got[0], [0.0, 0.0]), got[1:]
                own[0], own[1] = own[0] + reaped[0], own[1] + reaped[1]
        total = sum(a + b for a, b in by.values())
        top = sorted(by.items(), key=lambda kv: -sum(kv[1]))[:6]
        lines.append(f"{host} {total:.1f} s: " + ", ".join(
            f"{name} {own:.1f}+{reaped:.1f}" for name, (own, reaped) in top))
    masters = 0.0
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and str(lab.control_dir).encode() in \
                    (proc / "cmdline").read_bytes() and (got := _cpu_of(proc.name)):
                masters += got[1] + got[2]
        except OSError:
            pass
    lines.append(f"SSH masters {masters:.1f} s")
    return "; ".join(lines)


def _port_open(addr: str, port: int) -> bool:
    try:
        with socket.create_connection((addr, port), timeout=0.5):
            return True
    except OSError:
        return False


SSH_OPTS = ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
            "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=5", "-o", "BatchMode=yes"]


def _ssh(lab: Lab, host: str, *argv: str, check: bool = True,
         timeout: float = 60) -> subprocess.CompletedProcess:
    """Run argv on host (joined with shlex for the remote shell)."""
    return _run(["ssh", *SSH_OPTS, *lab.mux(host), "-i", str(CACHE / "ssh" / "id_ed25519"),
                 f"root@{lab.addr(host)}", shlex.join(argv)], timeout=timeout, check=check)


def _unit(lab: Lab, host: str, unit: str) -> dict[str, str]:
    out = _ssh(lab, host, "systemctl", "show", unit, "-p",
               "ActiveState,SubState,Type,NRestarts,MainPID,Result").stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def _status(lab: Lab, host: str) -> tuple[int, dict | None]:
    r = _ssh(lab, host, "awide-cluster", "status", "--config", "/etc/awide-cluster/cluster.yaml",
             "--format", "json", check=False)
    try:
        return r.returncode, json.loads(r.stdout)
    except ValueError:
        return r.returncode, None


def _healthy(lab: Lab, host: str, timeout: float = 60) -> dict:
    def ok():
        rc, doc = _status(lab, host)
        return doc if rc == 0 and doc and doc["healthy"] else None
    return _wait(f"status healthy from {host}", ok, timeout=timeout, every=1)


# --- wheels --------------------------------------------------------------------------------

def _source_copy(dest: Path, version: str | None, broken: bool = False) -> Path:
    """The repository's files (tracked and new, not ignored) copied to dest, optionally with
    another version number."""
    files = _run(["git", "ls-files", "-co", "--exclude-standard", "-z"], timeout=60,
                 cwd=ROOT).stdout.split("\0")
    for rel in filter(None, files):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    if version:
        for rel, pattern, repl in (("pyproject.toml", r'(?m)^version = "[^"]+"',
                                    f'version = "{version}"'),
                                   ("awide_cluster/__init__.py", r'__version__ = "[^"]+"',
                                    f'__version__ = "{version}"')):
            text = (dest / rel).read_text()
            new = re.sub(pattern, repl, text, count=1)
            assert new != text, f"no version in {rel}"
            (dest / rel).write_text(new)
    if broken:                                 # a build whose every command fails at import
        with open(dest / "awide_cluster" / "__init__.py", "a") as f:
            f.write('\nraise RuntimeError("a broken build, made by the system test")\n')
    return dest


def dependency_wheels() -> Path:
    """The wheels of this project's dependencies, from the package index once per list and
    cached in AWIDE_SYSTEST_CACHE (deps-<hash>), keyed by pyproject's dependencies and this
    Python's version and platform: a changed list is resolved anew, and the cache of an older
    list removed. Every build of the test runs offline from them (_offline_pip)."""
    import sysconfig
    import tomllib
    with open(ROOT / "pyproject.toml", "rb") as f:
        deps = tomllib.load(f)["project"]["dependencies"]
    recipe = json.dumps({"dependencies": deps, "python": list(sys.version_info[:2]),
                         "platform": sysconfig.get_platform(), "v": 1}, sort_keys=True)
    root = CACHE / f"deps-{hashlib.sha256(recipe.encode()).hexdigest()[:12]}"
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / ".awide-systest-ready").exists():
            for old in CACHE.glob("deps-*"):          # other lists, or a half-made one
                if old != root:
                    shutil.rmtree(old, ignore_errors=True)
            tmp = root.with_name(root.name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            _run([sys.executable, "-m", "pip", "wheel", "-q", "--wheel-dir", str(tmp), *deps],
                 timeout=600)
            (tmp / ".awide-systest-ready").write_text(recipe + "\n")
            tmp.rename(root)
    return root


def _offline_pip(deps: Path) -> dict[str, str]:
    """pip's environment for a build of this tree offline: the dependencies from deps (never
    the package index), built with this venv's setuptools (pyproject's build requirement, in
    the test extra) rather than in a fresh environment per build."""
    return {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(deps), "PIP_NO_BUILD_ISOLATION": "0"}


def _wheelhouse(tmp: Path, name: str, version: str | None, deps: Path,
                broken: bool = False) -> Path:
    """A wheelhouse as upgrade.yml takes it: the wheel of this tree (optionally with another
    version, or broken), built offline, and every dependency's wheel."""
    src = _source_copy(tmp / f"src-{name}", version, broken)
    out = tmp / f"wheels-{name}"
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--wheel-dir", str(out),
          str(src)], timeout=600, env={**os.environ, **_offline_pip(deps)})
    for whl in deps.glob("*.whl"):
        shutil.copy2(whl, out / whl.name)
    return out


# --- ansible -------------------------------------------------------------------------------

def _inventory(lab: Lab, tmp: Path, source: Path, witness: tuple[str, ...] = ("h3",),
               name: str = "inventory.yml") -> Path:
    """The lab's inventory: h1 and h2 storage hosts with one dir card each (at CARD_PATHS, the
    directories bind-mounted into them and into the GPU host), the witness hosts given (the CA,
    certificates and etcd passwords kept in tmp, shared by every inventory)."""
    import yaml
    members = (*STORAGE, *witness)
    hosts: dict[str, dict[str, object]] = {h: {"ansible_host": lab.addr(h)} for h in members}
    for h in STORAGE:
        hosts[h]["awide_cards"] = [{"name": "dev0", "kind": "dir", "path": CARD_PATHS[h]}]
    inv = {"all": {
        "vars": {"awide_cluster_name": CLUSTER, "ansible_user": "root",
                 "ansible_ssh_private_key_file": str(CACHE / "ssh" / "id_ed25519"),
                 "ansible_ssh_common_args": " ".join(SSH_OPTS),
                 "ansible_python_interpreter": "/usr/bin/python3",
                 "awide_source": str(source), "awide_health_retries": 45,
                 # the CA, the certificates and the generated etcd passwords: the test's own
                 "awide_tls_pki_dir": str(tmp / "pki"), "awide_secrets_dir": str(tmp / "secrets"),
                 "awide_gateways": [{"id": GATEWAY, "namespace": "ns1"}]},
        "children": {"storage": {"hosts": {h: hosts[h] for h in STORAGE}},
                     "witness": {"hosts": {h: hosts[h] for h in witness}}}}}
    # the GPU host: the gateway role (its own etcd user; nvme-cli is not in the root filesystem
    # and never needed: the cards are the storage hosts' directories, bind-mounted into it)
    children = inv["all"]["children"]
    assert isinstance(children, dict)
    children["gateways"] = {"hosts": {GPU: {
        "ansible_host": lab.addr(GPU), "gateway_hostnqn": f"nqn.2024-01.io.awide:{GPU}",
        "gateway_model": GATEWAY_MODEL, "gateway_packages": ["python3-venv"]}}}
    path = tmp / name
    path.write_text(yaml.safe_dump(inv, sort_keys=False))
    return path


def _playbook(lab: Lab, inventory: Path, playbook: str, name: str,
              *extra: str, expect_ok: bool = True,
              pip: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``pip``: pip's environment for the controller's wheel build (_offline_pip)."""
    env = dict(os.environ)
    env.update(pip or {})
    env.update({"PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}", "ANSIBLE_NOCOLOR": "1",
                "ANSIBLE_PIPELINING": "1", "ANSIBLE_HOST_KEY_CHECKING": "0",
                "ANSIBLE_FORKS": "5",
                # this lab's SSH masters: none of an earlier lab's (same addresses) is reused
                "ANSIBLE_SSH_CONTROL_PATH_DIR": str(lab.control_dir),
                # ansible's default less -C: compressing a virtual link only costs CPU; a
                # master kept between the playbooks of the run
                "ANSIBLE_SSH_ARGS": "-o ControlMaster=auto -o ControlPersist=1800s",
                # timestamped copy of the output: where a slow or failed run spent its time
                "ANSIBLE_LOG_PATH": str(lab.logs / f"{name}.ansible.log"),
                # the controller's scratch files (wheel archive) stay in the test's logs dir
                # even when a run fails before its clean-up
                "TMPDIR": str(_mkdir(lab.logs / "controller-tmp"))})
    # the main process polls its workers every ms by default: on 2 cores busy with the
    # workers and the hosts, 5 ms (ansible's setting for unattended runs; an ini key only)
    cfg = lab.logs / "ansible.cfg"
    cfg.write_text("[defaults]\ninternal_poll_interval = 0.005\n")
    env["ANSIBLE_CONFIG"] = str(cfg)
    log = lab.logs / f"{name}.log"
    started, cpu, own = time.monotonic(), _machine_cpu(), _own_cpu()
    with open(log, "w") as out:
        r = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(inventory), playbook, *extra],
                           cwd=ANSIBLE, stdout=out, stderr=subprocess.STDOUT, text=True,
                           timeout=PLAYBOOK_TIMEOUT, env=env)
    print(f"[systest] {playbook} ({name}): {time.monotonic() - started:.1f} s, machine CPU "
          f"{_machine_cpu() - cpu:.1f} s, controller {_own_cpu() - own:.1f} s", flush=True)
    r.stdout = log.read_text()
    r.stderr = ""
    if not expect_ok:
        assert r.returncode != 0, f"{playbook} should have failed:\n{r.stdout[-6000:]}"
        return r
    assert r.returncode == 0, (f"{playbook} exited {r.returncode}:\n{r.stdout[-6000:]}\n"
                               f"{r.stderr[-3000:]}")
    return r


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def _recap(stdout: str) -> dict[str, dict[str, int]]:
    recap: dict[str, dict[str, int]] = {}
    for m in re.finditer(r"^(\S+)\s+: ((?:\w+=\d+\s*)+)$", stdout, re.M):
        recap[m.group(1)] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m.group(2))}
    return recap


def _task_hosts(stdout: str, task: str) -> list[str]:
    """Hosts in the order their result of task was printed (all occurrences of the task)."""
    order: list[str] = []
    for block in stdout.split("\nTASK [")[1:]:
        if block.split("]", 1)[0].endswith(task):
            order += re.findall(r"^(?:ok|changed): \[([^\]]+)\]", block, re.M)
    return order


# --- the tests -----------------------------------------------------------------------------

def _fake_lab(tag: str) -> subprocess.Popen:
    """The network part of a lab (namespace, veth, bridge) with a process inside, as a run
    killed before its teardown leaves it."""
    _ip("netns", "add", f"{tag}-h1")
    _ip("netns", "add", f"{tag}-g1")                 # a host named other than h<n>
    _ip("link", "add", f"{tag}br", "type", "bridge")
    _ip("link", "add", f"{tag}v0", "type", "veth", "peer", "name", "eth0", "netns", f"{tag}-h1")
    _ip("link", "set", f"{tag}v0", "master", f"{tag}br", "up")
    return subprocess.Popen(["ip", "netns", "exec", f"{tag}-h1", "sleep", "600"],
                            stdin=subprocess.DEVNULL, start_new_session=True)


def test_labs_left_by_a_killed_run_are_removed_live_ones_kept() -> None:
    why = _why_not()
    if why:
        pytest.skip(why)
    LABS.mkdir(parents=True, exist_ok=True)
    dead, live = "aws0dea", "aws011e"
    procs = {}
    lock = open(LABS / f"{live}.lock", "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        procs = {tag: _fake_lab(tag) for tag in (dead, live)}
        assert {dead, live} <= set(_labs_here())
        assert dead in _clear_leftovers()
        assert procs[dead].wait(timeout=10) == -signal.SIGKILL
        labs = _labs_here()
        assert dead not in labs
        assert (sorted(labs[live][0]), sorted(labs[live][1])) == \
            ([f"{live}-g1", f"{live}-h1"], [f"{live}br", f"{live}v0"])
        assert procs[live].poll() is None
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait(timeout=10)
        # as a lab's teardown: deleted again until none of it is listed (a veth whose peer's
        # namespace was deleted goes with it only once the kernel has freed that namespace)
        refused = [r for tag in (dead, live) for r in _remove_network(tag)]
        (LABS / f"{live}.lock").unlink(missing_ok=True)
        lock.close()
    assert not refused and not {dead, live} & set(_labs_here()), refused


@dataclass
class Rollout:
    """The cluster this module's tests share: its controller-side files (a copy of this tree
    the wheels are built from, the CA, the etcd passwords, the inventory) and its state."""
    dir: Path
    source: Path
    inventory: Path
    rolled_out: bool = False                 # site.yml has run
    wheels: Path | None = None               # the wheelhouse installed last (None: the source)

    def wheel_args(self) -> tuple[str, ...]:
        return ("-e", f"awide_wheelhouse={self.wheels}") if self.wheels else ()


@pytest.fixture(scope="module")
def rollout(lab, tmp_path_factory: pytest.TempPathFactory) -> Rollout:
    lab_, _ = lab
    tmp = tmp_path_factory.mktemp("cluster")
    source = _source_copy(tmp / "src-current", None)
    return Rollout(dir=tmp, source=source, inventory=_inventory(lab_, tmp, source))


def test_rollout_upgrade_and_restart_under_systemd(lab, rollout: Rollout, tmp_path: Path) -> None:
    lab, t = lab
    deps = dependency_wheels()
    pip = _offline_pip(deps)                 # every build offline, site.yml's own too
    t.lap("dependency wheels (from the index, or cached)")
    inventory = rollout.inventory
    # upgrade.yml's wheelhouses (a new version, a broken one) are built while site.yml runs
    with ThreadPoolExecutor(2) as builds:
        new_f = builds.submit(_wheelhouse, tmp_path, "new", NEW_VERSION, deps)
        broken_f = builds.submit(_wheelhouse, tmp_path, "broken", BROKEN_VERSION, deps, True)
        # site.yml: etcd quorum, daemons, config, units; the wheels built by the playbook from
        # a copy of this tree (awide_source)
        _playbook(lab, inventory, "site.yml", "site", pip=pip)
        rollout.rolled_out = True
        wheels_new, wheels_broken = new_f.result(), broken_f.result()
    t.lap("site.yml (and the wheelhouses of a new and a broken version)")
    for host in HOSTS:
        etcd = _unit(lab, host, "awide-etcd.service")
        daemon = _unit(lab, host, "awide-cluster.service")
        assert (etcd["ActiveState"], etcd["SubState"]) == ("active", "running"), (host, etcd)
        assert daemon["Type"] == "notify", daemon
        assert (daemon["ActiveState"], daemon["SubState"]) == ("active", "running"), (host, daemon)
        assert _ssh(lab, host, "systemctl", "is-enabled", "etcd.service",
                    check=False).stdout.strip() == "masked"
        journal = _ssh(lab, host, "journalctl", "-u", "awide-etcd.service", "-o", "cat",
                       "--no-pager").stdout
        used = [line for line in journal.splitlines()
                if "ETCD_EXPERIMENTAL_WATCH_PROGRESS_NOTIFY_INTERVAL" in line]
        # the role's default interval (awide_etcd_progress_notify), the one cluster.yaml says
        assert used and used[-1].endswith("_INTERVAL=1400ms") and \
            "recognized and used" in used[-1], journal[-3000:]
        cfg = yaml.safe_load(_ssh(lab, host, "cat", "/etc/awide-cluster/cluster.yaml").stdout)
        assert cfg["timing"]["etcd_progress_notify"] == 1.4, cfg.get("timing")
        assert "unrecognized environment variable" not in journal
    members = _members(lab, "h1")
    assert sorted(m["name"] for m in members) == list(HOSTS)
    assert all(u.startswith("https://") for m in members for u in m["peerURLs"]), members
    _ssh(lab, "h1", *ETCDCTL, "--endpoints=" + ",".join(f"https://{lab.addr(h)}:2379"
                                                        for h in HOSTS), "endpoint", "health")
    _secured(lab, rollout.dir)
    t.lap("TLS and etcd users (plain http refused, a gateway's registry write refused)")
    doc = _healthy(lab, "h3")
    assert doc["etcd"]["quorum"] == "ok" and doc["etcd"]["up"] == 3, doc["etcd"]
    assert sorted(h["host"] for h in doc["hosts"]) == list(HOSTS)
    assert sorted((c["host"], c["name"], c["kind"], c["state"]) for c in doc["cards"]) == \
        [(h, "dev0", "dir", "in") for h in STORAGE]
    assert not doc["dev_cluster"]
    t.lap("checks after site.yml (etcd, units, status)")
    _gateway_serves(lab)
    t.lap(f"the gateway of {GPU} (gateway role) serves the cluster's cards")

    # a second run changes nothing
    again = _playbook(lab, inventory, "site.yml", "site-again", pip=pip)
    recap = _recap(again.stdout)
    assert {h: recap[h]["changed"] for h in HOSTS} == {h: 0 for h in HOSTS}, again.stdout[-4000:]
    assert all(recap[h]["failed"] == 0 for h in HOSTS)
    assert (recap[GPU]["changed"], recap[GPU]["failed"]) == (0, 0), again.stdout[-4000:]
    t.lap("site.yml again (no change)")

    # new certificates from the same CA, one member at a time, no restart: still serving
    served = {h: _served_cert(lab, h) for h in HOSTS}
    restarts = {h: _unit(lab, h, "awide-etcd.service")["MainPID"] for h in HOSTS}
    rotated = _playbook(lab, inventory, "rotate-certs.yml", "rotate-certs")
    assert _task_hosts(rotated.stdout, "Install the cluster CA and this host's certificate") \
        == list(HOSTS)
    for h in HOSTS:
        assert _served_cert(lab, h) != served[h], h
        assert _unit(lab, h, "awide-etcd.service")["MainPID"] == restarts[h], h
    rot = _healthy(lab, "h2")
    assert rot["etcd"]["quorum"] == "ok" and rot["etcd"]["up"] == 3, rot["etcd"]
    t.lap("rotate-certs.yml (new certificates, no restart, healthy)")

    # rolling upgrade to a new version, the leader last
    up = _playbook(lab, inventory, "upgrade.yml", "upgrade", "-e",
                   f"awide_wheelhouse={wheels_new}")
    rollout.wheels = wheels_new
    leader = _planned_leader(up.stdout)
    order = _task_hosts(up.stdout, "Install awide-cluster into the venv")
    assert order == sorted(set(HOSTS) - {leader}) + [leader], (order, leader)
    after = _healthy(lab, "h1")
    assert {h["host"]: h["version"] for h in after["hosts"]} == {h: NEW_VERSION for h in HOSTS}
    assert [c["state"] for c in after["cards"]] == ["in", "in"]
    # the gateway half: after every storage host, its batch agreeing in status
    assert _task_hosts(up.stdout, "Install awide-cluster into the gateway's venv") == [GPU]
    agreed = [b for b in up.stdout.split("\nTASK [")[1:] if b.split("]", 1)[0].endswith(
        "Wait until the batch's gateways agree in status, on the new version")]
    assert len(agreed) == 1 and f"ok: [{GPU} -> " in agreed[0], agreed   # run on a storage host
    assert up.stdout.index("Upgrade the gateway hosts in batches") > \
        up.stdout.index("Upgrade the leader last")
    _gateway_serves(lab, version=NEW_VERSION)
    t.lap(f"upgrade.yml to {NEW_VERSION} (order {' '.join(order)}, then {GPU}'s gateway)")

    # SIGKILL the leader's daemon: systemd restarts it, the cluster heals
    leader = after["leader"]["host"]
    before = _unit(lab, leader, "awide-cluster.service")
    killed_at = time.monotonic()
    # --kill-who=main: in these containers systemd cannot signal a unit's whole cgroup
    # ("Failed to send signal SIGKILL to auxiliary processes: Input/output error")
    _ssh(lab, leader, "systemctl", "kill", "--kill-who=main", "-s", "SIGKILL",
         "awide-cluster.service")

    def restarted():
        now = _unit(lab, leader, "awide-cluster.service")
        return now if (int(now["NRestarts"]) > int(before["NRestarts"])
                       and now["ActiveState"] == "active" and now["MainPID"] != before["MainPID"]
                       and now["MainPID"] != "0") else None
    now = _wait("the killed daemon restarted by systemd", restarted, timeout=60)
    restart_s = time.monotonic() - killed_at
    final = _healthy(lab, "h2", timeout=90)
    assert final["leader"] is not None
    assert [c["state"] for c in final["cards"]] == ["in", "in"]
    print(f"[systest] SIGKILL of {leader}'s daemon: active again (pid {before['MainPID']} -> "
          f"{now['MainPID']}) after {restart_s:.1f} s, leader now {final['leader']['host']}",
          flush=True)
    t.lap("SIGKILL -> restarted by systemd -> healthy")

    # upgrade.yml refuses an unhealthy cluster and changes nothing
    _ssh(lab, "h1", "systemctl", "stop", "awide-cluster.service")
    _wait("status unhealthy with h1's daemon stopped",
          lambda: _status(lab, "h2")[0] == 1, timeout=60, every=1)
    refused = _playbook(lab, inventory, "upgrade.yml", "upgrade-refused", "-e",
                        f"awide_wheelhouse={wheels_broken}", expect_ok=False)
    assert "the cluster is not healthy" in refused.stdout
    assert {h: _installed(lab, h) for h in HOSTS} == {h: NEW_VERSION for h in HOSTS}
    _ssh(lab, "h1", "systemctl", "start", "awide-cluster.service")
    _healthy(lab, "h2", timeout=90)
    t.lap("upgrade.yml refused on an unhealthy cluster")

    # a build that cannot start stops the rolling upgrade at its first host
    broken = _playbook(lab, inventory, "upgrade.yml", "upgrade-broken", "-e",
                       f"awide_wheelhouse={wheels_broken}", "-e", "awide_health_retries=5",
                       expect_ok=False)
    tried = _task_hosts(broken.stdout, "Install awide-cluster into the venv")
    assert len(tried) == 1 and tried[0] != _planned_leader(broken.stdout), tried
    first = tried[0]
    versions = {h: _installed(lab, h) for h in HOSTS}
    assert versions == {h: BROKEN_VERSION if h == first else NEW_VERSION for h in HOSTS}, \
        (versions, broken.stdout[-4000:])
    t.lap(f"upgrade.yml with a broken build stopped after {first}")

    # site.yml with the good wheels repairs it: limited to that host, as docs/deploy.md tells
    # an operator to repair one host
    repair = _playbook(lab, inventory, "site.yml", "site-repair", "--limit", first, "-e",
                       f"awide_wheelhouse={wheels_new}")
    assert set(_recap(repair.stdout)) == {first}, repair.stdout[-4000:]
    repaired = _healthy(lab, "h3", timeout=90)
    assert {h["host"]: h["version"] for h in repaired["hosts"]} == {h: NEW_VERSION for h in HOSTS}
    t.lap("site.yml repaired the broken host")


@pytest.mark.skipif(_long_why_not() is not None, reason=str(_long_why_not()))
def test_membership_changes_backup_and_restore(lab, rollout: Rollout) -> None:
    """On the rolled-out cluster (site.yml first when run alone): a 4th host joins with
    add-host.yml and leaves with remove-host.yml, a backup taken now with backup.yml is
    restored with restore.yml; after each, status is healthy with the expected etcd members,
    every card in service in the slot it had; after the restore the registry's generation
    is not older, no daemon restarted and status notes that each followed a new etcd history."""
    lab, t = lab
    if not rollout.rolled_out:                       # run alone: the cluster first
        # built once here rather than by each playbook (as after the upgrade test)
        rollout.wheels = _wheelhouse(rollout.dir, "current", None, dependency_wheels())
        _playbook(lab, rollout.inventory, "site.yml", "site", *rollout.wheel_args())
        rollout.rolled_out = True
        t.lap("wheelhouse and site.yml (the membership test run alone)")
    started = time.monotonic()
    wheels = rollout.wheel_args()                    # what the others run (upgraded or not)
    slots = _slots(_healthy(lab, "h1", timeout=90))
    assert sorted(slots) == [(h, "dev0") for h in STORAGE] and None not in slots.values(), slots

    # a 4th host (a witness) joins: a learner, promoted; every daemon told; its daemon started
    with_spare = _inventory(lab, rollout.dir, rollout.source, witness=("h3", SPARE),
                            name="inventory-spare.yml")
    _playbook(lab, with_spare, "add-host.yml", "add-host", "-e", f"awide_new_host={SPARE}",
              *wheels)
    members = _members(lab, "h1")
    assert sorted(m["name"] for m in members) == [*HOSTS, SPARE], members
    assert not any(m.get("isLearner") for m in members), members
    _serving(lab, "h1", (*HOSTS, SPARE), slots)
    t.lap(f"add-host.yml ({SPARE} joined, 4 voting members, healthy)")

    # it leaves again: its member removed, its units stopped, every daemon told
    _playbook(lab, with_spare, "remove-host.yml", "remove-host", "-e",
              f"awide_remove_host={SPARE}")
    assert sorted(m["name"] for m in _members(lab, "h1")) == list(HOSTS)
    for unit in ("awide-etcd.service", "awide-cluster.service"):
        assert _unit(lab, SPARE, unit)["ActiveState"] == "inactive", unit
    _serving(lab, "h2", HOSTS, slots)
    t.lap(f"remove-host.yml ({SPARE} left, 3 voting members, healthy)")

    # a backup now, restored: the daemons follow the new etcd history without a restart
    after = rollout.inventory
    backups = _mkdir(rollout.dir / "backups")
    _playbook(lab, after, "backup.yml", "backup", "-e", f"awide_backup_fetch_dir={backups}")
    snapshots = sorted(backups.glob("*.db"))
    assert len(snapshots) == 1 and snapshots[0].stat().st_size > 0, snapshots
    generation = _healthy(lab, "h2")["registry"]["generation"]
    pids = {h: _unit(lab, h, "awide-cluster.service")["MainPID"] for h in HOSTS}
    _playbook(lab, after, "restore.yml", "restore", "-e", f"awide_restore_confirm={CLUSTER}",
              "-e", f"awide_restore_snapshot={snapshots[0]}")
    # the snapshot holds the current generation: nothing to republish, none may go back
    restored = _serving(lab, "h1", HOSTS, slots, min_generation=generation)
    assert {h: _unit(lab, h, "awide-cluster.service")["MainPID"] for h in HOSTS} == pids

    def noted():                                     # each daemon's report says it followed
        rc, doc = _status(lab, "h2")
        return rc == 0 and doc is not None and sorted(
            p["subject"] for p in doc["problems"] if p["code"] == "etcd_history_reset") \
            == list(HOSTS)
    _wait("status notes every daemon's etcd_history_reset", noted, timeout=60, every=1)
    t.lap(f"backup.yml and restore.yml (generation {generation} -> "
          f"{restored['registry']['generation']}, no slot moved, no daemon restarted)")

    # replace the witness h3 by the spare: refused while h3's member still answers
    failed, replaced = "h3", ("h1", "h2", SPARE)
    replace = ("-e", f"awide_new_host={SPARE}", "-e", f"awide_remove_host={failed}")
    refused = _playbook(lab, with_spare, "replace-host.yml", "replace-refused", *replace,
                        *wheels, expect_ok=False)
    assert "refused, nothing was changed" in refused.stdout and "still answers" in \
        refused.stdout, refused.stdout[-4000:]
    assert sorted(m["name"] for m in _members(lab, "h1")) == list(HOSTS)
    # h3 fails (powered off): its member is removed first (voters 3 -> 2, both answering),
    # then the spare joins as a learner, is promoted (3 again) and runs its daemon
    lab.power_off(failed)
    _playbook(lab, with_spare, "replace-host.yml", "replace-host", *replace, *wheels)
    members = _members(lab, "h1")
    assert sorted(m["name"] for m in members) == sorted(replaced), members
    assert not any(m.get("isLearner") for m in members), members
    _serving(lab, "h2", replaced, slots)
    t.lap(f"replace-host.yml ({failed} powered off, refused before; {SPARE} in its place, "
          "3 voting members, healthy)")
    print(f"[systest] membership changes, backup and restore: {time.monotonic() - started:.1f} s",
          flush=True)


# etcdctl over TLS as root (its password is in the housekeeping units' env file)
ETCDCTL = ["sh", "-c", "set -a; . /etc/awide-cluster/etcdctl.env; unset ETCDCTL_ENDPOINTS; "
           'exec etcdctl "$@"', "etcdctl"]


def _members(lab: Lab, host: str) -> list[dict]:
    """etcd's member list, asked of host's member."""
    return json.loads(_ssh(lab, host, *ETCDCTL, "--endpoints=https://127.0.0.1:2379",
                           "member", "list", "-w", "json").stdout)["members"]


def _slots(doc: dict) -> dict[tuple[str, str], int | None]:
    return {(c["host"], c["name"]): c["slot"] for c in doc["cards"]}


def _serving(lab: Lab, via: str, hosts: tuple[str, ...], slots: dict,
             min_generation: int | None = None, timeout: float = 120) -> dict:
    """status from via, polled until healthy with exactly these hosts and etcd members (all
    up), the registry read (at a generation or above), every card in service in its slot."""
    last: list[object] = [None]

    def ok():
        rc, doc = _status(lab, via)
        if doc is None:
            last[0] = rc
            return None
        got = {"rc": rc, "healthy": doc["healthy"],
               "hosts": sorted(h["host"] for h in doc["hosts"]),
               "etcd": (doc["etcd"]["up"], doc["etcd"]["total"]),
               "generation": doc["registry"]["generation"],
               "cards": {(c["host"], c["name"]): (c["state"], c["slot"]) for c in doc["cards"]},
               "problems": [p["code"] + " " + p["subject"] for p in doc["problems"]]}
        last[0] = got
        want_gen = got["generation"] is not None and (min_generation is None
                                                      or got["generation"] >= min_generation)
        return doc if (rc == 0 and doc["healthy"] and got["hosts"] == sorted(hosts)
                       and got["etcd"] == (len(hosts), len(hosts)) and want_gen
                       and got["cards"] == {k: ("in", v) for k, v in slots.items()}) else None
    try:
        return _wait(f"status from {via} healthy with {' '.join(hosts)}", ok, timeout, every=1)
    except AssertionError as e:
        raise AssertionError(f"{e}\nlast status: {last[0]}") from None


def _served_cert(lab: Lab, host: str) -> bytes:
    """The certificate (DER) a member's client port serves."""
    import ssl
    pem = ssl.get_server_certificate((lab.addr(host), 2379), timeout=10)
    return ssl.PEM_cert_to_DER_cert(pem)


def _plain_http_fails(addr: str, port: int) -> str:
    """A plain-http request to a TLS port: what went wrong (it must not answer health)."""
    import urllib.error
    import urllib.request
    try:
        with urllib.request.urlopen(f"http://{addr}:{port}/health", timeout=10) as r:
            body = r.read()
    except urllib.error.HTTPError as e:        # Go: 400 "client sent an HTTP request to an
        return f"HTTP {e.code}"                # HTTPS server"
    except OSError as e:
        return type(e).__name__
    raise AssertionError(f"plain http to {addr}:{port} answered: {body[:200]!r}")


def _etcd_json(addr: str, path: str, body: dict, ca: Path, token: str | None = None) -> dict:
    """A call to etcd's JSON gateway over TLS (the gateway library speaks it)."""
    import ssl
    import urllib.error
    import urllib.request
    req = urllib.request.Request(f"https://{addr}:2379{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json",
                                          **({"Authorization": token} if token else {})})
    ctx = ssl.create_default_context(cafile=str(ca))
    try:
        with urllib.request.urlopen(req, timeout=10, context=ctx) as r:
            return json.load(r)
    except urllib.error.HTTPError as e:
        return json.loads(e.read() or b"{}") | {"http_status": e.code}


def _secured(lab: Lab, tmp: Path) -> None:
    """Plain http to a client and a peer port fails; the gateway's own user reads the registry
    and is refused writing it; no credentials read nothing."""
    import base64
    for host in HOSTS:
        for port in (2379, 2380):
            print(f"[systest] plain http to {host}:{port}: "
                  f"{_plain_http_fails(lab.addr(host), port)}", flush=True)
    ca, addr = tmp / "pki" / "ca.crt", lab.addr("h2")
    prefix = f"/awide/{CLUSTER}/"

    def b64(text: str) -> str:
        return base64.b64encode(text.encode()).decode()

    user = f"gateway:{CLUSTER}:{GATEWAY}"
    password = (tmp / "secrets" / user).read_text().strip()
    auth = _etcd_json(addr, "/v3/auth/authenticate", {"name": user, "password": password}, ca)
    assert "token" in auth, auth
    # what it may read (nothing is written to its own keys: the leader reads them)
    own = _etcd_json(addr, "/v3/kv/range", {"key": b64(prefix + "registry")}, ca, auth["token"])
    assert "header" in own and "error" not in own, own
    refused = _etcd_json(addr, "/v3/kv/put", {"key": b64(prefix + "registry"),
                                              "value": b64("{}")}, ca, auth["token"])
    assert "permission denied" in json.dumps(refused), refused
    anonymous = _etcd_json(addr, "/v3/kv/range", {"key": b64(prefix + "registry")}, ca)
    assert "user name is empty" in json.dumps(anonymous) or "http_status" in anonymous, anonymous


def _gateway_serves(lab: Lab, version: str | None = None) -> None:
    """The GPU host's gateway (awide-gateway.service, the gateway role): running, ready
    (/readyz 200), in status at the registry's generation (not stale, on ``version``), and
    serving the cluster's cards: every card in service there, in the slot the registry gives
    it (its metrics on GET /metrics, ``awide_gateway_card_in_service`` 1 for each card, polled
    until so), and its last logged slot table showing each card IN at its directory; its state
    file written. The cards are the storage hosts' directories, bind-mounted into the GPU host
    at their paths (Lab.binds): the gateway finds each directory and checks its label there.
    The service has no block I/O of its own (the library places blocks, the inference server
    reads and writes them): in service on the GPU host is what is checked."""
    unit = _unit(lab, GPU, "awide-gateway.service")
    assert (unit["ActiveState"], unit["SubState"]) == ("active", "running"), unit
    ready = _gateway_get(lab, "/readyz").stdout.strip()
    assert "accepted, key layout verified" in ready, ready

    def recorded():
        rc, now = _status(lab, "h3")
        if not now or rc != 0:
            return None
        gws = [g for g in now["gateways"] if g["id"] == GPU]
        ok = (gws and gws[0]["lag"] == 0 and not gws[0]["stale"] and gws[0]["host"] == GPU
              and (version is None or gws[0]["version"] == version))
        return (now, gws[0]) if ok else None
    now, record = _wait(f"status shows {GPU}'s gateway at the registry's generation", recorded,
                        timeout=60, every=1)
    cards = now["cards"]
    assert sorted(c["host"] for c in cards) == list(STORAGE), cards
    # every card in service in the gateway's own view, in its slot
    want = {c["id"]: (c["host"], str(c["slot"]), 1.0) for c in cards}
    last: list[object] = [None]

    def in_service():
        from prometheus_client.parser import text_string_to_metric_families
        r = _gateway_get(lab, "/metrics", check=False)
        if r.returncode != 0:
            last[0] = r.stderr[-300:]
            return None
        got = {s.labels["card"]: (s.labels["host"], s.labels["slot"], s.value)
               for f in text_string_to_metric_families(r.stdout)
               for s in f.samples if s.name == "awide_gateway_card_in_service"}
        last[0] = got
        return got if got == want else None
    try:
        _wait(f"every card in service on {GPU}'s gateway (its metrics)", in_service,
              timeout=60, every=1)
    except AssertionError as e:
        raise AssertionError(f"{e}\nwanted {want}, last {last[0]}; {GPU}'s last slot table:\n"
                             + "\n".join(_gateway_table(lab))) from None

    # its last logged slot table (one at the start, one after each change of the slots)
    def shown():
        table = _gateway_table(lab)
        return table if all(
            any(line.startswith(f"  slot {c['slot']}: IN ") and c["id"] in line
                and f"device={CARD_PATHS[c['host']]}" in line.split() for line in table)
            for c in cards) else None
    table = _wait(f"{GPU}'s slot table showing every card IN at its directory", shown,
                  timeout=30, every=1)
    assert record["fingerprint"] and record["fingerprint"] in table[0], (record, table[0])
    _ssh(lab, GPU, "test", "-s", f"/var/lib/awide-gateway/{GPU}.state.json")
    print(f"[systest] {GPU}'s gateway: ready ({ready}); slot table:\n" + "\n".join(table),
          flush=True)


def _gateway_get(lab: Lab, path: str, check: bool = True) -> subprocess.CompletedProcess:
    """GET path of the GPU host's gateway (its metrics server on 127.0.0.1:9701), run there."""
    return _ssh(lab, GPU, "python3", "-c", "import sys, urllib.request as u; sys.stdout.write("
                f"u.urlopen('http://127.0.0.1:9701{path}', timeout=5).read().decode())",
                check=check)


def _gateway_table(lab: Lab) -> list[str]:
    """The last slot table the GPU host's gateway logged (its journal)."""
    lines = _ssh(lab, GPU, "journalctl", "-u", "awide-gateway.service", "-o", "cat",
                 "--no-pager").stdout.splitlines()
    heads = [i for i, line in enumerate(lines) if line.startswith("generation ")]
    assert heads, lines[-40:]
    return lines[heads[-1]:heads[-1] + 9]


def _planned_leader(stdout: str) -> str:
    """The leader upgrade.yml found (and so upgrades last), as its plan says."""
    m = re.search(r'"msg": "leader (\S+): upgraded last"', stdout)
    assert m, stdout[-4000:]
    return m.group(1)


def _installed(lab: Lab, host: str) -> str:
    """The awide-cluster version in the host's venv (read from its metadata: a broken build
    cannot run)."""
    return _ssh(lab, host, "/opt/awide-cluster/bin/python", "-c",
                "import importlib.metadata as m; print(m.version('awide-cluster'))").stdout.strip()
