"""Validated NVMe names: NVMe-oF targets, NQNs, device names, serial/model strings.

Part of the contract (a card's target is in the registry, its serial in a host's report), so
it lives here, free of the ``nvme`` package that runs the commands; ``nvme`` imports it.

These values come from etcd (the card registry) and from config files: they are treated as
hostile until validated here, and only validated values ever reach an ``nvme`` argv.

Rules (stricter than the NVMe spec on purpose, see docs/cards.md):

- transport: ``tcp`` or ``rdma``.
- traddr: an IPv4/IPv6 address (no scope id) or an RFC-1123 host name; kept in canonical
  form (compressed lower-case IPv6, lower-case host name).
- trsvcid: a decimal port 1..65535 (``int`` or a string of 1-5 digits).
- NQN: ``nqn.YYYY-MM.<reverse domain>:<string>`` (which includes
  ``nqn.2014-08.org.nvmexpress:uuid:<uuid>``), at most 223 bytes, characters from
  ``[A-Za-z0-9._:@+-]`` only. Commas and ``=`` are refused because nvme-cli writes the
  connect options to ``/dev/nvme-fabrics`` as one ``key=value,key=value`` string: a comma
  in an NQN would inject kernel options.
"""

from __future__ import annotations

import ipaddress
import re
import uuid as uuidlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

TRANSPORTS = ("tcp", "rdma")
NQN_MAX_BYTES = 223
SERIAL_MAX = 20      # NVMe Identify Controller SN: 20 ASCII bytes
MODEL_MAX = 40       # MN: 40 ASCII bytes
FIRMWARE_MAX = 8     # FR: 8 ASCII bytes
_MAX_INPUT = 512     # anything longer is refused before any regex runs


class InvalidTarget(ValueError):
    """A target field (or an NQN / device name / serial) is not acceptable."""

    def __init__(self, field: str, value: object, reason: str) -> None:
        self.field = field
        self.value = value
        self.reason = reason
        shown = repr(value)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        super().__init__(f"invalid {field} {shown}: {reason}")


class InvalidDeviceName(InvalidTarget):
    """Not an NVMe device name of the form nvmeN or nvmeNnM."""


class InvalidIdentityString(InvalidTarget):
    """A serial number, model or firmware string that NVMe could not have produced."""


_LABEL = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_NQN = re.compile(
    r"nqn\.(?P<year>[0-9]{4})-(?P<month>[0-9]{2})\."
    r"(?P<domain>[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)+)"
    r":(?P<rest>[A-Za-z0-9._:@+-]+)"
)
_DEVICE = re.compile(r"nvme(?P<ctrl>[0-9]{1,6})(n(?P<ns>[0-9]{1,6}))?")
_PORT = re.compile(r"[0-9]{1,5}")


def _require_str(field: str, value: object) -> str:
    if not isinstance(value, str):
        raise InvalidTarget(field, value, f"must be a string, not {type(value).__name__}")
    if len(value) > _MAX_INPUT:
        raise InvalidTarget(field, value, f"longer than {_MAX_INPUT} characters")
    if not value:
        raise InvalidTarget(field, value, "empty")
    return value


def validate_transport(value: object) -> str:
    text = _require_str("transport", value)
    if text not in TRANSPORTS:
        raise InvalidTarget("transport", value, f"must be one of {', '.join(TRANSPORTS)}")
    return text


def validate_traddr(value: object) -> str:
    """Return the canonical form of an IP address or host name; raise InvalidTarget."""
    text = _require_str("traddr", value)
    if "%" in text:
        raise InvalidTarget("traddr", value, "scoped IPv6 addresses are not supported")
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        pass
    if len(text) > 253:
        raise InvalidTarget("traddr", value, "host name longer than 253 characters")
    labels = text.split(".")
    if not all(_LABEL.fullmatch(label) for label in labels):
        raise InvalidTarget("traddr", value, "not an IPv4/IPv6 address or RFC-1123 host name")
    if labels[-1].isdigit():
        raise InvalidTarget("traddr", value, "looks numeric but is not a valid IP address")
    return text.lower()


def validate_trsvcid(value: object) -> int:
    if isinstance(value, bool):
        raise InvalidTarget("trsvcid", value, "must be a port number, not a boolean")
    if isinstance(value, int):
        port = value
    elif isinstance(value, str):
        if not _PORT.fullmatch(value):
            raise InvalidTarget("trsvcid", value, "must be a decimal port number")
        port = int(value)
    else:
        raise InvalidTarget("trsvcid", value, "must be a port number")
    if not 1 <= port <= 65535:
        raise InvalidTarget("trsvcid", value, "port out of range 1..65535")
    return port


