"""etcd binaries: their version, their snapshot-restore tool, the housekeeping flags every
test member gets (``EtcdCluster`` starts them)."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

_VERSION_RE = re.compile(rb"etcd Version:\s*([0-9]+\.[0-9]+\.[0-9]+)")

# The housekeeping flags the ansible role writes (etcd.env.j2, docs/deploy.md): every member
# gets them unless ``extra_args`` names the same flag.
QUOTA_BACKEND_BYTES = 2 * 1024 * 1024 * 1024
HOUSEKEEPING: tuple[str, ...] = (
    "--auto-compaction-mode=periodic",
    "--auto-compaction-retention=1h",
    f"--quota-backend-bytes={QUOTA_BACKEND_BYTES}",
)


def _flag_name(arg: str) -> str:
    return arg.split("=", 1)[0]


def with_housekeeping(extra_args: Sequence[str]) -> list[str]:
    """``HOUSEKEEPING`` minus the flags ``extra_args`` sets itself, then ``extra_args``."""
    overridden = {_flag_name(a) for a in extra_args if a.startswith("--")}
    return [a for a in HOUSEKEEPING if _flag_name(a) not in overridden] + list(extra_args)


class EtcdClusterError(RuntimeError):
    """A member would not start, become healthy or stop within its bound."""


def find_etcd() -> str | None:
    """The ``etcd`` binary on PATH, or None."""
    return shutil.which("etcd")


def etcd_version(binary: str, *, timeout: float = 5.0) -> str:
    """``"3.5.1"`` for the given etcd binary (runs ``binary --version``, bounded)."""
    try:
        done = subprocess.run([binary, "--version"], capture_output=True, timeout=timeout,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EtcdClusterError(f"cannot run {binary} --version: {exc}") from exc
    match = _VERSION_RE.search(done.stdout + done.stderr)
    if done.returncode != 0 or match is None:
        raise EtcdClusterError(f"{binary} --version did not name a version: {done.stdout[:200]!r}")
    return match.group(1).decode()


def restore_tool(binary: str) -> list[str]:
    """The command that restores a snapshot for ``binary``'s etcd: ``etcdutl`` beside it (etcd
    3.5 and later) when it runs, else ``etcdctl`` beside it or on PATH (3.4, and 3.5's
    deprecated one)."""
    here = Path(binary).resolve().parent
    for name in ("etcdutl", "etcdctl"):
        for candidate in (Path(binary).parent / name, here / name, shutil.which(name)):
            if candidate is None or not Path(candidate).is_file():
                continue
            try:
                ok = subprocess.run([str(candidate), "version"], capture_output=True,
                                    timeout=10, check=False).returncode == 0
            except OSError:
                ok = False
            if ok:
                return [str(candidate)]
    raise EtcdClusterError(f"no etcdutl or etcdctl found for {binary}")


def version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))
