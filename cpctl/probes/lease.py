"""Leader-election Leases: which components have one, and what it is called."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from cpctl import catalogue
from cpctl.host.base import Host
from cpctl.inputs import load_yaml
from cpctl.probes.base import PodTarget

FALSE_WORDS = ("false", "0", "f", "no")   # what Go's strconv.ParseBool reads as false (and "no")


def _args(target: PodTarget) -> List[str]:
    """The string arguments (command and args) of the pod's containers."""
    spec = target.pod.get("spec") if isinstance(target.pod, dict) else None
    containers = spec.get("containers") if isinstance(spec, dict) else None
    out: List[str] = []
    for container in containers if isinstance(containers, list) else []:
        if isinstance(container, dict):
            for key in ("command", "args"):
                value = container.get(key)
                out += [a for a in value if isinstance(a, str)] if isinstance(value, list) else []
    return out


def uses_lease(target: PodTarget) -> bool:
    """Scheduler/controller-manager, or a second scheduler from `cpctl scheduler add` (own Lease),
    unless started with ``--leader-elect=false``: then there is no Lease at all to wait for."""
    meta = target.pod.get("metadata") if isinstance(target.pod, dict) else None
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    generated = isinstance(annotations, dict) and annotations.get("cpctl.io/generated-by") == "scheduler-add"
    if not catalogue.leader_elected(target.component) and not generated:
        return False
    elect = [a.split("=", 1)[1].strip().lower() for a in _args(target) if a.startswith("--leader-elect=")]
    return not (elect and elect[-1] in FALSE_WORDS)


def lease_name(target: PodTarget, host: Optional[Host] = None) -> str:
    """The leader-election Lease: --leader-elect-resource-name, else leaderElection.resourceName
    of the --config file (read on the node through ``host``), else the component name."""
    config = None
    for arg in _args(target):
        if arg.startswith("--leader-elect-resource-name="):
            return arg.split("=", 1)[1]
        if arg.startswith("--config="):
            config = arg.split("=", 1)[1]
    return (_config_lease(host, config) if host and config else None) or target.component


def _config_lease(host: Host, path: str) -> Optional[str]:
    import yaml
    try:
        config: Any = load_yaml(host.read_file(path, 1 << 20))
    except (OSError, yaml.YAMLError, ValueError, RecursionError):
        return None
    election: Dict[str, Any] = {}
    if isinstance(config, dict) and isinstance(config.get("leaderElection"), dict):
        election = config["leaderElection"]
    name = election.get("resourceName")
    return name if isinstance(name, str) and name else None
