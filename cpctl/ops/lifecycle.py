"""Wiring between the command line and the core: settings, node construction, ordering.

Nothing here parses arguments or prints; ``cli.py`` does both. Keeping this layer free of
click lets the remote fan-out and the tests drive whole commands as plain function calls.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from cpctl.core import manifests
from cpctl.core.node import Node, Outcome
from cpctl.core.state import JOURNAL
from cpctl.errors import CpctlError, ExitCode
from cpctl.host import ops as hostops
from cpctl.host.base import Host, LocalHost
from cpctl.probes.base import make_waiter

DEFAULT_MANIFESTS_DIR = "/etc/kubernetes/manifests"
DEFAULT_STATE_DIR = "/var/lib/cpctl"
DEFAULT_KUBECONFIG = "/etc/kubernetes/admin.conf"


class Settings:
    """Global options, already validated; paths are paths on the node being acted on."""

    def __init__(self, manifests_dir: str = DEFAULT_MANIFESTS_DIR, state_dir: str = DEFAULT_STATE_DIR,
                 node_name: Optional[str] = None, kubeconfig: str = DEFAULT_KUBECONFIG,
                 probe: str = "auto", lock_timeout: float = 10.0, crictl: str = "crictl",
                 output: str = "text", canary: bool = False) -> None:
        self.manifests_dir = manifests_dir
        self.state_dir = state_dir
        self.node_name = node_name
        self.kubeconfig = kubeconfig
        self.probe = probe
        self.lock_timeout = lock_timeout
        self.crictl = crictl
        self.output = output
        self.canary = canary

    def with_overrides(self, **overrides: Any) -> "Settings":
        """A copy with per-host values (inventory vars) applied."""
        copy = Settings(**self.__dict__)
        for key, value in overrides.items():
            if value is not None and hasattr(copy, key):
                setattr(copy, key, value)
        return copy


def open_node(settings: Settings, host: Optional[Host] = None, probe: Optional[str] = None,
              log: Optional[Callable[[str], None]] = None,
              progress: Optional[Callable[[str], None]] = None) -> Node:
    """A ``Node`` for ``host`` (default: this machine) with the configured waiter."""
    host = host or LocalHost()
    node = Node(host, settings.manifests_dir, settings.state_dir, settings.node_name,
                lock_timeout=settings.lock_timeout, log=log)
    node.waiter = make_waiter(probe or settings.probe, host=host, kubeconfig=settings.kubeconfig,
                              crictl=settings.crictl, progress=progress, canary=settings.canary)
    return node


def kube_client(settings: Settings, host: Optional[Host] = None) -> Any:
    """An API client from the kubeconfig on ``host`` (``--kubeconfig`` is a path there)."""
    from cpctl.probes.kubeapi import client_for
    return client_for(host or LocalHost(), settings.kubeconfig)


def order_components(names: list, reverse: bool = False) -> list:
    """Control-plane order (etcd, apiserver, controller-manager, scheduler) for starts,
    the reverse for stops; other components keep the user's order, after those."""
    def rank(name: str) -> int:
        target = manifests.ALIASES.get(name, name)
        return manifests.START_ORDER.index(target) if target in manifests.START_ORDER else len(manifests.START_ORDER)
    unique = list(dict.fromkeys(names))
    for name in unique:
        manifests.validate_component_name(name)
    ordered = sorted(unique, key=rank)
    if reverse:
        known = [n for n in ordered if rank(n) < len(manifests.START_ORDER)][::-1]
        ordered = known + [n for n in ordered if rank(n) == len(manifests.START_ORDER)]
    return ordered


def stop(node: Node, components: list, reason: Optional[str], until: Optional[float], wait: bool,
         timeout: float) -> list:
    ordered = order_components(components, reverse=True)  # validate names before any side effect
    with node.session("cpctl stop %s" % " ".join(components)):
        return [node.stop(c, reason=reason, until=until, wait=wait, timeout=timeout) for c in ordered]


