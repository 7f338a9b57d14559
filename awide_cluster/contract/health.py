"""Health hysteresis: one pure function, used by the leader (registry state of each card) and
by each gateway (its own view of each card's path).

A card goes out after ``sick_polls`` bad observations in a row and comes back after
``healthy_polls`` good ones in a row (1 by default: as soon as it is healthy). ``None`` is no
observation at all (e.g. the observer's own read failed): it changes nothing, because
"unreachable is not empty".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True, slots=True)
class Hysteresis:
    up: bool = True                 # in service as far as health goes
    bad: int = 0                    # consecutive bad observations
    good: int = 0                   # consecutive good observations
    reason: str = ""                # reason of the latest bad observation

    @property
    def state(self) -> Literal["in", "out"]:
        return "in" if self.up else "out"


def tally(
    h: Hysteresis, good: bool | None, *, sick_polls: int, healthy_polls: int = 1,
    reason: str = "",
) -> Hysteresis:
    if sick_polls < 1 or healthy_polls < 1:
        raise ValueError("sick_polls and healthy_polls must be at least 1")
    if good is None:
        return h
    if good:
        streak = h.good + 1
        up = h.up or streak >= healthy_polls
        return Hysteresis(up=up, bad=0, good=streak, reason="")
    bad = h.bad + 1
    up = h.up and bad < sick_polls
    return Hysteresis(up=up, bad=bad, good=0, reason=reason)
