"""Parsers for nvme-cli 2.3 output (JSON unless noted), pure functions over text.

Shapes (see tests/fixtures/nvme-cli-2.3/):

- ``list -o json``: ``{"Devices": [{NameSpace, DevicePath, Firmware, ModelNumber,
  SerialNumber, UsedBytes, MaximumLBA, PhysicalSize, SectorSize}]}``
- ``list-subsys -o json``: ``[{HostNQN, HostID, Subsystems: [{Name, NQN, Paths: [{Name,
  Transport, Address, State}]}]}]``; ``Address`` is ``traddr=…,trsvcid=…,src_addr=…``.
- ``id-ctrl -o json``: flat object; ``sn``/``mn``/``fr`` carry NVMe space padding.
- ``id-ns -o json``: flat object with ``nguid`` (32 hex) and ``eui64`` (16 hex).
- ``connect``: ``device: nvmeN`` (text) or ``{"device": "nvmeN"}`` (``-o json``).
- ``disconnect``: ``NQN:<nqn> disconnected <n> controller(s)``.
- ``discover -o json``: ``{"genctr": N, "records": [{trtype, adrfam, subtype, treq, portid,
  trsvcid, subnqn, traddr, ...}]}``; ``subtype`` is ``nvme subsystem`` for a subsystem (a
  discovery controller's own entries and referrals are other subtypes).

Junk or missing fields raise ``NvmeParseError(command, field, reason)``.
"""

from __future__ import annotations

import json
import re
import uuid as uuidlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from awide_cluster.contract.target import (
    InvalidTarget,
    NvmeTarget,
    clean_firmware,
    clean_model,
    clean_serial,
    validate_device_name,
)
from awide_cluster.nvme.errors import NvmeParseError

_ADDRESS_KEYS = ("traddr", "trsvcid", "src_addr", "host_traddr", "host_iface")
_HEX32 = re.compile(r"[0-9a-fA-F]{32}")
_HEX16 = re.compile(r"[0-9a-fA-F]{16}")


@dataclass(frozen=True, slots=True)
class Address:
    """A controller address as sysfs and list-subsys print it; PCIe addresses stay in ``raw``."""

    raw: str
    traddr: str | None = None
    trsvcid: str | None = None
    src_addr: str | None = None
    host_traddr: str | None = None


@dataclass(frozen=True, slots=True)
class ListedNamespace:
    device_path: str
    nsid: int
    serial: str
    model: str
    firmware: str
    used_bytes: int
    physical_size: int
    sector_size: int


@dataclass(frozen=True, slots=True)
class SubsysPath:
    name: str            # controller, e.g. nvme0
    transport: str
    address: Address
    state: str


@dataclass(frozen=True, slots=True)
class Subsystem:
    name: str            # e.g. nvme-subsys0
    nqn: str
    host_nqn: str | None
    paths: tuple[SubsysPath, ...]


@dataclass(frozen=True, slots=True)
class ControllerIdentity:
    serial: str
    model: str
    firmware: str
    subnqn: str | None
    cntlid: int


@dataclass(frozen=True, slots=True)
class NamespaceIdentity:
    nguid: str | None    # 32 lower-case hex digits, None when all zero
    eui64: str | None    # 16 lower-case hex digits, None when all zero
    nsze: int

    @property
    def identity(self) -> str | None:
        return namespace_identity(nguid=self.nguid, eui64=self.eui64)


# ---------------------------------------------------------------- helpers

def _load(command: str, text: str) -> Any:
    if not isinstance(text, str) or not text.strip():
        raise NvmeParseError(command, "<output>", "empty output")
    try:
        return json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        raise NvmeParseError(command, "<output>", f"not JSON: {exc}") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _field(command: str, obj: Any, key: str, kind: type | tuple[type, ...], where: str = "") -> Any:
    path = f"{where}.{key}" if where else key
    if not isinstance(obj, dict):
        raise NvmeParseError(command, where or "<output>", "not a JSON object")
    if key not in obj:
        raise NvmeParseError(command, path, "missing")
    value = obj[key]
    if isinstance(value, bool) or not isinstance(value, kind):
        raise NvmeParseError(command, path, f"unexpected type {type(value).__name__}")
    return value


def _text(command: str, obj: Any, key: str, where: str = "", limit: int = 256) -> str:
    value: str = _field(command, obj, key, str, where)
    if len(value) > limit:
        raise NvmeParseError(command, f"{where}.{key}" if where else key, "too long")
    return value


def _clean(command: str, path: str, cleaner: Callable[[str], str], value: str) -> str:
    try:
        return cleaner(value)
    except InvalidTarget as exc:
        raise NvmeParseError(command, path, exc.reason) from None


# ---------------------------------------------------------------- identities

