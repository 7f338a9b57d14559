"""Log lines: syslog priorities under journald, the JSON format, card fields (pure parts)."""

from __future__ import annotations

import io
import json
import logging
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from awide_cluster.logs import (
    JsonFormatter,
    RepeatFilter,
    TextFormatter,
    card_fields,
    priority,
    setup,
    under_journald,
)


def record(level: int, msg: str, **extra: object) -> logging.LogRecord:
    r = logging.LogRecord("awide_cluster.daemon", level, __file__, 1, msg, (), None)
    for k, v in extra.items():
        setattr(r, k, v)
    return r


@pytest.mark.parametrize(("level", "want"), [
    (logging.CRITICAL, 2), (logging.ERROR, 3), (logging.WARNING, 4), (logging.INFO, 6),
    (logging.DEBUG, 7), (5, 7)])
def test_priorities_are_syslogs(level, want):
    assert priority(level) == want


@given(st.integers(min_value=0, max_value=100))
def test_priority_falls_with_the_level(levelno):
    assert 2 <= priority(levelno) <= 7
    assert priority(levelno) >= priority(levelno + 10)


def test_journald_is_the_stream_journal_stream_names(tmp_path):
    with open(tmp_path / "err", "w") as f:
        st_ = os.fstat(f.fileno())
        assert under_journald(f, {"JOURNAL_STREAM": f"{st_.st_dev}:{st_.st_ino}"})
        assert not under_journald(f, {"JOURNAL_STREAM": f"{st_.st_dev}:{st_.st_ino + 1}"})
        assert not under_journald(f, {"JOURNAL_STREAM": "garbage"})
        assert not under_journald(f, {})
    assert not under_journald(io.StringIO(), {"JOURNAL_STREAM": "1:2"})


def test_text_under_journald_has_priorities_on_every_line_and_no_time():
    f = TextFormatter(journald=True)
    assert f.format(record(logging.WARNING, "card out")) == \
        "<4>WARNING awide_cluster.daemon: card out"
    assert f.format(record(logging.ERROR, "a\nb")).split("\n") == \
        ["<3>ERROR awide_cluster.daemon: a", "<3>b"]
    plain = TextFormatter(journald=False).format(record(logging.INFO, "x"))
    assert not plain.startswith("<") and plain.endswith(" INFO awide_cluster.daemon: x")


def test_json_is_one_object_per_line_with_the_fields():
    f = JsonFormatter(journald=False, fields={"cluster": "kv", "host": "s1"})
    line = f.format(record(logging.INFO, "card c0123456789a out\nsecond line",
                           card="c0123456789a", card_host="s2"))
    assert "\n" not in line
    doc = json.loads(line)
    assert doc["level"] == "info" and doc["logger"] == "awide_cluster.daemon"
    assert doc["message"] == "card c0123456789a out\nsecond line"
    assert (doc["cluster"], doc["host"], doc["card"], doc["card_host"]) == \
        ("kv", "s1", "c0123456789a", "s2")
    assert "time" in doc
    journal = JsonFormatter(journald=True).format(record(logging.ERROR, "x"))
    assert journal.startswith("<3>{") and "time" not in json.loads(journal[3:])


def test_card_fields_of_decision_lines():
    assert card_fields("card c0123456789a (SN-1 on s2) out after 3 bad polls") == \
        {"card": "c0123456789a", "card_host": "s2"}
    assert card_fields("intent drain for card c0123456789a ignored: not in the registry") == \
        {"card": "c0123456789a"}
    assert card_fields("registry generation 4 written (2 cards, 2 placed)") == {}


def test_setup_refuses_an_unknown_format():
    with pytest.raises(ValueError, match="log format 'xml'"):
        setup("info", "xml", stream=io.StringIO())


def test_json_reads_the_card_from_the_message_when_not_given():
    f = JsonFormatter(journald=False)
    r = logging.LogRecord("awide_cluster.daemon.leader", logging.INFO, __file__, 1,
                          "%s%s", ("card c0123456789a (SN-1 on s2) out: sick", ""), None)
    doc = json.loads(f.format(r))
    assert (doc["card"], doc["card_host"]) == ("c0123456789a", "s2")
    plain = json.loads(f.format(record(logging.INFO, "lease 1a granted")))
    assert "card" not in plain and "card_host" not in plain


def test_identical_lines_pass_a_burst_per_window_then_say_how_many_were_dropped():
    now = [0.0]
    f = RepeatFilter(window=30.0, burst=3, clock=lambda: now[0])

    def rec(msg: str, *args: object) -> logging.LogRecord:
        return logging.LogRecord("awide_cluster.api.server", logging.WARNING, __file__, 1, msg,
                                 args, None)

    passed = [f.filter(rec("refused %s", "10.0.0.9")) for _ in range(1000)]
    assert passed.count(True) == 3 and passed[:3] == [True] * 3
    assert f.filter(rec("refused %s", "10.0.0.8"))        # another line is its own
    now[0] = 31.0
    r = rec("refused %s", "10.0.0.9")
    assert f.filter(r) and r.getMessage() == "refused 10.0.0.9 (997 more like it in the last 31 s)"
    assert f.filter(rec("refused %s", "10.0.0.9"))        # a new window: its burst again


def test_a_traceback_is_never_dropped():
    f = RepeatFilter(window=30.0, burst=1, clock=lambda: 0.0)
    try:
        raise ValueError("x")
    except ValueError:
        import sys
        info = sys.exc_info()
    recs = [logging.LogRecord("a", logging.ERROR, __file__, 1, "boom", None, info)
            for _ in range(3)]
    assert all(f.filter(r) for r in recs)
