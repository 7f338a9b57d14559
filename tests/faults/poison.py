"""The hostile values the poison faults write into etcd by hand (pure: values from a pick).

``poison(pick, ...)`` chooses one key kind and one hostile value for it: the registry (corrupt
JSON, not UTF-8, 5,000-deep nesting, an unknown schema), a host report of a host of the
cluster (its daemon rewrites it at its next poll), the leader key (a forged record, off any
lease), an intent, a gateway record, a layout record, a key nobody knows (also under a name
that is not UTF-8), or a value near etcd's 1.5 MiB request limit at one of them.
``Poison.own`` says whether the key is the cluster's own (it repairs it) or must be deleted
when the fault heals.

``forged_registry(...)`` is a well-formed registry: the real cards, two forged cards (one on a
host of the cluster that does not report it, one on a host that is not the cluster's) and a
generation far ahead. ``stranger_report(...)`` is a well-formed report under
``members/<a host not in the cluster>`` listing a card nobody configured.

Every forged NVMe target is a loopback address (``127.66.6.x``): nothing the campaign writes
ever points outside the machine.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

from awide_cluster.contract import keys
from awide_cluster.contract import registry as regdoc
from awide_cluster.contract import report as reportdoc
from awide_cluster.contract import slots as slotfn
from awide_cluster.contract.registry import CardEntry, Registry
from awide_cluster.contract.target import NvmeTarget

MARK = "POISON\nINJECTED"           # a newline: it must not forge a log line either
BIG = 1_400_000                     # under etcd's default 1.5 MiB request limit
DEEP = 5000
FORGED_ADDR = "127.66.6.6"          # loopback only
STRANGER_ADDR = "127.66.6.7"
STRANGERS = ("intruder", "s9", "w2")        # names that are no host of the campaign's layout
AHEAD = 1000                        # how far ahead a forged registry's generation is
TARGETS = ("registry", "report", "leader", "intent", "gateway", "layout", "unknown", "huge")


@dataclass(frozen=True, slots=True)
class Poison:
    key: str                        # relative to the cluster prefix
    value: bytes
    note: str                       # what it is, in words (never the raw value)
    own: bool                       # a key of the cluster's own: it repairs it itself
    forged_cards: tuple[str, ...] = ()


def _deep(head: bytes) -> bytes:
    return head + b"[" * DEEP + b"]" * DEEP + b"}"


def _target(addr: str, tag: str) -> NvmeTarget:
    return NvmeTarget.parse({"transport": "tcp", "traddr": addr, "trsvcid": 4420,
                             "subnqn": f"nqn.2024-01.io.awide:forged-{tag}"})


def poison(pick: int, *, cluster: str, hosts: tuple[str, ...], leader: str | None,
           card_ids: tuple[str, ...], generation: int) -> Poison:
    """One hostile value, chosen by ``pick``: the key kind ``TARGETS[pick % 8]``, then a
    variant from the rest of ``pick``. ``generation``: the registry's now (0: unknown)."""
    kind = TARGETS[pick % len(TARGETS)]
    v = pick // len(TARGETS)
    host = sorted(hosts)[v % len(hosts)]
    if kind == "registry":
        values = [
            (b'{"schema": 1, "cluster": ' + b"[" * 2000, "corrupt JSON (cut, 2,000 brackets)"),
            (b"\xff\xfe\x00 not json " + bytes(range(128, 256)), "bytes that are not UTF-8"),
            (_deep(b'{"schema": 1, "cluster": "' + cluster.encode() + b'", "cards": '),
             f"{DEEP:,}-deep nesting"),
            (json.dumps({"schema": 99, "cluster": cluster, "generation": generation + 7,
                         "note": MARK}).encode(), "an unknown schema (99)"),
        ]
        value, what = values[v % len(values)]
        return Poison(keys.REGISTRY, value, f"registry: {what}", own=True)
    if kind == "report":
        values = [
            (_deep(b'{"schema": 1, "host": "' + host.encode() + b'", "cards": '),
             f"{DEEP:,}-deep nesting"),
            (b"\xff" * 64 + MARK.encode(), "bytes that are not UTF-8"),
            (json.dumps({"schema": 1, "host": host, "role": "storage", "seq": "NaN",
                         "cards": {"x": MARK}}).encode(), "fields of the wrong types"),
        ]
        value, what = values[v % len(values)]
        return Poison(keys.member(host), value, f"report of {host}: {what}", own=True)
    if kind == "leader":
        names = sorted(h for h in hosts if h != leader) + ["w9"]
        name = names[v % len(names)]
        value = json.dumps({"host": name, "since": "2099-01-01T00:00:00+00:00",
                            "api": f"http://{FORGED_ADDR}:9700", "run": "f0r9edf0r9ed"}).encode()
        return Poison(keys.LEADER, value, f"leader key: a forged record naming {name}, "
                      "off any lease", own=True)
    if kind == "intent":
        if v % 2 == 0 and card_ids:
            cid = sorted(card_ids)[(v // 2) % len(card_ids)]
            return Poison(keys.intent(cid), _deep(b'{"action": '),
                          f"intent for card {cid}: {DEEP:,}-deep nesting", own=False)
        return Poison(keys.intent("c0123456789a"),
                      json.dumps({"action": "explode", "by": MARK}).encode(),
                      "intent for no card: an unknown action", own=False)
    if kind == "gateway":
        if v % 2 == 0:
            return Poison(keys.gateway("gw-evil"), b'{"schema":1,"generation":' + b"9" * 5000
                          + b"}", "gateway record: a 5,000-digit generation", own=False)
        return Poison(keys.gateway("gw-bad"),
                      b'{"schema":1,"id":"gw-bad","generation":1e999}',
                      "gateway record: generation 1e999", own=False)
    if kind == "layout":
        return Poison(keys.layout("ns-evil"), b"\x00\xff" * 100,
                      "layout record: NUL and 0xff bytes", own=False)
    if kind == "unknown":
        unknown: list[tuple[str, bytes, str]] = [
            ("zzz/unknown", json.dumps({"note": MARK}).encode(), "a key nobody knows"),
            ("zzz/\udcff\udcfe", b"\xff" * 10, "a key nobody knows, its name not UTF-8"),
            (keys.MEMBERS + "\udcff\udcfe", b"\xff" * 10,
             "a report under a host name that is not UTF-8"),
        ]
        key, value, what = unknown[v % len(unknown)]
        return Poison(key, value, what, own=False)
    # huge: near etcd's request limit, at a key of each size bound
    value = b'{"schema": 1, "pad": "' + b"x" * BIG + b'"}'
    places = [(keys.REGISTRY, True), (keys.member(host), True), (keys.LEADER, True),
              ("zzz/huge", False)]
    key, own = places[v % len(places)]
    return Poison(key, value, f"{key}: a {len(value):,}-byte value", own=own)


def forged_card(tag: str, host: str, admitted: int = 1) -> CardEntry:
    serial = f"FORGED-{tag}"
    identity = f"uuid:forged-{tag}"
    return CardEntry(
        id=regdoc.card_id(serial, "evil", identity), serial=serial, model="evil",
        identity=identity, host=host, name="x9", kind="nvme", state="in", health="ok",
        reason="", admitted=admitted, changed_generation=admitted,
        target=_target(FORGED_ADDR, tag))


def forged_registry(reg: Registry, index: int, hosts: tuple[str, ...],
                    pick: int) -> tuple[bytes, tuple[str, ...]]:
    """A well-formed registry built on ``reg``: its cards, admitted later than two forged
    cards that therefore claim the first slots (the real cards move), one on a host of the
    cluster that does not report it, one on a host that is not the cluster's; the generation
    ``AHEAD`` further. (value, forged card ids)."""
    host = sorted(hosts)[pick % len(hosts)]
    stranger = STRANGERS[pick % len(STRANGERS)]
    fakes = (forged_card(f"{index}a", host), forged_card(f"{index}b", stranger))
    cards = (*fakes, *(replace(c, admitted=c.admitted + 10) for c in reg.cards))
    fake = regdoc.with_slots(replace(reg, cards=cards, generation=reg.generation + AHEAD,
                                     slots=slotfn.EMPTY))
    return regdoc.encode(fake), tuple(c.id for c in fakes)


def stranger_report(pick: int, index: int, registry: Registry | None) -> Poison:
    """A well-formed report of a host that is not the cluster's, listing a card nobody
    configured (and, every other pick, a copy of a real card as well: admitting it would put
    the real card in conflict)."""
    host = STRANGERS[pick % len(STRANGERS)]
    serial, identity = f"EVIL-{index}", f"uuid:evil-{index}"
    cards = [reportdoc.ReportedCard(
        name="x0", kind="nvme", found=True, serial=serial, model="evil", identity=identity,
        device="nvme9n1", controller_state="live", healthy=True, reason="",
        target=_target(STRANGER_ADDR, str(index)))]
    copied = ""
    real = registry.cards if registry is not None else ()
    if pick % 2 and real:
        c = real[(pick // 2) % len(real)]
        cards.append(reportdoc.ReportedCard(
            name="x1", kind="nvme", found=True, serial=c.serial, model=c.model,
            identity=c.identity, device="nvme8n1", controller_state="live", healthy=True,
            reason="", target=_target(STRANGER_ADDR, f"{index}c")))
        copied = f" and a copy of card {c.id}"
    rep = reportdoc.HostReport(host=host, role="storage", version="9.9.9",
                               api=f"http://{STRANGER_ADDR}:9700", run="f0r9edf0r9ed", seq=1,
                               cards=tuple(cards))
    value = reportdoc.encode(rep)
    reportdoc.decode(value)                 # well-formed: what a reader of it would accept
    return Poison(keys.member(host), value,
                  f"report of {host} (no host of the cluster) listing card "
                  f"{regdoc.card_id(serial, 'evil', identity)}{copied}", own=False,
                  forged_cards=(regdoc.card_id(serial, "evil", identity),))
