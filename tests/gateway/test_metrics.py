"""The gateway's metrics server: GET /metrics only, a bad address named, cluster and gateway on
every series (an unstarted gateway: no etcd needed; the started ones are scraped in
tests/embedded/test_metrics_labels.py)."""

from __future__ import annotations

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from awide_gateway_cluster import ClusterGateway, parse_config
from awide_gateway_cluster.metrics import MetricsServer


def gateway() -> ClusterGateway:
    return ClusterGateway(parse_config({
        "mode": "cluster", "cluster": "kv", "host": "gpu1", "pod": "p1",
        "etcd": {"endpoints": ["http://127.0.0.1:2379"]},
        "model": {"name": "test/model-7b", "num_layers": 4}}))


@pytest.mark.parametrize("listen", ["9701", "host:", ":9701", "h:99999", "h:port"])
def test_a_bad_address_is_named(listen):
    with pytest.raises(ValueError, match="expected HOST:PORT"):
        MetricsServer(gateway(), listen)


async def test_serves_get_metrics_only():
    gw = gateway()
    server = MetricsServer(gw, "127.0.0.1:0")
    await server.start()
    try:
        assert server.bound is not None
        host, port = server.bound
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://{host}:{port}/metrics") as r:
                assert r.status == 200 and r.headers["Content-Type"].startswith("text/plain")
                text = await r.text()
            async with http.post(f"http://{host}:{port}/metrics") as r:
                assert r.status == 405
            async with http.get(f"http://{host}:{port}/") as r:
                assert r.status == 404
    finally:
        await server.stop()
    samples = [s for f in text_string_to_metric_families(text) for s in f.samples]
    assert samples and all(s.labels.get("cluster") == "kv" for s in samples)
    assert all(s.labels.get("gateway") == gw.id for s in samples)
    assert not any(s.name.endswith("_created") for s in samples)
    assert {s.name for s in samples} >= {"awide_gateway_registry_generation",
                                         "awide_gateway_stale", "awide_gateway_polls_total"}


def test_readiness_needs_an_accepted_registry_and_a_verified_layout():
    from dataclasses import replace

    from awide_gateway_cluster.metrics import readiness
    view = gateway().snapshot()
    assert readiness(view) == (False, "no registry accepted yet")
    ok, why = readiness(replace(view, generation=7))
    assert not ok and "layout not verified" in why
    assert readiness(replace(view, generation=7, layout_ok=True)) == \
        (True, "registry generation 7 accepted, key layout verified")


async def test_readyz_answers_503_until_ready_and_get_only():
    server = MetricsServer(gateway(), "127.0.0.1:0")
    await server.start()
    try:
        assert server.bound is not None
        host, port = server.bound
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://{host}:{port}/readyz") as r:
                assert r.status == 503
                assert await r.text() == "no registry accepted yet\n"
            async with http.post(f"http://{host}:{port}/readyz") as r:
                assert r.status == 405
    finally:
        await server.stop()
