"""How much is read from etcd, per key of the layout (docs/store.md, "Bounds of the layout").

Everything read from etcd is untrusted: a value over its bound is refused by name (never
decoded), a folder with more keys than its bound is said to be so (never cut silently).
The bounds come from the contract, with a margin over the largest value a writer of this
project produces:

- a host report (``members/<host>``): 8 cards with every text field at its schema maximum
  encode to 113 KiB; a real one with 8 cards is about 7 KiB, with 64 cards about 52 KiB;
- the registry: a card entry is about 0.4 KiB (5.7 KiB with every field at its maximum);
  512 KiB holds 512 real cards, or 64 cards at their maximum, for 8 slots;
- the small records (``leader``, ``gateways/<id>``, ``layouts/<ns>``, ``intents/<card>``):
  readers keep at most 256 characters of a text field; a gateway record with every field at
  that maximum is 1.8 KiB;
- the history (``history``): at most ``HISTORY_MAX_ENTRIES`` entries and ``HISTORY_MAX_BYTES``
  encoded (the leader drops the oldest entries to stay within both); an entry is about 0.3 KiB
  with realistic texts (1.3 KiB with every text at its maximum), so 500 real ones fit;
- key counts: hosts are designed for up to 64 (``members/`` bound 128), intents are consumed
  each leader cycle (64 per cycle, the rest the next), everything under the cluster prefix
  (what ``status`` reads) 2048 keys.
"""

from __future__ import annotations

from awide_cluster.contract import keys

KIB = 1024

# why (``--reason``) an intent or a window is asked: characters (``untrusted.INTENT_REASON_MAX``;
# here, free of pydantic, for the CLI's help text)
INTENT_REASON_MAX = 256

# 64 cards with every text at its longest fit (daemon/reporter.py fit)
REPORT_MAX_BYTES = 512 * KIB
REGISTRY_MAX_BYTES = 512 * KIB
RECORD_MAX_BYTES = 4 * KIB
HISTORY_MAX_BYTES = 256 * KIB
HISTORY_MAX_ENTRIES = 500
# the windows record (``windows``): a pause, and at most WINDOWS_MAX_HOSTS hosts in maintenance
# and WINDOWS_MAX_CARDS cards silenced, each about 0.5 KiB with every text at its maximum
WINDOWS_MAX_BYTES = 128 * KIB
WINDOWS_MAX_HOSTS = 64
WINDOWS_MAX_CARDS = 128

MEMBERS_MAX_KEYS = 128
INTENTS_MAX_KEYS = 64
CLUSTER_MAX_KEYS = 2048        # every key under the cluster prefix (status)


def value_bound(key: str) -> int:
    """The bound of the value at ``key`` (relative to the cluster prefix); keys outside the
    layout get the small records' bound."""
    if key.startswith(keys.MEMBERS):
        return REPORT_MAX_BYTES
    if key == keys.REGISTRY:
        return REGISTRY_MAX_BYTES
    if key == keys.HISTORY:
        return HISTORY_MAX_BYTES
    if key == keys.WINDOWS:
        return WINDOWS_MAX_BYTES
    return RECORD_MAX_BYTES


def too_large(size: int, limit: int) -> str:
    """The reason a value over its bound is refused (the same words everywhere)."""
    return f"value over {limit} bytes ({size} bytes)"
