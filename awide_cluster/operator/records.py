"""Lenient readers of the keys status shows but does not own: ``leader``, ``gateways/<id>``,
``layouts/<namespace>``, ``intents/<card>``.

Status must show a cluster in the middle of a rolling upgrade, so these readers take the
fields they know (documented in docs/operations.md) and ignore the rest; a value that is not
a JSON object, or lacks a field status needs, raises ``RecordError`` naming it, and status
reports it as a problem instead of failing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any


class RecordError(ValueError):
    """A record that status cannot read; the message names the field at fault."""


def _object(what: str, raw: bytes | str) -> dict[str, Any]:
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise RecordError(f"{what} is not JSON: {e}") from None
    if not isinstance(data, dict):
        raise RecordError(f"{what} is not a JSON object")
    return data


def _text(what: str, data: dict[str, Any], key: str, *, required: bool = True) -> str:
    value = data.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value):
        raise RecordError(f"{what} field {key}: missing or not a string")
    return value


def _int(what: str, data: dict[str, Any], key: str) -> int:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise RecordError(f"{what} field {key}: missing or not a non-negative integer")
    return value


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


@dataclass(frozen=True, slots=True)
class LeaderRecord:
    host: str
    since: float | None         # unix seconds, the leader's own wall clock
    api: str
    run: str


def decode_leader(raw: bytes | str) -> LeaderRecord:
    d = _object("leader key", raw)
    return LeaderRecord(
        host=_text("leader key", d, "host"), since=parse_time(d.get("since")),
        api=_text("leader key", d, "api", required=False),
        run=_text("leader key", d, "run", required=False),
    )


@dataclass(frozen=True, slots=True)
class GatewayRecord:
    id: str
    host: str
    pod: str
    namespace: str
    placement: str
    fingerprint: str
    generation: int             # registry generation applied
    engine: str
    version: str
    stale: bool                 # the gateway says its registry view is stale


def decode_gateway(gateway_id: str, raw: bytes | str) -> GatewayRecord:
    what = f"gateway record {gateway_id}"
    d = _object(what, raw)
    if "generation" in d:
        generation = _int(what, d, "generation")
    else:
        generation = _int(what, d, "generation_applied")
    engine = d.get("engine")
    return GatewayRecord(
        id=gateway_id, host=_text(what, d, "host"), pod=_text(what, d, "pod"),
        namespace=_text(what, d, "namespace"), placement=_text(what, d, "placement"),
        fingerprint=_text(what, d, "fingerprint"), generation=generation,
        engine=engine if isinstance(engine, str) else "",
        version=_text(what, d, "version", required=False),
        stale=d.get("stale") is True,
    )


@dataclass(frozen=True, slots=True)
class LayoutRecord:
    namespace: str
    placement: str
    algorithm: int
    slot_algorithm: int
    created_by: str


def decode_layout(namespace: str, raw: bytes | str) -> LayoutRecord:
    what = f"layout record {namespace}"
    d = _object(what, raw)
    return LayoutRecord(
        namespace=namespace, placement=_text(what, d, "placement"),
        algorithm=_int(what, d, "algorithm") if "algorithm" in d else 0,
        slot_algorithm=_int(what, d, "slot_algorithm") if "slot_algorithm" in d else 0,
        created_by=_text(what, d, "created_by", required=False),
    )


@dataclass(frozen=True, slots=True)
class IntentRecord:
    card_id: str
    action: str
    by: str


def decode_intent(card_id: str, raw: bytes | str) -> IntentRecord:
    """An intent is a JSON object with ``action`` (drain, undrain, forget), or the bare word."""
    text = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
    if text.strip() in ("drain", "undrain", "forget"):
        return IntentRecord(card_id, text.strip(), "")
    d = _object(f"intent {card_id}", text)
    return IntentRecord(card_id, _text(f"intent {card_id}", d, "action"),
                        _text(f"intent {card_id}", d, "by", required=False))
