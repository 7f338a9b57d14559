"""What status judges: one bounded read of etcd (``RawSnapshot``, filled by ``gather``) and the
thresholds it judges by (``StatusPolicy``). Plain frozen values, no I/O."""

from __future__ import annotations

from dataclasses import dataclass

from awide_cluster.store.types import Alarm, EndpointStatus, KeyValue, Member, Refusal


@dataclass(frozen=True, slots=True)
class EndpointAnswer:
    endpoint: str
    status: EndpointStatus | None
    error: str = ""
    quota: int | None = None    # the member's backend quota, None: not read (its /metrics)


@dataclass(frozen=True, slots=True)
class RawSnapshot:
    cluster: str
    endpoints: tuple[str, ...]
    answers: tuple[EndpointAnswer, ...]
    members: tuple[Member, ...] | None
    members_error: str
    kvs: tuple[KeyValue, ...] | None       # every key under the prefix; None: the read failed
    read_error: str
    revision: int | None
    wall: float                            # time.time() of the read
    mono: float                            # monotonic time of the read (ages)
    refused: tuple[Refusal, ...] = ()      # keys whose value was over the read's bound
    key_count: int | None = None           # more keys than the read's bound: how many in all
    # with key_count: (folder, keys in it) of each folder of the layout
    folder_counts: tuple[tuple[str, int], ...] = ()
    alarms: tuple[Alarm, ...] | None = ()  # etcd's alarm list; None: the read failed
    alarms_error: str = ""

    @property
    def unreachable(self) -> bool:
        """Nothing answered at all: no endpoint status and no key read."""
        return self.kvs is None and not any(a.status is not None for a in self.answers)


@dataclass(frozen=True, slots=True)
class StatusPolicy:
    stale_after: float = 3.0     # a report unchanged this long is stale (3 polls)
    behind_grace: float = 3.0    # a gateway may lag a registry generation younger than this
    # the hosts the operator's config lists (a daemon config's ``hosts``; () with --endpoints):
    # with the registry's hosts, every host status expects a report from
    hosts: tuple[str, ...] = ()
    # this reader authenticates to etcd (a username): authentication is on, so members with
    # known authentication bypasses are warned about (``etcd_vulnerable``)
    auth: bool = False
