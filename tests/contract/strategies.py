"""Hypothesis strategies for registry cards (shared by the contract and daemon tests)."""

from __future__ import annotations

from functools import cache

from hypothesis import strategies as st

from awide_cluster.contract.registry import CardEntry, Registry, card_id, slot_table
from awide_cluster.contract.slots import EMPTY
from awide_cluster.contract.target import NvmeTarget

serials = st.sampled_from(["SN1", "SN2", "SN3", "SN4", "SN5", "SN6", "SN7", "SN8", "SN9",
                           "SN10", "SN11"])
hosts = st.sampled_from(["h1", "h2", "h3", "store-a.example"])
states = st.sampled_from(["in", "out", "drained"])
healths = st.sampled_from(["ok", "sick", "unknown"])
texts = st.text(max_size=30)
# what a reader accepts in a text field (contract/untrusted.py FORBIDDEN excluded)
printable = st.characters(
    blacklist_categories=("Cc", "Cs", "Zl", "Zp"),
    blacklist_characters="\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
# key-segment names (contract/keys.py)
names = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}", fullmatch=True)


# The strategies a draw uses are built once here, not on every draw: building one anew costs
# its validation on each draw (most of a property test's time), and draws the same values.
_models = st.sampled_from(["M1", "ADP card", ""])
_identities = st.uuids().map(str)
_kinds = st.sampled_from(["nvme", "dir"])
_target_hosts = st.sampled_from(["10.0.0.1", "fd00::1", "store-a"])
_ports = st.integers(1, 65535)
_dir_names = st.text(alphabet="abc012", min_size=1, max_size=6)
_card_names = st.sampled_from(["card0", "card1", "c-2"])
_counts = st.integers(0, 50)
_times = st.sampled_from(["", "2026-01-01T00:00:00+00:00"])
_conflicts = st.one_of(st.none(), texts.filter(bool))


@st.composite
def cards(draw) -> CardEntry:
    serial = draw(serials)
    model = draw(_models)
    identity = draw(_identities)
    kind = draw(_kinds)
    host = draw(hosts)
    target = None
    path = None
    if kind == "nvme":
        target = NvmeTarget("tcp", draw(_target_hosts), draw(_ports),
                            f"nqn.2024-01.io.awide:{serial.lower()}")
    else:
        path = "/srv/cards/" + draw(_dir_names)
    return CardEntry(
        id=card_id(serial, model, identity), serial=serial, model=model, identity=identity,
        host=host, name=draw(_card_names), kind=kind,
        state=draw(states), health=draw(healths), reason=draw(texts),
        admitted=draw(_counts), changed_generation=draw(_counts),
        changed_at=draw(_times),
        target=target, path=path,
        conflict=draw(_conflicts),
    )


@cache
def _card_lists(max_cards: int) -> st.SearchStrategy[list[CardEntry]]:
    return st.lists(cards(), max_size=max_cards, unique_by=lambda c: c.id)


@st.composite
def registries(draw, max_cards: int = 11) -> Registry:
    cs = draw(_card_lists(max_cards))
    table = slot_table(tuple(cs), EMPTY)
    return Registry(cluster="c1", generation=draw(st.integers(0, 10**6)),
                    leader=draw(hosts), cards=tuple(cs), slots=table,
                    written_at=draw(_times))
