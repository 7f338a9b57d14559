"""Text that goes from etcd or a subprocess into a log line, a report or an error message.

``safe_text`` makes it one printable line of bounded length: control characters (newline,
carriage return, escape, the C1 range, ...) become a space, so a value read from etcd cannot
forge a log line or a terminal escape, and nothing grows without bound.
"""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def safe_text(value: object, limit: int = 300) -> str:
    text = _CONTROL.sub(" ", str(value))
    return text if len(text) <= limit else text[: limit - 3] + "..."
