"""The role's NVMe-oF access and etcd settings, for the example inventory (rendered with
``ansible-playbook --check --diff`` into a temp dir, secrets as ansible-vault values): plain
http and any-host access only with their loud opt-outs, bad allow-lists and keys refused by the
inventory checks without showing a secret, and the role's NQN rule the gateway library's. The
render with the allow-lists is test_ansible_secrets.py; what both share is
ansible_secrets_support.py.

ansible-core comes with the test extra; without it the tests skip, saying so.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import example, given, settings
from hypothesis import strategies as st

from awide_cluster.contract.target import InvalidTarget, validate_nqn
from tests.system.ansible_secrets_support import (
    ANSIBLE,
    DHCHAP,
    ETCD_PASSWORD,
    ETCDCTL_PASSWORD,
    RENDER,
    ROLE,
    SECRETS,
    VAULT_PASSWORD,
    _dhchap_vars,
    _playbook,
    _recap,
    _run,
    _setup,
    _text,
    _vaulted,
    tools,  # noqa: F401 (a fixture)
)
from tests.system.ansible_support import target_python

pytestmark = pytest.mark.timeout(600)


def test_plain_http_only_with_the_loud_opt_out(tools: Path, tmp_path: Path) -> None:
    s = _setup(tools, tmp_path, awide_etcd_insecure_plaintext=True)
    r = _playbook(tools, s, "--check", "--diff")
    assert r.returncode == 0, _text(r)[-3000:]
    text = _text(r)
    assert "http://10.0.0.11:2379" in text and "https://" not in text
    assert "allow_plaintext: true" in text and "awide_etcd_insecure_plaintext is true" in text
    assert "ETCD_PEER_CLIENT_CERT_AUTH" not in text and "username" not in text
    # setting the scheme by hand is refused: REFUSED["http-by-hand"] below


def test_the_loud_opt_out_is_written_instead_of_the_list(tools: Path, tmp_path: Path) -> None:
    # the checks and the config tasks (the card env files and the keys file are theirs) of the
    # hosts with exported cards
    s = _setup(tools, tmp_path, render=(RENDER[0], RENDER[2]), awide_gateway_hostnqns=[],
               awide_nvmet_insecure_any_host=True)
    r = _playbook(tools, s, "--check", "--diff", "--limit", "storage")
    assert r.returncode == 0, _text(r)[-3000:]
    assert _text(r).count("AWIDE_INSECURE_ANY_HOST=yes") == 2
    assert "AWIDE_HOST_NQNS" not in _text(r) and "AWIDE_DHCHAP_KEYS_FILE" not in _text(r)


# Each refused host carries one bad setting (the rest as store-a's); the words its refusal must
# say. One run of the inventory checks over all of them and store-a (which passes).
MALFORMED = {**DHCHAP, "nqn.2024-01.io.awide:gpu1": "DHHC-1:00:not-a-key-3f9a:"}
REFUSED: dict[str, tuple[dict[str, Any], str]] = {
    "no-list": ({"awide_gateway_hostnqns": []}, "must list the gateways' host NQNs"),
    "bad-key": ({"dhchap": MALFORMED}, "hosts with a malformed key: ['nqn.2024-01.io.awide:gpu1']"),
    "bad-nqn": ({"awide_gateway_hostnqns": ["nqn.2024-01.io.awide:gpu1", "gpu2,evil"]},
                "gpu2,evil"),
    "no-key": ({"awide_gateway_hostnqns": ["nqn.2024-01.io.awide:gpu1",
                                           "nqn.2024-01.io.awide:gpu3"]},
               "missing: ['nqn.2024-01.io.awide:gpu3']"),
    "inline-pw": ({"awide_config_extra": {"etcd": {"username": "u", "password": "inline-pw"}}},
                  "set awide_etcd_password"),
    # setting the scheme by hand is no way around the loud name (awide_etcd_insecure_plaintext)
    "http-by-hand": ({"awide_etcd_scheme": "http"}, "awide_etcd_insecure_plaintext=true"),
}


@pytest.fixture(scope="module")
def refusals(tools: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The role's inventory checks (checks.yml, --check) run once over store-a of the example
    inventory and one host per REFUSED entry, each with store-a's cards and one bad setting as
    its host variables (the DH-HMAC-CHAP keys in host_vars, one of them vault-encrypted; the
    etcd passwords from the vault as extra vars)."""
    tmp = tmp_path_factory.mktemp("ansible-refusals")
    (tmp / "vault-pw").write_text(VAULT_PASSWORD + "\n")
    inv = yaml.safe_load((ANSIBLE / "inventory.example.yml").read_text())
    store_a = inv["all"]["children"]["storage"]["hosts"]["store-a"]
    hosts: dict[str, dict] = {"store-a": store_a}
    (tmp / "host_vars").mkdir()
    for i, (host, (over, _)) in enumerate(REFUSED.items()):
        hosts[host] = {**store_a, "ansible_host": f"10.0.1.{i + 11}",
                       **{k: v for k, v in over.items() if k != "dhchap"}}
    for host in hosts:
        dhchap = REFUSED[host][0].get("dhchap", DHCHAP) if host in REFUSED else DHCHAP
        (tmp / "host_vars" / f"{host}.yml").write_text(_dhchap_vars(tools, tmp, dhchap))
    inv["all"]["vars"].update({"ansible_connection": "local",
                               "ansible_python_interpreter": target_python()})
    inv["all"]["children"] = {"storage": {"hosts": hosts}}
    (tmp / "inventory.yml").write_text(yaml.safe_dump(inv))
    (tmp / "secrets.yml").write_text(
        "awide_etcd_passwords:\n"
        + _vaulted(tools, tmp, ETCD_PASSWORD, '  "host:prod1:store-a"')
        + _vaulted(tools, tmp, ETCDCTL_PASSWORD, '  "root"'))
    play = [{"name": "Check the inventory", "hosts": "storage", "gather_facts": False,
             "tasks": [{"name": "Checks", "ansible.builtin.import_role": {
                 "name": "awide", "tasks_from": "checks.yml"}}]}]
    (tmp / "checks.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    r = _run([str(tools / "ansible-playbook"), "-i", "inventory.yml", "-e", "@secrets.yml",
              "--vault-password-file", "vault-pw", "--check", "checks.yml"], cwd=tmp,
             ANSIBLE_ROLES_PATH=str(ANSIBLE / "roles"), ANSIBLE_CALLBACK_RESULT_FORMAT="json",
             ANSIBLE_CALLBACK_FORMAT_PRETTY="false")
    return {"run": r, "recap": _recap(r.stdout)}


