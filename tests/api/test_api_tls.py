"""The daemon API off loopback: TLS with client certificates, on a real socket; plain HTTP off
loopback is refused (by the config check and by the server) unless explicitly allowed."""

from __future__ import annotations

import asyncio
import copy
import shutil
import socket
import ssl

import aiohttp
import pytest

from awide_cluster.api.health import DaemonHealth
from awide_cluster.api.metrics import DaemonMetrics
from awide_cluster.api.server import MAX_PEER_CONNECTIONS, ApiError, ApiTls, DaemonApi
from awide_cluster.config import daemon as daemon_config
from awide_cluster.config.common import ConfigError
from awide_cluster.store.credentials import CredentialError
from awide_harness import make_test_pki
from awide_harness.waits import wait_until

HEADER_TIMEOUT = 0.5
BOUND = 10.0          # generous: an answer or a close must come, on a loaded machine too


@pytest.fixture(scope="module")
def pkis(tmp_path_factory):
    d = tmp_path_factory.mktemp("api-pki")
    return make_test_pki(d / "a"), make_test_pki(d / "b")


def _api(tls: ApiTls | None, listen: str = "127.0.0.1:0", **kw) -> DaemonApi:
    health = DaemonHealth(loop_stale_after=5.0, report_stale_after=5.0)
    health.beat()
    return DaemonApi(health=health, metrics=DaemonMetrics(host="h1", role="storage",
                                                          version="0.1.0"),
                     view=lambda: {"host": "h1"}, listen=listen, tls=tls,
                     header_timeout=HEADER_TIMEOUT, **kw)


@pytest.fixture
async def files(pkis, tmp_path):
    a, _ = pkis
    out = {}
    for name, src in (("cert", a.server_cert), ("key", a.server_key), ("ca", a.ca_file)):
        out[name] = str(tmp_path / f"api-{name}.pem")
        shutil.copy(src, out[name])
    return out


@pytest.fixture
async def api(files):
    server = _api(ApiTls(files["cert"], files["key"], files["ca"]))
    await server.start()
    yield server
    await server.stop()


def _client(ca: str, cert: str | None = None, key: str | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=ca)
    if cert is not None:
        ctx.load_cert_chain(cert, key)
    return ctx


async def _get(server: DaemonApi, ctx: ssl.SSLContext, path: str = "/healthz") -> int:
    async with aiohttp.ClientSession() as s, \
            s.get(server.url + path, ssl=ctx, timeout=aiohttp.ClientTimeout(total=BOUND)) as r:
        return r.status


async def test_a_client_with_a_certificate_of_the_client_ca_is_answered(api, pkis):
    a, _ = pkis
    assert api.url.startswith("https://127.0.0.1:")
    assert await _get(api, _client(a.ca_file, a.client_cert, a.client_key)) == 200
    assert await _get(api, _client(a.ca_file, a.client_cert, a.client_key), "/v1/status") == 200


async def test_a_client_without_a_certificate_is_refused(api, pkis):
    a, _ = pkis
    with pytest.raises((aiohttp.ClientError, ssl.SSLError, ConnectionError)):
        await _get(api, _client(a.ca_file))


async def test_a_client_certificate_of_another_ca_is_refused(api, pkis):
    a, b = pkis
    with pytest.raises((aiohttp.ClientError, ssl.SSLError, ConnectionError)):
        await _get(api, _client(a.ca_file, b.client_cert, b.client_key))


async def test_plain_http_to_the_tls_port_gets_no_answer(api):
    host, port = api.bound
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        await writer.drain()
        assert b"200" not in await asyncio.wait_for(reader.read(), BOUND)
    finally:
        writer.close()


async def test_a_slow_client_after_the_handshake_is_cut(api, pkis):
    a, _ = pkis
    host, port = api.bound
    reader, writer = await asyncio.open_connection(
        host, port, ssl=_client(a.ca_file, a.client_cert, a.client_key),
        server_hostname="127.0.0.1")
    try:
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        await writer.drain()
        assert await asyncio.wait_for(reader.read(), BOUND) == b""
    finally:
        writer.close()


async def test_reload_takes_a_new_certificate_and_refuses_a_bad_key(api, files, pkis):
    a, b = pkis
    good = _client(a.ca_file, a.client_cert, a.client_key)
    shutil.copy(b.server_key, files["key"])           # a key of another certificate
    with pytest.raises(CredentialError, match="api-key.pem: does not match"):
        api.reload_tls()
    assert await _get(api, good) == 200               # the old one still serves
    shutil.copy(b.server_cert, files["cert"])         # the new pair, of the other CA
    assert "re-read" in api.reload_tls()
    assert await _get(api, _client(b.ca_file, a.client_cert, a.client_key)) == 200
    with pytest.raises((aiohttp.ClientError, ssl.SSLError, ConnectionError)):
        await _get(api, good)                          # trusts only the old server CA


async def test_off_loopback_without_tls_is_refused_at_start():
    server = _api(None, listen="0.0.0.0:0")
    with pytest.raises(ApiError, match="api.tls"):
        await server.start()
    assert server.bound is None


BASE = {"cluster": "c1", "host": "h1", "hosts": ["h1"],
        "etcd": {"endpoints": ["http://127.0.0.1:2379"]}}


def _cfg(api: dict) -> dict:
    d = copy.deepcopy(BASE)
    d["api"] = api
    return d


def test_the_config_refuses_off_loopback_without_tls_naming_the_field(files):
    with pytest.raises(ConfigError) as err:
        daemon_config.parse(_cfg({"listen": "10.0.0.1:9700"}))
    assert err.value.field == "api.tls" and "allow_insecure" in err.value.reason
    assert daemon_config.parse(_cfg({"listen": "10.0.0.1:9700", "allow_insecure": True}))
    tls = {"cert_file": files["cert"], "key_file": files["key"], "client_ca_file": files["ca"]}
    assert daemon_config.parse(_cfg({"listen": "10.0.0.1:9700", "tls": tls})).api.tls
    assert daemon_config.parse(_cfg({"listen": "[::1]:9700"})).api.tls is None
    with pytest.raises(ConfigError, match="api.tls"):
        daemon_config.parse(_cfg({"listen": "10.0.0.1:9700", "tls": {**tls, "key_file": "/no"}}))


async def test_silent_tls_connections_are_capped_and_cut_after_the_handshake_bound(files, pkis):
    """200 connections that never send a ClientHello: at most MAX_PEER_CONNECTIONS are held,
    the others are closed at once, and the held ones are cut after the handshake bound; then a
    client with a certificate is answered."""
    server = _api(ApiTls(files["cert"], files["key"], files["ca"]), handshake_timeout=0.5)
    await server.start()
    loop = asyncio.get_running_loop()
    socks = []
    try:
        for _ in range(200):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setblocking(False)
            await loop.sock_connect(s, server.bound)
            socks.append(s)
        await wait_until(lambda: server.cap.refused + server.cap.taken >= 200, BOUND,
                         "every connection let in or refused")
        assert server.cap.peak <= MAX_PEER_CONNECTIONS and server.cap.refused >= 100
        await wait_until(lambda: server.cap.open == 0, BOUND, "the silent ones cut")
        a, _ = pkis
        assert await _get(server, _client(a.ca_file, a.client_cert, a.client_key)) == 200
    finally:
        for s in socks:
            s.close()
        await server.stop()
