"""The small records beside the registry, one implementation each, for writer and readers:

- ``LeaderRecord`` at ``leader`` (the elected daemon, on its lease),
- ``GatewayRecord`` at ``gateways/<id>`` (each gateway, on its lease),
- ``LayoutRecord`` at ``layouts/<namespace>`` (the first gateway of a namespace),
- ``IntentRecord`` at ``intents/<card id>`` (the operator CLI; consumed by the leader).

Readers are lenient about fields they do not know (a cluster in the middle of a rolling
upgrade has writers of two versions) and strict about the fields they need: a record that
lacks one raises ``RecordError`` naming it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from awide_cluster.contract import slots as slotfn

PLACEMENT_ALGORITHM = 1
INTENT_ACTIONS = ("drain", "undrain", "forget")


class RecordError(ValueError):
    """A record that cannot be read; the message names the record and the field at fault."""


def _object(what: str, raw: bytes | str) -> dict[str, Any]:
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise RecordError(f"{what} is not JSON: {e}") from None
    if not isinstance(data, dict):
        raise RecordError(f"{what} is not a JSON object")
    return data


def _text(what: str, data: dict[str, Any], key: str, *, required: bool = True,
          limit: int = 256) -> str:
    value = data.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value):
        raise RecordError(f"{what} field {key}: missing or not a string")
    return value[:limit]


def _int(what: str, data: dict[str, Any], key: str, default: int | None = None) -> int:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise RecordError(f"{what} field {key}: missing or not a non-negative integer")
    return value


def _encode(d: dict[str, Any]) -> bytes:
    return json.dumps(d, sort_keys=True, separators=(",", ":")).encode()


def parse_time(value: Any) -> float | None:
    """Unix seconds from an ISO-8601 text or a number; None when absent or unreadable."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and value:
        try:
            dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=timezone.utc)
        return dt.timestamp()
    return None


def iso(ts: float | None) -> str:
    if ts is None:
        return ""
    return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat(timespec="seconds")


# ------------------------------------------------------------------------ leader

@dataclass(frozen=True, slots=True)
class LeaderRecord:
    host: str
    since: str                  # ISO-8601, the leader's own wall clock (informational)
    api: str = ""
    run: str = ""

    @property
    def since_ts(self) -> float | None:
        return parse_time(self.since)

    def encode(self) -> bytes:
        return _encode({"host": self.host, "since": self.since, "api": self.api,
                        "run": self.run})

    @classmethod
    def decode(cls, raw: bytes | str) -> "LeaderRecord | None":
        """The record, or None when the value is not one (shown as an unknown holder)."""
        try:
            return decode_leader(raw)
        except RecordError:
            return None


def decode_leader(raw: bytes | str) -> LeaderRecord:
    d = _object("leader key", raw)
    since = d.get("since")
    return LeaderRecord(
        host=_text("leader key", d, "host"),
        since=since if isinstance(since, str) else iso(parse_time(since)),
        api=_text("leader key", d, "api", required=False),
        run=_text("leader key", d, "run", required=False),
    )


# ----------------------------------------------------------------------- gateway

@dataclass(frozen=True, slots=True)
class GatewayRecord:
    id: str
    host: str
    pod: str
    namespace: str
    placement: str
    fingerprint: str
    generation: int             # registry generation applied
    engine: str | None
    version: str
    stale: bool = False         # the gateway's registry view is stale

    def encode(self) -> bytes:
        return _encode({
            "schema": 1, "id": self.id, "host": self.host, "pod": self.pod,
            "namespace": self.namespace, "placement": self.placement,
            "fingerprint": self.fingerprint, "generation": self.generation,
            "engine": self.engine, "version": self.version, "stale": self.stale,
        })


def decode_gateway(raw: bytes | str, gateway_id: str | None = None) -> GatewayRecord:
    what = f"gateway record {gateway_id or ''}".rstrip()
    d = _object(what, raw)
    engine = d.get("engine")
    return GatewayRecord(
        id=gateway_id or _text(what, d, "id"), host=_text(what, d, "host"),
        pod=_text(what, d, "pod"), namespace=_text(what, d, "namespace"),
        placement=_text(what, d, "placement"), fingerprint=_text(what, d, "fingerprint"),
        generation=_int(what, d, "generation"),
        engine=engine if isinstance(engine, str) else None,
        version=_text(what, d, "version", required=False), stale=d.get("stale") is True,
    )


# ------------------------------------------------------------------------ layout

@dataclass(frozen=True, slots=True)
class LayoutRecord:
    namespace: str
    placement: str
    algorithm: int = PLACEMENT_ALGORITHM
    slot_algorithm: int = slotfn.ALGORITHM_VERSION
    created_by: str = ""

    def describe(self) -> str:
        return (f"placement={self.placement} placement-algorithm={self.algorithm} "
                f"slot-algorithm={self.slot_algorithm}")

    def same_layout(self, other: "LayoutRecord") -> bool:
        return (self.namespace, self.placement, self.algorithm, self.slot_algorithm) == (
            other.namespace, other.placement, other.algorithm, other.slot_algorithm)

    def encode(self) -> bytes:
        return _encode({
            "schema": 1, "namespace": self.namespace, "placement": self.placement,
            "algorithm": self.algorithm, "slot_algorithm": self.slot_algorithm,
            "created_by": self.created_by,
        })


def decode_layout(raw: bytes | str, namespace: str | None = None) -> LayoutRecord:
    what = f"layout record {namespace or ''}".rstrip()
    d = _object(what, raw)
    if d.get("schema", 1) != 1:
        raise RecordError(f"{what} field schema: {d.get('schema')!r} is not known")
    return LayoutRecord(
        namespace=namespace or _text(what, d, "namespace"),
        placement=_text(what, d, "placement"),
        algorithm=_int(what, d, "algorithm"),
        slot_algorithm=_int(what, d, "slot_algorithm"),
        created_by=_text(what, d, "created_by", required=False),
    )


# ------------------------------------------------------------------------ intent

@dataclass(frozen=True, slots=True)
class IntentRecord:
    action: str
    by: str = ""
    at: str = ""

    def encode(self) -> bytes:
        if self.action not in INTENT_ACTIONS:
            raise RecordError(f"unknown intent {self.action!r}")
        return _encode({"action": self.action, "by": self.by, "at": self.at})


def decode_intent(raw: bytes | str, card_id: str = "") -> IntentRecord:
    what = f"intent {card_id}".rstrip()
    d = _object(what, raw)
    action = d.get("action")
    if action not in INTENT_ACTIONS:
        raise RecordError(f"{what} field action: must be one of {', '.join(INTENT_ACTIONS)}")
    return IntentRecord(action=action, by=_text(what, d, "by", required=False, limit=128),
                        at=_text(what, d, "at", required=False))
