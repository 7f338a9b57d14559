"""What a program imports at start (cli/main.py, config/yaml_file.py, cards/__init__.py): the CLI
imports only what the subcommand that runs needs, and the gateway library given its config as
data imports no PyYAML and none of the daemon's card probes. Each case runs in a fresh
interpreter (this one has imported everything already)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# the heavy parts a command may import only when it runs
PARSER = ("pydantic", "yaml", "awide_cluster.config.common")
STORE = ("aiohttp", "awide_cluster.store.etcd")
PROGRAMS = ("awide_cluster.daemon", "awide_cluster.api", "awide_cluster.operator.render",
            "awide_cluster.operator.gather", "awide_gateway_cluster", "prometheus_client")

CLI = """
import json, sys
sys.argv = ["awide-cluster", *json.loads(sys.argv[1])]
from awide_cluster.cli.main import main
try:
    main()
except SystemExit as e:
    code = e.code
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


def imported(code: str, *args: str) -> tuple[dict[str, object], set[str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWIDE_")}
    env.update(PYTHONPATH=str(ROOT), AWIDE_DEFAULT_CONFIG="/nonexistent/cluster.yaml")
    p = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True,
                       text=True, timeout=60, check=True)
    out = json.loads(p.stdout.strip().splitlines()[-1])
    return out, set(out["modules"])


def loaded(modules: set[str], parts: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in parts))


@pytest.mark.parametrize("args", [["--help"], ["status", "--help"], ["status", "--bogus"],
                                  ["status"], ["drain", "--help"], ["access", "--help"]])
def test_help_and_usage_errors_import_no_parser_store_or_program(args: list[str]) -> None:
    out, modules = imported(CLI, json.dumps(args))
    assert out["code"] in (0, 64), out["code"]
    assert loaded(modules, PARSER + STORE + PROGRAMS) == []


def test_status_imports_no_daemon_and_no_gateway() -> None:
    out, modules = imported(CLI, json.dumps(["status", "--endpoints", "http://127.0.0.1:9",
                                             "--cluster", "c1", "--call-timeout", "0.05"]))
    assert out["code"] == 3                             # no etcd there: unreachable
    assert "awide_cluster.operator.gather" in modules   # it did run
    assert loaded(modules, ("awide_cluster.daemon", "awide_cluster.api", "awide_gateway_cluster",
                            "awide_cluster.cards", "yaml", "prometheus_client")) == []


GATEWAY = """
import json, sys
import awide_gateway_cluster
from awide_gateway_cluster import parse_config
parse_config({"mode": "cluster", "cluster": "c1", "pod": "p0", "host": "gpu0",
              "etcd": {"endpoints": ["http://127.0.0.1:2379"]},
              "model": {"name": "m/8b", "num_layers": 32}})
print(json.dumps({"modules": sorted(sys.modules)}))
"""


def test_the_gateway_library_given_data_imports_no_yaml_and_no_card_probes() -> None:
    _, modules = imported(GATEWAY)
    assert loaded(modules, ("yaml", "awide_cluster.config.yaml_file", "awide_cluster.cards.probes",
                            "awide_cluster.cards.observe", "awide_cluster.cards.directory",
                            "awide_cluster.daemon", "awide_cluster.operator",
                            "prometheus_client")) == []
    assert "awide_cluster.cards.worker" in modules      # what it does use of the package


def test_a_yaml_file_is_still_read_with_the_bounded_loader(tmp_path: Path) -> None:
    from awide_cluster.config.common import ConfigError, read_yaml
    f = tmp_path / "c.yaml"
    f.write_text("a: 1\nb: [x, y]\n")
    assert read_yaml(f) == {"a": 1, "b": ["x", "y"]}
    f.write_text("a: 1\na: 2\n")
    with pytest.raises(ConfigError, match="given twice"):
        read_yaml(f)


VOUCH = """
import json, sys
from awide_gateway_cluster import ClusterGateway, parse_config
doc = {"mode": "cluster", "cluster": "c1", "pod": "p0", "host": "gpu0",
       "etcd": {"endpoints": ["http://127.0.0.1:2379"]},
       "model": {"name": "m/8b", "num_layers": 32}, "vouch": json.loads(sys.argv[1])}
gw = ClusterGateway(parse_config(doc))
print(json.dumps({"vouching": gw._vouch is not None, "modules": sorted(sys.modules)}))
"""
REPORTS = ("awide_cluster.contract.report", "awide_gateway_cluster.vouching",
           "awide_gateway_cluster.vouch_loop")


def test_a_gateway_that_does_not_vouch_loads_no_report_decoder() -> None:
    """The hosts' reports are read only by a vouching gateway: ``vouch: false`` (a test rig
    playing the leader, the bench's footprint gateway) loads neither their decoder (its
    pydantic models) nor the vouching's loop; ``vouch: true`` (the default) has both."""
    out, modules = imported(VOUCH, "false")
    assert out["vouching"] is False
    assert loaded(modules, REPORTS) == []
    out, modules = imported(VOUCH, "true")
    assert out["vouching"] is True
    assert loaded(modules, REPORTS) == sorted(REPORTS)
