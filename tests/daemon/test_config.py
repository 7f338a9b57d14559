"""The daemon config: every invalid case names the file, the field and the reason (exit 78)."""

from __future__ import annotations

import copy
import socket
import subprocess
import sys
import time

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from awide_cluster.cli.main import cli
from awide_cluster.config import daemon as daemon_config
from awide_cluster.config.common import ConfigError

BASE = {
    "cluster": "c1", "host": "h1", "hosts": ["h1", "h2", "h3"], "role": "storage",
    "etcd": {"endpoints": ["http://127.0.0.1:2379", "http://127.0.0.1:2380"]},
    "timing": {"poll_interval": 1.0, "lease_ttl": 5, "sick_polls": 3, "healthy_polls": 1},
    "cards": [
        {"name": "c0", "kind": "dir", "path": "/srv/c0", "store": {"tcp": "127.0.0.1:7000"}},
        {"name": "n0", "kind": "nvme", "serial": "SN1",
         "target": {"transport": "tcp", "traddr": "10.0.0.1", "trsvcid": 4420,
                    "subnqn": "nqn.2024-01.io.awide:sub1"},
         "store": {"systemd_unit": "awide-store@n0.service"}},
    ],
}


def with_(path: str, value, base=BASE) -> dict:
    d = copy.deepcopy(base)
    *parents, last = path.split(".")
    cur = d
    for p in parents:
        cur = cur[int(p)] if isinstance(cur, list) else cur[p]
    if value is DELETE:
        del cur[last]
    elif isinstance(cur, list):
        cur[int(last)] = value
    else:
        cur[last] = value
    return d


DELETE = object()

