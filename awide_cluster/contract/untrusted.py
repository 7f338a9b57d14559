"""Values read from etcd are untrusted: the one way from raw bytes to a JSON object.

Every document awide-cluster reads from etcd (registry, host reports, the leader, gateway,
layout and intent records) comes in through ``load``, which bounds the value *before* it is
parsed and refuses, with the document's own typed error (a ``BadValue``):

- a value longer than the document kind's byte bound (``Limits.max_bytes``; problem code
  ``value_too_large``);
- a value that is not UTF-8, or not a JSON object;
- brackets nested deeper than ``Limits.max_depth`` (checked by a linear scan of the brackets
  outside strings, without recursion, so that no parser ever recurses on it);
- ``NaN``, ``Infinity``, integers outside ``|n| < 2**53``, floats that are not finite or not
  within the same bound, numbers written with more than ``MAX_NUMBER_CHARS`` characters (Python
  refuses to convert integer texts over 4,300 digits with a ``ValueError`` of its own);
- an object that names one field twice.

Text fields are then checked by the decoders with ``check_text``/``Text``: bounded length, and
none of ``FORBIDDEN`` (C0 and C1 control characters, DEL, the Unicode line and paragraph
separators, bidirectional overrides and lone surrogates), so no value read from etcd can forge
or reorder a log line. ``clean_text`` is the writers' side of the same rule: what daemons and
gateways put into etcd goes through it, so they never write what a reader refuses.

The bounds and problem codes are listed in docs/registry.md ("Values read from etcd are
untrusted").
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, TypeAlias

from pydantic import AfterValidator, StringConstraints

from awide_cluster.contract import bounds
from awide_cluster.contract.keys import check_name

KiB = 1024
MiB = 1024 * KiB

# ---------------------------------------------------------------- problem codes

REGISTRY_CORRUPT = "registry_corrupt"
REPORT_CORRUPT = "report_corrupt"
LEADER_CORRUPT = "leader_corrupt"
GATEWAY_RECORD_CORRUPT = "gateway_record_corrupt"
LAYOUT_CORRUPT = "layout_corrupt"
INTENT_CORRUPT = "intent_corrupt"
HISTORY_CORRUPT = "history_corrupt"
WINDOWS_CORRUPT = "windows_corrupt"
WINDOW_REQUEST_CORRUPT = "window_request_corrupt"
VALUE_TOO_LARGE = "value_too_large"


# ---------------------------------------------------------------- bounds

@dataclass(frozen=True, slots=True)
class Limits:
    """What a value of one document kind may be before it is parsed."""

    max_bytes: int
    max_depth: int


# The byte bounds are the ones the store reads with (contract/bounds.py, one place): a value
# over them is refused by the store before it is even fetched whole, and by ``load`` here.
# The registry: 8 placed cards in the design, every card ever admitted and not forgotten in
# fact; a card entry is about 0.5 KiB with realistic texts.
REGISTRY_LIMITS = Limits(max_bytes=bounds.REGISTRY_MAX_BYTES, max_depth=16)
# A host report: at most 64 cards (the daemon config's bound); the writer fits its report in
# this bound whatever its probes say (daemon/reporter.py ``fit``).
REPORT_LIMITS = Limits(max_bytes=bounds.REPORT_MAX_BYTES, max_depth=16)
# The history ring: at most HISTORY_MAX_ENTRIES flat entries (contract/history_ring.py).
HISTORY_LIMITS = Limits(max_bytes=bounds.HISTORY_MAX_BYTES, max_depth=4)
# The leader, gateway, layout and intent records: a handful of short fields each.
RECORD_LIMITS = Limits(max_bytes=bounds.RECORD_MAX_BYTES, max_depth=8)

MAX_INT = 2**53                 # |n| < MAX_INT for every number (exact in a double)
MAX_NUMBER_CHARS = 40           # a number token longer than this is refused before conversion

# text bounds, in characters (docs/registry.md has the table)
NAME_MAX = 63                   # host, card name, card id, cluster, gateway id, namespace
SERIAL_MAX = 64
MODEL_MAX = 64
IDENTITY_MAX = 128
REASON_MAX = 1024               # a reason a daemon reports (card or probe)
REGISTRY_REASON_MAX = 2048      # a registry card's reason: the leader adds the host and card
CONFLICT_MAX = 4096             # why a card is in conflict (names the other cards)
UNPLACED_REASON_MAX = CONFLICT_MAX + 64     # "conflict: <conflict>" or "no free slot: ..."
TIME_TEXT_MAX = 64              # ISO-8601 times: since, written_at, changed_at, at
VERSION_MAX = 64
RUN_MAX = 64
API_MAX = 256
PATH_MAX = 4096                 # a directory card's path, a device
CONTROLLER_STATE_MAX = 32
PROBE_NAME_MAX = 32
BY_MAX = 128                    # who wrote an intent
INTENT_REASON_MAX = bounds.INTENT_REASON_MAX     # why (``--reason``)
HISTORY_REASON_MAX = 512        # a history entry's reason (the decision's words, cut)
ENGINE_MAX = 128
FINGERPRINT_MAX = 64
PLACEMENT_MAX = 32
KEY_SHOWN_MAX = 200             # of a key named in an error
REASON_SHOWN_MAX = 512          # of an error's reason

# list bounds
REGISTRY_CARDS_MAX = 1024       # a registry's cards (and unplaced entries)
REPORT_CARDS_MAX = 64           # a host report's cards (the daemon config's bound)
PROBES_MAX = 16                 # probe lines of one reported card (6 probes today)

# Unix seconds a time may be: 1970-01-01 .. 9999-12-31T23:59:59Z (what ``datetime`` holds).
TIME_MIN = 0.0
TIME_MAX = 253402300799.0

FORBIDDEN = re.compile(
    "[\x00-\x1f\x7f-\x9f"           # C0, DEL, C1 (newline, carriage return, escape, ...)
    "\u2028\u2029"                  # line and paragraph separators
    "\u202a-\u202e\u2066-\u2069"    # bidirectional embeddings, overrides and isolates
    "\ud800-\udfff]"                # lone surrogates (from "\\ud800" escapes)
)


# ---------------------------------------------------------------- the typed error

class BadValue(ValueError):
    """A value read from etcd that is not what its reader accepts.

    ``key`` is the etcd key relative to the cluster prefix ("" if unknown), ``reason`` a short
    text naming the field at fault, ``problem`` the status problem code. ``str()`` names both
    the key and the reason, and never carries a control character or more than a few hundred
    characters of what was read.
    """

    what: ClassVar[str] = "value"
    default_problem: ClassVar[str] = "value_corrupt"

    def __init__(self, reason: str = "", *, key: str = "", problem: str | None = None) -> None:
        self.reason = clean_text(reason, REASON_SHOWN_MAX)
        self.key = clean_text(key or "", KEY_SHOWN_MAX, replacement="?")
        self.problem = problem or self.default_problem
        super().__init__(self.reason)

    def __str__(self) -> str:
        where = f"{self.what} (key {self.key})" if self.key else self.what
        return f"{where}: {self.reason}"


# ---------------------------------------------------------------- text

def clean_text(value: object, limit: int, *, replacement: str = " ") -> str:
    """What a writer may put into etcd: every ``FORBIDDEN`` character replaced, at most
    ``limit`` characters (cut with "..."). Non-text values are written as their ``str()``."""
    text = value if isinstance(value, str) else str(value)
    if len(text) > limit:
        text = text[: max(0, limit - 3)] + "..."[: limit]
    return FORBIDDEN.sub(replacement, text)


def text_problem(value: str, limit: int, min_length: int = 0) -> str | None:
    """None if ``value`` is an acceptable text of at most ``limit`` characters; else why not."""
    if len(value) > limit:
        return f"longer than {limit} characters"
    if len(value) < min_length:
        return "empty" if min_length == 1 else f"shorter than {min_length} characters"
    bad = FORBIDDEN.search(value)
    if bad is not None:
        return f"contains the control character U+{ord(bad.group()):04X}"
    return None


def shown(value: object, limit: int = 40) -> str:
    """A read value as an error may show it: short, escaped, never a whole structure."""
    if value is None or isinstance(value, (bool, int, float)):
        text = repr(value)
    elif isinstance(value, str):
        text = repr(value[: limit + 1])
    else:
        return f"a {type(value).__name__}"
    return clean_text(text, limit)


def _printable(value: str) -> str:
    bad = FORBIDDEN.search(value)
    if bad is not None:
        raise ValueError(f"contains the control character U+{ord(bad.group()):04X}")
    return value


def _name(value: str) -> str:
    check_name("name", value)           # BadName is a ValueError: pydantic reports it
    return value


# a free text field's pydantic metadata: ``Annotated[str, chars(n), PRINTABLE]`` is a string
# of at most n characters, none ``FORBIDDEN``
PRINTABLE = AfterValidator(_printable)


def chars(max_length: int, min_length: int = 0) -> StringConstraints:
    """Pydantic metadata: a string of ``min_length..max_length`` characters."""
    return StringConstraints(min_length=min_length, max_length=max_length)


# a key-segment name (contract/keys.py): host, card name, card id, cluster
Name: TypeAlias = Annotated[str, StringConstraints(min_length=1, max_length=NAME_MAX),
                 AfterValidator(_name)]


# ---------------------------------------------------------------- numbers and times

def time_value(value: object) -> float | None:
    """Unix seconds from a number within TIME_MIN..TIME_MAX; None for anything else."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    ts = float(value)
    if not math.isfinite(ts) or not TIME_MIN <= ts <= TIME_MAX:
        return None
    return ts


