"""etcd releases with known authentication bypasses, and whether a member's version is one.

With authentication on, etcd 3.5 before 3.5.9 and 3.4 before 3.4.26 answer some requests
without checking the caller (lease time-to-live leaks key names, CVE-2023-32082; members and
compaction are not checked either). Only clusters with authentication on have something to
bypass: readers judge versions only then (``status``, the daemon). Pure.
"""

from __future__ import annotations

import re

# (CVE, what it lets an unauthenticated client do, {series: first fixed release})
ADVISORIES: tuple[tuple[str, str, dict[tuple[int, int], tuple[int, int, int]]], ...] = (
    ("CVE-2023-32082", "lease requests answered without authentication, leaking key names",
     {(3, 4): (3, 4, 26), (3, 5): (3, 5, 9)}),
)
_VERSION = re.compile(r"^v?(\d{1,4})\.(\d{1,4})\.(\d{1,4})")


def parse(version: str) -> tuple[int, int, int] | None:
    """``3.5.1`` (or ``v3.5.1``, ``3.5.1-rc.0``) -> (3, 5, 1); None when not a version."""
    m = _VERSION.match(version.strip())
    return (int(m[1]), int(m[2]), int(m[3])) if m else None


def _text(v: tuple[int, int, int]) -> str:
    return ".".join(map(str, v))


def advisories(version: str) -> tuple[str, ...]:
    """One line per known bypass that a member of ``version`` has: the CVE and the fixed
    release to install. Nothing for an unreadable version or a series newer than those
    listed (3.6 and later carry the fixes)."""
    v = parse(version)
    if v is None:
        return ()
    out = []
    for cve, what, fixed in ADVISORIES:
        series = fixed.get((v[0], v[1]))
        newest = max(fixed.values())
        if series is not None and v < series:
            out.append(f"etcd {_text(v)} has {cve} ({what}): fixed in {_text(series)}")
        elif series is None and v < min(fixed.values()):
            out.append(f"etcd {_text(v)} has {cve} ({what}): no fixed {v[0]}.{v[1]} release, "
                       f"install {_text(newest)} or later")
    return tuple(out)


def note(versions: dict[str, str]) -> str:
    """member (endpoint or name) -> version, as one line naming the vulnerable ones ("" when
    none is)."""
    bad: dict[str, list[str]] = {}
    for member, version in sorted(versions.items()):
        for line in advisories(version):
            bad.setdefault(line, []).append(member)
    return "; ".join(f"{', '.join(ms)}: {line}" for line, ms in bad.items())
