"""The C load generator of figure 6 (``bench/leanload.c``), built at run time.

The benchmark compiles the single C file with the system compiler (``cc``, else ``gcc``) into
its scratch directory, ``-O2``, no library but libc; no binary is committed. Without a
compiler it falls back to the Python generator (``bench.leanload``), which speaks the same
commands and reports the same windows at a higher CPU per request; the results say which one
ran and what it cost per request.
"""

from __future__ import annotations

import base64
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from awide_cluster.contract import keys
from awide_gateway_cluster.config import TimingSection as GatewayTiming

# a simulated gateway's registration lease, as the gateway library's at its defaults: its
# keepalive every GATEWAY_LEASE_TTL / 3 s
GATEWAY_LEASE_TTL: int = GatewayTiming().registration_ttl

SOURCE = Path(__file__).with_name("leanload.c")
FLAGS = ("-O2", "-std=c99", "-Wall")


class BuildError(RuntimeError):
    """The compiler is there but could not build the C generator."""


@dataclass(frozen=True)
class Generator:
    """Which load generator a run uses: ``c`` (``program``) or ``python`` (``bench.leanload``)."""

    name: str
    program: tuple[str, ...] | None
    compiler: str | None = None


PYTHON = Generator("python", None)


def compiler() -> str | None:
    return shutil.which("cc") or shutil.which("gcc")


def build(out_dir: Path, cc: str) -> Path:
    """``leanload.c`` compiled into ``out_dir``; BuildError with the compiler's words if not."""
    out_dir.mkdir(parents=True, exist_ok=True)
    binary = out_dir / "leanload-c"
    try:
        done = subprocess.run([cc, *FLAGS, "-o", str(binary), str(SOURCE)],
                              capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BuildError(f"{cc} could not build {SOURCE.name}: {e}") from e
    if done.returncode != 0:
        tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-10:])
        raise BuildError(f"{cc} could not build {SOURCE.name} (exit {done.returncode}): {tail}")
    return binary


def choose(out_dir: Path) -> Generator:
    """The C generator when a compiler is installed, else the Python one."""
    cc = compiler()
    if cc is None:
        return PYTHON
    return Generator("c", (str(build(out_dir, cc)),), compiler=cc)


def spec(cluster: str, registry_mod_revision: int, lease_ttl: int = GATEWAY_LEASE_TTL
         ) -> dict[str, Any]:
    """What both generators need beyond the endpoints: the registry's key (base64, as etcd's
    JSON API takes it; the C program does no key scheme or encoding of its own), its
    mod_revision and the lease's TTL (a keepalive every TTL/3; by default the gateway
    config's, so the figure follows the gateway's default)."""
    key = (keys.prefix(cluster) + keys.REGISTRY).encode()
    return {"registry_key_b64": base64.b64encode(key).decode(),
            "registry_mod_revision": registry_mod_revision, "lease_ttl": lease_ttl}
