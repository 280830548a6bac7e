"""The agent's ``peer_cert`` op (standard library, bytes only) and the operator-side parsing of
what a master returns (issue 26): a real TLS server, a real agent subprocess, hostile bytes.

* the DER the agent returns is exactly the served certificate; the same through the agent
  protocol as in-process, batched in one round trip when prefetched;
* a port that answers plain HTTP, a closed port, a server that never finishes the handshake:
  one OSError each with cpctl's words, within the timeout;
* certificate bytes from a master are untrusted: garbage, truncated DER, a PEM block of junk -
  each a ``Cert.error``, never an exception.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, Iterator

import pytest
from cryptography.hazmat.primitives import serialization

from cpctl.host.agent import SubprocessAgentHost
from cpctl.host.local import LocalHost
from cpctl.ops import certs
from cpctl_lab import pki
from cpctl_lab.httpserve import serve
from tests.coreutil import echo_server


class _Quiet(BaseHTTPRequestHandler):
    def handle(self) -> None:
        return


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[int, bytes]]:
    """A TLS listener serving a fresh certificate; yields (port, its DER)."""
    ca = pki.make_ca("test-ca")
    leaf = pki.issue(ca, "kube-apiserver", server=True, sans=pki.SANs(["localhost"], ["127.0.0.1"]))
    pki.write_pair(tmp_path, "apiserver", leaf)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    srv = serve("127.0.0.1", port, _Quiet, tls=pki.server_context(tmp_path / "apiserver.crt",
                                                                  tmp_path / "apiserver.key"))
    try:
        yield port, leaf.cert.public_bytes(serialization.Encoding.DER)
    finally:
        srv.stop()


class CountingAgent(SubprocessAgentHost):
    """A real agent that records each request written to it."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[str] = []

    def _request(self, op: str, args: dict) -> Any:
        self.requests.append(op)
        return super()._request(op, args)


def test_peer_cert_returns_the_served_der_locally_and_through_the_agent(tls_server: tuple[int, bytes]) -> None:
    port, der = tls_server
    assert LocalHost().peer_cert("127.0.0.1", port)["der"] == der
    agent = CountingAgent()
    try:
        assert agent.peer_cert("127.0.0.1", port)["der"] == der
        calls = [("peer_cert", {"host": "127.0.0.1", "port": port, "timeout": 3.0})] * 2
        agent.requests.clear()
        with agent.prefetched(calls[:1] + [("lstat", {"path": "/"})]):
            assert agent.peer_cert("127.0.0.1", port, 3.0)["der"] == der
            assert agent.lstat("/") is not None
        assert agent.requests == ["batch"]        # both answers came in one round trip
    finally:
        agent.close()


def test_peer_cert_failures_are_one_oserror() -> None:
    host = LocalHost()
    with echo_server() as url:                    # answers plain HTTP
        with pytest.raises(OSError) as info:
            host.peer_cert("127.0.0.1", int(url.rsplit(":", 1)[1]), 2.0)
    assert "TLS" in str(info.value)
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    with pytest.raises(ConnectionRefusedError):
        host.peer_cert("127.0.0.1", port, 2.0)
    silent = socket.socket()                      # accepts, never answers the ClientHello
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)
    held: list = []
    threading.Thread(target=lambda: held.append(silent.accept()), daemon=True).start()
    start = time.monotonic()
    try:
        with pytest.raises(OSError) as info:
            host.peer_cert("127.0.0.1", silent.getsockname()[1], 0.5)
        assert "within 0.5s" in str(info.value)
        assert time.monotonic() - start < 3
    finally:
        silent.close()
        for conn, _ in held:
            conn.close()


@pytest.mark.parametrize("data, word", [
    (b"", "no PEM certificate"),
    (b"\x00\xff" * 1000, "no PEM certificate"),
    (b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n", "not a valid X.509"),
    (b"-----BEGIN CERTIFICATE-----\n" + b"QUJD" * 50 + b"\n-----END CERTIFICATE-----\n", "not a valid X.509"),
])
def test_hostile_certificate_bytes_are_verdicts(data: bytes, word: str) -> None:
    cert = certs.Cert("pki/apiserver.crt", "/etc/kubernetes/pki/apiserver.crt")
    try:
        parsed = certs.describe(cert, certs.first_der(data))
    except ValueError as exc:
        cert.error, parsed = str(exc), None
    assert parsed is None and word in cert.error


def test_served_garbage_is_a_stale_or_unreadable_verdict_never_a_crash() -> None:
    """What a master's handshake returns is parsed defensively too (``judge_serving``'s detail)."""
    old = certs.Cert("served", "127.0.0.1:6443")
    assert certs.describe(old, b"\x30\x82\x01\x00garbage") is None
    assert old.error.startswith("not a valid X.509 certificate")


def test_a_node_without_pki_and_an_odd_manifest_are_verdicts(node: Any) -> None:
    """No kubeadm pki next to the manifests dir: every file `missing`, no component `current`; a
    scheduler manifest with two containers, none named like the pod: `unknown`, with the reason."""
    import json

    import yaml
    pod = yaml.safe_load(open(os.path.join(node.manifests, "kube-scheduler.yaml")))
    main = pod["spec"]["containers"][0]
    pod["spec"]["containers"] = [dict(main, name="first"), dict(main, name="second")]
    with open(os.path.join(node.manifests, "kube-scheduler.yaml"), "w") as handle:
        yaml.safe_dump(pod, handle)
    data = json.loads(node.run("-o", "json", "certs").stdout)
    assert {c["name"]: c["error"] for c in data["certificates"]}["pki/ca.crt"] == "missing"
    verdicts = {c["component"]: c for c in data["components"]}
    assert verdicts["kube-scheduler"]["verdict"] == "unknown"
    assert "several containers" in verdicts["kube-scheduler"]["why"]
    assert "current" not in {c["verdict"] for c in data["components"]}
    text = node.run("certs").stdout
    assert "kube-scheduler" in text and "several containers" in text
