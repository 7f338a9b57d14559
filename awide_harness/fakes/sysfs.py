"""Builder for fake sysfs trees shaped like the kernel's NVMe attributes (no pytest needed).

    fs = FakeSysfs(tmp / "sys")
    name = fs.add_controller(subsysnqn="nqn.2024-01.io.awide:sub1", serial="SN1",
                             namespaces=[FakeNs(nsid=1, nguid="0102…10")])
    fs.set_state(name, "connecting"); fs.remove_controller(name)

Controller names come from a counter kept in the tree (``.fake-next-instance``) and only go up,
so a controller that is removed and added again gets a new name (as after a reconnect while
the old controller lingers). ``fake_nvme.py`` uses this same builder, so test code and the
fake program agree on the tree; mutations take a file lock (``.fake-lock``).
"""

from __future__ import annotations

import contextlib
import fcntl
import re
import shutil
import uuid as uuidlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

_CTRL = re.compile(r"nvme([0-9]+)")


@dataclass(frozen=True)
class FakeNs:
    nsid: int = 1
    nguid: str | None = None      # 32 hex digits or UUID form; None for no NGUID
    uuid: str | None = None       # namespace UUID; None: the kernel shows the NGUID here
    eui64: str | None = None      # 16 hex digits
    wwid: str | None = None       # override of the computed wwid


def uuid_form(hex32: str) -> str:
    """``0102…10`` -> ``01020304-0506-0708-090a-0b0c0d0e0f10`` (how the kernel prints it)."""
    return str(uuidlib.UUID(hex32.replace("-", "")))


class FakeSysfs:
    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)
        self.class_dir.mkdir(parents=True, exist_ok=True)
        self.subsys_dir.mkdir(parents=True, exist_ok=True)

    @property
    def class_dir(self) -> Path:
        return self.root / "class" / "nvme"

    @property
    def subsys_dir(self) -> Path:
        return self.root / "class" / "nvme-subsystem"

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        with open(self.root / ".fake-lock", "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    # ------------------------------------------------------------ queries

    def controller_names(self) -> list[str]:
        names = [p.name for p in self.class_dir.iterdir() if _CTRL.fullmatch(p.name)]
        return sorted(names, key=lambda n: int(n[4:]))

    def attr(self, name: str, attr: str) -> str | None:
        try:
            return (self.class_dir / name / attr).read_text().rstrip("\n")
        except OSError:
            return None

    def namespaces(self, name: str) -> list[str]:
        base = self.class_dir / name
        return sorted(p.name for p in base.iterdir() if p.is_dir() and p.name.startswith("nvme"))

    def ns_attr(self, name: str, ns: str, attr: str) -> str | None:
        try:
            return (self.class_dir / name / ns / attr).read_text().rstrip("\n")
        except OSError:
            return None

    # ------------------------------------------------------------ mutations

    def next_name(self) -> str:
        """Reserve and return the next controller name (monotonic; never reused)."""
        counter = self.root / ".fake-next-instance"
        try:
            stored = int(counter.read_text())
        except (OSError, ValueError):
            stored = 0
        existing = [int(n[4:]) for n in self.controller_names()]
        n = max([stored, *(e + 1 for e in existing)])
        counter.write_text(str(n + 1))
        return f"nvme{n}"

    def add_controller(
        self, *, subsysnqn: str, serial: str, name: str | None = None,
        model: str = "AWIDE Fake NVMe Ctrl", firmware_rev: str = "1.0",
        transport: str = "tcp", traddr: str = "10.200.0.11", trsvcid: int | str = 4420,
        address: str | None = None, state: str = "live", cntlid: int = 1,
        namespaces: Iterable[FakeNs] = (FakeNs(),), multipath: bool = False,
        hostnqn: str = "",
    ) -> str:
        """Create ``class/nvme/<name>`` with its attributes and namespaces; return the name."""
        name = name or self.next_name()
        base = self.class_dir / name
        base.mkdir(parents=True, exist_ok=False)
        if address is None:
            address = f"traddr={traddr},trsvcid={trsvcid}" if transport != "pcie" else traddr
        attrs = {
            "transport": transport, "address": address, "subsysnqn": subsysnqn,
            "serial": serial, "model": model, "firmware_rev": firmware_rev, "state": state,
            "cntlid": str(cntlid),
        }
        if hostnqn:                       # fabrics controllers show the host NQN used
            attrs["hostnqn"] = hostnqn
        for key, value in attrs.items():
            (base / key).write_text(value + "\n")
        subsys = self._subsystem_for(subsysnqn)
        (subsys / name).symlink_to(Path("..", "..", "nvme", name))
        for ns in namespaces:
            self.add_namespace(name, ns, multipath=multipath)
        return name

    def add_namespace(self, name: str, ns: FakeNs, *, multipath: bool = False) -> str:
        base = self.class_dir / name
        ctrl_n = int(name[4:])
        if multipath:
            subsys = self._subsystem_for(self.attr(name, "subsysnqn") or "")
            k = int(subsys.name[len("nvme-subsys"):])
            nsname = f"nvme{k}c{ctrl_n}n{ns.nsid}"
            head = subsys / f"nvme{k}n{ns.nsid}"
            head.mkdir(exist_ok=True)
            self._write_ns(head, ns)
        else:
            nsname = f"nvme{ctrl_n}n{ns.nsid}"
        nsdir = base / nsname
        nsdir.mkdir()
        self._write_ns(nsdir, ns)
        return nsname

    def _write_ns(self, nsdir: Path, ns: FakeNs) -> None:
        (nsdir / "nsid").write_text(f"{ns.nsid}\n")
        if ns.nguid:
            (nsdir / "nguid").write_text(uuid_form(ns.nguid) + "\n")
        uuid_text = ns.uuid or (uuid_form(ns.nguid) if ns.nguid else None)
        if uuid_text:
            (nsdir / "uuid").write_text(str(uuidlib.UUID(uuid_text)) + "\n")
        wwid = ns.wwid
        if wwid is None:
            if ns.uuid:
                wwid = f"uuid.{uuidlib.UUID(ns.uuid)}"
            elif ns.nguid:
                wwid = "eui." + ns.nguid.replace("-", "").lower()
            elif ns.eui64:
                wwid = "eui." + ns.eui64.lower()
            else:
                wwid = f"nvme.1b36-fake-nsid-{ns.nsid:08x}"
        (nsdir / "wwid").write_text(wwid + "\n")

    def remove_controller(self, name: str) -> None:
        base = self.class_dir / name
        nqn = self.attr(name, "subsysnqn")
        shutil.rmtree(base)
        for subsys in self.subsys_dir.iterdir():
            link = subsys / name
            if link.is_symlink():
                link.unlink()
            if nqn is not None and not any(p.is_symlink() for p in subsys.iterdir()):
                shutil.rmtree(subsys)

    def set_attr(self, name: str, attr: str, value: str) -> None:
        (self.class_dir / name / attr).write_text(value + "\n")

    def set_state(self, name: str, state: str) -> None:
        self.set_attr(name, "state", state)

    def _subsystem_for(self, subsysnqn: str) -> Path:
        used = []
        for subsys in self.subsys_dir.iterdir():
            try:
                if (subsys / "subsysnqn").read_text().strip() == subsysnqn:
                    return subsys
            except OSError:
                pass
            used.append(int(subsys.name[len("nvme-subsys"):]))
        k = 0
        while k in used:
            k += 1
        subsys = self.subsys_dir / f"nvme-subsys{k}"
        subsys.mkdir()
        (subsys / "subsysnqn").write_text(subsysnqn + "\n")
        return subsys
