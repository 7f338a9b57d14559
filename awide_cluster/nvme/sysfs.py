"""Cheap NVMe discovery from sysfs, with the sysfs root a parameter (tests build fake trees).

Layout read (``root`` is normally ``/sys``)::

    <root>/class/nvme/nvmeN/{transport,address,subsysnqn,serial,model,firmware_rev,state,cntlid}
    <root>/class/nvme/nvmeN/nvmeNnM/{nsid,nguid,uuid,wwid}        (no native multipath)
    <root>/class/nvme/nvmeN/nvmeScNnH/{nsid,nguid,uuid,wwid}      (multipath path device;
                                                                  I/O goes to head nvmeSnH)

The API is synchronous on purpose: every call is a few dozen reads of small kernel attributes,
each read capped at 4 KiB, entries capped at 1024 per directory. Async callers must run it
off the event loop under a timeout (``cards.nvme`` does, on the probe worker).
A controller that vanishes while being read is skipped; an attribute that is missing reads as
empty (``""``) or None.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from awide_cluster.contract.target import InvalidTarget, clean_firmware, clean_model, clean_serial
from awide_cluster.nvme.errors import NvmeParseError
from awide_cluster.nvme.parse import Address, namespace_identity, parse_address

READ_CAP = 4096
MAX_ENTRIES = 1024
_CTRL = re.compile(r"nvme([0-9]{1,6})")
_NS = re.compile(r"nvme([0-9]{1,6})n([0-9]{1,6})")
_PATH_NS = re.compile(r"nvme([0-9]{1,6})c([0-9]{1,6})n([0-9]{1,6})")


@dataclass(frozen=True, slots=True)
class Namespace:
    name: str                 # sysfs directory name: nvme0n1 or nvme0c0n1
    nsid: int
    device: str               # block device used for I/O: nvme0n1 (multipath: the head)
    nguid: str | None = None  # as the kernel prints it (UUID format); None if absent
    uuid: str | None = None
    wwid: str | None = None

    @property
    def identity(self) -> str | None:
        """``nguid:…`` / ``uuid:…`` / ``eui64:…`` from the sysfs attributes, or None."""
        found = namespace_identity(nguid=self.nguid, uuid=self.uuid)
        if found or not self.wwid:
            return found
        kind, _, value = self.wwid.partition(".")
        if kind == "eui":
            return namespace_identity(nguid=value) if len(value) == 32 else \
                namespace_identity(eui64=value)
        if kind == "uuid":
            return namespace_identity(uuid=value)
        return None           # nvme.<vid>-<serial>-<model>-<nsid> is not on-card identity


@dataclass(frozen=True, slots=True)
class Controller:
    name: str                 # nvmeN
    transport: str            # tcp, rdma, pcie, loop, fc
    address: Address
    subsysnqn: str
    serial: str               # padding stripped; "" when unreadable or invalid
    model: str
    firmware_rev: str
    state: str                # live, connecting, resetting, deleting, ... ("" if unreadable)
    cntlid: int | None
    namespaces: tuple[Namespace, ...] = ()
    hostnqn: str = ""         # the host NQN it connected with (fabrics); "" when not shown

    def namespace(self, nsid: int | None = None) -> Namespace | None:
        """The namespace with ``nsid``, or (nsid None) the one with the lowest nsid."""
        if nsid is None:
            return self.namespaces[0] if self.namespaces else None
        for ns in self.namespaces:
            if ns.nsid == nsid:
                return ns
        return None


class Sysfs:
    """Reads NVMe controllers and namespaces under ``root`` (``Path('/sys')`` in production)."""

    def __init__(self, root: Path | str = Path("/sys")) -> None:
        self.root = Path(root)

    @property
    def class_dir(self) -> Path:
        return self.root / "class" / "nvme"

    def controller_names(self) -> list[str]:
        names = [n for n in _listdir(self.class_dir) if _CTRL.fullmatch(n)]
        return sorted(names, key=lambda n: int(n[4:]))

    def controllers(self) -> tuple[Controller, ...]:
        out = []
        for name in self.controller_names():
            ctrl = self.controller(name)
            if ctrl is not None:
                out.append(ctrl)
        return tuple(out)

    def controller(self, name: str) -> Controller | None:
        """One controller by name, or None if it does not exist (or vanished)."""
        if not _CTRL.fullmatch(name):
            return None
        # paths as text joined once: a scan reads about 15 attributes a controller, and a
        # pathlib join and open per attribute was most of its CPU
        base = f"{self.class_dir}/{name}/"
        if not os.path.isdir(base):
            return None
        address_text = _read(base + "address") or ""
        try:
            address = parse_address(address_text)
        except NvmeParseError:
            address = Address(raw=address_text)
        cntlid_text = _read(base + "cntlid")
        ctrl = Controller(
            name=name,
            transport=_read(base + "transport") or "",
            address=address,
            subsysnqn=_read(base + "subsysnqn") or "",
            serial=_clean(clean_serial, _read(base + "serial")),
            model=_clean(clean_model, _read(base + "model")),
            firmware_rev=_clean(clean_firmware, _read(base + "firmware_rev")),
            state=_read(base + "state") or "",
            cntlid=_int(cntlid_text),
            namespaces=self._namespaces(base),
            hostnqn=_read(base + "hostnqn") or "",
        )
        if not os.path.isdir(base):    # disconnected while we read it
            return None
        return ctrl

    def set_fast_io_fail_tmo(self, name: str, seconds: int) -> None:
        """Write the controller's ``fast_io_fail_tmo`` attribute (Linux 5.10 and later): I/O
        to a controller that lost its target fails after ``seconds`` instead of waiting for
        ``ctrl_loss_tmo``. nvme-cli 2.3 has no connect option for it (``--fast_io_fail_tmo``
        came with later releases), so the gateway sets it here right after the connect.
        Raises OSError (or ValueError for a name that is not a controller's)."""
        if not _CTRL.fullmatch(name):
            raise ValueError(f"{name!r} is not a controller name")
        if isinstance(seconds, bool) or not isinstance(seconds, int) or not -1 <= seconds <= 86400:
            raise ValueError(f"fast_io_fail_tmo must be an integer in -1..86400, got {seconds!r}")
        base = self.class_dir / name
        if not base.is_dir():
            raise FileNotFoundError(f"controller {name} is not in {self.class_dir}")
        (base / "fast_io_fail_tmo").write_text(f"{seconds}\n")

    def find_by_serial(self, serial: str) -> tuple[Controller, ...]:
        """Every controller reporting ``serial`` (several with multipath), by controller number."""
        return with_serial(self.controllers(), serial)

    def _namespaces(self, base: str) -> tuple[Namespace, ...]:
        out = []
        for entry in _listdir(base):
            m = _NS.fullmatch(entry)
            p = _PATH_NS.fullmatch(entry)
            if m:
                device = entry
            elif p:
                device = f"nvme{p.group(1)}n{p.group(3)}"
            else:
                continue
            nsdir = f"{base}{entry}/"
            nsid = _int(_read(nsdir + "nsid"))
            if nsid is None:
                continue
            out.append(Namespace(
                name=entry, nsid=nsid, device=device,
                nguid=_read(nsdir + "nguid"), uuid=_read(nsdir + "uuid"),
                wwid=_read(nsdir + "wwid"),
            ))
        return tuple(sorted(out, key=lambda n: (n.nsid, n.name)))


def _listdir(path: Path | str) -> list[str]:
    try:
        with os.scandir(path) as it:
            names = []
            for entry in it:
                names.append(entry.name)
                if len(names) >= MAX_ENTRIES:
                    break
            return names
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError:
        return []


def with_serial(controllers: tuple[Controller, ...], serial: str) -> tuple[Controller, ...]:
    """The controllers of ``controllers`` reporting ``serial``, in their order. Pure."""
    wanted = serial.strip()
    return tuple(c for c in controllers if wanted and c.serial == wanted)


def _read(path: Path | str) -> str | None:
    """Read at most READ_CAP bytes of one attribute; None when missing or unreadable."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        data = os.read(fd, READ_CAP)
    except OSError:
        return None
    finally:
        os.close(fd)
    return data.decode("ascii", "replace").rstrip("\n")


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    text = text.strip()
    try:
        return int(text, 16) if text.startswith("0x") else int(text)
    except ValueError:
        return None


def _clean(cleaner: Callable[[str], str], text: str | None) -> str:
    if text is None:
        return ""
    try:
        return cleaner(text)
    except InvalidTarget:
        return ""
