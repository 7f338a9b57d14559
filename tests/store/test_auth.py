"""Authentication: user/password -> token, re-authentication, wrong password -> Denied."""

from __future__ import annotations

import asyncio

import pytest

from awide_cluster.store import Denied, Timeout
from awide_harness import EtcdCluster
from tests.timing import wait_until

from .helpers import admin, b64

# password checks are slow on a loaded 2-core machine: these tests are about auth, not bounds
SLOW = 2.0


@pytest.fixture(scope="module")
def auth_cluster(etcd_binary, tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("auth")
    with EtcdCluster(tmp_path / "etcd", binary=etcd_binary, stop_timeout=0.5) as cluster:
        ep = cluster.endpoints[0]
        admin(ep, "/v3/auth/user/add", {"name": "root", "password": "rootpw"})
        admin(ep, "/v3/auth/role/add", {"name": "root"})
        admin(ep, "/v3/auth/user/grant", {"user": "root", "role": "root"})
        admin(ep, "/v3/auth/user/add", {"name": "reader", "password": "readpw"})
        admin(ep, "/v3/auth/role/add", {"name": "ro"})
        admin(ep, "/v3/auth/role/grant", {"name": "ro", "perm": {
            "permType": "READ", "key": b64("/auth/"), "range_end": b64("/auth0")}})
        admin(ep, "/v3/auth/user/grant", {"user": "reader", "role": "ro"})
        admin(ep, "/v3/auth/enable", {})
        yield cluster


async def test_credentials_give_a_token_that_is_renewed(auth_cluster, make_store):
    store = make_store(auth_cluster.endpoints, prefix="/auth/", username="root",
                       password="rootpw",
                       call_timeout=SLOW)
    await store.put("k", b"1")
    first = store.transport.token
    assert first
    async with store.watch("k") as watch:
        nxt = asyncio.ensure_future(watch.__anext__())
        await wait_until(lambda: watch.revision > 0, 5, "the watch stream created")
        rev = await store.put("k", b"2")
        assert (await asyncio.wait_for(nxt, 5)).events[0].kv.mod_revision == rev

    # auth switched off and on again drops every token on the members: re-authenticate once
    root = admin(auth_cluster.endpoints[0], "/v3/auth/authenticate",
                 {"name": "root", "password": "rootpw"})["token"]
    admin(auth_cluster.endpoints[0], "/v3/auth/disable", {}, token=root)
    admin(auth_cluster.endpoints[0], "/v3/auth/enable", {})
    await store.put("k", b"3")
    assert store.transport.token and store.transport.token != first

    store.transport.token = "not-a-token"  # an unknown token: same
    assert (await store.get("k")).value == b"3"
    assert store.transport.token != "not-a-token"

    store.transport.token = "not-a-token"  # and a watch opened with it
    async with store.watch("k", start_revision=rev) as watch:
        batch = await asyncio.wait_for(watch.__anext__(), 5)
    assert batch.events[0].kv.value == b"2"
    assert store.transport.token != "not-a-token"


async def test_a_call_that_gives_up_leaves_the_password_check_running(auth_cluster, make_store):
    """A call bounded under the time a password check takes (bcrypt in etcd: tens of ms, more
    under load) times out, but the check goes on without it and its token serves the next call:
    cancelled with each call, checks would follow each other without end."""
    store = make_store(auth_cluster.endpoints, prefix="/auth/", username="root",
                       password="rootpw", call_timeout=SLOW)
    with pytest.raises(Timeout):
        await store.get("k", timeout=0.001)
    await wait_until(lambda: store.transport.token is not None, 5 * SLOW,
                     "the password check finished after its caller gave up")
    token = store.transport.token
    await store.put("k", b"after")
    assert (await store.get("k")).value == b"after"
    assert store.transport.token == token          # no second check


async def test_wrong_password_and_missing_credentials_are_denied(auth_cluster, make_store):
    wrong = make_store(auth_cluster.endpoints, prefix="/auth/", username="root",
                       password="nope",
                       call_timeout=SLOW)
    with pytest.raises(Denied):
        await wrong.get("k")
    with pytest.raises(Denied):
        await wrong.put("k", b"v")
    anonymous = make_store(auth_cluster.endpoints, prefix="/auth/", call_timeout=SLOW)
    with pytest.raises(Denied):
        await anonymous.get("k")
    with pytest.raises(Denied):
        await anonymous.put("k", b"v")


async def test_permission_denied(auth_cluster, make_store):
    reader = make_store(auth_cluster.endpoints, prefix="/auth/", username="reader",
                        password="readpw",
                       call_timeout=SLOW)
    await reader.get("k")  # reading is allowed
    with pytest.raises(Denied):
        await reader.put("k", b"v")
    outside = make_store(auth_cluster.endpoints, prefix="/elsewhere/", username="reader",
                         password="readpw",
                       call_timeout=SLOW)
    with pytest.raises(Denied):
        await outside.get("k")