BAD = [
    # (case, data, field expected, words expected in the reason)
    ("missing cluster", with_("cluster", DELETE), "cluster", "Field required"),
    ("bad cluster name", with_("cluster", "a/b"), "cluster", "not a valid name"),
    ("bad host name", with_("host", "h 1"), "host", "not a valid name"),
    ("missing hosts", with_("hosts", DELETE), "hosts", "Field required"),
    ("host not in hosts", with_("hosts", ["h2", "h3"]), "hosts", "not in hosts"),
    ("bad name in hosts", with_("hosts", ["h1", "h\n2"]), "hosts", "not a valid name"),
    ("host listed twice", with_("hosts", ["h1", "h1"]), "hosts", "twice"),
    ("unknown role", with_("role", "gateway"), "role", "storage"),
    ("unknown key", with_("colour", "red"), "colour", "Extra inputs"),
    ("typo in timing", with_("timing.poll", 1), "timing.poll", "Extra inputs"),
    ("no endpoints", with_("etcd.endpoints", []), "etcd.endpoints", "at least 1"),
    ("endpoint not a URL", with_("etcd.endpoints", ["10.0.0.1:2379"]), "etcd.endpoints",
     "http(s)://HOST:PORT"),
    ("hedge not below call", with_("etcd.hedge_after", 0.6), "etcd", "hedge_after"),
    ("poll zero", with_("timing.poll_interval", 0), "timing.poll_interval", "greater"),
    ("lease too short", with_("timing.lease_ttl", 2), "timing.lease_ttl",
     "not longer than poll_interval + 2 x etcd.call_timeout"),
    ("lease equal to floor", with_("etcd", {"endpoints": ["http://a:1"], "call_timeout": 1.0},
                                   with_("timing.lease_ttl", 3)), "timing.lease_ttl",
     "= 3 s"),
    ("lease fractional", with_("timing.lease_ttl", 2.5), "timing.lease_ttl", "integer"),
    ("sick_polls zero", with_("timing.sick_polls", 0), "timing.sick_polls", "greater"),
    ("progress notify zero", with_("timing.etcd_progress_notify", 0),
     "timing.etcd_progress_notify", "greater than or equal to 0.1"),
    ("progress notify a duration", with_("timing.etcd_progress_notify", "10s"),
     "timing.etcd_progress_notify", "valid number"),
    ("progress notify over 10 min", with_("timing.etcd_progress_notify", 601),
     "timing.etcd_progress_notify", "less than or equal to 600"),
    ("healthy_polls zero", with_("timing.healthy_polls", 0), "timing.healthy_polls", "greater"),
    ("bad api listen", with_("api", {"listen": "localhost"}), "api.listen", "HOST:PORT"),
    ("witness with cards", with_("role", "witness"), "cards", "witness"),
    ("duplicate card names", with_("cards.1.name", "c0",
                                   with_("cards.1", {"name": "c0", "kind": "dir",
                                                     "path": "/srv/c9"})),
     "cards.1.name", "already used"),
    ("duplicate dir paths", with_("cards.1", {"name": "c1", "kind": "dir", "path": "/srv/c0"}),
     "cards.1.path", "already used"),
    ("duplicate nvme serial", with_("cards.0", {"name": "n9", "kind": "nvme", "serial": "SN1"}),
     "cards.1.serial", "already used"),
    ("card kind", with_("cards.0.kind", "tape"), "cards.0.kind", "dir"),
    ("dir card relative path", with_("cards.0.path", "srv/c0"), "cards.0", "absolute"),
    ("nvme card without serial", with_("cards.1.serial", DELETE), "cards.1", "serial"),
    ("bad target", with_("cards.1.target.subnqn", "nqn,evil=1"), "cards.1.target", "subnqn"),
    ("two store probes", with_("cards.0.store", {"tcp": "a:1", "http": "http://a/"}),
     "cards.0.store", "exactly one"),
    ("probe longer than sick window", with_("cards.0.probe_timeout", 3.0),
     "cards.0.probe_timeout", "sick_polls x poll_interval"),
    ("relative sysfs", with_("sysfs_root", "sys"), "sysfs_root", "absolute"),
    ("dev_cluster not bool", with_("dev_cluster", "maybe"), "dev_cluster", "boolean"),
    # plain http to etcd (docs/security.md)
    ("plain http to another host", with_("etcd.endpoints", ["http://127.0.0.1:2379",
                                                            "http://10.0.0.2:2379"]),
     "etcd.endpoints.1", "allow_plaintext"),
    ("plain http to an IPv6 host", with_("etcd.endpoints", ["http://[fd00::2]:2379"]),
     "etcd.endpoints.0", "plain http to another host"),
    ("TLS with an http endpoint", with_("etcd.tls", {"ca_file": __file__},
                                        with_("etcd.allow_plaintext", True)),
     "etcd.tls", "endpoint 0 'http://127.0.0.1:2379' is plain http"),
    ("password with an http endpoint", with_("etcd.password", "pw", with_("etcd.username", "u",
                                             with_("dev_cluster", True))),
     "etcd.password", "would travel in clear"),
    ("password file with an http endpoint", with_("etcd.password_file", __file__,
                                                  with_("etcd.username", "u")),
     "etcd.password_file", "every endpoint must be https://"),
    ("credentials in an endpoint", with_("etcd.endpoints", ["https://u:pw@10.0.0.1:2379"]),
     "etcd.endpoints", "https://***@10.0.0.1:2379"),
]


@pytest.mark.parametrize("case,data,field,words", BAD, ids=[b[0] for b in BAD])
def test_invalid_config_names_field_and_reason(case, data, field, words) -> None:
    with pytest.raises(ConfigError) as e:
        daemon_config.parse(data, "f.yaml")
    assert e.value.file == "f.yaml"
    assert e.value.field == field, str(e.value)
    assert words in e.value.reason, str(e.value)
    assert str(e.value).startswith(f"f.yaml: {field}: ")


def test_good_config_and_defaults() -> None:
    cfg = daemon_config.parse(BASE)
    assert cfg.api.listen == "127.0.0.1:9700" and cfg.timing.lease_ttl == 5
    assert str(cfg.sysfs_root) == "/sys" and cfg.nvme_program == "nvme"
    me = socket.gethostname().split(".")[0]
    minimal = daemon_config.parse({"cluster": "c1", "role": "witness", "hosts": [me],
                                   "etcd": {"endpoints": ["http://localhost:2379"]}})
    assert minimal.host == socket.gethostname().split(".")[0] and minimal.cards == ()


