"""The access plan: who may read and write which keys (pure, hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from awide_cluster.access.plan import (
    GatewayIdentity,
    PlanError,
    access_plan,
    gateway_user,
    host_user,
    operator_user,
    owner_cluster,
    prefix_end,
    reader_user,
    render,
)
from awide_cluster.contract import keys

name = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,10}", fullmatch=True)
names = st.lists(name, min_size=1, max_size=6, unique=True)


@st.composite
def plans(draw):
    cluster = draw(name)
    hosts = draw(names)
    gids = draw(st.lists(name, max_size=5, unique=True))
    nss = draw(st.lists(name, min_size=1, max_size=3))
    gws = [GatewayIdentity(g, draw(st.sampled_from(nss))) for g in gids]
    shared = draw(st.booleans())
    return access_plan(cluster, hosts, gws, shared_gateways=shared), hosts, gws, shared


def every_key(plan, hosts, gws, extra):
    base = plan.prefix
    ks = [keys.LEADER, keys.REGISTRY, keys.HISTORY, *(keys.member(h) for h in hosts + extra),
          *(keys.gateway(g.gateway_id) for g in gws), *(keys.gateway(x) for x in extra),
          *(keys.layout(g.namespace) for g in gws), *(keys.layout(x) for x in extra),
          *(keys.intent(x) for x in extra), keys.WINDOWS, keys.window_request("pause"),
          *(keys.window_request("host", x) for x in hosts + extra),
          *(keys.window_request("card", x) for x in extra)]
    return [base + k for k in ks]


@given(plans(), st.lists(name, max_size=3))
def test_only_daemons_write_the_registry_its_history_and_the_leader_key(p, extra):
    plan, hosts, _, _ = p
    for key in (keys.REGISTRY, keys.HISTORY, keys.LEADER, keys.WINDOWS):
        writers = {u.name for u in plan.users if plan.may(u.name, "WRITE", plan.prefix + key)}
        assert writers == {host_user(plan.cluster, h) for h in hosts}


@given(plans(), st.lists(name, max_size=3))
def test_each_daemon_writes_only_its_own_report(p, extra):
    plan, hosts, _, _ = p
    for key_host in set(hosts + extra):
        writers = {u.name for u in plan.users
                   if plan.may(u.name, "WRITE", plan.prefix + keys.member(key_host))}
        assert writers == ({host_user(plan.cluster, key_host)} if key_host in hosts else set())


@given(plans(), st.lists(name, max_size=3))
def test_gateways_write_only_their_record_and_layout(p, extra):
    plan, hosts, gws, shared = p
    c = plan.cluster
    for g in gws:
        me = gateway_user(c, g.gateway_id)
        written = {k for k in every_key(plan, hosts, gws, extra) if plan.may(me, "WRITE", k)}
        assert written == {plan.prefix + keys.gateway(g.gateway_id),
                           plan.prefix + keys.layout(g.namespace)}
    if shared:
        written = {k for k in every_key(plan, hosts, gws, extra)
                   if plan.may(gateway_user(c), "WRITE", k)}
        assert written == {k for k in every_key(plan, hosts, gws, extra)
                           if k.startswith((plan.prefix + keys.GATEWAYS,
                                            plan.prefix + keys.LAYOUTS))}


@given(plans(), st.lists(name, max_size=3))
def test_operator_writes_intents_reader_writes_nothing(p, extra):
    plan, hosts, gws, _ = p
    for k in every_key(plan, hosts, gws, extra):
        assert plan.may(reader_user(plan.cluster), "WRITE", k) is False
        assert plan.may(operator_user(plan.cluster), "WRITE", k) == \
            k.startswith((plan.prefix + keys.INTENTS, plan.prefix + keys.WINDOW_REQUESTS))


@given(plans(), st.lists(name, max_size=3), name)
def test_everyone_reads_the_prefix_and_nothing_outside(p, extra, other):
    plan, hosts, gws, _ = p
    outside = [f"/awide/{plan.cluster}", f"/awide/{plan.cluster}0/registry", "/awide/",
               f"/awide/{plan.cluster}-x/leader", f"/other/{other}"]
    if other != plan.cluster:
        outside.append(keys.prefix(other) + keys.REGISTRY)
    for u in plan.users:
        assert all(plan.may(u.name, "READ", k) for k in every_key(plan, hosts, gws, extra))
        for k in outside:
            assert not plan.may(u.name, "READ", k) and not plan.may(u.name, "WRITE", k), (u, k)


@given(plans())
def test_names_are_unique_and_belong_to_the_cluster(p):
    plan, hosts, gws, shared = p
    us = [u.name for u in plan.users]
    assert len(set(us)) == len(us) == len(hosts) + len(gws) + int(shared) + 2
    assert all(owner_cluster(n) == plan.cluster for n in us)
    assert all(u.roles == (u.name,) for u in plan.users)
    assert len(render(plan)) == len(us) + 1


@given(plans(), st.randoms())
def test_input_order_does_not_matter(p, rnd):
    plan, hosts, gws, shared = p
    h2, g2 = list(hosts), list(gws)
    rnd.shuffle(h2)
    rnd.shuffle(g2)
    assert access_plan(plan.cluster, h2, g2, shared_gateways=shared) == plan


def test_bad_input_is_named():
    with pytest.raises(PlanError, match="host 'h1' is given twice"):
        access_plan("c1", ["h1", "h1"])
    with pytest.raises(PlanError, match="gateway id 'g1' is given twice"):
        access_plan("c1", ["h1"], [GatewayIdentity("g1", "a"), GatewayIdentity("g1", "b")])
    with pytest.raises(keys.BadName, match="host 'a:b'"):
        access_plan("c1", ["a:b"])
    with pytest.raises(keys.BadName, match="namespace"):
        access_plan("c1", ["h1"], [GatewayIdentity("g1", "x/y")])
    with pytest.raises(keys.BadName, match="cluster"):
        access_plan("c/1", ["h1"])


def test_prefix_end_and_owner():
    assert prefix_end("/awide/c1/") == "/awide/c10"
    assert prefix_end("/awide/c1/intents/") == "/awide/c1/intents0"
    assert owner_cluster("host:c1:h1") == "c1" and owner_cluster("gateway:c1") == "c1"
    for other in ("root", "host:c1", "operator:c1:x", "reader", "gateway:c1:g:x", "x:c1:h1"):
        assert owner_cluster(other) is None


def test_cli_plan_and_refusals(tmp_path):
    """``access plan`` prints the plan; ``access apply`` refuses bad input before any call."""
    from click.testing import CliRunner

    from awide_cluster.cli.main import cli
    run = CliRunner().invoke
    ep = ["--endpoints", "http://127.0.0.1:9", "--cluster", "c1"]
    r = run(cli, ["access", "plan", *ep, "--host", "h1,h2", "--gateway", "g1=ns1"])
    assert r.exit_code == 0, r.output
    assert "host:c1:h1 (host): read *; write history; write intents/*; write leader; " \
        "write members/h1; write registry; write window-requests/*; write windows" in r.output
    assert "operator:c1 (operator): read *; write intents/*; write window-requests/*" \
        in r.output
    assert "gateway:c1:g1 (gateway): read *; write gateways/g1; write layouts/ns1" in r.output
    r = run(cli, ["access", "plan", *ep, "--host", "h1", "--format", "json"])
    assert r.exit_code == 0 and '"name": "reader:c1"' in r.output, r.output
    for argv, said in (
            (["--host", "h1", "--gateway", "g1"], "give ID=NAMESPACE"),
            (["--host", "h1,h1"], "host 'h1' is given twice"),
            (["--host", "a:b"], "host 'a:b' is not a valid name")):
        r = run(cli, ["access", "plan", *ep, *argv])
        assert r.exit_code == 64 and said in r.output, r.output
    r = run(cli, ["access", "plan", *ep])
    assert r.exit_code == 64 and "say which daemon hosts" in r.output, r.output
    daemon = tmp_path / "cluster.yaml"
    daemon.write_text("cluster: c2\nhost: s1\nhosts: [s1, s2, w1]\nrole: witness\n"
                      "etcd: {endpoints: ['http://127.0.0.1:9']}\n")
    r = run(cli, ["access", "plan", "--config", str(daemon)])
    assert r.exit_code == 0, r.output
    assert [ln.split(" ")[0] for ln in r.output.splitlines()[1:4]] == \
        ["host:c2:s1", "host:c2:s2", "host:c2:w1"], r.output
    pw = tmp_path / "pw"
    pw.mkdir()
    (pw / "root").write_text("secret-root\n")
    (pw / "root").chmod(0o644)
    r = run(cli, ["access", "apply", *ep, "--host", "h1", "--passwords", str(pw)])
    assert r.exit_code == 64 and "readable by others" in r.output, r.output
    (pw / "root").chmod(0o600)
    r = run(cli, ["access", "apply", *ep, "--host", "h1", "--passwords", str(pw)])
    assert r.exit_code == 64 and "plain http" in r.output, r.output
    assert "secret-root" not in r.output
