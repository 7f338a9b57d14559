"""A card's flap-damping hold in the registry (``CardHold``) and its wire form: the ``hold``
field of a card entry (``contract/registry.py``), written only when there is one, so a
registry without holds is unchanged; read as untrusted, every field bounded."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import Field

from awide_cluster.contract import untrusted as u
from awide_cluster.contract.wire import _Strict

HOLD_LEVEL_MAX = 64
HOLD_SECONDS_MAX = 86400.0


@dataclass(frozen=True, slots=True)
class CardHold:
    """Flap damping: a card that went out several times within a window is held out when it
    returns, for a hold that doubles each time (``daemon/decision_damping.py``). Written by the
    leader so that a new leader keeps the hold; read as untrusted (bounded)."""

    level: int                      # holds in a row (1: the first); the next is twice as long
    seconds: float                  # this hold's length
    active: bool                    # held out now (or the hold ran out and waits its return)
    until: str = ""                 # the leader's wall clock when it ends, informational only
    reason: str = ""                # why it is held (outs within the window)

    def __post_init__(self) -> None:
        object.__setattr__(self, "reason", u.clean_text(self.reason, u.REGISTRY_REASON_MAX))
        object.__setattr__(self, "until", u.clean_text(self.until, u.TIME_TEXT_MAX))


class HoldDoc(_Strict):
    """The ``hold`` field of a card entry as read."""

    level: int = Field(ge=1, le=HOLD_LEVEL_MAX)
    seconds: float = Field(ge=0, le=HOLD_SECONDS_MAX, allow_inf_nan=False)
    active: bool
    until: Annotated[str, u.chars(u.TIME_TEXT_MAX), u.PRINTABLE] = ""
    reason: Annotated[str, u.chars(u.REGISTRY_REASON_MAX), u.PRINTABLE] = ""


def hold_from_doc(doc: HoldDoc | None) -> CardHold | None:
    """The hold of a checked card entry (None: the entry has none)."""
    if doc is None:
        return None
    return CardHold(level=doc.level, seconds=doc.seconds, active=doc.active, until=doc.until,
                    reason=doc.reason)


def hold_to_dict(h: CardHold) -> dict[str, Any]:
    """A hold as the registry writes it."""
    return {"level": h.level, "seconds": h.seconds, "active": h.active, "until": h.until,
            "reason": h.reason}
