"""The checks every JSON document read from etcd goes through (the registry, host reports, the
history ring): bounded JSON of a schema the reader knows, then every field by a strict
pydantic model, an error naming the key and the first field at fault; the NVMe-oF target
model a card entry carries."""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, StringConstraints, ValidationError

from awide_cluster.contract import untrusted as u
from awide_cluster.contract import versions as ver
from awide_cluster.contract.target import InvalidTarget, NvmeTarget


class _Strict(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)


_Short = Annotated[str, StringConstraints(max_length=256)]     # NvmeTarget checks the rest
_Port = Annotated[str, StringConstraints(max_length=8)]


class _TargetDoc(_Strict):
    transport: _Short
    traddr: _Short
    trsvcid: int | _Port           # NvmeTarget writes an int; "4420" also accepted
    subnqn: _Short


def where(err: ValidationError) -> str:
    """The first field at fault in a pydantic error, as ``cards[3].reason: <why>``."""
    e = err.errors(include_url=False, include_input=False)[0]
    loc = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in e["loc"]).lstrip(".")
    return f"{loc or 'document'}: {e['msg']}"


Doc = TypeVar("Doc", bound=BaseModel)


def validated(model: type[Doc], raw: bytes | str, *, schema_version: int,
              error: type[u.BadValue], unknown: type[u.BadValue], limits: u.Limits,
              key: str) -> Doc:
    """The document in ``raw`` (a registry or a host report) checked by its wire ``model``:
    bounded JSON, the schema this reader knows (else ``unknown``), every field; ``error``
    names the key and the field at fault."""
    data = loaded(raw, schema_version=schema_version, error=error, unknown=unknown,
                  limits=limits, key=key)
    return checked(model, data, error=error, key=key)


def loaded(raw: bytes | str, *, schema_version: int, error: type[u.BadValue],
           unknown: type[u.BadValue], limits: u.Limits, key: str,
           span: ver.Span | None = None, newer: type[u.BadValue] | None = None,
           kind: str = "") -> dict[str, Any]:
    """``validated``'s first half: the bounded JSON object of the schema this reader knows.
    ``span``: the schemas this reader reads (contract/versions.py): any minor of its majors is
    accepted (a newer minor is read, its unknown fields ignored); a newer major raises
    ``newer`` when the document claims it (``versions.claims`` for ``kind``), else
    ``unknown``. Without ``span`` only ``schema_version`` is accepted."""
    data = u.load(raw, error=error, limits=limits, key=key)
    if span is not None:
        s = ver.schema_of(data, error=unknown, key=key)
        fit = span.fit(s)
        if fit in ("newer_major", "older"):
            claimed = newer is not None and fit == "newer_major" and ver.claims(data, kind, s)
            raise (newer if newer is not None and claimed else unknown)(
                f"schema {s.major} is not known to this reader (reads {span})", key=key)
        return data
    schema = data.get("schema")
    if type(schema) is not int or schema != schema_version:
        raise unknown(f"schema {u.shown(schema)} is not known to this "
                      f"reader (knows {schema_version})", key=key)
    return data


def checked(model: type[Doc], data: dict[str, Any], *, error: type[u.BadValue],
            key: str) -> Doc:
    """``validated``'s second half: every field of ``data`` checked by ``model``."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise error(f"field {where(e)}", key=key) from None


def card_target(doc: _TargetDoc | None, index: int, *, error: type[u.BadValue],
                key: str) -> NvmeTarget | None:
    """The NVMe-oF target of card ``index`` of a document, validated (None: it has none)."""
    try:
        return NvmeTarget.parse(doc.model_dump()) if doc else None
    except InvalidTarget as e:
        raise error(f"field cards[{index}].target: {e}", key=key) from None
