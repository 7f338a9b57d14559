"""A real Prometheus (Debian's ``/usr/bin/prometheus``) scraping an embedded cluster.

The three scrape jobs of docs/operations.md ("Dashboards and alerts"): ``awide-cluster`` (every
daemon's API), ``awide-gateway`` (every gateway's metrics), ``awide-etcd`` (every etcd member,
with the cluster as a target label), on a temporary config and data directory, with an
optional rules file. Used by the monitoring test and the dashboard picture.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from awide_harness.cluster import EmbeddedCluster

PROMETHEUS = "/usr/bin/prometheus"


class PrometheusError(RuntimeError):
    """Prometheus exited, refused a query or did not get ready; the message says which."""


def find_prometheus() -> str | None:
    """Debian's Prometheus, else one on PATH."""
    return PROMETHEUS if Path(PROMETHEUS).is_file() else shutil.which("prometheus")


def duration(seconds: float) -> str:
    """A Prometheus duration (whole milliseconds: it takes no fractions of a unit)."""
    return f"{round(seconds * 1000)}ms"


def hostport(url: str) -> str:
    return urllib.parse.urlsplit(url).netloc


def scrape_targets(c: EmbeddedCluster) -> dict[str, list[str]]:
    """job -> targets of the cluster's daemons, gateways and etcd members."""
    return {"awide-cluster": [hostport(c.api_url(h)) for h in c.hosts],
            "awide-gateway": [hostport(c.metrics_url(g)) for g in c.gateway_ids],
            "awide-etcd": [hostport(u) for u in c.etcd.endpoints]}


def get_json(url: str, timeout: float = 5.0) -> Any:
    """The JSON at ``url``; a refused query's JSON error (or an error document) likewise."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:  # noqa: S310 - local URL
            return json.loads(r.read().decode())
    except urllib.error.HTTPError as e:
        body = e.read().decode(errors="replace")
        try:
            return json.loads(body)
        except ValueError:
            return {"status": "error", "error": f"HTTP {e.code}: {body[:200]}"}


class Prometheus:
    """Started at once; ``stop()`` ends it. ``interval``: scrape and rule evaluation period."""

    def __init__(self, work: Path, targets: Mapping[str, Sequence[str]], cluster: str,
                 binary: str, port: int, *, interval: float = 1.0,
                 rules: Path | None = None) -> None:
        work.mkdir(parents=True, exist_ok=True)
        self.targets = {job: list(t) for job, t in targets.items()}
        self.interval = interval
        config: dict[str, Any] = {
            "global": {"scrape_interval": duration(interval),
                       "evaluation_interval": duration(interval),
                       "scrape_timeout": duration(interval * 0.9)},
            "scrape_configs": [
                {"job_name": job, "static_configs": [
                    {"targets": t, **({"labels": {"cluster": cluster}}
                                      if job == "awide-etcd" else {})}]}
                for job, t in self.targets.items()],
        }
        if rules is not None:
            config["rule_files"] = [str(rules)]
        (work / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = work / "prometheus.log"
        self.log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [binary, f"--config.file={work / 'prometheus.yml'}",
             f"--storage.tsdb.path={work / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
            stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def api(self, path: str, **params: str) -> Any:
        """The ``data`` of ``/api/v1/<path>``; PrometheusError with its error otherwise."""
        url = f"{self.url}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        doc = get_json(url)
        if not isinstance(doc, dict) or doc.get("status") != "success":
            what = params.get("query", "")
            err = doc.get("error", doc) if isinstance(doc, dict) else doc
            raise PrometheusError(f"Prometheus {path}{f' {what!r}' if what else ''}: {err}")
        return doc["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        params = {"query": expr} | ({"time": f"{at:.3f}"} if at is not None else {})
        return list(self.api("query", **params)["result"])

    def query_range(self, expr: str, start: float, end: float,
                    step: float | None = None) -> list[dict[str, Any]]:
        return list(self.api("query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}",
                             step=duration(step or self.interval))["result"])

    def version(self) -> str:
        return str(self.api("status/buildinfo").get("version", "?"))

    def ready(self) -> bool:
        """Every target scraped and up. PrometheusError if Prometheus exited."""
        if self.proc.poll() is not None:
            tail = self.log_path.read_text(errors="replace").strip().splitlines()[-3:]
            raise PrometheusError(f"Prometheus exited with {self.proc.returncode}: "
                                  + " | ".join(tail))
        try:
            up = self.query("up")
        except (OSError, PrometheusError, ValueError):
            return False
        want = sum(len(t) for t in self.targets.values())
        return len(up) == want and all(r["value"][1] == "1" for r in up)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        self.log.close()

