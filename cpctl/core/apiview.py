"""Is the API's view of this node's pods current? (HA control planes, issue #13 item 5)

From kubeadm 1.33 the feature ControlPlaneKubeletLocalMode is on: a control-plane kubelet talks
to its own node's API server (its ``kubelet.conf`` names that server's address, not the load
balancer). When that API server is down - parked by cpctl, crash-looping, or answering 5xx because
its stacked etcd is down - the kubelet cannot update its mirror pods, while the other API servers keep serving the
frozen ones through the load balancer. Waits for this node's pods must then believe the runtime
and the health endpoints only.

``LocalApiCheck`` finds the kubelet's server in ``kubelet.conf`` (next to the manifests dir, as
kubeadm lays out /etc/kubernetes), decides whether it is this node's own API server (its
``--advertise-address``, or a loopback address), and if so whether anything
answers there. The answer is cached for a few seconds: a status of many pods asks once.
"""

from __future__ import annotations

import os
import time
from typing import Callable, Dict, List, Mapping, Optional, Tuple

from cpctl.agent import httpops
from cpctl.host.base import Host, HttpRequest
from cpctl.inputs import load_yaml

KUBELET_CONF = "kubelet.conf"
CACHE_SECONDS = 5.0
PROBE_TIMEOUT = 1.5
MAX_CONF_BYTES = 1 << 20


class LocalApiCheck:
    """Whether this node's kubelet runs in local mode and its own API server does not answer."""

    def __init__(self, host: Host, manifests_dir: str) -> None:
        self.host = host
        self.conf_path = os.path.join(os.path.dirname(manifests_dir.rstrip("/")) or "/", KUBELET_CONF)
        self._cached: Optional[Tuple[float, str]] = None

    def down(self, apiserver_pod: Callable[[], Optional[Mapping[str, object]]]) -> str:
        """Why the API's view of this node is stale ("" when it is not, or cannot be told);
        ``apiserver_pod`` gives this node's API server manifest when it is needed."""
        now = time.monotonic()
        if self._cached is not None and now - self._cached[0] < CACHE_SECONDS:
            return self._cached[1]
        reason = self._check(apiserver_pod)
        self._cached = (now, reason)
        return reason

    def read_call(self) -> Tuple[str, Dict[str, object]]:
        """The read ``down`` makes first, for ``Host.prefetched``."""
        return ("read_file", {"path": self.conf_path, "limit": MAX_CONF_BYTES})

    def ahead(self, apiserver_pod: Callable[[], Optional[Mapping[str, object]]]) -> List[HttpRequest]:
        """The request ``down`` is about to make (none when its answer is cached or it asks nothing),
        for ``Host.http_ahead``."""
        if self._cached is not None and time.monotonic() - self._cached[0] < CACHE_SECONDS:
            return []
        server = self._own_server(apiserver_pod)
        return [_healthz(server)] if server else []

    def _own_server(self, apiserver_pod: Callable[[], Optional[Mapping[str, object]]]) -> str:
        """The kubelet's API server when it is this node's own ("" otherwise, or when unknown)."""
        server = self._kubelet_server()
        return server if server and _is_own(server, apiserver_pod()) else ""

    def _check(self, apiserver_pod: Callable[[], Optional[Mapping[str, object]]]) -> str:
        server = self._own_server(apiserver_pod)
        if not server:
            return ""
        try:
            reply = self.host.http(**_healthz(server))
        except OSError as exc:
            return "the kubelet talks to this node's own API server (local mode) and %s does not answer (%s)" % (
                server, exc.strerror or type(exc).__name__)
        status = reply.get("status") if isinstance(reply, dict) else None
        if isinstance(status, int) and status >= 500:
            # it answers, but cannot serve (its etcd is down): the kubelet cannot write either
            return "the kubelet talks to this node's own API server (local mode) and %s answers %d (its etcd " \
                   "down?): the API's view of this node is stale" % (server, status)
        return ""

    def _kubelet_server(self) -> str:
        """The server URL of the kubelet's kubeconfig ("" when it cannot be read)."""
        import yaml
        try:
            data = self.host.read_file(self.conf_path, MAX_CONF_BYTES)
            config = load_yaml(data.decode("utf-8", "replace"))
        except (OSError, yaml.YAMLError, ValueError, RecursionError):
            return ""
        if not isinstance(config, dict):
            return ""
        cluster_name = ""
        for context in _items(config.get("contexts")):
            inner = context.get("context")
            if context.get("name") == config.get("current-context") and isinstance(inner, dict):
                cluster_name = str(inner.get("cluster") or "")
        for cluster in _items(config.get("clusters")):
            inner = cluster.get("cluster")
            if isinstance(inner, dict) and (cluster.get("name") == cluster_name or not cluster_name):
                server = inner.get("server")
                return server if isinstance(server, str) else ""
        return ""


def _healthz(server: str) -> HttpRequest:
    """The one request that tells whether ``server`` answers (``LocalApiCheck``)."""
    return HttpRequest(method="GET", url=server.rstrip("/") + "/healthz", timeout=PROBE_TIMEOUT,
                       tls={"insecure": True}, limit=4096)


def _items(value: object) -> List[Dict[str, object]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _list(value: object) -> List[object]:
    return value if isinstance(value, list) else []


def _is_own(server: str, apiserver_pod: Optional[Mapping[str, object]]) -> bool:
    """True when ``server`` is on this node: the address its API server advertises, or a loopback
    address when no manifest says. (A load balancer on this node's address would count too: then
    the runtime is asked instead of the API, which is never wrong, only less detailed.)"""
    simple = httpops.split_url(server)   # a plain URL without urllib.parse (~1.5 ms with ipaddress)
    if simple is not None:
        host = simple[1]
    else:
        import urllib.parse
        try:
            host = urllib.parse.urlsplit(server).hostname or ""
        except ValueError:
            return False
    advertised = _advertised(apiserver_pod)
    if advertised:
        return _same_address(host, advertised)
    packed = httpops.packed_address(host)
    if packed is None:
        return host == "localhost"
    return packed[0] == 127 if len(packed) == 4 else packed == _IPV6_LOOPBACK


_IPV6_LOOPBACK = bytes(15) + b"\x01"


def _same_address(a: str, b: str) -> bool:
    packed_a, packed_b = httpops.packed_address(a), httpops.packed_address(b)
    if packed_a is not None and packed_b is not None:
        return packed_a == packed_b
    return a.lower() == b.lower()


def _advertised(pod: Optional[Mapping[str, object]]) -> str:
    """The --advertise-address of the API server's manifest ("" when unknown)."""
    spec = (pod or {}).get("spec")
    for container in _items(spec.get("containers") if isinstance(spec, dict) else None):
        for item in _list(container.get("command")) + _list(container.get("args")):
            if isinstance(item, str) and item.startswith("--advertise-address="):
                return item.split("=", 1)[1]
    return ""
