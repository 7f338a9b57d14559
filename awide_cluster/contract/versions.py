"""Schema versions of the documents that cross releases, and what this release reads and writes
(docs/versions.md, the version-skew policy).

A schema version is ``major.minor``. On the wire a document keeps its integer ``schema`` (the
major, as every release wrote it) and adds ``schema_minor`` (absent: 0). A minor version only
adds fields that a reader of a lower minor of the same major may ignore: such a reader reads the
document with a warning, never refuses it. A new major is incompatible: a reader that does not
know it refuses the document, so writers write it only once every reader can read it.

Every host report, gateway record and (from minor 1) registry carries ``versions``: the schema
spans its writer can read and write, per document kind::

    "versions": {"read": {"registry": "1.0-1.1", "report": "1.0-1.1", "gateway": "1.0-1.1"},
                 "write": {"registry": "1.0-1.1", "report": "1.1-1.1", "gateway": "1.1-1.1"}}

A document without ``versions`` was written by a release before the field (it reads and writes
``1.0`` of every kind: ``BEFORE``). Kinds a reader does not know are ignored; a span that is not
``M.m-M.m`` is refused with the document's own typed error, naming the key and the field.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from awide_cluster.contract import untrusted as u

KINDS = ("registry", "report", "gateway")
KINDS_MAX = 16                  # kinds one ``versions`` may name (unknown ones are ignored)
PART_MAX = 9999                 # a major or minor number
_SPAN = re.compile(r"(\d{1,4})\.(\d{1,4})-(\d{1,4})\.(\d{1,4})")


@dataclass(frozen=True, slots=True, order=True)
class Schema:
    major: int
    minor: int = 0

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"


Fit = Literal["full", "newer_minor", "newer_major", "older"]


@dataclass(frozen=True, slots=True)
class Span:
    """The schemas from ``low`` to ``high`` (both included) of one document kind."""

    low: Schema
    high: Schema

    def __str__(self) -> str:
        return f"{self.low}-{self.high}"

    def fit(self, s: Schema) -> Fit:
        """How a reader of this span reads a document of schema ``s``: fully, as a newer
        minor of its highest major (extra fields ignored, with a warning), or not at all."""
        if s < self.low:
            return "older"
        if s <= self.high:
            return "full"
        return "newer_minor" if s.major == self.high.major else "newer_major"


@dataclass(frozen=True, slots=True)
class Versions:
    """The spans a writer reads and writes, per document kind it knows (sorted by kind;
    ``versions(read=..., write=...)`` builds one from mappings)."""

    read: tuple[tuple[str, Span], ...]
    write: tuple[tuple[str, Span], ...]

    def reads(self, kind: str) -> Span:
        return next((s for k, s in self.read if k == kind), BEFORE_SPAN)

    def writes(self, kind: str) -> Span:
        return next((s for k, s in self.write if k == kind), BEFORE_SPAN)

    def says_it_writes(self, kind: str, s: Schema) -> bool:
        span = next((x for k, x in self.write if k == kind), None)
        return span is not None and span.low <= s <= span.high

    def describe(self) -> str:
        return "reads " + " ".join(f"{k} {s}" for k, s in self.read)


def versions(*, read: Mapping[str, Span], write: Mapping[str, Span]) -> Versions:
    return Versions(read=tuple(sorted(read.items())), write=tuple(sorted(write.items())))


def _span(text: str) -> Span:
    a, b, c, d = (int(x) for x in text.replace("-", ".").split("."))
    return Span(Schema(a, b), Schema(c, d))


BEFORE_SPAN = _span("1.0-1.0")
# a writer of a release before the ``versions`` field: reads and writes 1.0 of every kind
BEFORE = versions(read={k: BEFORE_SPAN for k in KINDS}, write={k: BEFORE_SPAN for k in KINDS})

# this release: reads every kind from 1.0 to 1.1 and writes reports and gateway records in 1.1,
# the registry in 1.0 or 1.1 (the highest every live daemon and gateway reads fully)
MINE = versions(
    read={"registry": _span("1.0-1.1"), "report": _span("1.0-1.1"), "gateway": _span("1.0-1.1")},
    write={"registry": _span("1.0-1.1"), "report": _span("1.1-1.1"),
           "gateway": _span("1.1-1.1")},
)
REGISTRY = MINE.writes("registry").high
REPORT = MINE.writes("report").high
GATEWAY = MINE.writes("gateway").high


def to_wire(v: Versions) -> dict[str, Any]:
    return {"read": {k: str(s) for k, s in v.read}, "write": {k: str(s) for k, s in v.write}}


def from_wire(value: object, *, error: type[u.BadValue], key: str,
              field: str = "versions") -> Versions:
    """The ``versions`` field read from etcd (None: ``BEFORE``); raises ``error`` naming the
    key and the field, and nothing else."""
    if value is None:
        return BEFORE
    if not isinstance(value, dict):
        raise error(f"field {field}: not an object", key=key)
    out: dict[str, dict[str, Span]] = {}
    for side in ("read", "write"):
        spans = value.get(side, {})
        if not isinstance(spans, dict) or len(spans) > KINDS_MAX:
            raise error(f"field {field}.{side}: not an object of at most {KINDS_MAX} kinds",
                        key=key)
        got: dict[str, Span] = {}
        for kind, text in spans.items():
            where = f"field {field}.{side}.{u.shown(kind, 20)}"
            if not isinstance(text, str) or _SPAN.fullmatch(text) is None:
                raise error(f"{where}: {u.shown(text)} is not a span M.m-M.m", key=key)
            span = _span(text)
            if span.high < span.low:
                raise error(f"{where}: {text} ends before it starts", key=key)
            if kind in KINDS:
                got[kind] = span
        out[side] = got
    return versions(read=out["read"], write=out["write"])


def schema_of(data: Mapping[str, Any], *, error: type[u.BadValue], key: str,
              default_major: int | None = None) -> Schema:
    """``schema`` and ``schema_minor`` of a loaded document; raises ``error`` naming the key
    when either is not a number a writer would write."""
    major = data.get("schema", default_major)
    if type(major) is not int or not 1 <= major <= PART_MAX:
        raise error(f"field schema: {u.shown(major)} is not a schema version", key=key)
    minor = data.get("schema_minor", 0)
    if type(minor) is not int or not 0 <= minor <= PART_MAX:
        raise error(f"field schema_minor: {u.shown(minor)} is not a schema version", key=key)
    return Schema(major, minor)


def claims(data: Mapping[str, Any], kind: str, s: Schema) -> bool:
    """Whether a document of schema ``s`` says its writer writes that schema of ``kind`` (a
    valid ``versions`` whose write span holds it). Only such a document is taken for one of a
    newer release: a newer schema without that claim (``{"schema": 99}``) was not written by a
    release of this policy and is refused or repaired like any bad value."""
    if "versions" not in data:
        return False
    try:
        written = from_wire(data.get("versions"), error=u.BadValue, key="")
    except u.BadValue:
        return False
    return written.says_it_writes(kind, s)


def newer_note(kind: str, s: Schema, reader: Versions = MINE) -> str:
    """"" when this reader reads schema ``s`` of ``kind`` fully; else the warning it gives
    (a newer minor: read, the fields it does not know ignored)."""
    span = reader.reads(kind)
    if span.fit(s) != "newer_minor":
        return ""
    return (f"{kind} schema {s} is newer than this release reads fully ({span}): read as "
            f"{span.high}, the fields it does not know ignored")


def registry_to_write(readers: Iterable[Versions], writer: Versions = MINE) -> Schema:
    """The highest registry schema ``writer`` writes that every one of ``readers`` (the live
    daemons and gateways) reads fully; the lowest it writes when none fits them all."""
    span = writer.writes("registry")
    spans = [r.reads("registry") for r in readers]
    fits = [s for s in _schemas(span) if all(r.fit(s) == "full" for r in spans)]
    return max(fits) if fits else span.low


def _schemas(span: Span) -> list[Schema]:
    """The schemas of a span a writer may choose: every minor of each major in it."""
    if span.low.major == span.high.major:
        return [Schema(span.low.major, m) for m in range(span.low.minor, span.high.minor + 1)]
    return [span.low, span.high]        # across majors: its two ends
