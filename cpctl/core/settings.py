"""What cpctl acts on, on one node: the global options after validation.

Paths are paths on the node being acted on (over SSH: on the master). Per-host values from an
inventory override the global ones (``with_overrides``). The ``Node`` they open is made in one
place, ``cpctl.ops.wiring.open_node``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Optional

from cpctl.core.identity import DEFAULT_KUBELET_DIR, DEFAULT_MANIFESTS_DIR  # noqa: F401 (re-exported)

DEFAULT_STATE_DIR = "/var/lib/cpctl"
DEFAULT_KUBECONFIG = "/etc/kubernetes/admin.conf"


@dataclass(frozen=True)
class Settings:
    """Global options, already validated. ``manifests_dir``/``node_name`` None: as the kubelet says.
    A value: a command that adds its own (``--verify``'s ``canary``) makes a copy with ``with_overrides``."""

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
