"""The lab serves certificate files as the real binaries re-read them (``pki.ServedCert``, issue 36):
read once (the certificate a kubeconfig embeds: never re-read), at each handshake (etcd's
GetCertificate: a pair that does not load fails that handshake), or once the files' change is a
given number of seconds old (the API server's dynamiccertificates at its slowest: a pair that does
not load keeps the old certificate)."""

from __future__ import annotations

import os
import ssl
import time
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from cpctl_lab import pki


def served(source: pki.ServedCert) -> bytes:
    """The DER a real TLS handshake with ``source``'s next context gets (in memory, no socket)."""
    s_in, s_out, c_in, c_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    server = source.context().wrap_bio(s_in, s_out, server_side=True)
    client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_ctx.check_hostname = False
    client_ctx.verify_mode = ssl.CERT_NONE
    client = client_ctx.wrap_bio(c_in, c_out)
    done = set()
    for _ in range(20):
        for name, side in (("client", client), ("server", server)):
            try:
                side.do_handshake()
                done.add(name)
            except ssl.SSLWantReadError:
                pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        if done == {"client", "server"}:
            break
    assert "client" in done, "no handshake"
    cert = client.getpeercert(binary_form=True)
    assert cert
    return cert


def der(directory: Path) -> bytes:
    from cryptography import x509
    return x509.load_pem_x509_certificate((directory / "apiserver.crt").read_bytes()).public_bytes(
        serialization.Encoding.DER)


def write(directory: Path, age: float = 0.0) -> None:
    pki.write_pair(directory, "apiserver", pki.issue(pki.make_ca("ca"), "kube-apiserver", server=True))
    then = time.time() - age
    for name in ("apiserver.crt", "apiserver.key"):
        os.utime(directory / name, (then, then))


@pytest.mark.parametrize("reread", [None, 0.0, 60.0])
def test_what_each_kind_of_binary_serves_after_a_renewal(tmp_path: Path, reread: float) -> None:
    write(tmp_path)
    first = der(tmp_path)
    source = pki.ServedCert(tmp_path / "apiserver.crt", tmp_path / "apiserver.key", reread)
    assert served(source) == first
    write(tmp_path)                                  # renewed just now
    expected_now = der(tmp_path) if reread == 0.0 else first
    assert served(source) == expected_now
    write(tmp_path, age=61)                          # renewed a minute ago
    expected_later = first if reread is None else der(tmp_path)
    assert served(source) == expected_later


def test_a_pair_that_does_not_load(tmp_path: Path) -> None:
    write(tmp_path)
    etcd = pki.ServedCert(tmp_path / "apiserver.crt", tmp_path / "apiserver.key", 0.0)
    api = pki.ServedCert(tmp_path / "apiserver.crt", tmp_path / "apiserver.key", 60.0)
    kept = der(tmp_path)
    other = pki.issue(pki.make_ca("ca"), "kube-apiserver", server=True)     # a certificate renewed before its key
    (tmp_path / "apiserver.crt").write_bytes(other.cert_pem())
    then = time.time() - 61
    os.utime(tmp_path / "apiserver.crt", (then, then))
    with pytest.raises(OSError):
        etcd.context()                               # GetCertificate fails: so does the handshake
    assert served(api) == kept                       # dynamiccertificates keeps the last good pair
