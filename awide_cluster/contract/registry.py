"""The card registry: one versioned JSON document at ``registry``, written by the leader only.

Domain values are frozen dataclasses (``Registry``, ``CardEntry``); the wire format is checked
by pydantic models (``_RegistryDoc``) so that a bad document is refused with the path of the
field at fault. A reader refuses a schema it does not know (``UnknownSchema``) and keeps its
last good copy; that policy lives in the readers, this module only says what is wrong.

Schema 1, see docs/registry.md::

    {"schema": 1, "cluster": "c1", "generation": 7, "leader": "h1",
     "written_at": "2026-11-30T14:00:00+00:00", "slot_algorithm": 1,
     "cards": [{"id": "c3f1...", "serial": "SN1", "model": "M", "identity": "uuid",
                "host": "h1", "name": "card0", "kind": "nvme", "path": null,
                "target": {"transport": "tcp", "traddr": "10.0.0.1", "trsvcid": 4420,
                           "subnqn": "nqn.2024-01.io.awide:sub1"},
                "state": "in", "health": "ok", "reason": "", "admitted": 3,
                "changed_generation": 5, "changed_at": "...", "conflict": null}],
     "slots": ["c3f1...", null, null, null, null, null, null, null],
     "unplaced": [{"card": "...", "reason": "..."}]}
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import Field, ValidationError

from awide_cluster.contract import keys
from awide_cluster.contract import slots as slotfn
from awide_cluster.contract import untrusted as u
from awide_cluster.contract import versions as ver
from awide_cluster.contract.card_hold import CardHold, HoldDoc, hold_from_doc, hold_to_dict
from awide_cluster.contract.target import NvmeTarget
from awide_cluster.contract.untrusted import Name
from awide_cluster.contract.wire import (
    _Strict,
    _TargetDoc,
    card_target,
    checked,
    loaded,
)

SCHEMA_VERSION = 1
MAX_GENERATION = 2**53 - 1      # exact in every JSON reader; a lineage never gets there
STATES = ("in", "out", "drained")
HEALTHS = ("ok", "sick", "unknown")
KINDS = ("nvme", "dir")

State = Literal["in", "out", "drained"]
Health = Literal["ok", "sick", "unknown"]


class RegistryError(u.BadValue):
    """The registry document is not valid; the message names the field at fault."""

    what = "registry"
    default_problem = u.REGISTRY_CORRUPT


class UnknownSchema(RegistryError):
    """The document's schema version is not one this reader knows."""


class NewerSchema(UnknownSchema):
    """The document is of a newer major schema than this reader knows: written by a newer
    release (a leader of an older one keeps it as is, docs/versions.md)."""


def card_id(serial: str, model: str, identity: str) -> str:
    """A card's stable id: derived from what the card is, never from where it is mounted.

    A card whose identity changed gets another id: it is a different card.
    """
    digest = hashlib.sha256(f"{serial}\n{model}\n{identity}".encode()).hexdigest()
    return "c" + digest[:11]


@dataclass(frozen=True, slots=True)
class CardEntry:
    id: str
    serial: str
    model: str
    identity: str
    host: str
    name: str                       # the card's name in its host's config
    kind: Literal["nvme", "dir"]
    state: State
    health: Health
    reason: str
    admitted: int                   # generation at which the card entered the registry
    changed_generation: int         # generation of the last state change
    changed_at: str = ""            # leader's wall clock at that change, informational only
    target: NvmeTarget | None = None
    path: str | None = None         # directory cards: where the directory is
    conflict: str | None = None     # why this card is in conflict (duplicate serial), if it is
    hold: CardHold | None = None    # flap damping: its hold (None: none, nor a recent one)

    def __post_init__(self) -> None:
        # the free texts are made what every reader accepts (untrusted.clean_text): the
        # leader composes them from reports and other cards, and must never write a registry
        # that readers refuse
        object.__setattr__(self, "reason", u.clean_text(self.reason, u.REGISTRY_REASON_MAX))
        if self.conflict is not None:
            object.__setattr__(self, "conflict", u.clean_text(self.conflict, u.CONFLICT_MAX))

    @property
    def usable(self) -> bool:
        """In service for I/O: state ``in`` and no conflict."""
        return self.state == "in" and self.conflict is None


