"""``GatewayStats``: what ``ClusterGateway.stats()`` returns, for the host program's metrics."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GatewayStats:
    """Counters and staleness, for the host program's metrics."""

    generation: int                 # registry generation applied (0: none)
    staleness: float | None         # seconds since etcd last answered a poll (None: never)
    stale: bool
    problem: str                    # why the view is stale or a document was refused
    polls: int
    failed_polls: int
    registries_rejected: int        # corrupt, unknown schema, other cluster, version skew
    version_skew: int
    hostile_targets: int            # registry targets refused before any subprocess
    cards_refused: int              # wrong serial/model/identity/label
    registration_failures: int
    layout_ok: bool
    events_dropped: int
    loop_errors: int = 0            # exceptions the poll/registration loops survived
    watch_events: int = 0           # registry watch events taken (each checked like a poll)
    watch_restarts: int = 0         # registry watches opened again after they ended
    watch_progress: int = 0         # watch progress notifications taken
    watch_moves: int = 0            # watch streams moved to another member after a silence
    watch_member: str | None = None     # the member the registry watch streams from
    polls_skipped: int = 0          # turns whose poll was left out: the watch proved freshness
    history_resets: int = 0         # new etcd histories followed (restored or rebuilt etcd)
    history_note: str = ""          # why the last one was adopted ("" when none was)
    entries_refused: int = 0        # registry entries no host report vouched for (per change)
    refusals: tuple[str, ...] = ()  # the refusals in force: card, host, field, why
    state_file_age: float | None = None   # age (s) of the state file served (None: not served)
    state_note: str = ""            # what became of the state file (served, refused: why)
    layout_records_refused: int = 0     # layout records of its namespace that did not decode
    view_builds: int = 0            # slot views built (a change of the registry, the layout or
                                    # what a card's probe shows; none while nothing changes)
