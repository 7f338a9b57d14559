"""Credential files: what is refused (naming the file), what a reload changes, what it keeps."""

from __future__ import annotations

import shutil

import pytest
from hypothesis import given
from hypothesis import strategies as st

from awide_cluster.store import StoreConfig, TlsConfig
from awide_cluster.store.credentials import (
    CredentialError,
    CredentialFiles,
    password_problem,
    pem_problem,
    read_credentials,
)
from awide_cluster.store.etcd import EtcdStore
from awide_harness import make_test_pki

CERT = b"-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUQ==\n-----END CERTIFICATE-----\n"
KEY = b"-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEG==\n-----END PRIVATE KEY-----\n"


def test_good_pem_passes():
    assert pem_problem(CERT, "certificate") is None
    assert pem_problem(CERT + CERT, "certificate") is None          # a bundle
    assert pem_problem(KEY, "key") is None
    assert pem_problem(KEY.replace(b"PRIVATE KEY", b"EC PRIVATE KEY"), "key") is None


@pytest.mark.parametrize("data,kind,why", [
    (b"", "certificate", "empty"),
    (b"hello\n", "certificate", "not PEM"),
    (CERT[:40], "certificate", "not closed"),
    (KEY, "certificate", "no CERTIFICATE"),
    (CERT + KEY, "certificate", "private key"),
    (CERT, "key", "no PRIVATE KEY"),
    (KEY + KEY, "key", "2 private keys"),
    (KEY.replace(b"PRIVATE KEY", b"ENCRYPTED PRIVATE KEY"), "key", "encrypted"),
    (CERT.replace(b"MIIB", b"M!!B"), "certificate", "not base64"),
    (CERT.replace(b"END CERTIFICATE", b"END X509 CRL"), "certificate", "ends with"),
])
def test_bad_pem_is_named(data, kind, why):
    assert why in (pem_problem(data, kind) or "")


@given(st.binary(max_size=300))
def test_random_bytes_never_pass_as_a_key_unless_they_hold_one(data):
    why = pem_problem(data, "key")
    assert why is None or isinstance(why, str)
    if b"PRIVATE KEY-----" not in data:
        assert why is not None


@given(st.binary(max_size=200), st.binary(max_size=200))
def test_garbage_around_a_certificate_keeps_it_a_certificate_or_refuses(before, after):
    why = pem_problem(before + CERT + after, "certificate")
    if b"-----" not in before + after:
        assert why is None


@given(st.text(min_size=1, max_size=60).filter(lambda t: t.strip() and "\n" not in t.strip()
                                               and "\r" not in t.strip()))
def test_a_one_line_password_passes(text):
    assert password_problem(text.encode() + b"\n") is None


@pytest.mark.parametrize("data,why", [(b"", "empty"), (b"  \n", "empty"),
                                      (b"a\nb\n", "more than one line"), (b"\xff\xfe", "UTF-8"),
                                      (b"x" * 5000, "4096")])
def test_bad_password_files_are_named(data, why):
    assert why in (password_problem(data) or "")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    return make_test_pki(d / "a"), make_test_pki(d / "b")


def test_real_files_build_a_context(pki):
    a, _ = pki
    creds = read_credentials(CredentialFiles(a.ca_file, a.client_cert, a.client_key))
    assert creds.ssl is not None and creds.password is None and creds.digest


def test_a_key_of_another_certificate_is_refused_naming_the_key(pki):
    a, b = pki
    with pytest.raises(CredentialError) as err:
        read_credentials(CredentialFiles(a.ca_file, a.client_cert, b.client_key))
    assert err.value.file == b.client_key and "does not match" in err.value.reason


def test_a_missing_file_is_refused_naming_it(pki, tmp_path):
    a, _ = pki
    with pytest.raises(CredentialError, match="nope.pem: cannot read"):
        read_credentials(CredentialFiles(str(tmp_path / "nope.pem")))


def _store(tmp_path, a, password: str = "s3cret") -> tuple[EtcdStore, dict[str, str]]:
    files = {}
    for name, src in (("ca", a.ca_file), ("cert", a.client_cert), ("key", a.client_key)):
        files[name] = str(tmp_path / f"{name}.pem")
        shutil.copy(src, files[name])
    files["password"] = str(tmp_path / "password")
    (tmp_path / "password").write_text(password + "\n")
    cfg = StoreConfig(("https://127.0.0.1:1",), "/p/", tls=TlsConfig(files["ca"], files["cert"],
                                                                    files["key"]),
                      username="u", password=password, password_file=files["password"])
    return EtcdStore(cfg), files


async def test_reload_adopts_good_files_and_keeps_the_old_on_a_bad_one(pki, tmp_path):
    a, b = pki
    store, files = _store(tmp_path, a)
    try:
        first = store.transport.ssl_context
        assert "unchanged" in store.reload_credentials()
        assert store.transport.ssl_context is first
        shutil.copy(b.ca_file, files["ca"])
        store.transport.token = "old-token"
        assert "new connections use them" in store.reload_credentials()
        second = store.transport.ssl_context
        assert second is not first and store.transport.token == "old-token"
        # a key that does not match: refused, naming it; nothing changes
        shutil.copy(b.client_key, files["key"])
        with pytest.raises(CredentialError, match="key.pem: does not match"):
            store.reload_credentials()
        assert store.transport.ssl_context is second
        shutil.copy(a.client_key, files["key"])
        # an empty password file: refused; a new password drops the token
        open(files["password"], "w").close()
        with pytest.raises(CredentialError, match="password: empty"):
            store.reload_credentials()
        assert store.config.password == "s3cret"
        with open(files["password"], "w") as f:
            f.write("n3w\n")
        assert "new connections" in store.reload_credentials()
        assert store.config.password == "n3w" and store.transport.token is None
        assert "n3w" not in repr(store.config)
    finally:
        await store.close()


async def test_the_metered_store_passes_a_reload_on(pki, tmp_path):
    from awide_cluster.api.metrics import DaemonMetrics
    from awide_cluster.daemon.metered import MeteredStore
    a, _ = pki
    store, files = _store(tmp_path, a)
    metered = MeteredStore(store, DaemonMetrics(host="h1", role="storage", version="0"))
    try:
        assert "unchanged" in metered.reload_credentials()
        open(files["ca"], "w").close()
        with pytest.raises(CredentialError, match="ca.pem: empty"):
            metered.reload_credentials()
    finally:
        await store.close()
