"""What cpctl acts on, on one node: the global options after validation, and the ``Node`` they open.

Paths are paths on the node being acted on (over SSH: on the master). Per-host values from an
inventory override the global ones (``with_overrides``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Optional

from cpctl.core import identity
from cpctl.core.identity import DEFAULT_KUBELET_DIR, DEFAULT_MANIFESTS_DIR  # noqa: F401 (re-exported)
from cpctl.core.node import Node
from cpctl.host.base import Host
from cpctl.probes.registry import make_waiter

DEFAULT_STATE_DIR = "/var/lib/cpctl"
DEFAULT_KUBECONFIG = "/etc/kubernetes/admin.conf"


@dataclass
class Settings:
    """Global options, already validated. ``manifests_dir``/``node_name`` None: as the kubelet says."""

    manifests_dir: Optional[str] = None
    state_dir: str = DEFAULT_STATE_DIR
    node_name: Optional[str] = None
    kubeconfig: str = DEFAULT_KUBECONFIG
    probe: str = "auto"
    lock_timeout: float = 10.0
    crictl: str = "crictl"
    canary: bool = False
    kubelet_dir: str = DEFAULT_KUBELET_DIR
    node_root: str = "/"                 # the directory holding the node's / (a lab node's root dir)

    def with_overrides(self, **overrides: Any) -> "Settings":
        """A copy with these values applied (``None`` values are ignored: not set per host)."""
        known = {f.name for f in dataclasses.fields(self)}
        return dataclasses.replace(self, **{k: v for k, v in overrides.items() if v is not None and k in known})


def open_node(settings: Settings, host: Host, probe: Optional[str] = None,
              log: Optional[Callable[[str], None]] = None,
              progress: Optional[Callable[[str], None]] = None) -> Node:
    """A ``Node`` on ``host`` with the configured waiter (``probe`` overrides ``settings.probe``).

    The node name and the manifests dir follow the kubelet's own configuration unless given."""
    if settings.manifests_dir and settings.node_name:       # nothing waits for the kubelet's files
        node = Node(host, settings.manifests_dir, settings.state_dir, settings.node_name,
                    lock_timeout=settings.lock_timeout, log=log, kubeconfig=settings.kubeconfig)
        node.defer_identity(lambda: identity.discover(host, settings.node_name, settings.manifests_dir,
                                                      settings.kubelet_dir),
                            identity.identity_reads(settings.kubelet_dir))
    else:
        with host.prefetched(identity.identity_reads(settings.kubelet_dir)):
            found = identity.discover(host, settings.node_name, settings.manifests_dir, settings.kubelet_dir)
        node = Node(host, found.manifests_dir.value, settings.state_dir, found.node_name.value,
                    lock_timeout=settings.lock_timeout, log=log, kubeconfig=settings.kubeconfig, identity=found)
    node.crictl = settings.crictl
    node.node_root = settings.node_root
    node.waiter = make_waiter(probe or settings.probe, host=host, kubeconfig=settings.kubeconfig,
                              crictl=settings.crictl, progress=progress, canary=settings.canary)
    return node
