"""The ``health`` probe: the component's own health endpoint, taken from the manifest's probes.

The URL is the one the kubelet probes: scheme, host (an IPv6 literal gets its brackets:
``http://[::1]:2381/readyz``), port (a number, or a name such as kubeadm 1.34's ``probe-port``
resolved through the container's ``ports``) and path. "Connection refused" means nothing listens:
the pod is gone. Any other failure (a timeout, a reset, a TLS error) is "could not look".
"""

from __future__ import annotations

from typing import List, Mapping, Optional

from cpctl import catalogue
from cpctl.host.base import Host
from cpctl.probes.base import PodState, PodTarget, ProbeMissing, ProbeOptions, Unavailable
from cpctl.probes.kubeapi import node_http

DEFAULT_TIMEOUT = 2.0
MIN_CALL = 0.2          # the least time one request gets, even at the very end of a wait
HEALTH_LIMIT = 1 << 20  # a health answer is a few bytes ("ok"); /readyz?verbose a few KiB


class HealthProbe:
    """The component's own endpoint (without the API; it cannot tell one instance from the next)."""

    name = "health"
    max_call = DEFAULT_TIMEOUT
    via_api = False
    identifies = False

    def __init__(self, host: Host) -> None:
        self.host = host

    @classmethod
    def from_options(cls, options: ProbeOptions) -> "HealthProbe":
        """The probe asking endpoints from ``options.host``."""
        return cls(options.host)

    def observe(self, target: PodTarget, timeout: Optional[float] = None) -> PodState:
        url = health_url(target)
        if url is None:
            raise ProbeMissing("no health endpoint known for %s" % target.component)
        budget = DEFAULT_TIMEOUT if timeout is None else min(DEFAULT_TIMEOUT, timeout)
        try:
            resp = node_http(self.host, "GET", url, max(budget, MIN_CALL), HEALTH_LIMIT, tls={"insecure": True})
        except ConnectionRefusedError:
            return PodState(False, source=self.name)
        except OSError as exc:
            raise Unavailable("%s: %s" % (url, exc.strerror or exc)) from None
        return PodState(True, resp["status"] == 200, "Running", source=self.name)


def health_url(target: PodTarget) -> Optional[str]:
    """The endpoint the kubelet would probe (readiness first), else kubeadm's default."""
    containers = (target.pod.get("spec") or {}).get("containers") if isinstance(target.pod, dict) else None
    for container in containers if isinstance(containers, list) else []:
        if not isinstance(container, dict):
            continue
        for kind in ("readinessProbe", "startupProbe", "livenessProbe"):
            probe = container.get(kind)
            get = probe.get("httpGet") if isinstance(probe, dict) else None
            if not isinstance(get, dict):
                continue
            port = _port(get.get("port"), container)
            scheme = _text(get.get("scheme"), "HTTP").lower()
            if port is None or scheme not in ("http", "https"):
                continue
            path = _text(get.get("path"), "/")
            if catalogue.carries_api(target.component) and path == "/livez":
                path = "/readyz"
            return url_for(scheme, _text(get.get("host"), "") or default_host(target), port, path)
    entry = catalogue.get(target.component)
    if entry is None:
        return None
    return url_for(entry.health.scheme, default_host(target), entry.health.port, entry.health.path)


def url_for(scheme: str, host: str, port: int, path: str) -> str:
    """``scheme://host:port/path`` with an IPv6 literal in brackets (``http://[::1]:2381/readyz``)."""
    if ":" in host and not host.startswith("["):
        host = "[%s]" % host
    return "%s://%s:%d%s" % (scheme, host, port, path if path.startswith("/") else "/" + path)


def default_host(target: PodTarget) -> str:
    """Where a probe without ``host`` goes: the kubelet uses the pod IP, which for a host-network
    apiserver is its ``--advertise-address``; 127.0.0.1 otherwise."""
    if target.component == catalogue.KUBE_APISERVER:
        for arg in _command(target):
            if arg.startswith("--advertise-address=") and arg.split("=", 1)[1]:
                return arg.split("=", 1)[1]
    return "127.0.0.1"


def _command(target: PodTarget) -> List[str]:
    containers = (target.pod.get("spec") or {}).get("containers") if isinstance(target.pod, dict) else None
    args: List[str] = []
    for container in containers if isinstance(containers, list) else []:
        if isinstance(container, dict):
            for key in ("command", "args"):
                value = container.get(key)
                args += [a for a in value if isinstance(a, str)] if isinstance(value, list) else []
    return args


def _text(value: object, default: str) -> str:
    return value if isinstance(value, str) and value else default


def _port(value: object, container: Mapping[str, object]) -> Optional[int]:
    """A probe's port: a number, or the name of one of the container's ``ports`` (as the kubelet
    resolves it: the ``containerPort`` of the entry with that name)."""
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value if 0 < value < 65536 else None
    if not isinstance(value, str) or not value:
        return None
    ports = container.get("ports")
    for port in ports if isinstance(ports, list) else []:
        if isinstance(port, dict) and port.get("name") == value:
            number = port.get("containerPort")
            if isinstance(number, int) and not isinstance(number, bool) and 0 < number < 65536:
                return number
    return None
