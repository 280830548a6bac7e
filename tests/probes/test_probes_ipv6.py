"""Issue #13: health endpoints on IPv6 and with named ports; the health probe never reads "blind" as "gone".

kubeadm writes probe ``host: ::1`` on IPv6 clusters (a URL needs ``http://[::1]:2381``), the
apiserver's ``--advertise-address`` may be ``fd00::1``, and from v1.34 probes use the named port
``probe-port`` with a matching ``ports:`` entry. The lab's ``ipv6`` profile at v1.34 has all of it.
"""

# ruff: noqa: F811  (pytest fixtures are imported by name and then used as parameters)
from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from cpctl.host.local import LocalHost
from cpctl.probes.base import PodTarget, ProbeMissing, Unavailable
from cpctl.probes.health import HealthProbe, health_url
from tests.labfixture import lab_factory  # noqa: F401
from tests.labfixture import run_cpctl as cpctl


def pod(command: list, **probes: Any) -> dict:
    container = {"name": "c", "image": "x", "command": command, **probes}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [container]}}


def http_get(host: Any = None, port: Any = 2381, path: str = "/readyz", scheme: str = "HTTP") -> dict:
    get = {"path": path, "port": port, "scheme": scheme}
    if host is not None:
        get["host"] = host
    return {"httpGet": get}


def test_health_urls_bracket_ipv6_and_resolve_named_ports():
    etcd = pod(["etcd"], readinessProbe=http_get("::1", "probe-port"),
               ports=[{"name": "metrics", "containerPort": 9999}, {"name": "probe-port", "containerPort": 2381}])
    assert health_url(PodTarget("etcd", "kube-system", "n", etcd)) == "http://[::1]:2381/readyz"
    api = pod(["kube-apiserver", "--advertise-address=fd00::1"],
              livenessProbe=http_get("fd00::1", 6443, "/livez", "HTTPS"))
    # the API server's liveness path is asked as readiness: "it came back" means ready
    assert health_url(PodTarget("kube-apiserver", "kube-system", "n", api)) == "https://[fd00::1]:6443/readyz"
    bare = pod(["kube-apiserver", "--advertise-address=fd00::1"])   # no probes: kubeadm's default port and path
    assert health_url(PodTarget("kube-apiserver", "kube-system", "n", bare)) == "https://[fd00::1]:6443/readyz"
    old_etcd = pod(["etcd"], livenessProbe=http_get("127.0.0.1", 2381, "/health?exclude=NOSPACE&serializable=true"))
    assert health_url(PodTarget("etcd", "kube-system", "n", old_etcd)) == \
        "http://127.0.0.1:2381/health?exclude=NOSPACE&serializable=true"
    for bad_port in ("no-such-name", 0, 70000, True, ["2381"]):   # unresolvable: kubeadm's default for etcd
        odd = pod(["etcd"], readinessProbe=http_get("::1", bad_port))
        assert health_url(PodTarget("etcd", "kube-system", "n", odd)) == "http://127.0.0.1:2381/readyz"
    assert health_url(PodTarget("plain", "default", "n", pod(["sleep"]))) is None


class _Answer(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server API
        if self.path == "/hang":
            time.sleep(3)
            return
        self.send_response(200 if self.path == "/readyz" else 500)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: Any) -> None:
        pass


class _Server6(ThreadingHTTPServer):
    address_family = socket.AF_INET6
    daemon_threads = True


@pytest.fixture
def server6() -> Iterator[int]:
    server = _Server6(("::1", 0), _Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_the_health_probe_on_ipv6_and_when_it_cannot_look(server6):
    probe = HealthProbe(LocalHost())

    def target(path: str, port: int = server6) -> PodTarget:
        return PodTarget("etcd", "kube-system", "n", pod(["etcd"], readinessProbe=http_get("::1", port, path)))

    assert probe.observe(target("/readyz")).ready is True
    assert probe.observe(target("/livez-fails")).ready is False
    started = time.monotonic()
    with pytest.raises(Unavailable) as excinfo:   # a hang is "could not look", not "gone"
        probe.observe(target("/hang"), timeout=0.5)
    assert time.monotonic() - started < 1.5 and "no complete answer within 0.5s" in str(excinfo.value)
    closed = socket.socket(socket.AF_INET6)
    closed.bind(("::1", 0))   # bound, not listening: refused, i.e. nothing serves the endpoint
    try:
        assert probe.observe(target("/readyz", closed.getsockname()[1])).present is False
    finally:
        closed.close()
    with pytest.raises(ProbeMissing):
        probe.observe(PodTarget("plain", "default", "n", pod(["sleep"])))


def test_ipv6_lab_with_named_probe_ports(lab_factory):
    lab = lab_factory(profile="ipv6", k8s_version="1.34")
    metrics, api = lab.ports()["etcd-metrics"], lab.ports()["apiserver"]
    # without crictl, etcd is judged by its own /readyz on [::1] through the named port
    proc = cpctl(lab, "--crictl", "/nonexistent", "restart", "etcd", "--timeout", "30")
    assert proc.returncode == 0, proc.stderr   # was: exit 70, "Port could not be cast to integer value"
    assert "gone (health)" in proc.stdout
    assert "Running and Ready (health), http://[::1]:%d/readyz answers 200" % metrics in proc.stdout
    proc = cpctl(lab, "restart", "apiserver", "--timeout", "30")
    assert proc.returncode == 0, proc.stderr
    assert "Running and Ready (crictl), https://[::1]:%d/readyz answers 200" % api in proc.stdout
