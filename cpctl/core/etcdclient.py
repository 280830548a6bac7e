"""The client certificate a node asks its etcd with: the one rule the census, etcd care, the
certificate check and the identity gate share.

Its own light module (no fleet code): ``cpctl status`` asks the node's etcd for its alarms, and a
view must not load what a fan-out needs (tests/cli/test_cli_startup_imports.py).
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional

from cpctl import catalogue
from cpctl.catalogue import ETCD, KUBE_APISERVER
from cpctl.core.flags import flags_of
from cpctl.core.manifests import DirScan
from cpctl.core.mounts import host_path_of, under_root
from cpctl.core.node import Node
from cpctl.errors import CpctlError
from cpctl.host.base import TlsOptions


def etcd_client_tls(node: Node, scan: Optional[DirScan] = None) -> Optional[TlsOptions]:
    """The client certificate to ask etcd with, as node paths: the API server's own
    (--etcd-cafile/--etcd-certfile/--etcd-keyfile), else kubeadm's etcd/healthcheck-client beside
    etcd's --trusted-ca-file; taken from the manifests in place, else from parked copies."""
    pods = [m.pod for m in (scan or node.scan()).valid if m.pod_name in (KUBE_APISERVER, ETCD)]
    pods += parked_pods(node)
    for wanted in (KUBE_APISERVER, ETCD):
        for pod in pods:
            if _name_of(pod) != wanted:
                continue
            for container in _containers(pod):
                values = {f.name: f.value or "" for f in flags_of(container)}
                if wanted == KUBE_APISERVER:
                    files = [values.get(k, "") for k in ("etcd-cafile", "etcd-certfile", "etcd-keyfile")]
                else:
                    ca = values.get("trusted-ca-file", "")
                    base = ca.rsplit("/", 1)[0]
                    files = [ca, base + "/healthcheck-client.crt", base + "/healthcheck-client.key"] if ca else []
                if len(files) == 3 and all(f.startswith("/") for f in files):
                    ca, cert, key = (under_root(node.node_root, host_path_of(pod or {}, container, f) or f)
                                     for f in files)
                    return TlsOptions(ca_file=ca, cert_file=cert, key_file=key)
    return None


def parked_pods(node: Node) -> List[Optional[Dict[str, Any]]]:
    """The pods of parked API server and etcd manifests (their flags still name the files)."""
    from cpctl.core.manifests import MAX_MANIFEST_BYTES, parse_pod
    pods: List[Optional[Dict[str, Any]]] = []
    for filename, meta in node.parked().items():
        if catalogue.canonical(str(meta.get("component") or "")) not in (KUBE_APISERVER, ETCD):
            continue
        try:
            pods.append(parse_pod(node.host.read_file(node.state.parked_path(filename), MAX_MANIFEST_BYTES)))
        except (OSError, CpctlError):
            continue
    return pods


def _name_of(pod: Optional[Mapping[str, object]]) -> str:
    meta = pod.get("metadata") if isinstance(pod, Mapping) else None
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return name if isinstance(name, str) else ""


def _containers(pod: Optional[Mapping[str, object]]) -> List[Mapping[str, object]]:
    spec = pod.get("spec") if isinstance(pod, Mapping) else None
    items = spec.get("containers") if isinstance(spec, Mapping) else None
    return [c for c in items if isinstance(c, Mapping)] if isinstance(items, list) else []
