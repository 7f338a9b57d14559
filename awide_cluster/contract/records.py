"""The small records beside the registry, one implementation each, for writer and readers:

- ``LeaderRecord`` at ``leader`` (the elected daemon, on its lease),
- ``GatewayRecord`` at ``gateways/<id>`` (each gateway, on its lease),
- ``LayoutRecord`` at ``layouts/<namespace>`` (the first gateway of a namespace),
- ``IntentRecord`` at ``intents/<card id>`` (the operator CLI; consumed by the leader).

Readers are lenient about fields they do not know (a cluster in the middle of a rolling
upgrade has writers of two versions) and strict about the fields they need: a record that
lacks one, or holds a bad one, raises its own ``RecordError`` subclass (``LeaderRecordError``,
``GatewayRecordError``, ``LayoutRecordError``, ``IntentRecordError``) naming the key and the
field, and nothing else escapes a decoder (contract/untrusted.py bounds the value first).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from awide_cluster.contract import keys
from awide_cluster.contract import slots as slotfn
from awide_cluster.contract import untrusted as u
from awide_cluster.contract import versions as ver
from awide_cluster.contract.keys import BadName, check_name

PLACEMENT_ALGORITHM = 1
# the placement algorithm versions this release runs (a namespace's ``layouts/<ns>`` record names
# the one its gateways use; ``awide-cluster namespace migrate`` moves it: docs/versions.md)
PLACEMENT_ALGORITHMS: tuple[int, ...] = (1,)
ALGORITHMS_MAX = 16          # versions one gateway record may list
# the storage format of the blocks a gateway writes on the cards (their keys and encoding); a
# layout record without one was written by a release of format 1
STORAGE_FORMAT = 1
INTENT_ACTIONS = ("drain", "undrain", "forget", "clear-hold")
REFUSAL_MAX = 400            # characters of a gateway record's latest refusal


class RecordError(u.BadValue):
    """A record that cannot be read; the message names the record and the field at fault.
    Each record has its own subclass (and problem code)."""

    what = "record"


class LeaderRecordError(RecordError):
    what = "leader record"
    default_problem = u.LEADER_CORRUPT


class GatewayRecordError(RecordError):
    what = "gateway record"
    default_problem = u.GATEWAY_RECORD_CORRUPT


class LayoutRecordError(RecordError):
    what = "layout record"
    default_problem = u.LAYOUT_CORRUPT


class IntentRecordError(RecordError):
    what = "intent"
    default_problem = u.INTENT_CORRUPT


class _Fields:
    """The fields of one decoded record: each read is checked, and a bad one raises the
    record's own error naming the key and the field."""

    def __init__(self, raw: bytes | str, error: type[RecordError], key: str) -> None:
        self.error, self.key = error, key
        self.data = u.load(raw, error=error, limits=u.RECORD_LIMITS, key=key)

    def refuse(self, field: str, why: str) -> RecordError:
        return self.error(f"field {field}: {why}", key=self.key)

    def text(self, field: str, *, required: bool = True, limit: int = 256) -> str:
        value = self.data.get(field)
        if value is None and not required:
            return ""
        if not isinstance(value, str) or (required and not value):
            raise self.refuse(field, "missing or not a string")
        why = u.text_problem(value, limit)
        if why is not None:
            raise self.refuse(field, why)
        return value

    def name(self, field: str) -> str:
        value = self.text(field, limit=u.NAME_MAX)
        try:
            return check_name(field, value)
        except BadName as e:
            raise self.refuse(field, str(e)) from None

    def integer(self, field: str, default: int | None = None) -> int:
        value = self.data.get(field, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise self.refuse(field, "missing or not a non-negative integer")
        return value


def _named(error: type[RecordError], what: str, value: str, key: str) -> str:
    """A name the caller took from the key (a gateway id, a namespace)."""
    try:
        return check_name(what, value)
    except BadName as e:
        raise error(f"key: {e}", key=key) from None


def _encode(d: dict[str, Any]) -> bytes:
    return json.dumps(d, sort_keys=True, separators=(",", ":")).encode()


def parse_time(value: Any) -> float | None:
    """Unix seconds from an ISO-8601 text or a number; None when absent, unreadable or out of
    range (1970 .. 9999): never raises."""
    if isinstance(value, str):
        if not value or len(value) > u.TIME_TEXT_MAX:
            return None
        try:
            dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
            if dt.tzinfo is None:
                dt = dt.replace(tzinfo=UTC)
            return u.time_value(dt.timestamp())
        except (ValueError, OverflowError, OSError):
            return None
    return u.time_value(value)


def iso(ts: float | None) -> str:
    """ISO-8601 text of Unix seconds; "" for None or a time ``parse_time`` would not give."""
    if ts is None or not isinstance(ts, (int, float)) or not math.isfinite(ts):
        return ""
    if not u.TIME_MIN <= ts <= u.TIME_MAX:
        return ""
    try:
        return datetime.fromtimestamp(ts, tz=UTC).isoformat(timespec="seconds")
    except (ValueError, OverflowError, OSError):
        return ""


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
    def decode(cls, raw: bytes | str, *, key: str = keys.LEADER) -> LeaderRecord | None:
        """The record, or None when the value is not one (shown as an unknown holder)."""
        try:
            return decode_leader(raw, key=key)
        except LeaderRecordError:
            return None


def decode_leader(raw: bytes | str, *, key: str = keys.LEADER) -> LeaderRecord:
    """Raises LeaderRecordError naming the key and the field, and nothing else. ``since`` is
    kept as written when it is a text; a number (older writers) is turned into one, "" when
    out of range."""
    f = _Fields(raw, LeaderRecordError, key)
    since = f.data.get("since")
    return LeaderRecord(
        host=f.name("host"),
        since=(f.text("since", required=False, limit=u.TIME_TEXT_MAX)
               if isinstance(since, str) else iso(parse_time(since))),
        api=f.text("api", required=False, limit=u.API_MAX),
        run=f.text("run", required=False, limit=u.RUN_MAX),
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
    # the minor schema version and what the writer reads and writes (contract/versions.py):
    # a record of a release before these fields decodes as minor 0, ``versions.BEFORE``
    schema_minor: int = ver.GATEWAY.minor
    versions: ver.Versions = ver.MINE
    # registry entries this gateway refused (not vouched for by their hosts' reports) since
    # it started, how many are refused now, and the latest refusal (who wrote the registry,
    # the card, the field); written only when ``refused`` (older readers ignore them)
    refused: int = 0
    refusing: int = 0
    last_refusal: str = ""
    # the placement algorithm versions this gateway can run (absent in a record of a release
    # before the field: it runs 1 only)
    algorithms: tuple[int, ...] = PLACEMENT_ALGORITHMS
    # the gateway served its state file at start (etcd did not answer): how old the file was
    # then (whole seconds), when it began (ISO, the gateway's clock) and when etcd's registry
    # replaced it ("" while it still serves it); written only when ``state_since`` is set, for
    # a while after etcd answered (older readers ignore them)
    state_age: int = 0
    state_since: str = ""
    state_until: str = ""

    def __post_init__(self) -> None:
        # the engine's name comes from the engine integration: written as readers accept it
        if self.engine is not None:
            object.__setattr__(self, "engine", u.clean_text(self.engine, u.ENGINE_MAX))

    def encode(self) -> bytes:
        return _encode({
            "schema": 1, "id": self.id, "host": self.host, "pod": self.pod,
            "namespace": self.namespace, "placement": self.placement,
            "fingerprint": self.fingerprint, "generation": self.generation,
            "engine": self.engine, "version": self.version, "stale": self.stale,
            **({"schema_minor": self.schema_minor, "versions": ver.to_wire(self.versions),
                "algorithms": sorted(set(self.algorithms))}
               if self.schema_minor else {}),
            **({"refused": self.refused, "refusing": self.refusing,
                "last_refusal": u.clean_text(self.last_refusal, REFUSAL_MAX)}
               if self.refused else {}),
            **({"state_age": self.state_age, "state_since": self.state_since,
                "state_until": self.state_until} if self.state_since else {}),
        })


def _algorithms(f: _Fields) -> tuple[int, ...]:
    """The ``algorithms`` of a gateway record; (1,) when absent (a release before the field)."""
    value = f.data.get("algorithms")
    if value is None:
        return (1,)
    if (not isinstance(value, list) or not 1 <= len(value) <= ALGORITHMS_MAX
            or any(type(v) is not int or not 1 <= v <= 9999 for v in value)):
        raise f.refuse("algorithms", f"not a list of 1 to {ALGORITHMS_MAX} algorithm versions "
                                     "(integers 1 to 9999)")
    return tuple(sorted(set(value)))


def decode_gateway(raw: bytes | str, gateway_id: str | None = None, *,
                   key: str | None = None) -> GatewayRecord:
    """Raises GatewayRecordError naming the key and the field, and nothing else."""
    key = key if key is not None else keys.GATEWAYS + gateway_id if gateway_id else ""
    f = _Fields(raw, GatewayRecordError, key)
    schema = ver.schema_of(f.data, error=GatewayRecordError, key=key, default_major=1)
    span = ver.MINE.reads("gateway")
    if span.fit(schema) in ("newer_major", "older"):
        raise f.refuse("schema", f"{schema.major} is not known to this reader (reads {span})")
    engine = f.data.get("engine")
    return GatewayRecord(
        id=(_named(GatewayRecordError, "gateway id", gateway_id, key) if gateway_id
            else f.name("id")),
        host=f.name("host"), pod=f.name("pod"), namespace=f.name("namespace"),
        placement=f.text("placement", limit=u.PLACEMENT_MAX),
        fingerprint=f.text("fingerprint", limit=u.FINGERPRINT_MAX),
        generation=f.integer("generation"),
        engine=(f.text("engine", required=False, limit=u.ENGINE_MAX) if isinstance(engine, str)
                else None),
        version=f.text("version", required=False, limit=u.VERSION_MAX),
        stale=f.data.get("stale") is True,
        schema_minor=schema.minor,
        versions=ver.from_wire(f.data.get("versions"), error=GatewayRecordError, key=key),
        refused=f.integer("refused", 0), refusing=f.integer("refusing", 0),
        last_refusal=f.text("last_refusal", required=False, limit=REFUSAL_MAX),
        algorithms=_algorithms(f),
        state_age=f.integer("state_age", 0),
        state_since=f.text("state_since", required=False, limit=u.TIME_TEXT_MAX),
        state_until=f.text("state_until", required=False, limit=u.TIME_TEXT_MAX),
    )


# ------------------------------------------------------------------------ layout

@dataclass(frozen=True, slots=True)
class LayoutRecord:
    namespace: str
    placement: str
    algorithm: int = PLACEMENT_ALGORITHM
    slot_algorithm: int = slotfn.ALGORITHM_VERSION
    created_by: str = ""
    format: int = STORAGE_FORMAT
    # the cards holding a slot of the registry the record was written from (None: not recorded,
    # a record of an older release), and that registry's lineage and generation
    cards: tuple[str, ...] | None = None
    cards_lineage: str = ""
    cards_generation: int = 0

    def describe(self) -> str:
        return (f"placement={self.placement} placement-algorithm={self.algorithm} "
                f"slot-algorithm={self.slot_algorithm}")

    @property
    def card_set(self) -> str:
        """The fingerprint of ``cards`` ("" when not recorded)."""
        return "" if self.cards is None else card_set_fingerprint(self.cards)

    def same_layout(self, other: LayoutRecord) -> bool:
        return (self.namespace, self.placement, self.algorithm, self.slot_algorithm) == (
            other.namespace, other.placement, other.algorithm, other.slot_algorithm)

    def encode(self) -> bytes:
        return _encode({
            "schema": 1, "namespace": self.namespace, "placement": self.placement,
            "algorithm": self.algorithm, "slot_algorithm": self.slot_algorithm,
            "created_by": self.created_by, "format": self.format,
        } | ({} if self.cards is None else {
            "cards": sorted(self.cards), "card_set": self.card_set,
            "cards_lineage": self.cards_lineage, "cards_generation": self.cards_generation,
        }))


def card_set_fingerprint(cards: tuple[str, ...] | list[str]) -> str:
    """The fingerprint of a set of card ids (order does not count)."""
    canon = json.dumps(sorted(set(cards)), separators=(",", ":"))
    return "S" + hashlib.sha256(canon.encode()).hexdigest()[:16]


def _card_ids(f: _Fields) -> tuple[str, ...] | None:
    """The ``cards`` of a layout record, checked against its ``card_set``; None when absent."""
    value = f.data.get("cards")
    if value is None:
        return None
    if not isinstance(value, list) or len(value) > slotfn.SLOT_COUNT:
        raise f.refuse("cards", f"not a list of at most {slotfn.SLOT_COUNT} card ids")
    ids: list[str] = []
    for v in value:
        try:
            ids.append(check_name("card id", v))
        except BadName as e:
            raise f.refuse("cards", str(e)) from None
    if len(set(ids)) != len(ids):
        raise f.refuse("cards", "a card id listed twice")
    if f.data.get("card_set") != card_set_fingerprint(ids):
        raise f.refuse("card_set", "missing or not the fingerprint of cards")
    return tuple(sorted(ids))


def decode_layout(raw: bytes | str, namespace: str | None = None, *,
                  key: str | None = None) -> LayoutRecord:
    """Raises LayoutRecordError naming the key and the field, and nothing else."""
    key = key if key is not None else keys.LAYOUTS + namespace if namespace else ""
    f = _Fields(raw, LayoutRecordError, key)
    schema = f.data.get("schema", 1)
    if type(schema) is not int or schema != 1:
        raise f.refuse("schema", f"{u.shown(schema)} is not known")
    return LayoutRecord(
        namespace=(_named(LayoutRecordError, "namespace", namespace, key) if namespace
                   else f.name("namespace")),
        placement=f.text("placement", limit=u.PLACEMENT_MAX),
        algorithm=f.integer("algorithm"),
        slot_algorithm=f.integer("slot_algorithm"),
        created_by=f.text("created_by", required=False, limit=u.NAME_MAX),
        format=_format(f),
        cards=(ids := _card_ids(f)),
        cards_lineage=(f.text("cards_lineage", required=False, limit=u.NAME_MAX)
                       if ids is not None else ""),
        cards_generation=f.integer("cards_generation", 0) if ids is not None else 0,
    )


def _format(f: _Fields) -> int:
    value = f.integer("format", STORAGE_FORMAT)
    if value < 1:
        raise f.refuse("format", "a storage format starts at 1")
    return value


# ------------------------------------------------------------------------ intent

@dataclass(frozen=True, slots=True)
class IntentRecord:
    """Who (``by``, user@host), when (``at``, the writer's clock, informational) and why
    (``reason``, the operator's ``--reason``) an intent was given."""

    action: str
    by: str = ""
    at: str = ""
    reason: str = ""

    def __post_init__(self) -> None:
        # ``by`` and ``reason`` come from the command line or user@host: written as readers
        # accept them
        object.__setattr__(self, "by", u.clean_text(self.by, u.BY_MAX))
        object.__setattr__(self, "reason", u.clean_text(self.reason, u.INTENT_REASON_MAX))

    def encode(self) -> bytes:
        if self.action not in INTENT_ACTIONS:
            raise IntentRecordError(f"unknown intent {self.action!r}")
        d = {"action": self.action, "by": self.by, "at": self.at}
        if self.reason:
            d["reason"] = self.reason
        # UTF-8, not \u escapes: 128 + 256 characters of any text fit the record bound
        # (4 bytes a character at most, against 12 for an escaped astral one)
        return json.dumps(d, sort_keys=True, separators=(",", ":"),
                          ensure_ascii=False).encode()


def decode_intent(raw: bytes | str, card_id: str = "", *, key: str | None = None) -> IntentRecord:
    """Raises IntentRecordError naming the key and the field, and nothing else."""
    key = key if key is not None else keys.INTENTS + card_id if card_id else ""
    f = _Fields(raw, IntentRecordError, key)
    action = f.data.get("action")
    if not isinstance(action, str) or action not in INTENT_ACTIONS:
        raise f.refuse("action", f"must be one of {', '.join(INTENT_ACTIONS)}")
    return IntentRecord(action=action, by=f.text("by", required=False, limit=u.BY_MAX),
                        at=f.text("at", required=False, limit=u.TIME_TEXT_MAX),
                        reason=f.text("reason", required=False, limit=u.INTENT_REASON_MAX))


class SwitchoverRecordError(RecordError):
    what = "switchover"
    default_problem = u.INTENT_CORRUPT


@dataclass(frozen=True)
class SwitchoverRecord:
    """At ``intents/switchover``: the operator's request to move leadership (``to``: the host
    asked for, "" any live one), and once the leader granted it, the hand-over
    (``granted_by``: the leader that handed over; ``to``: the one host that campaigns while
    it lasts), written on a lease of the lease TTL (it vanishes by itself)."""

    to: str = ""
    by: str = ""
    at: str = ""
    reason: str = ""
    granted_by: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "by", u.clean_text(self.by, u.BY_MAX))
        object.__setattr__(self, "reason", u.clean_text(self.reason, u.INTENT_REASON_MAX))

    @property
    def granted(self) -> bool:
        return bool(self.granted_by)

    def encode(self) -> bytes:
        d = {"action": "switchover", "to": self.to, "by": self.by, "at": self.at}
        if self.reason:
            d["reason"] = self.reason
        if self.granted_by:
            d["granted_by"] = self.granted_by
        return json.dumps(d, sort_keys=True, separators=(",", ":"),
                          ensure_ascii=False).encode()


def decode_switchover(raw: bytes | str, *, key: str = keys.SWITCHOVER) -> SwitchoverRecord:
    """Raises SwitchoverRecordError naming the key and the field, and nothing else."""
    f = _Fields(raw, SwitchoverRecordError, key)
    if f.data.get("action") != "switchover":
        raise f.refuse("action", "must be switchover")
    to = f.name("to") if f.data.get("to") else ""
    granted_by = f.name("granted_by") if f.data.get("granted_by") else ""
    if granted_by and not to:
        raise f.refuse("to", "a granted switchover names its host")
    return SwitchoverRecord(to=to, by=f.text("by", required=False, limit=u.BY_MAX),
                            at=f.text("at", required=False, limit=u.TIME_TEXT_MAX),
                            reason=f.text("reason", required=False, limit=u.INTENT_REASON_MAX),
                            granted_by=granted_by)