# ---------------------------------------------------------------- parsing

class _Refused(Exception):
    """Raised by the parser's hooks; turned into the caller's BadValue by ``load``."""


def _refuse_constant(name: str) -> Any:
    raise _Refused(f"{name} is not a number JSON allows")


def _bounded_int(text: str) -> int:
    if len(text) > 17:                   # |n| < 2**53 has at most 16 digits and a sign
        raise _Refused(f"integer of {len(text)} characters is out of range")
    n = int(text)
    if not -MAX_INT < n < MAX_INT:
        raise _Refused(f"integer {n} is out of range (|n| < 2**53)")
    return n


def _bounded_float(text: str) -> float:
    if len(text) > MAX_NUMBER_CHARS:
        raise _Refused(f"number of {len(text)} characters is refused")
    x = float(text)
    if not math.isfinite(x) or not -MAX_INT < x < MAX_INT:
        raise _Refused(f"number {text} is out of range (finite, |x| < 2**53)")
    return x


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    d = dict(pairs)
    if len(d) != len(pairs):
        raise _Refused("an object names one field twice")
    return d


_ESCAPE = re.compile(r"\\.", re.DOTALL)           # a backslash and the character it escapes
_STRING = re.compile(r'"[^"]*"')                   # a string once escapes are gone
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_PAIR = re.compile(r"\[\]|\{\}")


