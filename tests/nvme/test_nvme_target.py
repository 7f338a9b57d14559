"""NvmeTarget and the other validators: hostile registry values are refused."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from awide_cluster.contract.target import (
    InvalidDeviceName,
    InvalidIdentityString,
    InvalidTarget,
    NvmeTarget,
    clean_firmware,
    clean_model,
    clean_serial,
    validate_device_name,
    validate_nqn,
    validate_traddr,
    validate_trsvcid,
)

GOOD = {"transport": "tcp", "traddr": "10.200.0.11", "trsvcid": 4420,
        "subnqn": "nqn.2024-01.io.awide:sub1"}


def test_parse_good_target_and_round_trip():
    t = NvmeTarget.parse(GOOD)
    assert t == NvmeTarget("tcp", "10.200.0.11", 4420, "nqn.2024-01.io.awide:sub1")
    assert t.to_dict() == GOOD
    assert NvmeTarget.parse(t.to_dict()) == t
    assert str(t) == "tcp://10.200.0.11:4420/nqn.2024-01.io.awide:sub1"


@pytest.mark.parametrize("traddr,canonical", [
    ("10.0.0.1", "10.0.0.1"),
    ("FD00::0001", "fd00::1"),
    ("::ffff:10.0.0.1", "::ffff:a00:1"),
    ("Store-A.example.com", "store-a.example.com"),
    ("store1", "store1"),
])
def test_traddr_canonical_forms(traddr, canonical):
    assert validate_traddr(traddr) == canonical
    assert str(NvmeTarget("rdma", traddr, "4420", GOOD["subnqn"])).startswith("rdma://")


def test_trsvcid_string_becomes_int():
    assert NvmeTarget.parse({**GOOD, "trsvcid": "4420"}).trsvcid == 4420


@pytest.mark.parametrize("nqn", [
    "nqn.2024-01.io.awide:sub1",
    "nqn.2014-08.org.nvmexpress:uuid:b97306f6-0dde-4ab1-a911-14ab9f32adc8",
    "nqn.1992-08.com.netapp:sn.0123:subsystem.nvme_1",
    "nqn.2010-06.com.purestorage:flasharray.5e1b0ea2c3d4@x+y",
])
def test_good_nqns(nqn):
    assert validate_nqn(nqn) == nqn


HOSTILE = [
    ("transport", "--foo"), ("transport", "TCP"), ("transport", "fc"), ("transport", "pcie"),
    ("transport", "tcp\n"), ("transport", ""), ("transport", None), ("transport", 1),
    ("traddr", "--foo"), ("traddr", "-a"), ("traddr", "1.2.3.4;rm -rf /"),
    ("traddr", "10.0.0.1\n"), ("traddr", " 10.0.0.1"), ("traddr", "10.0.0.1 "),
    ("traddr", "a" * 5000), ("traddr", ""), ("traddr", "$(reboot)"), ("traddr", "`id`"),
    ("traddr", "fe80::1%eth0"), ("traddr", "fe80::1%;rm -rf /"), ("traddr", "10.0.0.256"),
    ("traddr", "010.0.0.1"), ("traddr", "1.2.3"), ("traddr", "host_name"), ("traddr", "-host"),
    ("traddr", "host-"), ("traddr", "a..b"), ("traddr", "host.name."), ("traddr", "x" * 64),
    ("traddr", "10.0.0.1,trsvcid=1"), ("traddr", "[::1]"), ("traddr", ["10.0.0.1"]),
    ("traddr", "h\u00f6st"),
    ("trsvcid", "--foo"), ("trsvcid", "0"), ("trsvcid", 0), ("trsvcid", "65536"),
    ("trsvcid", 65536), ("trsvcid", "-1"), ("trsvcid", -1), ("trsvcid", "4420 "),
    ("trsvcid", "0x10"), ("trsvcid", True), ("trsvcid", 4420.0), ("trsvcid", None),
    ("trsvcid", "4420;id"), ("trsvcid", "1" * 5000), ("trsvcid", "\u0664\u0664"),
    ("subnqn", "--foo"), ("subnqn", "-nqn.2024-01.io.awide:sub1"),
    ("subnqn", "nqn.2024-01.io.awide:sub1,hostnqn=nqn.2024-01.io.evil:x"),
    ("subnqn", "nqn.2024-01.io.awide:sub 1"), ("subnqn", "nqn.2024-01.io.awide:sub1\n"),
    ("subnqn", "nqn.2024-01.io.awide:sub1;rm -rf /"), ("subnqn", "nqn.2024-13.io.awide:x"),
    ("subnqn", "nqn.2024-00.io.awide:x"), ("subnqn", "NQN.2024-01.io.awide:x"),
    ("subnqn", "nqn.2024-01.io.awide"), ("subnqn", "nqn.2024-01.awide:x"),
    ("subnqn", "nqn.2024-01.io.awide:"), ("subnqn", "nqn.2024-01.io.awide:s\u00fcb"),
    ("subnqn", "nqn.2014-08.org.nvmexpress:uuid:not-a-uuid"),
    ("subnqn", "nqn.2014-08.org.nvmexpress:uuid:b97306f60dde4ab1a91114ab9f32adc8"),
    ("subnqn", "nqn.2024-01.io.awide:" + "x" * 203), ("subnqn", "nqn." + "a" * 5000),
    ("subnqn", ""), ("subnqn", None), ("subnqn", "nqn.2024-01.io.awide:a=b"),
    ("subnqn", "nqn.2024-01.io.awide:a/b"), ("subnqn", "nqn.2024-01.io.awide:a\x00b"),
]


@pytest.mark.parametrize("field,value", HOSTILE)
def test_hostile_values_refused_with_field_named(field, value):
    with pytest.raises(InvalidTarget) as info:
        NvmeTarget.parse({**GOOD, field: value})
    assert info.value.field == field
    assert isinstance(info.value, ValueError)
    assert field in str(info.value)
    assert len(str(info.value)) < 400        # a 5000-char value is not echoed whole


def test_nqn_at_the_limit():
    nqn = "nqn.2024-01.io.awide:" + "x" * (223 - len("nqn.2024-01.io.awide:"))
    assert len(nqn) == 223 and validate_nqn(nqn) == nqn
    with pytest.raises(InvalidTarget):
        validate_nqn(nqn + "x")


def test_mapping_shape_checked() -> None:
    with pytest.raises(InvalidTarget, match="missing"):
        NvmeTarget.parse({k: v for k, v in GOOD.items() if k != "subnqn"})
    with pytest.raises(InvalidTarget, match="unknown target field"):
        NvmeTarget.parse({**GOOD, "hostnqn": "x"})
    with pytest.raises(InvalidTarget):
        NvmeTarget.parse(["tcp"])  # type: ignore[arg-type]


def test_constructor_validates_too() -> None:
    with pytest.raises(InvalidTarget):
        NvmeTarget("tcp", "1.2.3.4;rm -rf /", 4420, str(GOOD["subnqn"]))
    t = NvmeTarget.parse(GOOD)
    with pytest.raises(AttributeError):
        t.traddr = "x"  # type: ignore[misc]


def test_trsvcid_bounds():
    assert validate_trsvcid("1") == 1 and validate_trsvcid(65535) == 65535


@pytest.mark.parametrize("name,bare", [("nvme0", "nvme0"), ("/dev/nvme12n3", "nvme12n3"),
                                       ("nvme1n1", "nvme1n1")])
def test_device_names(name, bare):
    assert validate_device_name(name) == bare


@pytest.mark.parametrize("name", ["nvme", "nvme0;rm", "/dev/nvme0/../sda", "sda", "nvme0c0n1",
                                  "-nvme0", "nvme0 ", "nvme01234567", "/dev/nvme0\n", 3])
def test_bad_device_names(name):
    with pytest.raises(InvalidDeviceName):
        validate_device_name(name)


def test_device_name_kind():
    with pytest.raises(InvalidDeviceName):
        validate_device_name("nvme0", namespace=True)
    with pytest.raises(InvalidDeviceName):
        validate_device_name("nvme0n1", namespace=False)


def test_serial_model_firmware_padding_stripped():
    assert clean_serial("AWIDE0000SN0001     ") == "AWIDE0000SN0001"
    assert clean_model("AWIDE Fake NVMe Ctrl" + " " * 20) == "AWIDE Fake NVMe Ctrl"
    assert clean_firmware("1.0     ") == "1.0"
    assert clean_serial(b"SN1\x00\x00") == "SN1"
    assert clean_serial("S" * 20) == "S" * 20


@pytest.mark.parametrize("cleaner,value", [
    (clean_serial, "S" * 21), (clean_serial, ""), (clean_serial, "   "), (clean_serial, "a\nb"),
    (clean_serial, "s\u00e9rie"), (clean_serial, None), (clean_model, "M" * 41),
    (clean_firmware, "123456789"), (clean_serial, "x" * 5000), (clean_serial, "a\tb"),
])
def test_bad_identity_strings(cleaner, value):
    with pytest.raises(InvalidIdentityString):
        cleaner(value)


# ------------------------------------------------------------------ properties

def _assert_safe(t: NvmeTarget) -> None:
    for value in (t.transport, t.traddr, str(t.trsvcid), t.subnqn):
        assert value and not value.startswith("-")
        assert not any(c.isspace() for c in value)
        assert "," not in value and "\x00" not in value
        assert value.isascii() and value.isprintable()
    assert len(t.subnqn.encode()) <= 223
    assert NvmeTarget.parse(t.to_dict()) == t


junk = st.one_of(st.text(max_size=300), st.integers(-10, 70000), st.none(), st.booleans(),
                 st.sampled_from(["tcp", "rdma", "10.0.0.1", "::1", "4420", "store-a",
                                  GOOD["subnqn"], "--foo", "-1"]))


@settings(max_examples=300, deadline=None)
@given(st.fixed_dictionaries({"transport": junk, "traddr": junk, "trsvcid": junk,
                              "subnqn": junk}))
def test_anything_accepted_is_safe_and_round_trips(mapping):
    try:
        t = NvmeTarget.parse(mapping)
    except InvalidTarget:
        return
    _assert_safe(t)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_any_text_accepted_as_nqn_or_traddr_is_safe(text):
    for validate in (validate_nqn, validate_traddr):
        try:
            out = validate(text)
        except InvalidTarget:
            continue
        assert out and not out.startswith("-") and out.isascii() and out.isprintable()
        assert not any(c.isspace() for c in out) and "," not in out
        assert validate(out) == out        # canonical form is a fixed point


label = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?", fullmatch=True)
wellformed = st.builds(
    lambda y, m, parts, rest: f"nqn.{y:04d}-{m:02d}.{'.'.join(parts)}:{rest}",
    st.integers(1970, 2100), st.integers(1, 12), st.lists(label, min_size=2, max_size=4),
    st.from_regex(r"[A-Za-z0-9._:@+-]{1,60}", fullmatch=True))


@settings(max_examples=200, deadline=None)
@given(wellformed, st.sampled_from(["tcp", "rdma"]), st.integers(1, 65535),
       st.ip_addresses().map(str))
def test_wellformed_targets_accepted(nqn, transport, port, ip):
    t = NvmeTarget(transport, ip, port, nqn)
    _assert_safe(t)
