"""CardSpec: config entries of cards; typos and hostile values are errors naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from awide_cluster.cards.spec import CardSpec, StoreProbeSpec, parse_host_port
from awide_cluster.contract.target import NvmeTarget

TARGET = {"transport": "tcp", "traddr": "10.200.0.11", "trsvcid": 4420,
          "subnqn": "nqn.2024-01.io.awide:sub1"}
NVME = {"name": "card0", "kind": "nvme", "serial": "AWIDE0000SN0001", "target": TARGET,
        "store": {"systemd_unit": "awide-store@card0.service"}}
DIR = {"name": "dev0", "kind": "dir", "path": "/srv/awide/dev0"}


def _error(data) -> tuple[tuple, str]:
    with pytest.raises(ValidationError) as info:
        CardSpec.model_validate(data)
    err = info.value.errors()[0]
    return err["loc"], err["msg"]


def test_nvme_card():
    spec = CardSpec.model_validate({**NVME, "nsid": 1})
    assert spec.target == NvmeTarget.parse(TARGET)
    assert spec.store.kind == "systemd_unit"
    assert spec.probe_timeout == 0.5 and spec.nsid == 1
    assert spec.model_dump(mode="json")["target"] == TARGET
    assert CardSpec.model_validate(spec.model_dump()) == spec


def test_dir_card():
    spec = CardSpec.model_validate(DIR)
    assert spec.path == Path("/srv/awide/dev0") and spec.target is None and spec.store is None


def test_serial_padding_stripped():
    assert CardSpec.model_validate({**NVME, "serial": "SN1   "}).serial == "SN1"


@pytest.mark.parametrize("data,loc,words", [
    ({**NVME, "serail": "x"}, ("serail",), "Extra inputs"),
    ({**NVME, "kind": "disk"}, ("kind",), "'dir' or 'nvme'"),
    ({**NVME, "name": "Card 0"}, ("name",), "card name"),
    ({**NVME, "name": "-x"}, ("name",), "card name"),
    ({k: v for k, v in NVME.items() if k != "serial"}, (), "needs serial"),
    ({**NVME, "serial": "S" * 21}, ("serial",), "longer than 20"),
    ({**NVME, "serial": "a\nb"}, ("serial",), "printable"),
    ({**NVME, "path": "/x"}, (), "dir cards only"),
    ({**NVME, "nsid": 0}, ("nsid",), "greater than or equal"),
    ({**NVME, "probe_timeout": 0}, ("probe_timeout",), "greater than"),
    ({**NVME, "probe_timeout": 60}, ("probe_timeout",), "less than"),
    ({**DIR, "path": None}, (), "needs path"),
    ({**DIR, "path": "relative/dir"}, (), "absolute"),
    ({**DIR, "serial": "SN1"}, (), "label"),
    ({**NVME, "target": {**TARGET, "traddr": "1.2.3.4;rm -rf /"}}, ("target",), "traddr"),
    ({**NVME, "target": {**TARGET, "subnqn": "--foo"}}, ("target",), "subnqn"),
    ({**NVME, "target": {**TARGET, "trsvcid": 0}}, ("target",), "trsvcid"),
    ({**NVME, "target": {**TARGET, "extra": 1}}, ("target",), "unknown target field"),
    ({**NVME, "target": "10.0.0.1:4420"}, ("target",), "mapping"),
    ({**NVME, "store": {}}, ("store",), "exactly one"),
    ({**NVME, "store": {"tcp": "10.0.0.1:80", "http": "http://x/"}}, ("store",), "exactly one"),
    ({**NVME, "store": {"systemd": "x.service"}}, ("store", "systemd"), "Extra inputs"),
    ({**NVME, "store": {"systemd_unit": "--now"}}, ("store", "systemd_unit"), "unit name"),
    ({**NVME, "store": {"systemd_unit": "a b.service"}}, ("store", "systemd_unit"), "unit"),
    # is-active takes patterns: a glob would answer for other units in the turn's one call
    ({**NVME, "store": {"systemd_unit": "awide-*.service"}}, ("store", "systemd_unit"), "unit"),
    ({**NVME, "store": {"systemd_unit": "store[0].service"}}, ("store", "systemd_unit"), "unit"),
    ({**NVME, "store": {"http": "ftp://x/"}}, ("store", "http"), "http(s)"),
    ({**NVME, "store": {"http": "http://x:99999/"}}, ("store", "http"), "port"),
    ({**NVME, "store": {"tcp": "10.0.0.1"}}, ("store", "tcp"), "host:port"),
    ({**NVME, "store": {"tcp": "fd00::1:80"}}, ("store", "tcp"), "brackets"),
    ({**NVME, "store": {"tcp": "a;b:80"}}, ("store", "tcp"), "host name"),
    ({**NVME, "store": {"command": []}}, ("store", "command"), "non-empty"),
    ({**NVME, "store": {"command": ["--x"]}}, ("store", "command"), "program"),
    ({**NVME, "store": {"command": "check-store --fast"}}, ("store", "command"), "tuple"),
])
def test_invalid_entries(data, loc, words):
    got_loc, msg = _error(data)
    assert got_loc == loc
    assert words in msg


def test_store_kinds():
    assert StoreProbeSpec(http="http://127.0.0.1:8080/health").kind == "http"
    assert StoreProbeSpec(tcp="[fd00::1]:9000").kind == "tcp"
    assert StoreProbeSpec.model_validate({"command": ["/usr/bin/true"]}).command == (
        "/usr/bin/true",)


@pytest.mark.parametrize("text,expected", [
    ("10.0.0.1:80", ("10.0.0.1", 80)), ("[FD00::1]:9000", ("fd00::1", 9000)),
    ("store-a:1", ("store-a", 1)),
])
def test_host_port(text, expected):
    assert parse_host_port(text) == expected


def test_spec_is_frozen() -> None:
    spec = CardSpec.model_validate(NVME)
    with pytest.raises(ValidationError):
        spec.serial = "x"