def test_the_inventory_checks_pass_a_good_host(refusals: dict) -> None:
    r = refusals["run"]
    assert r.returncode != 0                       # the refused hosts
    assert refusals["recap"]["store-a"]["failed"] == 0, _text(r)[-4000:]
    assert not any(secret in _text(r) for secret in SECRETS)
    assert "not-a-key-3f9a" not in _text(r)


@pytest.mark.parametrize("host", sorted(REFUSED))
def test_the_inventory_checks_refuse_bad_access_settings(refusals: dict, host: str) -> None:
    r = refusals["run"]
    assert refusals["recap"][host]["failed"] == 1, _text(r)[-4000:]
    said = "\n".join(line for line in r.stdout.splitlines()
                     if re.match(r"(fatal|failed): \[" + re.escape(host) + r"\]", line))
    assert REFUSED[host][1] in said, (host, said, _text(r)[-3000:])
    assert not any(secret in _text(r) for secret in SECRETS)
    assert "not-a-key-3f9a" not in _text(r)


# --- the role's NQN rule is the gateway library's (pure) ------------------------------------

def _role_nqn_pattern() -> re.Pattern[str]:
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    pattern = defaults["awide_nqn_pattern"].replace("{{ awide_nqn_label }}",
                                                     defaults["awide_nqn_label"])
    assert "{{" not in pattern
    return re.compile(pattern)


@settings(max_examples=300, deadline=None)
@example(date="2024-01", domain="io.awide", name="gw\n", extra="")
@example(date="2024-01", domain="io.awide", name="gw\nAWIDE_INSECURE_ANY_HOST=yes", extra="")
@given(date=st.sampled_from(["2024-01", "2014-08", "2024-12", "2024-13", "2024-00", "24-01"]),
       domain=st.lists(st.sampled_from(["io", "awide", "a-b", "x1", "7", "-a", "a-", "", "a_b",
                                        "A"]), min_size=1, max_size=3).map(".".join),
       name=st.one_of(st.text("abXY09.-_:@+", min_size=1, max_size=6),
                      st.text("abc019.-_:@+,=/ \n", min_size=0, max_size=6)),
       extra=st.sampled_from(["", "x" * 220]))
def test_the_role_accepts_exactly_the_nqns_the_library_accepts(date: str, domain: str,
                                                                name: str, extra: str) -> None:
    nqn = f"nqn.{date}.{domain}:{name}{extra}"
    try:
        validate_nqn(nqn)
        library = True
    except InvalidTarget:
        library = False
    # ansible's `match` test is re.match
    assert (_role_nqn_pattern().match(nqn) is not None) == library, nqn
