"""A real daemon's log lines: with its stderr as the journal's stream (``JOURNAL_STREAM`` names
it) every line starts with the syslog priority of its level and carries no time; with
``--log-format json`` (here ``AWIDE_LOG_FORMAT``) every line is one JSON object, and the
leader's decision about a card carries the card's id and host."""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path

from awide_harness.cluster import DEFAULT_COMMANDS, EmbeddedCluster
from awide_harness.spec import ClusterSpec, Command, Timing
from awide_harness.views import card_out
from tests.timing import bound, wait_until_sync

from .support import etcd_or_skip

PRIORITY = {"CRITICAL": "2", "ERROR": "3", "WARNING": "4", "INFO": "6", "DEBUG": "7"}


def spec(cluster: str, env: dict[str, str], *extra: str) -> ClusterSpec:
    daemon = DEFAULT_COMMANDS["daemon"]
    return ClusterSpec(cluster=cluster, storage_hosts=1, cards_per_host=1, witness_hosts=0,
                       gateways=1, timing=Timing.quick(),
                       commands={"daemon": Command((*daemon.argv, *extra), env)})


def lines(path: Path) -> list[str]:
    return [x for x in path.read_text(errors="replace").splitlines() if x.strip()]


def test_under_journald_each_line_has_its_priority_and_no_time(tmp_path):
    etcd_or_skip()
    log = tmp_path / "logs" / "daemon-s1.log"          # the launcher appends to this file
    log.parent.mkdir(parents=True)
    log.touch()
    st = os.stat(log)
    env = {"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"}
    with EmbeddedCluster(tmp_path, spec("journal", env, "--log-level", "debug")) as c:
        c.config_path("s1").write_text("cluster: [not, a, config]\n")
        c.daemon_signal("s1", signal.SIGHUP)                # reload refused: an error line
        wait_until_sync(lambda: any(x.startswith("<3>ERROR") for x in lines(log)), 10.0,
                        "the refused reload logged as an error")
    got = lines(log)
    assert got
    bad = [x for x in got if not re.match(r"<[2-7]>", x)]
    assert not bad, bad[:5]
    first = [x for x in got if re.match(r"<[2-7]>[A-Z]+ ", x)]
    assert first, got[:5]
    for x in first:
        level = x[3:].split(" ", 1)[0]
        assert PRIORITY[level] == x[1], x
    assert {x[1] for x in first} >= {"3", "6", "7"}
    assert not [x for x in got if re.match(r"<\d>\d{4}-\d\d-\d\d", x)], "a time of its own"


def test_json_lines_parse_and_a_card_decision_names_the_card(tmp_path):
    etcd_or_skip()
    env = {"AWIDE_LOG_FORMAT": "json", "JOURNAL_STREAM": "0:0"}   # not its stderr: no prefix
    with EmbeddedCluster(tmp_path, spec("jsonlogs", env)) as c:
        key = c.cards[0]
        cid = c.card_id(key)
        c.card_store_kill(key)
        c.wait_until(card_out(cid), bound(10.0))
        log = tmp_path / "logs" / "daemon-s1.log"

        def about_card() -> list[dict[str, object]]:
            docs = [json.loads(x) for x in lines(log)]
            return [d for d in docs if d.get("card") == cid and "out" in str(d["message"])]

        found = wait_until_sync(about_card, 10.0, "the leader's line about the card")
    docs = [json.loads(x) for x in lines(log)]            # every line is one JSON object
    assert docs
    for d in docs:
        assert {"time", "level", "logger", "message"} <= set(d), d
        assert (d["cluster"], d["host"]) == ("jsonlogs", "s1"), d
    assert found[0]["card_host"] == "s1" and found[0]["level"] == "warning"
