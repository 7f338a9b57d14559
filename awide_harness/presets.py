"""Daemons run in the test process: one timing preset, directory cards, one config builder.

``FAST`` is the timing of every in-process daemon of the tests (poll 0.1 s, lease 1 s >
0.1 + 2 x ``ETCD_CALL``, 3 sick polls, no restart grace: a clean stop's report vanishes at
once; the tests of the planned absence set ``restart_grace``). ``DirCards`` makes labelled
directory cards whose store probe is ``test -e <dir>.ok`` (``set_healthy`` flips it);
``config_dict`` is a daemon config document for them (``awide_cluster.config.daemon.parse``
reads it), flap damping off (``damping: {outs: 0}``) unless a test passes its own ``damping``:
the tests fault one card many times and judge each fault's detection and return. The embedded
cluster's own configs are ``spec.daemon_config``.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from awide_cluster.cards.directory import write_label

FAST: dict[str, Any] = {"poll_interval": 0.1, "lease_ttl": 1, "sick_polls": 3,
                        "healthy_polls": 1, "restart_grace": 0}
ETCD_CALL = 0.3
TEST_PROGRAM = shutil.which("test") or "/usr/bin/test"      # the store probe: `test -e FLAG`


class DirCards:
    """Directory cards under ``root``: labelled dirs, and a store probe each (a command that
    succeeds while ``<dir>.ok`` exists)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def make(self, name: str, serial: str, *, model: str = "dir-card") -> Path:
        path = self.root / name
        path.mkdir(parents=True, exist_ok=True)
        write_label(path, serial, model)
        self.set_healthy(name, True)
        return path

    def relabel(self, name: str, serial: str, *, model: str = "dir-card") -> None:
        write_label(self.root / name, serial, model, force=True)

    def flag(self, name: str) -> Path:
        """The file whose presence makes the card's store probe succeed."""
        return self.root / f"{name}.ok"

    def set_healthy(self, name: str, ok: bool) -> None:
        if ok:
            self.flag(name).write_text("ok")
        else:
            self.flag(name).unlink(missing_ok=True)

    def spec(self, name: str, probe_timeout: float = 0.25) -> dict[str, Any]:
        return {"name": name, "kind": "dir", "path": str(self.root / name),
                "probe_timeout": probe_timeout,
                "store": {"command": [TEST_PROGRAM, "-e", str(self.flag(name))]}}

    def card(self, name: str, serial: str) -> dict[str, Any]:
        """``make`` then ``spec``: a healthy card's config section."""
        self.make(name, serial)
        return self.spec(name)


def config_dict(endpoints: Iterable[str], cluster: str, host: str,
                cards: Sequence[dict[str, Any]] = (), *, hosts: Iterable[str] = (),
                role: str = "storage", timing: dict[str, Any] | None = None,
                dev: bool = False, call: float = ETCD_CALL, product_timing: bool = False,
                **extra: Any) -> dict[str, Any]:
    """A daemon config document: ``hosts`` the cluster's hosts (``host`` always one).
    ``product_timing``: no timing and no etcd call bound of its own, the product's defaults
    (what a deployment runs: the benchmarks measure it)."""
    d: dict[str, Any] = {
        "cluster": cluster, "host": host, "hosts": sorted({host, *hosts}), "role": role,
        "dev_cluster": dev, "etcd": {"endpoints": list(endpoints), "call_timeout": call},
        "timing": dict(timing or FAST), "api": {"listen": "127.0.0.1:0"},
        "cards": list(cards), "damping": {"outs": 0}}
    if product_timing:
        del d["timing"], d["etcd"]["call_timeout"]
    d.update(extra)
    return d