def normalize_guid(value: str | None, kind: str) -> str | None:
    """Normalise a 16-byte id (nguid/uuid) or an 8-byte eui64; all-zero or junk gives None."""
    if value is None:
        return None
    text = value.strip().lower()
    if kind in ("nguid", "uuid"):
        compact = text.replace("-", "")
        if not _HEX32.fullmatch(compact) or int(compact, 16) == 0:
            return None
        return compact if kind == "nguid" else str(uuidlib.UUID(compact))
    compact = text.replace("-", "")
    if not _HEX16.fullmatch(compact) or int(compact, 16) == 0:
        return None
    return compact


def namespace_identity(nguid: str | None = None, uuid: str | None = None,
                       eui64: str | None = None) -> str | None:
    """The on-card identity of a namespace: ``nguid:<hex>``, else ``uuid:<uuid>``, else
    ``eui64:<hex>``, else None. Accepts sysfs (UUID-formatted) and id-ns (plain hex) forms."""
    n = normalize_guid(nguid, "nguid")
    if n:
        return f"nguid:{n}"
    u = normalize_guid(uuid, "uuid")
    if u:
        return f"uuid:{u}"
    e = normalize_guid(eui64, "eui64")
    if e:
        return f"eui64:{e}"
    return None


def parse_address(text: str, command: str = "sysfs") -> Address:
    """Split ``traddr=…,trsvcid=…[,src_addr=…]``; an address without ``=`` (PCIe) is kept raw."""
    if not isinstance(text, str) or len(text) > 512:
        raise NvmeParseError(command, "Address", "not a string of at most 512 characters")
    raw = text.strip()
    if "=" not in raw:
        return Address(raw=raw)
    values: dict[str, str] = {}
    for part in raw.split(","):
        key, sep, value = part.strip().partition("=")
        if not sep or not key:
            raise NvmeParseError(command, "Address", f"part {part!r} is not key=value")
        if key in values:
            raise NvmeParseError(command, "Address", f"{key} given twice")
        values[key] = value
    if "traddr" not in values:
        raise NvmeParseError(command, "Address", "no traddr")
    return Address(raw=raw, **{k: values.get(k) for k in _ADDRESS_KEYS if k != "host_iface"})


# ---------------------------------------------------------------- commands

def _device_name(command: str, path: str, name: str, *, namespace: bool) -> None:
    """A device name in ``command``'s output is one ``validate_device_name`` accepts."""
    try:
        validate_device_name(name, namespace=namespace)
    except InvalidTarget as exc:
        raise NvmeParseError(command, path, exc.reason) from None


def parse_list(text: str) -> tuple[ListedNamespace, ...]:
    doc = _load("list", text)
    devices = _field("list", doc, "Devices", list)
    out = []
    for i, dev in enumerate(devices):
        where = f"Devices[{i}]"
        path = _text("list", dev, "DevicePath", where)
        if not path.startswith("/dev/"):
            raise NvmeParseError("list", f"{where}.DevicePath", "not under /dev/")
        _device_name("list", f"{where}.DevicePath", path, namespace=True)
        out.append(ListedNamespace(
            device_path=path,
            nsid=_field("list", dev, "NameSpace", int, where),
            serial=_clean("list", f"{where}.SerialNumber", clean_serial,
                          _text("list", dev, "SerialNumber", where)),
            model=_clean("list", f"{where}.ModelNumber", clean_model,
                         _text("list", dev, "ModelNumber", where)),
            firmware=_clean("list", f"{where}.Firmware", clean_firmware,
                            _text("list", dev, "Firmware", where)),
            used_bytes=_field("list", dev, "UsedBytes", int, where),
            physical_size=_field("list", dev, "PhysicalSize", int, where),
            sector_size=_field("list", dev, "SectorSize", int, where),
        ))
    return tuple(out)


def parse_list_subsys(text: str) -> tuple[Subsystem, ...]:
    doc = _load("list-subsys", text)
    if not isinstance(doc, list):
        raise NvmeParseError("list-subsys", "<output>", "not a JSON list of hosts")
    out = []
    for h, host in enumerate(doc):
        where = f"[{h}]"
        if not isinstance(host, dict):
            raise NvmeParseError("list-subsys", where, "not a JSON object")
        host_nqn = _text("list-subsys", host, "HostNQN", where) if "HostNQN" in host else None
        subsystems = _field("list-subsys", host, "Subsystems", list, where) \
            if "Subsystems" in host else []
        for s, sub in enumerate(subsystems):
            swhere = f"{where}.Subsystems[{s}]"
            paths = []
            for p, path in enumerate(_field("list-subsys", sub, "Paths", list, swhere)):
                pwhere = f"{swhere}.Paths[{p}]"
                name = _text("list-subsys", path, "Name", pwhere)
                _device_name("list-subsys", f"{pwhere}.Name", name, namespace=False)
                paths.append(SubsysPath(
                    name=name,
                    transport=_text("list-subsys", path, "Transport", pwhere),
                    address=parse_address(_text("list-subsys", path, "Address", pwhere),
                                          "list-subsys"),
                    state=_text("list-subsys", path, "State", pwhere),
                ))
            out.append(Subsystem(
                name=_text("list-subsys", sub, "Name", swhere),
                nqn=_text("list-subsys", sub, "NQN", swhere),
                host_nqn=host_nqn,
                paths=tuple(paths),
            ))
    return tuple(out)