def nesting_problem(text: str, max_depth: int) -> str | None:
    """None when the brackets outside strings of ``text`` balance and nest at most
    ``max_depth`` deep; else why not. Linear in ``len(text)`` per level, no recursion, no
    backtracking: escapes are dropped first (so strings hold no quote), then strings, then
    everything that is not a bracket; each pass then removes the innermost ``[]``/``{}``."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", _ESCAPE.sub("", text)))
    for _ in range(max_depth):
        if not brackets:
            return None
        brackets, removed = _PAIR.subn("", brackets)
        if not removed:
            return "value is not JSON: its brackets do not balance"
    if brackets:
        return f"brackets nested deeper than {max_depth} levels"
    return None


def load(raw: object, *, error: type[BadValue], limits: Limits, key: str = "") -> dict[str, Any]:
    """The JSON object in ``raw`` (bytes from etcd, or text), bounded before it is parsed.

    Raises ``error`` (a BadValue subclass) naming ``key`` and the reason, and nothing else."""
    if isinstance(raw, str):
        if len(raw) > limits.max_bytes:
            raise error(f"value of {len(raw)} characters is larger than "
                        f"{limits.max_bytes} bytes", key=key, problem=VALUE_TOO_LARGE)
        try:
            data = raw.encode("utf-8")
        except UnicodeEncodeError:
            raise error("value is not valid UTF-8 text", key=key) from None
    elif isinstance(raw, (bytes, bytearray, memoryview)):
        size = raw.nbytes if isinstance(raw, memoryview) else len(raw)
        if size > limits.max_bytes:
            raise error(f"value of {size} bytes is larger than {limits.max_bytes} bytes",
                        key=key, problem=VALUE_TOO_LARGE)
        data = bytes(raw)
    else:
        raise error(f"value is {type(raw).__name__}, not bytes", key=key)
    if len(data) > limits.max_bytes:
        raise error(f"value of {len(data)} bytes is larger than {limits.max_bytes} bytes",
                    key=key, problem=VALUE_TOO_LARGE)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise error(f"value is not UTF-8 (byte {e.start})", key=key) from None
    why = nesting_problem(text, limits.max_depth)
    if why is not None:
        raise error(why, key=key)
    try:
        doc = json.loads(text, parse_constant=_refuse_constant, parse_int=_bounded_int,
                         parse_float=_bounded_float, object_pairs_hook=_object)
    except _Refused as e:
        raise error(str(e), key=key) from None
    except ValueError as e:              # json.JSONDecodeError: names a position, no content
        raise error(f"value is not JSON: {e}", key=key) from None
    if not isinstance(doc, dict):
        raise error("value is not a JSON object", key=key)
    return doc
