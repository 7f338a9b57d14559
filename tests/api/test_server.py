"""The daemon HTTP API on a real loopback port, driven by a real asyncio loop."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest

from awide_cluster.api.health import DaemonHealth
from awide_cluster.api.metrics import DaemonMetrics
from awide_cluster.api.server import ApiError, DaemonApi
from awide_cluster.api.view import host_view
from awide_cluster.config.listen import ListenError, parse_listen
from awide_cluster.contract.registry import CardEntry, Registry
from awide_cluster.contract.report import HostReport, ReportedCard
from tests.timing import wait_until


def _registry() -> Registry:
    card = CardEntry(
        id="c0123456789a", serial="SN1", model="M", identity="u1", host="h1", name="card0",
        kind="dir", state="in", health="ok", reason="", admitted=1, changed_generation=1,
        path="/srv/card0",
    )
    other = CardEntry(
        id="c0123456789b", serial="SN2", model="M", identity="u2", host="h2", name="card0",
        kind="dir", state="out", health="sick", reason="probe read failed", admitted=1,
        changed_generation=4, path="/srv/card0",
    )
    from awide_cluster.contract.registry import with_slots
    return with_slots(Registry(cluster="c1", generation=4, leader="h1", cards=(card, other)))


def _report() -> HostReport:
    return HostReport(
        host="h1", role="storage", version="0.1.0", api="127.0.0.1:9700", run="r1", seq=9,
        cards=(ReportedCard(name="card0", kind="dir", found=True, serial="SN1", model="M",
                            identity="u1", device="/srv/card0", controller_state="live",
                            healthy=True, reason="", path="/srv/card0"),),
    )


@pytest.fixture
async def api():
    health = DaemonHealth(loop_stale_after=0.4, report_stale_after=0.4)
    metrics = DaemonMetrics(host="h1", role="storage", version="0.1.0")
    reg = _registry()
    state = {"registry": reg}

    def view():
        return host_view(host="h1", role="storage", version="0.1.0", report=_report(),
                         registry=state["registry"], leader="h1", is_leader=True)

    server = DaemonApi(health=health, metrics=metrics, view=view, listen="127.0.0.1:0")
    await server.start()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http:
        yield server, health, metrics, http, state
    await server.stop()


async def _get(http, server, path):
    async with http.get(server.url + path) as r:
        return r.status, r.headers.get("Content-Type", ""), await r.text()


async def test_healthz_turns_503_when_the_loop_stalls(api):
    server, health, _, http, _ = api
    stall = asyncio.Event()

    async def main_loop():
        while True:
            if stall.is_set():
                await asyncio.Event().wait()     # stuck: the process and its API live on
            health.beat()
            await asyncio.sleep(0.05)    # not a wait: the fake main loop's period

    task = asyncio.create_task(main_loop())
    try:
        await wait_until(lambda: health.marks().beats >= 2, 2, "the loop turned twice")
        status, ctype, body = await _get(http, server, "/healthz")
        assert status == 200 and ctype.startswith("application/json")
        assert json.loads(body)["ok"] is True
        stall.set()

        async def unhealthy() -> str | None:
            status, _, body = await _get(http, server, "/healthz")
            return body if status == 503 else None

        body = await wait_until(unhealthy, 3, "/healthz answers 503")
        assert "stalled" in json.loads(body)["reason"]
    finally:
        task.cancel()


async def test_readyz_follows_etcd_and_report(api):
    server, health, _, http, _ = api
    status, _, body = await _get(http, server, "/readyz")
    assert status == 503 and "etcd not reached" in json.loads(body)["reason"]
    health.report_written()
    status, _, body = await _get(http, server, "/readyz")
    assert status == 200, body
    health.etcd_failed("Unavailable: no member answered")
    status, _, body = await _get(http, server, "/readyz")
    assert status == 503 and "Unavailable" in json.loads(body)["reason"]


async def test_status_is_this_hosts_view(api):
    server, health, _, http, _ = api
    health.beat()
    health.report_written()
    status, ctype, body = await _get(http, server, "/v1/status")
    assert status == 200 and ctype.startswith("application/json")
    doc = json.loads(body)
    assert doc["host"] == "h1" and doc["is_leader"] is True
    assert doc["registry_generation"] == 4
    assert [c["id"] for c in doc["registry_cards"]] == ["c0123456789a"]   # only h1's card
    assert doc["registry_cards"][0]["slot"] == 0
    assert doc["report"]["cards"][0]["serial"] == "SN1"
    assert doc["liveness"]["ok"] is True and doc["readiness"]["ok"] is True


async def test_status_view_failure_is_a_500_not_a_crash():
    health = DaemonHealth(loop_stale_after=1, report_stale_after=1)
    metrics = DaemonMetrics(host="h1", role="witness", version="0.1.0")

    def broken():
        raise KeyError("registry")

    server = DaemonApi(health=health, metrics=metrics, view=broken, listen="127.0.0.1:0")
    await server.start()
    try:
        async with aiohttp.ClientSession() as http:
            status, _, body = await _get(http, server, "/v1/status")
            assert status == 500 and "KeyError" in json.loads(body)["error"]
            status, _, _ = await _get(http, server, "/healthz")
            assert status == 200
    finally:
        await server.stop()


async def test_metrics_text_format(api):
    server, health, metrics, http, state = api
    health.beat()
    metrics.poll_done(0.02)
    metrics.poll_done(0.3, ok=False)
    metrics.probe_result("c0123456789a", "card0", "read", True, 0.004)
    metrics.probe_result("c0123456789a", "card0", "read", False, 0.5)
    metrics.observe_registry(state["registry"])
    metrics.observe_leader("h1", me=True)
    metrics.observe_leader("h2", me=False)
    metrics.etcd_call("range", 0.003)
    metrics.etcd_call("txn", 0.5, "Timeout")
    metrics.registry_write("written")
    metrics.registry_write("conflict")
    status, ctype, body = await _get(http, server, "/metrics")
    assert status == 200 and ctype.startswith("text/plain")
    lines = set(body.splitlines())
    for want in (
        'awide_polls_total{result="ok"} 1.0',
        'awide_polls_total{result="error"} 1.0',
        'awide_probe_results_total{card="c0123456789a",card_name="card0",probe="read",'
        'result="fail"} 1.0',
        'awide_card_state{card="c0123456789b",card_name="card0",host="h2",state="out"} 1.0',
        'awide_card_state{card="c0123456789b",card_name="card0",host="h2",state="in"} 0.0',
        'awide_cards{state="out"} 1.0',
        "awide_registry_generation 4.0",
        "awide_leader_changes_total 1.0",
        "awide_is_leader 0.0",
        'awide_etcd_call_errors_total{error="Timeout",op="txn"} 1.0',
        'awide_etcd_call_duration_seconds_count{op="range"} 1.0',
        'awide_registry_writes_total{result="conflict"} 1.0',
        'awide_build_info{host="h1",role="storage",version="0.1.0"} 1.0',
    ):
        assert want in lines, want
    assert any(line.startswith("awide_loop_heartbeat_age_seconds ") for line in lines)


def test_forgotten_card_leaves_the_card_state_gauge():
    from dataclasses import replace

    m = DaemonMetrics(host="h1", role="storage", version="x")
    reg = _registry()
    m.observe_registry(reg)
    assert b'card="c0123456789b"' in m.exposition()
    m.observe_registry(replace(reg, generation=5, cards=reg.cards[:1]))
    text = m.exposition()
    assert b'card="c0123456789b"' not in text and b"awide_registry_generation 5.0" in text


async def test_etcd_timer_records_errors_and_reraises():
    m = DaemonMetrics(host="h1", role="storage", version="x")

    class Timeout(Exception):
        pass

    with pytest.raises(Timeout):
        with m.etcd_timer("range"):
            await asyncio.sleep(0)      # not a wait: an await inside the timed call
            raise Timeout()
    with m.etcd_timer("range"):
        await asyncio.sleep(0)          # not a wait: an await inside the timed call
    text = m.exposition().decode()
    assert 'awide_etcd_call_errors_total{error="Timeout",op="range"} 1.0' in text
    assert 'awide_etcd_call_duration_seconds_count{op="range"} 2.0' in text


async def test_port_taken_is_a_clear_error(api):
    server, health, metrics, _, _ = api
    host, port = server.bound
    other = DaemonApi(health=health, metrics=DaemonMetrics(host="h", role="storage", version="x"),
                      view=dict, listen=f"{host}:{port}")
    with pytest.raises(ApiError, match="cannot listen"):
        await other.start()


def test_parse_listen():
    assert parse_listen("127.0.0.1:9700") == ("127.0.0.1", 9700)
    assert parse_listen("[::1]:9700") == ("::1", 9700)
    for bad in ("9700", "::1:9700", "host:port", "[::1]9700", ":9700"):
        with pytest.raises(ListenError):
            parse_listen(bad)



def test_cluster_label_on_every_series_and_no_created():
    m = DaemonMetrics(host="h1", role="storage", version="x", cluster="kv1")
    m.observe_registry(_registry())
    m.local_card("c0123456789a", "card0", True)
    m.probe_result("c0123456789a", "card0", "read", True, 0.001)
    m.registry_write("written")
    samples = [line for line in m.exposition().decode().splitlines()
               if line and not line.startswith("#")]
    assert samples
    assert all('cluster="kv1"' in line for line in samples), samples
    assert not any("_created" in line for line in m.exposition().decode().splitlines())
    assert ('awide_local_card_healthy{card="c0123456789a",card_name="card0",cluster="kv1"} 1.0'
            in samples)


def test_a_local_card_under_another_id_leaves_its_old_series():
    m = DaemonMetrics(host="h1", role="storage", version="x")
    m.local_card("", "card0", False)                 # not found yet: id unknown
    m.local_card("c0123456789a", "card0", True)
    text = m.exposition().decode()
    assert 'awide_local_card_healthy{card="c0123456789a",card_name="card0"} 1.0' in text
    assert 'card=""' not in text


def test_probe_results_counted_on_the_kept_series():
    m = DaemonMetrics(host="h1", role="storage", version="x")
    for ok in (True, True, False, True, False):
        m.probe_result("c0123456789a", "card0", "store", ok, 0.002)
    m.probe_result("c0123456789b", "card0", "store", True)      # another card under the name
    lines = set(m.exposition().decode().splitlines())
    for want in (
        'awide_probe_results_total{card="c0123456789a",card_name="card0",probe="store",'
        'result="ok"} 3.0',
        'awide_probe_results_total{card="c0123456789a",card_name="card0",probe="store",'
        'result="fail"} 2.0',
        'awide_probe_results_total{card="c0123456789b",card_name="card0",probe="store",'
        'result="ok"} 1.0',
        'awide_probe_duration_seconds_count{probe="store"} 5.0',
    ):
        assert want in lines, want
