"""Leader-election Leases: which components have one, and what it is called."""

from __future__ import annotations

from typing import Optional

from cpctl.host.base import Host
from cpctl.probes.base import PodTarget

LEASE_COMPONENTS = ("kube-scheduler", "kube-controller-manager")


def uses_lease(target: PodTarget) -> bool:
    """Scheduler/controller-manager, or a second scheduler from `cpctl scheduler add` (own Lease)."""
    annotations = (target.pod.get("metadata") or {}).get("annotations") or {}
    return target.component in LEASE_COMPONENTS or annotations.get("cpctl.io/generated-by") == "scheduler-add"


def lease_name(target: PodTarget, host: Optional[Host] = None) -> str:
    """The leader-election Lease: --leader-elect-resource-name, else leaderElection.resourceName
    of the --config file (read on the node through ``host``), else the component name."""
    config = None
    for container in (target.pod.get("spec") or {}).get("containers") or []:
        for arg in (container.get("command") or []) + (container.get("args") or []):
            if isinstance(arg, str) and arg.startswith("--leader-elect-resource-name="):
                return arg.split("=", 1)[1]
            if isinstance(arg, str) and arg.startswith("--config="):
                config = arg.split("=", 1)[1]
    return (_config_lease(host, config) if host and config else None) or target.component


def _config_lease(host: Host, path: str) -> Optional[str]:
    import yaml
    try:
        config = yaml.safe_load(host.read_file(path, 1 << 20))
    except (OSError, yaml.YAMLError):
        return None
    name = ((config or {}).get("leaderElection") or {}).get("resourceName") if isinstance(config, dict) else None
    return name if isinstance(name, str) and name else None
