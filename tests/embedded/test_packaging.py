"""The runtime wheel carries only what a storage host or a gateway pod runs.

The cluster harness (``awide_harness``: test PKI, fake NVMe initiator and sysfs, the fake
store service, etcd flags such as ``--unsafe-no-fsync``, the demo) lives in the source tree
only. Built from a copy of the whole tree (so ``[tool.setuptools.packages.find]`` is what
keeps the harness out, not the copy), without network (``--no-build-isolation``: the test
extra brings setuptools).
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RUNTIME = ("awide_cluster", "awide_gateway_cluster")
# what only a test or demo cluster has; none of it may be installed on a host
FORBIDDEN_NAMES = ("awide_harness", "fakes/", "fake_nvme", "certs.py",
                   "store_service", "store_thread", "netns.py", "tests/")
FORBIDDEN_TEXT = (b"unsafe-no-fsync", b"make_test_pki", b"awide-test-ca", b"FakeNvmeWorld")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(
        ".venv*", ".git", "build", "*.egg-info", ".pytest_cache", ".hypothesis",
        "__pycache__", ".ansible"))
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--no-index", "-q", "-w", str(tmp / "out"), str(src)],
        capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    wheels = list((tmp / "out").glob("awide_cluster-*.whl"))
    assert len(wheels) == 1, wheels
    return zipfile.ZipFile(wheels[0])


def test_the_wheel_holds_the_runtime_packages(wheel: zipfile.ZipFile) -> None:
    names = wheel.namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == set(RUNTIME), tops
    # the daemon, the operator CLI and the gateway library are all there
    for must in ("awide_cluster/cli/main.py", "awide_cluster/daemon/service.py",
                 "awide_gateway_cluster/gateway.py"):
        assert must in names, must


def test_the_license_is_an_spdx_expression(wheel: zipfile.ZipFile) -> None:
    """PEP 639: ``license = "Apache-2.0"``, no deprecated table (setuptools' banner at install)."""
    meta = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    text = wheel.read(meta).decode()
    assert "License-Expression: Apache-2.0" in text, text[:1500]


def test_the_wheel_carries_no_harness_part(wheel: zipfile.ZipFile) -> None:
    names = wheel.namelist()
    bad_names = [n for n in names for f in FORBIDDEN_NAMES if f in n]
    assert bad_names == []
    bad_text = [(n, t) for n in names for t in FORBIDDEN_TEXT if t in wheel.read(n)]
    assert bad_text == []
    # the code never names the harness (the README in METADATA does: it explains the demo)
    code = [n for n in names if n.endswith(".py") and b"awide_harness" in wheel.read(n)]
    assert code == []


def _imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


def test_the_runtime_never_imports_the_harness_or_the_tests() -> None:
    files = [p for pkg in RUNTIME for p in sorted((REPO / pkg).rglob("*.py"))]
    assert len(files) > 20
    found = {str(p.relative_to(REPO)): sorted(m for m in _imports(p)
                                              if m.split(".")[0] in ("awide_harness", "tests"))
             for p in files}
    assert {f: m for f, m in found.items() if m} == {}


def test_the_scan_sees_an_import_of_the_harness(tmp_path: Path) -> None:
    """The scan above can fail: it finds both forms of import."""
    probe = tmp_path / "probe.py"
    probe.write_text("import awide_harness.cluster\nfrom awide_harness.fakes import FakeSysfs\n"
                     "def f():\n    from tests.faults import runner\n")
    assert _imports(probe) >= {"awide_harness.cluster", "awide_harness.fakes", "tests.faults"}