@dataclass(frozen=True, slots=True)
class Registry:
    cluster: str
    generation: int
    leader: str
    cards: tuple[CardEntry, ...]            # sorted by id
    slots: slotfn.SlotTable = slotfn.EMPTY
    written_at: str = ""
    schema: int = SCHEMA_VERSION
    slot_algorithm: int = slotfn.ALGORITHM_VERSION
    lineage: str = ""                       # id of this registry's history (docs/registry.md)
    hosts: tuple[str, ...] = ()             # the hosts whose reports the leader admits
    # the minor schema version (0: the document has neither it nor ``versions``) and what its
    # writer reads and writes (contract/versions.py; None: not said, a writer before the field)
    schema_minor: int = 0
    versions: ver.Versions | None = None
    by_id: dict[str, CardEntry] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "cards", tuple(sorted(self.cards, key=lambda c: c.id)))
        object.__setattr__(self, "hosts", tuple(sorted(set(self.hosts))))
        object.__setattr__(self, "by_id", {c.id: c for c in self.cards})

    def card(self, card_id_: str) -> CardEntry | None:
        return self.by_id.get(card_id_)

    def content(self) -> tuple[object, ...]:
        """What a write compares to decide whether anything changed (not generation/time)."""
        return (self.cluster, self.cards, self.slots, self.slot_algorithm, self.lineage,
                self.hosts, self.schema, self.schema_minor,
                self.versions if self.schema_minor else None)

    @property
    def schema_version(self) -> ver.Schema:
        return ver.Schema(self.schema, self.schema_minor)


def claims(cards: tuple[CardEntry, ...], table: slotfn.SlotTable) -> list[slotfn.SlotClaim]:
    """The slot function's input from registry cards and the table they last held."""
    held = table.as_mapping()
    out = []
    for c in cards:
        placed = held.get(c.id)
        eligible = c.conflict is None or placed is not None
        out.append(slotfn.SlotClaim(
            card_id=c.id, admitted=c.admitted, claim=placed, eligible=eligible,
            ineligible_reason=f"conflict: {c.conflict}" if not eligible else "",
        ))
    return out


def slot_table(cards: tuple[CardEntry, ...], previous: slotfn.SlotTable) -> slotfn.SlotTable:
    """The slot table for ``cards`` given the table the registry held before."""
    return slotfn.assign(claims(cards, previous))


def went_back(old: Registry | None, new: Registry) -> str | None:
    """Why ``new`` must not replace ``old`` (None: it may): within one lineage the generation
    only grows, and one generation has one content. A registry of another lineage (a
    deliberate re-creation, docs/registry.md) may replace it; its reader says so."""
    if old is None or new.lineage != old.lineage:
        return None
    if new.generation < old.generation:
        return (f"generation {new.generation} is older than generation {old.generation} "
                f"already applied (lineage {old.lineage or '-'}): the registry went back")
    if new.generation == old.generation and new.content() != old.content():
        return (f"generation {new.generation} differs from the generation {old.generation} "
                f"already applied (lineage {old.lineage or '-'}) with the same number")
    return None


def check_slots(reg: Registry, *, memo: CardMemo | None = None) -> str | None:
    """None when the published table is what the slot function gives; else why not.
    ``memo``: the reader's ``CardMemo``, which keeps the last table computed by what it was
    computed from (the same outcome, computed once per change of its inputs)."""
    mine = memo.slot_table(reg) if memo is not None else slot_table(reg.cards, reg.slots)
    if mine != reg.slots:
        return (
            f"published slot table of generation {reg.generation} differs from this "
            f"reader's slot function (algorithm {slotfn.ALGORITHM_VERSION}, registry says "
            f"{reg.slot_algorithm}): published {list(reg.slots.slots)}, computed "
            f"{list(mine.slots)}"
        )
    return None


