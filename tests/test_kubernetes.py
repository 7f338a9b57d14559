"""deploy/kubernetes/: every manifest validates offline against the Kubernetes schemas that
kubernetes-validate bundles (strict: an unknown field is an error), and the ConfigMap's
gateway config passes the gateway's own validation (`parse_config`, what
`awide-cluster gateway check-config` runs) with its files (CA, etcd password, DH-HMAC-CHAP
secret) present; the lines the pod's init container rewrites are there."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml

from awide_gateway_cluster.config import parse_config
from awide_gateway_cluster.layout import namespace

kv = pytest.importorskip("kubernetes_validate", reason="pip install -e '.[test]' "
                         "(kubernetes-validate)")

ROOT = Path(__file__).resolve().parents[1]
MANIFESTS = sorted((ROOT / "deploy" / "kubernetes").glob("*.yaml"))
VERSIONS = ("1.28.0", "1.37.0")     # an older cluster still in service, the newest bundled
SECRET = "DHHC-1:00:T50zLBgrqnvwGLqGoXa15nxG1ihDKwuDxyyRynTG/Hbyz/8e:"


def _docs() -> list[tuple[str, dict]]:
    return [(p.name, d) for p in MANIFESTS for d in yaml.safe_load_all(p.read_text()) if d]


def _by_kind(kind: str) -> dict:
    found = [d for _, d in _docs() if d["kind"] == kind]
    assert len(found) == 1, (kind, len(found))
    return found[0]


def test_the_example_has_a_configmap_a_secret_and_a_deployment() -> None:
    assert sorted(d["kind"] for _, d in _docs()) == ["ConfigMap", "Deployment", "Secret"]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", [p.name for p in MANIFESTS])
def test_manifests_validate_offline(name: str, version: str) -> None:
    for doc in yaml.safe_load_all((ROOT / "deploy" / "kubernetes" / name).read_text()):
        kv.validate(doc, version, strict=True)


def test_a_wrong_field_is_refused() -> None:
    """The validation can fail: a misspelt probe field and a port given as text."""
    bad = copy.deepcopy(_by_kind("Deployment"))
    server = bad["spec"]["template"]["spec"]["containers"][0]
    server["readinessProbe"]["httpGett"] = server["readinessProbe"].pop("httpGet")
    with pytest.raises(kv.ValidationError):
        kv.validate(bad, VERSIONS[-1], strict=True)
    bad = copy.deepcopy(_by_kind("Deployment"))
    bad["spec"]["replicas"] = "two"
    with pytest.raises(kv.ValidationError):
        kv.validate(bad, VERSIONS[-1], strict=True)


def test_the_configmaps_gateway_config_passes_the_gateways_validation(tmp_path: Path) -> None:
    text = _by_kind("ConfigMap")["data"]["gateway.yaml"]
    # the pod's files (written by its init container under /run/awide) made here
    files = {"/run/awide/ca.crt": "-----BEGIN CERTIFICATE-----\n",
             "/run/awide/etcd-password": "pw\n", "/run/awide/dhchap.key": SECRET + "\n",
             "/etc/nvme/hostid": "fc5d7cf3-2da3-497c-9a5d-9660e3b8585c\n"}
    for path, content in files.items():
        local = tmp_path / Path(path).name
        local.write_text(content)
        local.chmod(0o600)
        assert path in text, path
        text = text.replace(path, str(local))
    cfg = parse_config(yaml.safe_load(text), "gateway-config.yaml")
    assert cfg.mode == "cluster" and cfg.etcd.username == f"gateway:{cfg.cluster}"
    assert cfg.nvme.hostnqn and cfg.nvme.dhchap_secret_file == tmp_path / "dhchap.key"
    assert cfg.nvme.hostid == "fc5d7cf3-2da3-497c-9a5d-9660e3b8585c"   # the node's
    assert cfg.state.dir == Path("/var/lib/awide-gateway")
    assert namespace(cfg.model)
    # the init container rewrites exactly these lines; each is there once
    init = _by_kind("Deployment")["spec"]["template"]["spec"]["initContainers"][0]
    script = init["args"][0]
    for key in ("host", "pod", "gateway_id"):
        assert f"s/^{key}: .*/" in script, key
        assert len(re.findall(rf"(?m)^{key}: ", text)) == 1, key


def test_the_pod_is_ready_on_the_gateways_readyz_and_says_what_nvme_cli_needs() -> None:
    spec = _by_kind("Deployment")["spec"]["template"]["spec"]
    server = spec["containers"][0]
    assert server["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": 9701}
    assert spec["hostNetwork"] is True and server["securityContext"]["privileged"] is True
    assert {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v} == \
        {"state": "/var/lib/awide-gateway", "dev": "/dev", "etc-nvme": "/etc/nvme"}
    assert {e["name"]: e["value"] for e in server["env"]} == \
        {"AWIDE_CONFIG": "/run/awide/gateway.yaml"}
