"""A card's config entry (the daemon config embeds ``cards: [CardSpec, ...]``).

    - name: card0
      kind: nvme                       # or dir
      serial: AWIDE0000SN0001          # nvme: the card is found in sysfs by serial
      nsid: 1                          # optional; default: the lowest nsid
      target: {transport: tcp, traddr: 10.200.0.11, trsvcid: 4420,
               subnqn: nqn.2024-01.io.awide:sub1}
      store: {systemd_unit: awide-store@card0.service}   # or http / tcp / command
      probe_timeout: 0.5

    - name: dev0
      kind: dir
      path: /srv/awide/dev0            # carries .awide-card.json (see directory.py)

Unknown keys are errors; ``target`` is validated by ``NvmeTarget`` (the error names the field).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from awide_cluster.contract.target import InvalidTarget, NvmeTarget, clean_serial, validate_traddr
from awide_cluster.contract.untrusted import FORBIDDEN

# A directory card's path goes into every host report and the registry: at most this many
# bytes (UTF-8) and no control character, so a report of 64 cards always fits its bound
# (contract/untrusted.py, daemon/reporter.py ``fit``).
PATH_MAX_BYTES = 1024

_NAME = re.compile(r"[a-z0-9]([a-z0-9_.-]{0,62})")
_UNIT = re.compile(r"[A-Za-z0-9:_.\\@-]{1,250}\.(service|socket|target|mount|path|timer)")


def _to_target(value: Any) -> NvmeTarget:
    if isinstance(value, NvmeTarget):
        return value
    if not isinstance(value, dict):
        raise ValueError("target must be a mapping with transport, traddr, trsvcid, subnqn")
    try:
        return NvmeTarget.parse(value)
    except InvalidTarget as exc:
        raise ValueError(str(exc)) from None


TargetField = Annotated[
    NvmeTarget,
    PlainValidator(_to_target),
    PlainSerializer(lambda t: t.to_dict(), return_type=dict),
    WithJsonSchema({"type": "object", "properties": {
        "transport": {"enum": ["tcp", "rdma"]}, "traddr": {"type": "string"},
        "trsvcid": {"type": "integer"}, "subnqn": {"type": "string"}}}),
]


def parse_host_port(text: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` -> (canonical host, port); ValueError otherwise."""
    if not isinstance(text, str) or len(text) > 300:
        raise ValueError("must be host:port")
    if text.startswith("["):
        host, sep, port = text[1:].partition("]:")
    else:
        host, sep, port = text.rpartition(":")
        if ":" in host:
            raise ValueError("IPv6 addresses go in brackets: [addr]:port")
    if not sep or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"{text!r} is not host:port with a port 1..65535")
    try:
        return validate_traddr(host), int(port)
    except InvalidTarget as exc:
        raise ValueError(f"{text!r}: {exc.reason}") from None


class StoreProbeSpec(BaseModel):
    """How to tell that the card's store service is alive: exactly one of the four."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    systemd_unit: str | None = None
    http: str | None = None
    tcp: str | None = None
    command: tuple[str, ...] | None = None

    @field_validator("systemd_unit")
    @classmethod
    def _unit(cls, v: str | None) -> str | None:
        if v is not None and (not _UNIT.fullmatch(v) or v.startswith("-")):
            raise ValueError(f"{v!r} is not a systemd unit name (e.g. awide-store@card0.service)")
        return v

    @field_validator("http")
    @classmethod
    def _http(cls, v: str | None) -> str | None:
        if v is None:
            return v
        parts = urlsplit(v)
        try:
            _ = parts.port      # raises ValueError when the port is not a number in range
        except ValueError:
            raise ValueError(f"{v!r}: bad port") from None
        if parts.scheme not in ("http", "https") or not parts.hostname or any(
                c.isspace() for c in v):
            raise ValueError(f"{v!r} is not an http(s)://host[:port]/path URL")
        return v

    @field_validator("tcp")
    @classmethod
    def _tcp(cls, v: str | None) -> str | None:
        if v is not None:
            parse_host_port(v)
        return v

    @field_validator("command")
    @classmethod
    def _command(cls, v: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if v is None:
            return v
        if not v or not v[0] or len(v) > 64:
            raise ValueError("command must be a non-empty argv list (at most 64 items)")
        if v[0].startswith("-"):
            raise ValueError("command[0] must be a program, not an option")
        if any("\x00" in a or len(a) > 4096 for a in v):
            raise ValueError("command items must have no NUL and at most 4096 characters")
        return v

    @model_validator(mode="after")
    def _exactly_one(self) -> StoreProbeSpec:
        given = [k for k in ("systemd_unit", "http", "tcp", "command")
                 if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of systemd_unit, http, tcp, command "
                             f"(got {', '.join(given) or 'none'})")
        return self

    @property
    def kind(self) -> Literal["systemd_unit", "http", "tcp", "command"]:
        for k in ("systemd_unit", "http", "tcp", "command"):
            if getattr(self, k) is not None:
                return k
        raise AssertionError("validated to have one")


class CardSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    kind: Literal["dir", "nvme"]
    path: Path | None = None
    serial: str | None = None
    nsid: int | None = Field(default=None, ge=1, le=0xFFFFFFFE)
    target: TargetField | None = None
    store: StoreProbeSpec | None = None
    probe_timeout: float = Field(default=0.5, gt=0.0, le=30.0,
                                 description="bound of all of one card's probes, seconds")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME.fullmatch(v):
            raise ValueError("card name must be 1-63 of a-z 0-9 _ . - starting with a-z or 0-9")
        return v

    @field_validator("path")
    @classmethod
    def _path(cls, v: Path | None) -> Path | None:
        if v is None:
            return v
        text = str(v)
        if len(text.encode("utf-8", "surrogateescape")) > PATH_MAX_BYTES:
            raise ValueError(f"path longer than {PATH_MAX_BYTES} bytes")
        if FORBIDDEN.search(text):
            raise ValueError("path contains a control character")
        return v

    @field_validator("serial")
    @classmethod
    def _serial(cls, v: str | None) -> str | None:
        if v is None:
            return v
        try:
            return clean_serial(v)
        except InvalidTarget as exc:
            raise ValueError(exc.reason) from None

    @model_validator(mode="after")
    def _by_kind(self) -> CardSpec:
        if self.kind == "dir":
            if self.path is None:
                raise ValueError("a dir card needs path")
            if not self.path.is_absolute():
                raise ValueError("path must be absolute")
            if self.serial is not None or self.nsid is not None:
                raise ValueError("a dir card's serial comes from its label: "
                                 "remove serial/nsid")
        else:
            if self.serial is None:
                raise ValueError("an nvme card needs serial")
            if self.path is not None:
                raise ValueError("path is for dir cards only")
        return self