def test_watch_stall_bounds_follow_the_progress_notify_interval() -> None:
    """Default 1.4 s (the deploy's and the test etcd's): the idle leader-key watch's bound is
    three notifications, 4.2 s; the members/ watch, fed by every host's report each poll, has a
    bound of 1.5 polls (never under 1 s): 1.5 s, under the 2 s after a fault at which a sick
    card's third report is due at the earliest. Slower notifications stretch the leader-key
    watch's bound alike; quicker ones never bring it under 3 s."""
    cfg = daemon_config.parse(BASE)
    assert cfg.timing.etcd_progress_notify == 1.4
    assert cfg.timing.leader_watch_stall == pytest.approx(4.2)
    assert cfg.timing.reports_watch_stall == 1.5
    assert cfg.timing.reports_watch_stall < (cfg.timing.sick_polls - 1) * cfg.timing.poll_interval
    ten = daemon_config.parse(with_("timing.etcd_progress_notify", 10))
    assert ten.timing.leader_watch_stall == 30.0
    assert ten.timing.reports_watch_stall == 1.5
    slow_poll = daemon_config.parse(with_("timing", {"poll_interval": 2.0, "lease_ttl": 5,
                                                     "etcd_progress_notify": 10}))
    assert slow_poll.timing.reports_watch_stall == 3.0
    fast = daemon_config.parse(with_("timing.etcd_progress_notify", 0.5))
    assert fast.timing.leader_watch_stall == 3.0
    assert fast.timing.reports_watch_stall == 1.0


@given(notify=st.floats(min_value=0.1, max_value=600.0),
       poll=st.floats(min_value=0.05, max_value=60.0))
def test_a_watch_outlasts_three_silent_notifications_or_polls(notify: float, poll: float
                                                              ) -> None:
    """The leader-key watch outlasts three silent notifications; the members/ watch, fed
    each poll, 1.5 silent polls or notifications (the shorter), never less than 1 s."""
    t = daemon_config.TimingSection(poll_interval=poll, etcd_progress_notify=notify)
    assert t.leader_watch_stall >= max(3.0, 3 * notify)
    assert t.leader_watch_stall >= t.reports_watch_stall >= 1.0
    assert t.reports_watch_stall >= 1.5 * min(poll, notify)
    assert t.reports_watch_stall <= max(1.0, 1.5 * poll)


def test_reload_refuses_fields_that_need_a_restart() -> None:
    a = daemon_config.parse(BASE)
    b = daemon_config.parse(with_("timing.sick_polls", 5, with_("host", "h2")))
    assert daemon_config.reload_problems(a, b) == ["host"]
    assert daemon_config.reload_problems(a, daemon_config.parse(
        with_("timing.sick_polls", 5))) == []


@pytest.mark.parametrize("text,field,words", [
    ("cluster: [unclosed", "line 1", "not valid YAML"),
    ("- a list\n- not a mapping\n", "-", "mapping"),
    ("", "-", "mapping"),
])
def test_unreadable_files(tmp_path, text, field, words) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(text)
    res = CliRunner().invoke(cli, ["check-config", str(f)])
    assert res.exit_code == 78
    assert res.output.startswith(f"{f}: {field}: ") and words in res.output


def test_missing_file(tmp_path) -> None:
    res = CliRunner().invoke(cli, ["check-config", str(tmp_path / "nope.yaml")])
    assert res.exit_code == 78 and "cannot read the file" in res.output