def validate_nqn(value: object, field: str = "subnqn") -> str:
    """Return ``value`` if it is an acceptable NVMe Qualified Name; raise InvalidTarget."""
    if not isinstance(value, str):
        raise InvalidTarget(field, value, f"must be a string, not {type(value).__name__}")
    if len(value.encode("utf-8", "surrogatepass")) > NQN_MAX_BYTES:
        raise InvalidTarget(field, value, f"longer than {NQN_MAX_BYTES} bytes")
    m = _NQN.fullmatch(value)
    if m is None:
        raise InvalidTarget(
            field, value,
            "not an NQN of the form nqn.YYYY-MM.reverse.domain:name "
            "(characters A-Z a-z 0-9 . _ : @ + - only)",
        )
    if not 1 <= int(m["month"]) <= 12:
        raise InvalidTarget(field, value, "month of the NQN date is not 01..12")
    rest = m["rest"]
    if m["domain"].lower() == "org.nvmexpress" and rest.startswith("uuid:"):
        try:
            uuidlib.UUID(rest[5:])
        except ValueError:
            raise InvalidTarget(field, value,
                                "nqn.2014-08.org.nvmexpress:uuid: needs a UUID") from None
        if len(rest[5:]) != 36:
            raise InvalidTarget(field, value, "UUID must be in 8-4-4-4-12 form")
    return value


def validate_device_name(value: object, *, namespace: bool | None = None) -> str:
    """Accept ``nvmeN`` / ``nvmeNnM`` (optionally with a ``/dev/`` prefix) and return the bare name.

    ``namespace=True`` requires the ``nvmeNnM`` form, ``False`` the ``nvmeN`` form.
    """
    if not isinstance(value, str):
        raise InvalidDeviceName("device", value, "must be a string")
    name = value[5:] if value.startswith("/dev/") else value
    m = _DEVICE.fullmatch(name)
    if m is None:
        raise InvalidDeviceName("device", value, "not an NVMe device name (nvmeN or nvmeNnM)")
    if namespace is True and m["ns"] is None:
        raise InvalidDeviceName("device", value, "a namespace device (nvmeNnM) is needed")
    if namespace is False and m["ns"] is not None:
        raise InvalidDeviceName("device", value, "a controller device (nvmeN) is needed")
    return name


def _clean_ascii(field: str, value: object, limit: int) -> str:
    if isinstance(value, bytes):
        value = value.decode("ascii", "replace")
    if not isinstance(value, str):
        raise InvalidIdentityString(field, value, "must be a string")
    if len(value) > _MAX_INPUT:
        raise InvalidIdentityString(field, value, f"longer than {_MAX_INPUT} characters")
    text = value.strip(" \x00\n")
    if not text:
        raise InvalidIdentityString(field, value, "empty")
    if len(text) > limit:
        raise InvalidIdentityString(field, value, f"longer than {limit} characters")
    if not all(0x20 <= ord(c) <= 0x7E for c in text):
        raise InvalidIdentityString(field, value, "not printable ASCII")
    return text


def clean_serial(value: object) -> str:
    """Strip NVMe space/NUL padding and check a serial number (1..20 printable ASCII)."""
    return _clean_ascii("serial", value, SERIAL_MAX)


def clean_model(value: object) -> str:
    """Strip padding and check a model number (1..40 printable ASCII)."""
    return _clean_ascii("model", value, MODEL_MAX)


def clean_firmware(value: object) -> str:
    """Strip padding and check a firmware revision (1..8 printable ASCII)."""
    return _clean_ascii("firmware", value, FIRMWARE_MAX)


@dataclass(frozen=True, slots=True)
class NvmeTarget:
    """An NVMe-oF target. Constructing one validates (and canonicalises) every field."""

    transport: str
    traddr: str
    trsvcid: int
    subnqn: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "transport", validate_transport(self.transport))
        object.__setattr__(self, "traddr", validate_traddr(self.traddr))
        object.__setattr__(self, "trsvcid", validate_trsvcid(self.trsvcid))
        object.__setattr__(self, "subnqn", validate_nqn(self.subnqn))

    @classmethod
    def parse(cls, mapping: Mapping[str, Any]) -> NvmeTarget:
        """Build from a mapping with exactly the keys transport, traddr, trsvcid, subnqn."""
        if not isinstance(mapping, Mapping):
            raise InvalidTarget("target", mapping, "must be a mapping")
        wanted = ("transport", "traddr", "trsvcid", "subnqn")
        for key in wanted:
            if key not in mapping:
                raise InvalidTarget(key, None, "missing")
        extra = [k for k in mapping if k not in wanted]
        if extra:
            raise InvalidTarget(str(extra[0]), mapping[extra[0]], "unknown target field")
        return cls(mapping["transport"], mapping["traddr"], mapping["trsvcid"], mapping["subnqn"])

    def to_dict(self) -> dict[str, Any]:
        return {
            "transport": self.transport,
            "traddr": self.traddr,
            "trsvcid": self.trsvcid,
            "subnqn": self.subnqn,
        }

    def __str__(self) -> str:
        host = f"[{self.traddr}]" if ":" in self.traddr else self.traddr
        return f"{self.transport}://{host}:{self.trsvcid}/{self.subnqn}"
