"""FakeNvmeWorld: a temp dir with a fake ``nvme`` on PATH, its world file and a fake sysfs.

Pytest-free, for unit tests, the gateway tests and the fault runner::

    world = FakeNvmeWorld(tmp_path)
    world.add_target("nqn.2024-01.io.awide:sub1", serial="AWIDE0000SN0001")
    runner = Runner(env=world.env())           # nvme resolves to world.bin_dir/nvme
    cli = NvmeCli(runner)
    device = await cli.connect(NvmeTarget("tcp", "10.200.0.11", 4420, "nqn.2024-01.io.awide:sub1"))
    Sysfs(world.sysfs_root).find_by_serial("AWIDE0000SN0001")
    world.calls()                               # every argv the fake received

Faults: ``world.fault("connect", "hang")``, ``world.fault("connect", "fail", rc=1,
stderr="...")``, ``world.fault("list-subsys", "output", stdout="junk")``,
``world.fault("disconnect", "noop")``; ``times=N`` limits a fault to N calls.
A card swap: ``world.update_target(nqn, serial="OTHER", nguid=...)`` then reconnect.
"""

from __future__ import annotations

import json
import os
import secrets
import stat
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from awide_harness.fakes.sysfs import FakeSysfs

HERE = Path(__file__).resolve().parent
FAKE_NVME = HERE / "fake_nvme.py"
DEFAULT_HOSTNQN = "nqn.2014-08.org.nvmexpress:uuid:b97306f6-0dde-4ab1-a911-14ab9f32adc8"


def install_python_program(bin_dir: Path, name: str, source: str) -> Path:
    """Write an executable Python program ``bin_dir/name`` run by this interpreter."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / name
    path.write_text(f"#!{sys.executable} -S\n{source}")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


class FakeNvmeWorld:
    def __init__(self, tmpdir: Path | str, *, hostnqn: str = DEFAULT_HOSTNQN) -> None:
        self.dir = Path(tmpdir)
        self.bin_dir = self.dir / "bin"
        self.sysfs_root = self.dir / "sys"
        self.world_file = self.dir / "nvme-world.json"
        self.log_file = self.dir / "nvme-argv.log"
        self.sysfs = FakeSysfs(self.sysfs_root)
        self._doc: dict[str, Any] = {"hostnqn": hostnqn, "targets": [], "faults": {}}
        self._save()
        self.log_file.touch()
        install_python_program(
            self.bin_dir, "nvme",
            "import runpy, sys\n"
            "sys.argv[0] = 'nvme'\n"
            f"runpy.run_path({str(FAKE_NVME)!r}, run_name='__main__')\n")

    # ------------------------------------------------------------ world file

    def _load(self) -> dict[str, Any]:
        self._doc = json.loads(self.world_file.read_text())
        return self._doc

    def _save(self) -> None:
        tmp = self.world_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(self._doc, indent=1))
        os.replace(tmp, self.world_file)

    def add_target(self, subnqn: str, *, serial: str, traddr: str = "10.200.0.11",
                   trsvcid: int = 4420, transport: str = "tcp",
                   model: str = "AWIDE Fake NVMe Ctrl", firmware: str = "1.0",
                   nguid: str | None = None, eui64: str | None = None, nsid: int = 1,
                   reachable: bool = True, state: str = "live",
                   allowed_hosts: list[str] | None = None,
                   dhchap_keys: Mapping[str, str] | None = None,
                   dhchap_ctrl_keys: Mapping[str, str] | None = None,
                   published: bool = True) -> dict[str, Any]:
        """Describe a reachable target (one namespace). ``nguid`` defaults to a random one.
        ``allowed_hosts``: only these host NQNs may connect (None: any); ``dhchap_keys``: the
        DH-HMAC-CHAP secret each host must give; ``dhchap_ctrl_keys``: the controller key the
        target proves to each host (a connect asking for another one fails); ``published``:
        listed by the discovery controller at its address (``nvme discover``)."""
        target = {"transport": transport, "traddr": traddr, "trsvcid": trsvcid,
                  "subnqn": subnqn, "serial": serial, "model": model, "firmware": firmware,
                  "nsid": nsid, "nguid": nguid if nguid is not None else secrets.token_hex(16),
                  "eui64": eui64, "reachable": reachable, "state": state,
                  "allowed_hosts": allowed_hosts, "dhchap_keys": dict(dhchap_keys or {}),
                  "dhchap_ctrl_keys": dict(dhchap_ctrl_keys or {}),
                  "published": published}
        doc = self._load()
        doc["targets"] = [t for t in doc["targets"] if t["subnqn"] != subnqn] + [target]
        self._save()
        return dict(target)

    def update_target(self, subnqn: str, **changes: Any) -> dict[str, Any]:
        doc = self._load()
        for t in doc["targets"]:
            if t["subnqn"] == subnqn:
                unknown = set(changes) - set(t)
                if unknown:
                    raise KeyError(f"unknown target fields {sorted(unknown)}")
                t.update(changes)
                self._save()
                return dict(t)
        raise KeyError(subnqn)

    def discovery_extra(self, records: list[dict[str, Any]]) -> None:
        """Records every discovery controller of this world lists after its own targets
        (e.g. a subsystem published at an address no registry gives)."""
        doc = self._load()
        doc["discovery_extra"] = list(records)
        self._save()

    def remove_target(self, subnqn: str) -> None:
        doc = self._load()
        doc["targets"] = [t for t in doc["targets"] if t["subnqn"] != subnqn]
        self._save()

    def target(self, subnqn: str) -> dict[str, Any]:
        for t in self._load()["targets"]:
            if t["subnqn"] == subnqn:
                return dict(t)
        raise KeyError(subnqn)

    def fault(self, command: str, mode: str, *, times: int | None = None, **kw: Any) -> None:
        """Make ``command`` (or ``"*"``) hang / fail / print ``stdout`` / do nothing."""
        if mode not in ("hang", "fail", "output", "noop"):
            raise ValueError(f"unknown fault mode {mode!r}")
        fault = {"mode": mode, **kw}
        if times is not None:
            fault["times"] = times
        doc = self._load()
        doc["faults"][command] = fault
        self._save()

    def clear_faults(self) -> None:
        doc = self._load()
        doc["faults"] = {}
        self._save()

    # ------------------------------------------------------------ process side

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """Environment for a Runner: the fake first on PATH plus the fake's variables."""
        env = dict(os.environ if base is None else base)
        env["PATH"] = f"{self.bin_dir}{os.pathsep}{env.get('PATH', os.defpath)}"
        env["AWIDE_FAKE_NVME_WORLD"] = str(self.world_file)
        env["AWIDE_FAKE_SYSFS"] = str(self.sysfs_root)
        env["AWIDE_FAKE_NVME_LOG"] = str(self.log_file)
        return env

    def _log(self) -> list[dict[str, Any]]:
        lines = self.log_file.read_text().splitlines()
        return [json.loads(line) for line in lines if line.strip()]

    def calls(self) -> list[list[str]]:
        """Every argv (without the program name) the fake received, in order."""
        return [e["argv"] for e in self._log() if "hang_child_pid" not in e]

    def pids(self) -> list[int]:
        """Pids of every fake process and of every child a hang fault started."""
        pids: list[int] = []
        for e in self._log():
            for pid in (e["pid"], e.get("hang_child_pid")):
                if pid is not None and pid not in pids:
                    pids.append(pid)
        return pids

    def install_program(self, name: str, source: str) -> Path:
        """Put another fake program (Python source) on this world's PATH, e.g. systemctl."""
        return install_python_program(self.bin_dir, name, source)


def pid_alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z"