def test_check_config_ok(tmp_path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(yaml.safe_dump(BASE))
    res = CliRunner().invoke(cli, ["check-config", str(f)])
    assert res.exit_code == 0 and "ok (cluster c1, host h1, storage, 2 card(s))" in res.output


def test_run_with_a_bad_file_exits_2_before_touching_etcd(tmp_path) -> None:
    """A listener stands in for etcd: ``run`` must not connect to it at all."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.settimeout(0.2)
    port = srv.getsockname()[1]
    f = tmp_path / "bad.yaml"
    f.write_text(yaml.safe_dump(with_("timing.lease_ttl", 1, with_(
        "etcd.endpoints", [f"http://127.0.0.1:{port}"]))))
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c",
                           "from awide_cluster.cli.main import main; main()",
                           "run", "--config", str(f)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 78
    assert done.stderr.strip() == (
        f"{f}: timing.lease_ttl: 1 s is not longer than poll_interval + 2 x etcd.call_timeout "
        "= 1 + 2 x 0.5 = 2 s: the lease could expire between two keepalives of a healthy daemon")
    with pytest.raises(TimeoutError):
        srv.accept()                                   # nobody connected
    srv.close()
    assert time.monotonic() - started < 30


@pytest.mark.parametrize("endpoints,extra", [
    (["http://127.0.0.1:2379", "http://[::1]:2379", "http://localhost:2379"], {}),
    (["http://10.0.0.1:2379"], {"dev_cluster": True}),
    (["http://10.0.0.1:2379"], {"etcd.allow_plaintext": True}),
    (["https://10.0.0.1:2379"], {}),
], ids=["loopback", "dev cluster", "opt-out", "https"])
def test_plain_http_is_accepted_only_where_it_is_safe_or_said(endpoints, extra) -> None:
    data = with_("etcd.endpoints", endpoints)
    for path, value in extra.items():
        data = with_(path, value, data)
    assert daemon_config.parse(data).etcd.endpoints == endpoints


def test_check_config_warns_about_the_plaintext_opt_out(tmp_path) -> None:
    data = with_("etcd.allow_plaintext", True, with_("etcd.endpoints", ["http://10.0.0.1:2379"]))
    f = tmp_path / "c.yaml"
    f.write_text(yaml.safe_dump(data))
    res = CliRunner().invoke(cli, ["check-config", str(f)])
    assert res.exit_code == 0, res.output
    assert "WARNING: etcd.allow_plaintext is true" in res.stderr
    assert "http://10.0.0.1:2379 is NOT encrypted" in res.stderr
    f.write_text(yaml.safe_dump(with_("etcd.allow_plaintext", False, data)))
    res = CliRunner().invoke(cli, ["check-config", str(f)])
    assert res.exit_code == 78
    assert f"{f}: etcd.endpoints.0: http://10.0.0.1:2379 is plain http" in res.stderr
    f.write_text(yaml.safe_dump(BASE))               # loopback only: nothing to warn about
    res = CliRunner().invoke(cli, ["check-config", str(f)])
    assert res.exit_code == 0 and "WARNING" not in res.stderr, res.stderr


def test_status_and_gateway_check_config_warn_about_the_opt_out_too(tmp_path) -> None:
    # 192.0.2.1 (TEST-NET-1) answers nothing: status is unhealthy after one bounded call,
    # and has said WARNING before it
    daemon = with_("etcd", {"endpoints": ["http://192.0.2.1:2379"], "allow_plaintext": True,
                            "call_timeout": 0.2, "hedge_after": 0.05})
    f = tmp_path / "c.yaml"
    f.write_text(yaml.safe_dump(daemon))
    res = CliRunner().invoke(cli, ["status", "--config", str(f)])
    assert res.exit_code != 0
    assert "WARNING: etcd.allow_plaintext is true" in res.stderr, res.stderr
    gw = {"mode": "cluster", "cluster": "c1", "host": "gpu1", "pod": "vllm-0",
          "etcd": {"endpoints": ["http://10.0.0.1:2379"], "allow_plaintext": True},
          "model": {"name": "m"}}
    g = tmp_path / "gw.yaml"
    g.write_text(yaml.safe_dump(gw))
    res = CliRunner().invoke(cli, ["gateway", "check-config", str(g)])
    assert res.exit_code == 0, res.output
    assert "WARNING: etcd.allow_plaintext is true" in res.stderr
    g.write_text(yaml.safe_dump({**gw, "etcd": {"endpoints": ["http://10.0.0.1:2379"]}}))
    res = CliRunner().invoke(cli, ["gateway", "check-config", str(g)])
    assert res.exit_code == 78 and "etcd.endpoints.0" in res.stderr, res.stderr
