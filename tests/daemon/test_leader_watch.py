"""The leader-key watch's decision (pure): what a daemon does about what its watch of
``leader`` showed. Only the kind of the last event counts; a value is never looked at."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from awide_cluster.daemon.lease import KeyAction, key_seen, on_leader_key
from awide_cluster.store.types import KeyValue, WatchBatch, WatchEvent

SEEN = st.sampled_from(["put", "delete", "progress", "lost"])


@given(seen=SEEN, has_key=st.booleans(), lease_valid=st.booleans())
def test_only_a_vacated_or_unknown_key_makes_a_follower_campaign(seen, has_key, lease_valid):
    step = on_leader_key(seen, has_key=has_key, lease_valid=lease_valid)
    assert step.reason
    campaign = not has_key and lease_valid and seen in ("delete", "lost")
    assert (step.action is KeyAction.CAMPAIGN) == campaign
    # the holder re-reads its key on every event, never campaigns on one
    assert (step.action is KeyAction.VERIFY) == (has_key and seen != "progress")
    if seen == "progress" or (seen == "put" and not has_key):
        assert step.action is KeyAction.IGNORE


def test_a_deleted_key_is_taken_at_once_by_a_follower_with_a_lease():
    step = on_leader_key("delete", has_key=False, lease_valid=True)
    assert step.action is KeyAction.CAMPAIGN
    assert "vacated" in step.reason


def test_a_follower_without_a_confirmed_lease_waits_for_its_poll():
    step = on_leader_key("delete", has_key=False, lease_valid=False)
    assert step.action is KeyAction.IGNORE
    assert "lease" in step.reason


def kv(value: bytes, rev: int) -> KeyValue:
    return KeyValue(key="leader", value=value, create_revision=rev, mod_revision=rev,
                    version=1, lease=0)


@given(kinds=st.lists(st.sampled_from(["put", "delete"]), max_size=5),
       value=st.binary(max_size=64))
def test_the_batch_says_only_its_last_event_kind(kinds, value):
    events = tuple(WatchEvent(kind=k, kv=kv(value, i + 1)) for i, k in enumerate(kinds))
    seen = key_seen(WatchBatch(revision=len(kinds) + 1, events=events,
                               progress=not events))
    assert seen == (kinds[-1] if kinds else "progress")