# ---------------------------------------------------------------- wire format
# Every field is bounded (docs/registry.md, "Values read from etcd are untrusted"); ``Name``
# is a key-segment name (contract/keys.py), ``Annotated[str, u.chars(n), u.PRINTABLE]`` at
# most n characters without a control character.

_Serial: TypeAlias = Annotated[str, u.chars(u.SERIAL_MAX, 1), u.PRINTABLE]
_Model: TypeAlias = Annotated[str, u.chars(u.MODEL_MAX), u.PRINTABLE]
_Identity: TypeAlias = Annotated[str, u.chars(u.IDENTITY_MAX), u.PRINTABLE]
_Reason: TypeAlias = Annotated[str, u.chars(u.REGISTRY_REASON_MAX), u.PRINTABLE]
_Conflict: TypeAlias = Annotated[str, u.chars(u.CONFLICT_MAX), u.PRINTABLE]
_Unplaced: TypeAlias = Annotated[str, u.chars(u.UNPLACED_REASON_MAX), u.PRINTABLE]
_Time: TypeAlias = Annotated[str, u.chars(u.TIME_TEXT_MAX), u.PRINTABLE]
_Path: TypeAlias = Annotated[str, u.chars(u.PATH_MAX), u.PRINTABLE]
class _CardDoc(_Strict):
    id: Name
    serial: _Serial
    model: _Model
    identity: _Identity
    host: Name
    name: Name
    kind: Literal["nvme", "dir"]
    state: Literal["in", "out", "drained"]
    health: Literal["ok", "sick", "unknown"]
    reason: _Reason
    admitted: int = Field(ge=0)
    changed_generation: int = Field(ge=0)
    changed_at: _Time = ""
    target: _TargetDoc | None = None
    path: _Path | None = None
    conflict: _Conflict | None = None
    hold: HoldDoc | None = None


class _UnplacedDoc(_Strict):
    card: Name
    reason: _Unplaced


class _RegistryHead(_Strict):
    """``_RegistryDoc`` with its cards left unchecked (``CardMemo`` checks them one by one)."""

    schema_: int = Field(alias="schema")
    cluster: Name
    generation: int = Field(ge=0, le=MAX_GENERATION)
    leader: Name
    written_at: _Time = ""
    slot_algorithm: int = Field(ge=1)
    cards: list[Any] = Field(max_length=u.REGISTRY_CARDS_MAX)
    slots: list[Name | None] = Field(min_length=slotfn.SLOT_COUNT, max_length=slotfn.SLOT_COUNT)
    unplaced: list[_UnplacedDoc] = Field(default=[], max_length=u.REGISTRY_CARDS_MAX)
    lineage: Name | Literal[""] = ""
    hosts: list[Name] = Field(default=[], max_length=256)


class _RegistryDoc(_RegistryHead):
    """The whole document, its cards checked (the field keeps its place among the others)."""

    cards: list[_CardDoc] = Field(max_length=u.REGISTRY_CARDS_MAX)


def decode(raw: bytes | str, *, key: str = keys.REGISTRY,
           memo: CardMemo | None = None) -> Registry:
    """Parse and check a registry document read at ``key``.

    Raises RegistryError (UnknownSchema for a schema this reader does not know) naming the
    key and what is wrong, and nothing else, whatever ``raw`` holds. ``memo``: the card
    entries of the last document this reader decoded (``CardMemo``); the result, or the
    error, is the same with it or without it."""
    data = loaded(raw, schema_version=SCHEMA_VERSION, error=RegistryError,
                  unknown=UnknownSchema, limits=u.REGISTRY_LIMITS, key=key,
                  span=ver.MINE.reads("registry"), newer=NewerSchema, kind="registry")
    if memo is not None:
        reg = memo.decode(data, key)
        if reg is not None:
            return reg
    doc = checked(_RegistryDoc, data, error=RegistryError, key=key)
    cards = [_entry(c, i, key) for i, c in enumerate(doc.cards)]
    reg = _registry(doc, cards, key, data)
    if memo is not None:
        memo.remember(data["cards"], cards)
    return reg


