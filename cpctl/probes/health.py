"""The ``health`` probe: the component's own health endpoint, taken from the manifest's probes."""

from __future__ import annotations

from typing import Any, Optional

from cpctl.host.base import Host
from cpctl.probes.base import API_LESS, PodState, PodTarget, Unavailable

DEFAULT_HEALTH = {
    "kube-apiserver": ("https", 6443, "/readyz"),
    "kube-controller-manager": ("https", 10257, "/healthz"),
    "kube-scheduler": ("https", 10259, "/healthz"),
    "etcd": ("http", 2381, "/readyz"),
}


class HealthProbe:
    name = "health"

    def __init__(self, host: Host) -> None:
        self.host = host

    def observe(self, target: PodTarget) -> PodState:
        url = health_url(target)
        if url is None:
            raise Unavailable("no health endpoint known for %s" % target.component)
        try:
            resp = self.host.http("GET", url, timeout=2.0, tls={"insecure": True})
        except OSError:
            return PodState(False, source=self.name)
        ok = resp["status"] == 200
        return PodState(True, ok, "Running", source=self.name)


def health_url(target: PodTarget) -> Optional[str]:
    """The endpoint the kubelet would probe (readiness first), else kubeadm's default."""
    containers = (target.pod.get("spec") or {}).get("containers") or []
    for container in containers:
        for kind in ("readinessProbe", "startupProbe", "livenessProbe"):
            get = (container.get(kind) or {}).get("httpGet")
            if not get:
                continue
            port = _port(get.get("port"), container)
            if port is None:
                continue
            path = get.get("path") or "/"
            if target.component in API_LESS and path == "/livez":
                path = "/readyz"
            host = get.get("host") or "127.0.0.1"
            return "%s://%s:%d%s" % ((get.get("scheme") or "HTTP").lower(), host, port, path)
    default = DEFAULT_HEALTH.get(target.component)
    return "%s://127.0.0.1:%d%s" % default if default else None


def _port(value: Any, container: dict) -> Optional[int]:
    if isinstance(value, int):
        return value
    for port in container.get("ports") or []:
        if port.get("name") == value:
            return port.get("containerPort")
    return int(value) if isinstance(value, str) and value.isdigit() else None
