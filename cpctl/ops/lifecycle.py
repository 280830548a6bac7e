"""Stop, start and restart of control-plane components on one node, in kubeadm's order, and the
dry-run plan of each. The moves themselves are the core's (``Node.stop``/``Node.start``)."""

from __future__ import annotations

import difflib
from typing import Optional

from cpctl.core import manifests
from cpctl.core.node import Node, Outcome
from cpctl.errors import CpctlError, ExitCode


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
