"""A daemon or gateway config whose etcd user is another identity of the access plan is
refused, naming etcd.username (etcd would refuse its writes)."""

from __future__ import annotations

import pytest

from awide_cluster.access.plan import identity_problem
from awide_cluster.config import daemon as daemon_config
from awide_cluster.config.common import ConfigError
from awide_gateway_cluster.config import parse_config

ETCD = {"endpoints": ["https://10.0.0.1:2379"], "password_file": "/etc/awide-cluster/etcd-pw"}
DAEMON = {"cluster": "c1", "host": "h1", "hosts": ["h1", "h2", "h3"], "role": "witness",
          "timing": {"poll_interval": 1.0, "lease_ttl": 5}}
GATEWAY = {"mode": "cluster", "cluster": "c1", "host": "gpu1", "pod": "vllm-0",
           "model": {"name": "m"}}


def daemon_problems(user: str) -> list[tuple[str, str]]:
    cfg = daemon_config.parse({**DAEMON, "etcd": {**ETCD, "username": user}}, "d.yaml")
    return [p for p in daemon_config.combination_problems(cfg) if p[0] == "etcd.username"]


@pytest.mark.parametrize("user", ["host:c1:h1", "root", "awide", "host:c1"])
def test_a_daemon_with_its_own_or_a_site_user(user):
    assert daemon_problems(user) == []


@pytest.mark.parametrize(("user", "said"), [
    ("host:c1:h2", "'host:c1:h2' is another identity's; this daemon's is 'host:c1:h1'"),
    ("gateway:c1:g1", "this daemon's is 'host:c1:h1'"),
    ("reader:c1", "etcd would refuse its writes"),
    ("host:c2:h1", "an identity of cluster 'c2', not 'c1'")])
def test_a_daemon_with_another_identity_is_refused(user, said):
    with pytest.raises(ConfigError) as e:
        daemon_problems(user)
    assert str(e.value).startswith("d.yaml: etcd.username: ") and said in str(e.value)


@pytest.mark.parametrize("user", ["gateway:c1:gpu1-vllm-0", "gateway:c1", "root"])
def test_a_gateway_with_its_own_shared_or_a_site_user(user):
    assert parse_config({**GATEWAY, "etcd": {**ETCD, "username": user}}, "g.yaml")


@pytest.mark.parametrize("user", ["gateway:c1:gpu2-vllm-0", "host:c1:h1", "operator:c1",
                                  "gateway:c9"])
def test_a_gateway_with_another_identity_is_refused(user):
    with pytest.raises(ConfigError, match=r"g\.yaml: etcd\.username: .*" + user):
        parse_config({**GATEWAY, "etcd": {**ETCD, "username": user}}, "g.yaml")


def test_no_user_is_not_judged():
    assert identity_problem(None, "c1", ("host:c1:h1",), "this daemon") is None
