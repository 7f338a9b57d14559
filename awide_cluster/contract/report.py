"""The host report: what each daemon writes to ``members/<host>`` every poll, on its lease.

The leader reads every report each cycle. A report that does not decode is ignored for that
cycle and counted (the host's cards then count as not observed), never crashes the leader.

``run`` is a random id per daemon process and ``seq`` counts that process's reports: the
leader judges a report fresh when (run, seq) changed since its previous cycle, so no wall clock
is compared across hosts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, ValidationError

from awide_cluster.contract.keys import BadName, check_name
from awide_cluster.contract.registry import _Strict, _TargetDoc  # the same wire types
from awide_cluster.nvme.target import InvalidTarget, NvmeTarget

SCHEMA_VERSION = 1


class ReportError(ValueError):
    """A host report that is not valid; the message names the field at fault."""


@dataclass(frozen=True, slots=True)
class ProbeLine:
    probe: str
    ok: bool
    reason: str
    elapsed: float


@dataclass(frozen=True, slots=True)
class ReportedCard:
    name: str                       # the card's name in the host's config
    kind: Literal["nvme", "dir"]
    found: bool                     # False: configured but not found (then serial etc. empty)
    serial: str
    model: str
    identity: str
    device: str                     # e.g. nvme3n1 or the directory path
    controller_state: str
    healthy: bool
    reason: str
    target: NvmeTarget | None = None
    path: str | None = None
    probes: tuple[ProbeLine, ...] = ()


@dataclass(frozen=True, slots=True)
class HostReport:
    host: str
    role: Literal["storage", "witness"]
    version: str
    api: str                        # the daemon's HTTP API address, "" if none
    run: str
    seq: int
    cards: tuple[ReportedCard, ...] = ()
    dev_cluster: bool = False
    schema: int = SCHEMA_VERSION

    @property
    def freshness(self) -> tuple[str, int]:
        return (self.run, self.seq)


class _ProbeDoc(_Strict):
    probe: str
    ok: bool
    reason: str = Field(max_length=1024)
    elapsed: float


class _CardDoc(_Strict):
    name: str
    kind: Literal["nvme", "dir"]
    found: bool
    serial: str = Field(max_length=64)
    model: str = Field(max_length=64)
    identity: str = Field(max_length=128)
    device: str = Field(max_length=4096)
    controller_state: str = Field(max_length=32)
    healthy: bool
    reason: str = Field(max_length=1024)
    target: _TargetDoc | None = None
    path: str | None = Field(default=None, max_length=4096)
    probes: list[_ProbeDoc] = []


class _ReportDoc(_Strict):
    schema_: int = Field(alias="schema")
    host: str
    role: Literal["storage", "witness"]
    version: str = Field(max_length=64)
    api: str = Field(max_length=256)
    run: str = Field(min_length=1, max_length=64)
    seq: int = Field(ge=0)
    dev_cluster: bool = False
    cards: list[_CardDoc] = Field(default=[], max_length=64)


def decode(raw: bytes | str) -> HostReport:
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise ReportError(f"host report is not JSON: {e}") from None
    if not isinstance(data, dict):
        raise ReportError("host report is not a JSON object")
    if data.get("schema") != SCHEMA_VERSION:
        raise ReportError(f"host report schema {data.get('schema')!r} is not known")
    try:
        doc = _ReportDoc.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise ReportError(f"host report field {loc}: {err['msg']}") from None
    cards = []
    for i, c in enumerate(doc.cards):
        try:
            check_name("card name", c.name)
            target = NvmeTarget.parse(c.target.model_dump()) if c.target else None
        except (BadName, InvalidTarget) as e:
            raise ReportError(f"host report field cards.{i}: {e}") from None
        cards.append(ReportedCard(
            name=c.name, kind=c.kind, found=c.found, serial=c.serial, model=c.model,
            identity=c.identity, device=c.device, controller_state=c.controller_state,
            healthy=c.healthy, reason=c.reason, target=target, path=c.path,
            probes=tuple(ProbeLine(p.probe, p.ok, p.reason, p.elapsed) for p in c.probes),
        ))
    try:
        check_name("host", doc.host)
    except BadName as e:
        raise ReportError(f"host report field host: {e}") from None
    return HostReport(
        host=doc.host, role=doc.role, version=doc.version, api=doc.api, run=doc.run,
        seq=doc.seq, cards=tuple(cards), dev_cluster=doc.dev_cluster, schema=doc.schema_,
    )


def to_dict(r: HostReport) -> dict[str, Any]:
    return {
        "schema": r.schema, "host": r.host, "role": r.role, "version": r.version,
        "api": r.api, "run": r.run, "seq": r.seq, "dev_cluster": r.dev_cluster,
        "cards": [
            {
                "name": c.name, "kind": c.kind, "found": c.found, "serial": c.serial,
                "model": c.model, "identity": c.identity, "device": c.device,
                "controller_state": c.controller_state, "healthy": c.healthy,
                "reason": c.reason, "target": c.target.to_dict() if c.target else None,
                "path": c.path,
                "probes": [
                    {"probe": p.probe, "ok": p.ok, "reason": p.reason, "elapsed": p.elapsed}
                    for p in c.probes
                ],
            }
            for c in r.cards
        ],
    }


def encode(r: HostReport) -> bytes:
    return json.dumps(to_dict(r), sort_keys=True, separators=(",", ":")).encode()