def _entry(c: _CardDoc, index: int, key: str) -> CardEntry:
    target = card_target(c.target, index, error=RegistryError, key=key)
    if c.kind == "nvme" and target is None:
        raise RegistryError(f"field cards[{index}].target: an nvme card needs a target",
                            key=key)
    return CardEntry(
        id=c.id, serial=c.serial, model=c.model, identity=c.identity, host=c.host,
        name=c.name, kind=c.kind, state=c.state, health=c.health, reason=c.reason,
        admitted=c.admitted, changed_generation=c.changed_generation,
        changed_at=c.changed_at, target=target, path=c.path, conflict=c.conflict,
        hold=hold_from_doc(c.hold),
    )


def _registry(doc: _RegistryDoc | _RegistryHead, cards: list[CardEntry], key: str,
              data: dict[str, Any]) -> Registry:
    """The document's registry from its checked fields and its cards' entries (in order);
    ``data``: the loaded document (its schema version and its writer's versions)."""
    minor = ver.schema_of(data, error=RegistryError, key=key).minor
    written_by = (ver.from_wire(data.get("versions"), error=RegistryError, key=key)
                  if "versions" in data else None)
    ids = [c.id for c in cards]
    if len(set(ids)) != len(ids):
        raise RegistryError("field cards: the same card id appears twice", key=key)
    known = set(ids)
    for i, s in enumerate(doc.slots):
        if s is not None and s not in known:
            raise RegistryError(f"field slots[{i}]: card {s} is not in cards", key=key)
    placed = [s for s in doc.slots if s is not None]
    if len(set(placed)) != len(placed):
        raise RegistryError("field slots: a card holds two slots", key=key)
    table = slotfn.SlotTable(
        slots=tuple(doc.slots),
        unplaced=tuple(sorted((x.card, x.reason) for x in doc.unplaced)),
    )
    return Registry(
        cluster=doc.cluster, generation=doc.generation, leader=doc.leader,
        cards=tuple(cards), slots=table, written_at=doc.written_at, schema=doc.schema_,
        slot_algorithm=doc.slot_algorithm, lineage=doc.lineage, hosts=tuple(doc.hosts),
        schema_minor=minor, versions=written_by,
    )


def _content(value: Any) -> Any:
    """A parsed JSON value as a hashable key of its exact content, types included (``1``,
    ``1.0`` and ``true`` are equal in Python, not here)."""
    kind = value.__class__
    if kind is dict:
        return (dict, tuple([(k, _content(v)) for k, v in value.items()]))
    if kind is list:
        return (list, tuple([_content(v) for v in value]))
    return (kind, value)


def _card_key(value: Any) -> Any:
    """The key of one card entry as parsed: its field names in order, each value and the
    value's type (a flat entry, the usual one: three tuples; else its nested ``_content``)."""
    if value.__class__ is not dict:
        return None
    values = tuple(value.values())
    kinds = tuple(map(type, values))
    if dict in kinds or list in kinds:
        return _content(value)
    return (tuple(value), values, kinds)


