"""Vouching: a registry entry is believed only as far as its owning host's report says it.

Every daemon identity may write the registry (any daemon may become leader), so the registry
alone proves nothing about where a card is. What a card *is* and where it is served is said by
one writer only: the host that has it, in its own report ``members/<host>``, which etcd's
roles let no other identity write. A reader (the leader, a gateway) accepts a registry entry
only when (``vet``):

- its id is ``card_id(serial, model, identity)``;
- the host it names has a report, that report lists a found card with this id, and it agrees
  on the kind, the NVMe-oF target (transport, address, port, subsystem NQN) or the directory;
- no other host's report also lists this card id (a host claiming another host's card);
- for an NVMe card, when the reader was given allowed addresses (``allowed``: host -> the
  networks its targets may use, from the inventory the operator controls), the target
  address lies in one of its host's networks (a host name never does: it is not an address).

Anything else is a ``Refusal`` naming the card, the host the entry names, the field that
disagrees and why. Pure: no I/O, no clock.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias

from awide_cluster.contract.registry import CardEntry, card_id

if TYPE_CHECKING:     # types only: a gateway that does not vouch loads no report decoder
    from awide_cluster.contract.report import HostReport, ReportedCard

Network: TypeAlias = ipaddress.IPv4Network | ipaddress.IPv6Network
Allowed: TypeAlias = Mapping[str, tuple[Network, ...]]

TARGET_FIELDS = ("transport", "traddr", "trsvcid", "subnqn")


@dataclass(frozen=True, slots=True)
class Refusal:
    card: str           # the entry's id
    host: str           # the host the entry names
    field: str          # the field that is not vouched for
    detail: str

    def line(self) -> str:
        return f"card {self.card} (host {self.host}) refused: {self.field}: {self.detail}"


def parse_networks(texts: Iterable[str]) -> tuple[Network, ...]:
    """``10.0.0.1``, ``10.0.0.0/24``, ``fd00::/64`` -> networks; ValueError naming the bad one
    (host bits set are refused: ``10.0.0.1/24`` is a typing error, not a network)."""
    out = []
    for text in texts:
        try:
            out.append(ipaddress.ip_network(text, strict=True))
        except ValueError as e:
            raise ValueError(f"{text!r} is not an address or network: {e}") from None
    return tuple(out)


def address_allowed(traddr: str, networks: tuple[Network, ...]) -> bool:
    try:
        addr = ipaddress.ip_address(traddr)
    except ValueError:
        return False
    return any(addr.version == n.version and addr in n for n in networks)


def _reported_id(rc: ReportedCard) -> str | None:
    if not rc.found or not rc.serial:
        return None
    return card_id(rc.serial, rc.model, rc.identity)


def _mismatch(entry: CardEntry, rc: ReportedCard) -> tuple[str, str] | None:
    if rc.kind != entry.kind:
        return "kind", f"entry says {entry.kind}, the host reports {rc.kind}"
    if entry.kind == "dir":
        if rc.path != entry.path:
            return "path", f"entry says {entry.path!r}, the host reports {rc.path!r}"
        return None
    if entry.target is None or rc.target is None:
        return "target", (f"entry says {entry.target or 'none'}, the host reports "
                          f"{rc.target or 'none'}")
    for name in TARGET_FIELDS:
        mine, theirs = getattr(entry.target, name), getattr(rc.target, name)
        if mine != theirs:
            return name, f"entry says {mine!r}, the host reports {theirs!r}"
    return None


def vet(entry: CardEntry, reports: Mapping[str, HostReport],
        allowed: Allowed | None = None) -> Refusal | None:
    """None when ``entry`` is vouched for by its host's report ``reports[entry.host]`` (and
    its address is allowed); else why not."""
    def no(field: str, detail: str) -> Refusal:
        return Refusal(entry.id, entry.host, field, detail)

    derived = card_id(entry.serial, entry.model, entry.identity)
    if entry.id != derived:
        return no("id", f"is not card_id(serial, model, identity) = {derived}")
    report = reports.get(entry.host)
    if report is None or report.host != entry.host:
        return no("host", f"no report from {entry.host} vouches for it")
    rc = next((c for c in report.cards if _reported_id(c) == entry.id), None)
    if rc is None:
        same = next((c for c in report.cards if c.found and c.serial == entry.serial), None)
        if same is None:
            return no("serial", f"{entry.host} reports no card with serial {entry.serial!r}")
        field = "model" if same.model != entry.model else "identity"
        return no(field, f"{entry.host} reports serial {entry.serial!r} with another {field}")
    wrong = _mismatch(entry, rc)
    if wrong is not None:
        return no(*wrong)
    others = sorted(h for h, r in reports.items()
                    if h != entry.host and any(_reported_id(c) == entry.id for c in r.cards))
    if others:
        return no("host", f"also reported by {', '.join(others)}")
    if allowed is not None and entry.kind == "nvme" and entry.target is not None:
        nets = allowed.get(entry.host)
        if nets is None:
            return no("traddr", f"no allowed addresses are given for host {entry.host}")
        if not address_allowed(entry.target.traddr, nets):
            return no("traddr", f"{entry.target.traddr} is not in the allowed addresses of "
                                f"{entry.host} ({', '.join(str(n) for n in nets)})")
    return None
