"""The config loader's limits (one loader for the daemon's, the gateway's and the operator's
files): a file too large, too deep, not UTF-8, with a key twice, or naming a secret file others
may read is refused in one line with exit code 78 (EXIT_CONFIG) and no traceback, in well
under a second."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from awide_cluster.cli.lookup import EXIT_CONFIG
from awide_cluster.cli.main import cli
from awide_cluster.config import daemon as daemon_config
from awide_cluster.config.common import (
    MAX_CONFIG_BYTES,
    MAX_DEPTH,
    MAX_NODES,
    ConfigError,
    read_yaml,
    secret_mode_problem,
)
from tests.timing import bound

ENDPOINTS = ["https://10.0.0.1:2379", "https://10.0.0.2:2379", "https://10.0.0.3:2379"]
DAEMON = {"cluster": "c1", "host": "h1", "hosts": ["h1", "h2", "h3"], "role": "witness",
          "etcd": {"endpoints": ENDPOINTS}}
GATEWAY = {"mode": "cluster", "cluster": "c1", "host": "gpu1", "pod": "vllm-0",
           "model": {"name": "m"}, "etcd": {"endpoints": ENDPOINTS}}


def _secret(tmp_path: Path, name: str, mode: int) -> Path:
    path = tmp_path / name
    path.write_text("not-a-real-secret\n")
    path.chmod(mode)
    return path


def _yaml(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _text(tmp_path: Path, text: str | bytes) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


def _deep(tmp_path: Path) -> Path:
    return _text(tmp_path, "cluster: c1\nhosts: " + "[" * 100_000 + "]" * 100_000 + "\n")


def _just_too_deep(tmp_path: Path) -> Path:
    return _text(tmp_path, "a: " + "[" * MAX_DEPTH + "]" * MAX_DEPTH + "\n")


def _latin1(tmp_path: Path) -> Path:
    return _text(tmp_path, "cluster: c1\nhost: h\xe9\n".encode("latin-1"))


def _huge(tmp_path: Path) -> Path:
    path = tmp_path / "cluster.yaml"
    with path.open("wb") as f:                  # sparse: 100 MB without writing them
        f.truncate(100 * 1024 * 1024)
    return path


def _many_values(tmp_path: Path) -> Path:
    return _text(tmp_path, "".join(f"k{i}: v\n" for i in range(MAX_NODES)))


def _duplicate(tmp_path: Path) -> Path:
    return _text(tmp_path, "cluster: c1\nhost: h1\nhosts: [h1, h2, h3]\nrole: witness\n"
                           "etcd: {endpoints: [https://10.0.0.1:2379]}\ncluster: c2\n")


def _nested_duplicate(tmp_path: Path) -> Path:
    return _text(tmp_path, "cluster: c1\netcd:\n  endpoints: [https://10.0.0.1:2379]\n"
                           "  call_timeout: 1\n  call_timeout: 2\n")


def _bad_date(tmp_path: Path) -> Path:
    return _text(tmp_path, "cluster: 2001-02-30\n")


def _loose_password(tmp_path: Path) -> Path:
    pw = _secret(tmp_path, "etcd-password", 0o644)
    return _yaml(tmp_path, {**DAEMON, "etcd": {"endpoints": ENDPOINTS, "username": "host:c1:h1",
                                               "password_file": str(pw)}})


def _loose_etcd_key(tmp_path: Path) -> Path:
    ca, cert = _secret(tmp_path, "ca.crt", 0o644), _secret(tmp_path, "h1.crt", 0o644)
    key = _secret(tmp_path, "h1.key", 0o604)
    return _yaml(tmp_path, {**DAEMON, "etcd": {"endpoints": ENDPOINTS, "tls": {
        "ca_file": str(ca), "cert_file": str(cert), "key_file": str(key)}}})


def _group_api_key(tmp_path: Path) -> Path:
    ca, cert = _secret(tmp_path, "ca.crt", 0o644), _secret(tmp_path, "api.crt", 0o644)
    key = _secret(tmp_path, "api.key", 0o640)
    if os.geteuid() == 0:
        os.chown(key, 65534, 65534)             # a key of another, non-root user
    return _yaml(tmp_path, {**DAEMON, "api": {"listen": "10.0.0.1:9700", "tls": {
        "cert_file": str(cert), "key_file": str(key), "client_ca_file": str(ca)}}})


CASES = [
    # (case, file maker, words of the one line)
    ("deep nesting", _deep, "line 2: not valid YAML: "),
    ("one level too deep", _just_too_deep, f"nested deeper than {MAX_DEPTH} levels"),
    ("not UTF-8", _latin1, "line 2: not UTF-8 text (byte 0xe9"),
    ("100 MB", _huge, f"104857600 bytes, over the bound of {MAX_CONFIG_BYTES}"),
    ("too many values", _many_values, f"more than {MAX_NODES} values"),
    ("duplicate key", _duplicate, "line 6: not valid YAML: key 'cluster' given twice "
                                  "(first on line 1)"),
    ("nested duplicate key", _nested_duplicate, "line 5: not valid YAML: key 'call_timeout' "
                                                "given twice (first on line 4)"),
    ("a date that does not exist", _bad_date, "day is out of range"),
    ("0644 password file", _loose_password, "etcd.password_file: secret file"),
    ("0604 etcd TLS key", _loose_etcd_key, "mode 0604 lets others in"),
    ("0640 API key of a non-root owner", _group_api_key, "mode 0640 lets its group in"),
]


def _check(args: list[str]) -> tuple[int, str, float]:
    start = time.monotonic()
    result = CliRunner().invoke(cli, args)
    elapsed = time.monotonic() - start
    assert result.exception is None or isinstance(result.exception, SystemExit), \
        result.exception                                            # never a traceback
    return result.exit_code, result.output, elapsed


@pytest.mark.parametrize(("case", "make", "said"), CASES, ids=[c[0] for c in CASES])
def test_a_file_over_a_limit_is_one_line_exit_78_under_a_second(case, make, said, tmp_path):
    path = make(tmp_path)
    code, out, elapsed = _check(["check-config", str(path)])
    assert code == EXIT_CONFIG, out
    assert out.count("\n") == 1 and out.startswith(f"{path}: "), out
    assert said in out, out
    assert "Traceback" not in out
    assert elapsed < bound(1.0), f"{case}: {elapsed:.2f} s"


@pytest.mark.parametrize("make", [_deep, _latin1, _huge, _nested_duplicate])
def test_the_gateway_file_goes_through_the_same_loader(make, tmp_path):
    path = make(tmp_path)
    code, out, elapsed = _check(["gateway", "check-config", str(path)])
    assert code == EXIT_CONFIG and out.count("\n") == 1 and out.startswith(f"{path}: "), out
    assert elapsed < bound(1.0)


def test_within_the_limits_the_same_files_load(tmp_path):
    """The controls: a private password file and key, nesting at the bound, a merge key."""
    pw = _secret(tmp_path, "etcd-password", 0o600)
    ca, cert = _secret(tmp_path, "ca.crt", 0o644), _secret(tmp_path, "h1.crt", 0o644)
    key = _secret(tmp_path, "h1.key", 0o600)
    path = _yaml(tmp_path, {**DAEMON, "etcd": {
        "endpoints": ENDPOINTS, "username": "host:c1:h1", "password_file": str(pw),
        "tls": {"ca_file": str(ca), "cert_file": str(cert), "key_file": str(key)}}})
    code, out, _ = _check(["check-config", str(path)])
    assert code == 0, out
    deep = _text(tmp_path, "a: " + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1) + "\n")
    value, depth = read_yaml(deep), 0
    while isinstance(value, (dict, list)) and value:
        value = value["a"] if isinstance(value, dict) else value[0]
        depth += 1
    assert depth == MAX_DEPTH - 1          # the mapping and MAX_DEPTH - 1 lists: at the bound
    merged = _text(tmp_path, "base: &b {p: 1}\ncopy:\n  <<: *b\n  q: 2\n")
    assert read_yaml(merged)["copy"] == {"p": 1, "q": 2}


def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "cluster.yaml"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="not a regular file"):
        daemon_config.load(fifo)


@pytest.mark.parametrize(("mode", "uid", "gid", "euid", "groups", "refused"), [
    (0o600, 1000, 1000, 1000, {1000}, None),
    (0o400, 1000, 1000, 1000, {1000}, None),
    (0o644, 1000, 1000, 1000, {1000}, "lets others in"),
    (0o601, 1000, 1000, 1000, {1000}, "lets others in"),
    (0o640, 1000, 1000, 1000, {1000}, "lets its group in"),     # not root's: refused
    (0o640, 0, 998, 999, {999, 998}, None),                     # root:awide 0640, read by awide
    (0o640, 0, 100, 999, {999}, "lets its group in"),           # root's, a group not the reader's
    (0o640, 0, 998, 0, {0}, None),                              # root checks what root shares
    (0o660, 0, 998, 999, {998}, None),
])
def test_secret_mode_rule(mode, uid, gid, euid, groups, refused):
    why = secret_mode_problem(0o100000 | mode, uid, gid, euid=euid, groups=frozenset(groups))
    if refused is None:
        assert why is None
    else:
        assert why is not None and refused in why