def start(node: Node, components: list, wait: bool, timeout: float) -> list:
    ordered = order_components(components)  # validate names before any side effect
    with node.session("cpctl start %s" % " ".join(components)):
        return [node.start(c, wait=wait, timeout=timeout) for c in ordered]


def restart(node: Node, components: list, reason: Optional[str], timeout: float) -> list:
    """Stop and start each component in turn, waiting for the kubelet at both steps."""
    outcomes: list = []
    ordered = order_components(components)  # validate names before any side effect
    with node.session("cpctl restart %s" % " ".join(components)):
        for component in ordered:
            stopped = _stop_for_restart(node, component, reason or "restart", timeout)
            started = node.start(component, wait=True, timeout=timeout, reason=reason or "restart")
            outcomes.append(Outcome(started.component, "restart", stopped.changed or started.changed,
                                    "restarted" if stopped.changed else "started (was stopped)",
                                    stop=stopped.to_dict(), start=started.to_dict()))
    return outcomes


def plan(node: Node, verb: str, components: list) -> dict:
    """What stop/start/restart would do, checked like the real run, changing nothing."""
    import difflib
    scan, parked = node.scan(), node.parked()
    before = [m.file for m in scan.manifests]
    after = list(before)
    steps = []
    for component in order_components(components, reverse=(verb == "stop")):
        present, parked_hits = node.resolve(component, scan, parked)
        if verb in ("stop", "restart") and present:
            manifest = present[0]
            steps.append({"action": "stop", "component": manifest.pod_name or component,
                          "move": [manifest.path, node.state.parked_path(manifest.file)]})
            if verb == "restart":
                steps.append({"action": "start", "component": manifest.pod_name or component,
                              "move": [node.state.parked_path(manifest.file), manifest.path]})
            else:
                after.remove(manifest.file)
        elif verb in ("start", "restart") and parked_hits and not present:
            node.check_restorable(parked_hits[0], scan)
            steps.append({"action": "start", "component": component,
                          "move": [node.state.parked_path(parked_hits[0]), node.manifests_dir + "/" + parked_hits[0]]})
            after.append(parked_hits[0])
        elif present or parked_hits:
            steps.append({"action": verb, "component": component,
                          "note": "nothing to do (already %s)" % ("stopped" if verb == "stop" else "running")})
        else:
            raise node.not_found(component)
    diff = "".join(difflib.unified_diff([f + "\n" for f in before], [f + "\n" for f in sorted(after)],
                                        node.manifests_dir + " (now)", node.manifests_dir + " (after)"))
    return {"node": node.node_name, "dry_run": True, "changed": False, "plan": steps, "diff": diff}


def _stop_for_restart(node: Node, component: str, reason: str, timeout: float) -> Outcome:
    """The stop half of a restart; if the old pod does not go away in time, put the manifest
    back before failing, so that a restart never leaves a component parked."""
    try:
        return node.stop(component, reason=reason, wait=True, timeout=timeout)
    except CpctlError as exc:
        if exc.code != ExitCode.TIMEOUT:
            raise
        node.start(component, wait=False, reason="restart aborted: %s" % exc.message)
        raise CpctlError("restart of %s aborted, manifest restored: %s" % (component, exc.message),
                         ExitCode.TIMEOUT, hint=exc.hint) from None


def status(node: Node, components: Optional[list] = None) -> dict:
    """Read-only view; still finishes an interrupted operation when it can take the lock."""
    with node.host.prefetched(node.view_reads()):
        if node.state.ensure(create=False) and _journal_pending(node):
            with node.session("cpctl status"):
                pass
        return node.status(components)


def history(node: Node, component: Optional[str], limit: int) -> list:
    if component:
        manifests.validate_component_name(component)
    with node.host.prefetched(node.state.view_reads() + [("info", {}), node.state.read_call(node.state.history_path)]):
        if not node.state.ensure(create=False):
            return []
        return node.history(component, limit)


def _journal_pending(node: Node) -> bool:
    """A journal awaits recovery, or a kill tore the journal's own write (its dot temp is left)."""
    return any(n == JOURNAL or hostops.is_temp_name(n)
               for n in node.host.listdir(node.state.path))

