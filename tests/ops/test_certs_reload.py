"""What each binary re-reads by itself (the catalogue's ``CERT_RELOADS``, issue 36), and the
verdicts it gives: a real TLS server on 127.0.0.1 serving an old certificate is "reloads by
itself, not yet" while the file changed less than the binary's window ago (by the node's clock
the handshake returns), STALE after it, and STALE at once for a flag the table does not know."""

from __future__ import annotations

import json
import os
import re
import socket
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from types import SimpleNamespace
from typing import Iterator

import pytest

from cpctl import catalogue
from cpctl.host import replies
from cpctl.host.local import LocalHost
from cpctl.ops import certs
from cpctl_lab import pki
from cpctl_lab.httpserve import serve

DOCS = Path(__file__).resolve().parents[2] / "docs" / "certs.md"


class _Quiet(BaseHTTPRequestHandler):
    def handle(self) -> None:
        return


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """``tmp_path/pki/apiserver.crt`` and a TLS listener serving it as it was at the start (yields
    the kube dir and the port)."""
    pkidir = tmp_path / "pki"
    pkidir.mkdir()
    pki.write_pair(pkidir, "apiserver", pki.issue(pki.make_ca("ca"), "kube-apiserver", server=True))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    srv = serve("127.0.0.1", port, _Quiet, tls=pki.server_context(pkidir / "apiserver.crt", pkidir / "apiserver.key"))
    try:
        yield tmp_path, port
    finally:
        srv.stop()


def judge(kube_dir: Path, port: int, reload: "catalogue.CertReload | None") -> certs.Evidence:
    node = SimpleNamespace(host=LocalHost(), manifests_dir=str(kube_dir / "manifests"))
    cat = certs.Catalogue(node)  # type: ignore[arg-type]
    return certs.judge_serving(cat, str(kube_dir / "pki/apiserver.crt"), "127.0.0.1", port, reload)


def renew(kube_dir: Path, age: float) -> None:
    pkidir = kube_dir / "pki"
    pki.write_pair(pkidir, "apiserver", pki.issue(pki.make_ca("ca"), "kube-apiserver", server=True))
    then = time.time() - age
    os.utime(pkidir / "apiserver.crt", (then, then))


def test_a_reloading_server_is_not_stale_inside_its_window(served: tuple[Path, int]) -> None:
    kube_dir, port = served
    api = catalogue.cert_reload("kube-apiserver", "tls-cert-file")
    assert api is not None and api.reloads and api.window >= 60
    assert judge(kube_dir, port, api).verdict == certs.CURRENT
    renew(kube_dir, age=5)
    inside = judge(kube_dir, port, api)
    assert inside.verdict == certs.RELOADING
    assert inside.detail.startswith("reloads by itself, not yet: serves a certificate valid until ")
    assert "kube-apiserver re-reads it by itself, file watch (fsnotify) plus a re-read every minute" in inside.detail
    renew(kube_dir, age=api.window + 5)
    late = judge(kube_dir, port, api)
    assert late.verdict == certs.STALE and "but the file changed" in late.detail
    assert late.detail.endswith("restart needed")
    # etcd re-reads at each handshake: its window is seconds, not a minute
    etcd = catalogue.cert_reload("etcd", "cert-file")
    assert etcd is not None and etcd.window < 60
    renew(kube_dir, age=etcd.window + 1)
    assert judge(kube_dir, port, etcd).verdict == certs.STALE
    # a flag the table does not know is read once at start: an old served certificate is STALE at once
    renew(kube_dir, age=0)
    assert judge(kube_dir, port, None).verdict == certs.STALE


def test_component_verdict_order() -> None:
    comp = certs.ComponentCerts("kube-apiserver", evidence=[
        certs.Evidence("serving", "pki/apiserver.crt", certs.RELOADING, "reloads by itself, not yet: x"),
        certs.Evidence("client", "pki/apiserver-etcd-client.crt", certs.RELOADS, "y")])
    comp.decide()
    assert (comp.verdict, comp.why) == (certs.RELOADING, "reloads by itself, not yet: x")
    comp.evidence[0].verdict = certs.CURRENT
    comp.decide()
    assert comp.verdict == certs.CURRENT
    assert comp.why == "uses the files on disk; re-reads pki/apiserver-etcd-client.crt by itself"
    comp.evidence.append(certs.Evidence("client", "scheduler.conf", certs.STALE, "z"))
    comp.decide()
    assert comp.verdict == certs.STALE


def test_every_certificate_flag_cpctl_judges_is_in_the_table() -> None:
    for entry in catalogue.COMPONENTS:
        for flag in [s.cert_flag for s in entry.serving_certs] + list(entry.client_certs):
            assert catalogue.cert_reload(entry.name, flag) is not None, (entry.name, flag)
            assert catalogue.cert_reload(entry.alias, flag) == catalogue.cert_reload(entry.name, flag)
    # the two that need a restart after kubeadm certs renew, and only those
    never = {(r.component, r.flag) for r in catalogue.CERT_RELOADS if not r.reloads and r.flag != "trusted-ca-file"}
    assert {c for c, _ in never} == {"kube-controller-manager", "kube-scheduler"}
    assert all(r.source for r in catalogue.CERT_RELOADS) and all(r.window == 0 for r in catalogue.CERT_RELOADS
                                                                 if not r.reloads)


def test_docs_carry_the_table() -> None:
    rows = re.findall(r"^\| ([\w-]+) \| `--([\w-]+)` \| (yes|no), ", DOCS.read_text(), re.M)
    assert sorted(rows) == sorted((r.component, r.flag, "yes" if r.reloads else "no")
                                  for r in catalogue.CERT_RELOADS)


@pytest.mark.parametrize("result, why", [
    ({"der": b"x", "time": "soon"}, "time is not a number"),
    ({"der": b"x", "time": float("nan")}, "time is not a number"),
    ({"der": "x", "time": 1.0}, "der is not bytes"),
    ({"der": b"x" * (70 << 10), "time": 1.0}, "der is longer"),
])
def test_a_peer_cert_reply_is_checked(result: dict, why: str) -> None:
    with pytest.raises(replies.BadReply, match=why):
        replies.checked("master-1", "peer_cert", {},
                        (json.dumps({"ok": True, "result": _encoded(result)}) + "\n").encode())
    assert replies.check_response("peer_cert", {}, {"ok": True, "result": {"der": b"x", "time": 2.5}})


def _encoded(result: dict) -> dict:
    from cpctl.agent import rpc
    return {k: rpc.encode(v) if isinstance(v, bytes) else v for k, v in result.items()}
