"""Stop, start and restart of control-plane components on one node, in kubeadm's order, and the
dry-run plan of each. The moves themselves are the core's (``Node.stop``/``Node.start``)."""

from __future__ import annotations

import difflib
import time
from typing import Optional

from cpctl.core import manifests
from cpctl.core.node import Node, Outcome, hand_edit
from cpctl.errors import CpctlError, ExitCode, Terminated, interrupted_by


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
    node.check_parkable(ordered)
    with node.session("cpctl stop %s" % " ".join(components)):
        return [node.stop(c, reason=reason, until=until, wait=wait, timeout=timeout) for c in ordered]


def start(node: Node, components: list, wait: bool, timeout: float) -> list:
    ordered = order_components(components)  # validate names before any side effect
    with node.session("cpctl start %s" % " ".join(components)):
        return [node.start(c, wait=wait, timeout=timeout) for c in ordered]


def parked_components(node: Node) -> list:
    """Every parked component (by file stem), in start order: what ``start --all-parked`` starts."""
    return order_components([manifests.file_stem(filename) for filename in sorted(node.parked())])


def start_all_parked(node: Node, wait: bool, timeout: float) -> list:
    """Start every parked manifest, etcd first and the scheduler last (then any other static pod);
    no outcome at all when nothing is parked."""
    components = parked_components(node)
    return start(node, components, wait, timeout) if components else []


def restart(node: Node, components: list, reason: Optional[str], timeout: float) -> list:
    """Stop and start each component in turn, waiting for the kubelet at both steps.

    A restart never leaves a component parked: whatever stops its stop phase (a timeout, an API
    or probe failure, Ctrl-C, SIGTERM) puts the manifest back before cpctl exits, and says so. Its
    park carries a deadline (twice the timeout and a minute), so that even a SIGKILLed restart
    shows up in ``cpctl check`` as an overdue park, which ``check --fix`` restores."""
    outcomes: list = []
    ordered = order_components(components)  # validate names before any side effect
    node.check_parkable(ordered)
    with node.session("cpctl restart %s" % " ".join(components)):
        for component in ordered:
            stopped = _stop_for_restart(node, component, reason or "restart", timeout)
            try:
                started = node.start(component, wait=True, timeout=timeout, reason=reason or "restart")
            except BaseException as exc:  # noqa: BLE001 - every failure gets where the manifest is
                raise _where_left(node, component, "start", exc) from None
            outcomes.append(Outcome(started.component, "restart", stopped.changed or started.changed,
                                    "restarted" if stopped.changed else "started (was stopped)",
                                    stop=stopped.to_dict(), start=started.to_dict()))
    return outcomes


def _stop_for_restart(node: Node, component: str, reason: str, timeout: float) -> Outcome:
    """The stop half of a restart: on any failure or interruption, the manifest goes back first."""
    until = time.time() + 2 * timeout + 60
    try:
        return node.stop(component, reason=reason, until=until, wait=True, timeout=timeout)
    except BaseException as exc:  # noqa: BLE001 - whatever stops the stop phase, the manifest goes back
        why = _why(exc)
        try:
            node.start(component, wait=False, reason="restart aborted: %s" % why)
        except BaseException as again:  # noqa: BLE001 - reported loudly with where it stays
            raise CpctlError("restart of %s aborted (%s) and its manifest could NOT be put back (%s): it stays "
                             "parked in %s; run: cpctl start %s" % (component, why, _why(again), node.state.parked_dir,
                                                                   component), ExitCode.ENVIRONMENT) from None
        code = exc.code if isinstance(exc, CpctlError) else \
            ExitCode.INTERRUPTED if interrupted_by(exc) else ExitCode.ENVIRONMENT
        raise CpctlError("restart of %s aborted, manifest restored to %s: %s" % (component, node.manifests_dir, why),
                         code, hint=getattr(exc, "hint", "")) from None


def _where_left(node: Node, component: str, step: str, exc: BaseException) -> BaseException:
    """Re-raise a failure of a restart's start phase with where the manifest is now."""
    if not isinstance(exc, (CpctlError, KeyboardInterrupt, Terminated)):
        return exc
    parked = any(meta.get("component") == component or component in f for f, meta in node.parked().items())
    where = "still parked in %s (cpctl start %s)" % (node.state.parked_dir, component) if parked \
        else "back in %s" % node.manifests_dir
    code = exc.code if isinstance(exc, CpctlError) else ExitCode.INTERRUPTED
    return CpctlError("restart of %s: %s failed (%s); the manifest is %s" % (component, step, _why(exc), where),
                      code, hint=getattr(exc, "hint", ""))


def _why(exc: BaseException) -> str:
    """Why a restart step stopped, short enough for a history record's reason."""
    signal = interrupted_by(exc)
    if signal:
        return "interrupted (%s)" % signal
    return getattr(exc, "message", None) or str(exc) or type(exc).__name__


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
            _, data = node.check_restorable(parked_hits[0], scan)
            steps.append({"action": "start", "component": component,
                          "move": [node.state.parked_path(parked_hits[0]), node.manifests_dir + "/" + parked_hits[0]]})
            edited = hand_edit(parked[parked_hits[0]], manifests.checksum(data))
            if edited:
                steps[-1]["note"] = "%s: what cpctl parked would be kept as a revision" % edited
            after.append(parked_hits[0])
        elif present or parked_hits:
            steps.append({"action": verb, "component": component,
                          "note": "nothing to do (already %s)" % ("stopped" if verb == "stop" else "running")})
        else:
            raise node.not_found(component)
    diff = "".join(difflib.unified_diff([f + "\n" for f in before], [f + "\n" for f in sorted(after)],
                                        node.manifests_dir + " (now)", node.manifests_dir + " (after)"))
    return {"node": node.node_name, "dry_run": True, "changed": False, "plan": steps, "diff": diff}