def parse_id_ctrl(text: str) -> ControllerIdentity:
    doc = _load("id-ctrl", text)
    subnqn = _text("id-ctrl", doc, "subnqn") if isinstance(doc, dict) and "subnqn" in doc else None
    return ControllerIdentity(
        serial=_clean("id-ctrl", "sn", clean_serial, _text("id-ctrl", doc, "sn")),
        model=_clean("id-ctrl", "mn", clean_model, _text("id-ctrl", doc, "mn")),
        firmware=_clean("id-ctrl", "fr", clean_firmware, _text("id-ctrl", doc, "fr")),
        subnqn=(subnqn.strip() or None) if subnqn is not None else None,
        cntlid=_field("id-ctrl", doc, "cntlid", int),
    )


def parse_id_ns(text: str) -> NamespaceIdentity:
    doc = _load("id-ns", text)
    nguid = _text("id-ns", doc, "nguid")
    eui64 = _text("id-ns", doc, "eui64")
    if not _HEX32.fullmatch(nguid):
        raise NvmeParseError("id-ns", "nguid", "not 32 hex digits")
    if not _HEX16.fullmatch(eui64):
        raise NvmeParseError("id-ns", "eui64", "not 16 hex digits")
    return NamespaceIdentity(
        nguid=normalize_guid(nguid, "nguid"),
        eui64=normalize_guid(eui64, "eui64"),
        nsze=_field("id-ns", doc, "nsze", int),
    )


_CONNECT_TEXT = re.compile(r"^device:\s*(\S+)\s*$", re.MULTILINE)


def parse_connect(text: str) -> str:
    """Return the controller device name (``nvmeN``) that ``nvme connect`` created."""
    if not isinstance(text, str) or not text.strip():
        raise NvmeParseError("connect", "device", "no output")
    stripped = text.strip()
    if stripped.startswith("{"):
        name = _text("connect", _load("connect", stripped), "device")
    else:
        m = _CONNECT_TEXT.search(text)
        if m is None:
            raise NvmeParseError("connect", "device", "no 'device: nvmeN' line")
        name = m.group(1)
    try:
        return validate_device_name(name, namespace=False)
    except InvalidTarget as exc:
        raise NvmeParseError("connect", "device", exc.reason) from None


_DISCONNECT = re.compile(r"disconnected\s+(\d{1,6})\s+controller\(s\)")


def parse_disconnect(text: str) -> int:
    """Return how many controllers ``nvme disconnect`` says it disconnected."""
    m = _DISCONNECT.search(text or "")
    if m is None:
        raise NvmeParseError("disconnect", "disconnected", "no 'disconnected N controller(s)'")
    return int(m.group(1))


# the most discovery log entries read (a discovery controller of a storage host lists its
# cards' subsystems, a few per host; more is refused, not cut)
DISCOVERY_RECORDS_MAX = 1024


@dataclass(frozen=True, slots=True)
class DiscoveryLog:
    """What a discovery controller published: the subsystem entries that are valid targets
    (the others, and entries of other subtypes, are left out and counted)."""

    targets: tuple[NvmeTarget, ...]
    skipped: int

    def publishes(self, target: NvmeTarget) -> bool:
        """``target`` (transport, address, port and NQN, canonical) is published as is."""
        return target in self.targets


def parse_discover(text: str) -> DiscoveryLog:
    """The subsystem entries of ``nvme discover -o json``, each validated as a target like a
    registry's (untrusted: an entry that is not one is skipped, never used)."""
    doc = _load("discover", text)
    records = _field("discover", doc, "records", list)
    if len(records) > DISCOVERY_RECORDS_MAX:
        raise NvmeParseError("discover", "records",
                             f"{len(records)} entries, over {DISCOVERY_RECORDS_MAX}")
    targets: list[NvmeTarget] = []
    skipped = 0
    for r in records:
        if not isinstance(r, dict) or r.get("subtype") != "nvme subsystem":
            skipped += 1
            continue
        try:
            targets.append(NvmeTarget.parse({
                "transport": r.get("trtype"), "traddr": r.get("traddr"),
                "trsvcid": r.get("trsvcid"), "subnqn": r.get("subnqn")}))
        except InvalidTarget:
            skipped += 1
    return DiscoveryLog(tuple(targets), skipped)
