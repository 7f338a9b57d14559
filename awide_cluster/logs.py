"""Log lines on stderr, for a terminal or for journald (docs/operations.md, "Logs").

- ``text`` (default): ``TIME LEVEL LOGGER: message``;
- ``json``: one JSON object per line: ``level``, ``logger``, ``message``, ``time`` and the
  process's fields (``cluster``, ``host``, or ``gateway``) plus, where a line is about a card,
  ``card`` (its id) and ``card_host`` (from ``extra=``, else read from the message's
  ``card <id> (SERIAL on HOST)``); a traceback is ``exception``.

Under journald (``JOURNAL_STREAM`` names the device and inode of stderr, as systemd sets it
for a unit whose stderr is the journal) every line starts with the syslog priority ``<N>``
(``journalctl -p err`` finds the errors) and carries no time of its own (journald records
one); each line of a traceback carries the priority too.

Repeated lines are rate-limited (``RepeatFilter``, on the handler ``setup`` installs): the
same message from the same logger at the same level passes ``REPEAT_BURST`` times per
``REPEAT_WINDOW`` seconds; the first to pass after a window with suppressed copies says how
many there were (``(N more like it in the last T s)``). A flood (refused connections, a probe
that fails the same way every turn) costs a few lines a minute, not a line per event.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import IO, Literal

Format = Literal["text", "json"]
FORMATS: tuple[Format, ...] = ("text", "json")

# the attributes a log call may pass in ``extra=``; else json takes them from the message
CARD_FIELDS = ("card", "card_host")


_CARD = re.compile(r"\bcard (c[0-9a-f]{11})\b(?: \([^()]* on ([^\s()]+)\))?")


def card_fields(line: str) -> dict[str, str]:
    """The card a log line is about: the first ``card <id>`` it names and, when it follows as
    ``(SERIAL on HOST)`` (``reconcile.describe``, the leader's decisions), the card's host."""
    m = _CARD.search(line)
    if m is None:
        return {}
    return {"card": m.group(1)} | ({"card_host": m.group(2)} if m.group(2) else {})


def priority(levelno: int) -> int:
    """The syslog priority of a Python log level: critical 2, error 3, warning 4, info 6,
    debug (and below) 7."""
    if levelno >= logging.CRITICAL:
        return 2
    if levelno >= logging.ERROR:
        return 3
    if levelno >= logging.WARNING:
        return 4
    if levelno >= logging.INFO:
        return 6
    return 7


def under_journald(stream: IO[str], env: Mapping[str, str]) -> bool:
    """True when ``stream`` is the journal's stream: ``JOURNAL_STREAM`` is ``DEV:INODE`` of
    that very file (systemd's contract: a child that inherited the variable but writes
    elsewhere must not add priorities)."""
    value = env.get("JOURNAL_STREAM", "")
    dev, sep, ino = value.partition(":")
    if not sep or not dev.isdigit() or not ino.isdigit():
        return False
    try:
        st = os.fstat(stream.fileno())
    except (OSError, ValueError, AttributeError):
        return False
    return (st.st_dev, st.st_ino) == (int(dev), int(ino))


def _prefixed(text: str, levelno: int) -> str:
    p = f"<{priority(levelno)}>"
    return "\n".join(p + line for line in text.split("\n"))


class TextFormatter(logging.Formatter):
    def __init__(self, *, journald: bool) -> None:
        fmt = "%(levelname)s %(name)s: %(message)s"
        super().__init__(fmt if journald else "%(asctime)s " + fmt)
        self.journald = journald

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        return _prefixed(text, record.levelno) if self.journald else text


class JsonFormatter(logging.Formatter):
    def __init__(self, *, journald: bool, fields: Mapping[str, str] | None = None) -> None:
        super().__init__()
        self.journald = journald
        self.fields = dict(fields or {})

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, object] = {}
        if not self.journald:
            doc["time"] = datetime.fromtimestamp(record.created, UTC).isoformat(
                timespec="milliseconds")
        doc |= {"level": record.levelname.lower(), "logger": record.name,
                "message": record.getMessage(), **self.fields}
        given = {n: str(v) for n in CARD_FIELDS if (v := getattr(record, n, None))}
        doc.update(given or card_fields(record.getMessage()))
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        line = json.dumps(doc, ensure_ascii=False, default=str)   # newlines escaped: one line
        return f"<{priority(record.levelno)}>{line}" if self.journald else line


REPEAT_WINDOW = 30.0       # seconds of one window of an identical line
REPEAT_BURST = 10          # copies of an identical line let through in one window
REPEAT_KEYS_MAX = 1024     # distinct lines remembered; the oldest are forgotten beyond


class RepeatFilter(logging.Filter):
    """Let an identical line (logger, level, rendered message) through ``burst`` times per
    ``window`` seconds; count the others and say the count on the next one let through."""

    def __init__(self, window: float = REPEAT_WINDOW, burst: int = REPEAT_BURST, *,
                 clock: Callable[[], float] = time.monotonic,
                 keys_max: int = REPEAT_KEYS_MAX) -> None:
        super().__init__()
        self.window, self.burst, self.clock, self.keys_max = window, burst, clock, keys_max
        # line -> (window start, copies let through in it, copies suppressed in it)
        self._seen: dict[tuple[str, int, str], tuple[float, int, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info:                       # a traceback is never swallowed
            return True
        try:
            text = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad format is the handler's to report
            return True
        key = (record.name, record.levelno, text)
        now = self.clock()
        since, passed, dropped = self._seen.pop(key, (now, 0, 0))
        if now - since >= self.window:
            if dropped:
                record.msg = f"{text} ({dropped} more like it in the last {now - since:.0f} s)"
                record.args = None
            since, passed, dropped = now, 0, 0
        if passed >= self.burst:
            self._seen[key] = (since, passed, dropped + 1)
            return False
        self._seen[key] = (since, passed + 1, dropped)
        while len(self._seen) > self.keys_max:
            del self._seen[next(iter(self._seen))]
        return True


def setup(level: str, fmt: Format = "text", *, fields: Mapping[str, str] | None = None,
          stream: IO[str] | None = None, env: Mapping[str, str] | None = None) -> None:
    """Configure the root logger: ``level`` (debug, info, warning, error) to ``stream``
    (stderr) in ``fmt``; ``fields`` (e.g. cluster and host) go into every json line."""
    if fmt not in FORMATS:
        raise ValueError(f"log format {fmt!r}: expected one of {', '.join(FORMATS)}")
    stream = stream if stream is not None else sys.stderr
    journald = under_journald(stream, os.environ if env is None else env)
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter(journald=journald, fields=fields) if fmt == "json"
                         else TextFormatter(journald=journald))
    handler.addFilter(RepeatFilter())
    logging.basicConfig(level=getattr(logging, level.upper()), handlers=[handler], force=True)