class CardMemo:
    """One reader's card entries of the last registry it decoded, by the exact parsed content
    of each entry (field names in order, values and their JSON types): a registry change
    touches a card or two, and an entry whose content is the same as in the last document is
    not checked again, since the check of an entry depends on its content only (the same
    content gives the same ``CardEntry``, or the same refusal). The rest of the document is
    checked every time, and a document that fails any check is decoded again without the
    memo, so its error names the same field as it would without it. At most one document's
    cards are kept (``REGISTRY_CARDS_MAX``), and the last slot table computed for the slot
    check (``slot_table``)."""

    def __init__(self) -> None:
        self._cards: dict[Any, CardEntry] = {}
        self.hits = 0
        # the slot function's last input (the table held, and each card's id, admission and
        # conflict: all ``claims`` reads of a card) and its output
        self._slots: tuple[Any, slotfn.SlotTable] | None = None

    def slot_table(self, reg: Registry) -> slotfn.SlotTable:
        """``slot_table(reg.cards, reg.slots)``, computed again only when its input changed
        (a registry change that moves no card, joins none and changes no conflict reuses the
        last result)."""
        key = (reg.slots, tuple([(c.id, c.admitted, c.conflict) for c in reg.cards]))
        last = self._slots
        if last is not None and last[0] == key:
            return last[1]
        table = slot_table(reg.cards, reg.slots)
        self._slots = (key, table)
        return table

    def decode(self, data: dict[str, Any], key: str) -> Registry | None:
        """The registry of ``data`` (the loaded document of the known schema) using the
        memo; None when any check fails (the caller decodes it without the memo)."""
        try:
            head = _RegistryHead.model_validate(data)
        except ValidationError:
            return None
        keys_: list[Any] = []
        cards: list[CardEntry] = []
        hits = 0
        try:
            for i, raw in enumerate(head.cards):
                k = _card_key(raw)
                entry = self._cards.get(k) if k is not None else None
                if entry is None:
                    entry = _entry(_CardDoc.model_validate(raw), i, key)
                else:
                    hits += 1
                keys_.append(k)
                cards.append(entry)
            reg = _registry(head, cards, key, data)
        except (ValidationError, RegistryError, TypeError):
            return None             # TypeError: an unhashable key (a card the check refuses)
        self._cards = {k: c for k, c in zip(keys_, cards, strict=True) if k is not None}
        self.hits += hits
        return reg

    def remember(self, raws: list[Any], cards: list[CardEntry]) -> None:
        """The entries of a document decoded without the memo (its cards, in order)."""
        memo: dict[Any, CardEntry] = {}
        try:
            for raw, card in zip(raws, cards, strict=True):
                k = _card_key(raw)
                if k is not None:
                    memo[k] = card
        except TypeError:
            return
        self._cards = memo


def to_dict(reg: Registry) -> dict[str, Any]:
    return {
        "schema": reg.schema,
        "cluster": reg.cluster,
        "generation": reg.generation,
        "leader": reg.leader,
        "written_at": reg.written_at,
        "slot_algorithm": reg.slot_algorithm,
        "cards": [_card_dict(c) for c in reg.cards],
        "slots": list(reg.slots.slots),
        "unplaced": [{"card": cid, "reason": why} for cid, why in reg.slots.unplaced],
        "lineage": reg.lineage,
        "hosts": list(reg.hosts),
        # minor 0 is the document as releases before the fields wrote it
        **({"schema_minor": reg.schema_minor,
            "versions": ver.to_wire(reg.versions or ver.MINE)} if reg.schema_minor else {}),
    }


def _card_dict(c: CardEntry) -> dict[str, Any]:
    d = _plain_card(c)
    if c.hold is not None:      # only when there is one: a registry without holds is unchanged
        d["hold"] = hold_to_dict(c.hold)
    return d


def _plain_card(c: CardEntry) -> dict[str, Any]:
    return {
        "id": c.id, "serial": c.serial, "model": c.model, "identity": c.identity,
        "host": c.host, "name": c.name, "kind": c.kind, "state": c.state,
        "health": c.health, "reason": c.reason, "admitted": c.admitted,
        "changed_generation": c.changed_generation, "changed_at": c.changed_at,
        "target": c.target.to_dict() if c.target else None, "path": c.path,
        "conflict": c.conflict,
    }


def encode(reg: Registry) -> bytes:
    return json.dumps(to_dict(reg), sort_keys=True, separators=(",", ":")).encode()


def with_slots(reg: Registry) -> Registry:
    """The registry with its slot table recomputed from its cards and previous table."""
    return replace(reg, slots=slot_table(reg.cards, reg.slots))
