"""Manual scheduling: bind a Pending pod to a node, list what waits for a scheduler.

``spec.nodeName`` of an existing pod is immutable; the pods/binding subresource is the one way
to place it, exactly what a scheduler does. Every check the pod registry makes
(pkg/registry/core/pod/storage/storage.go, in its order: being deleted, already assigned to a
node, non-empty ``spec.schedulingGates``) is made first so that the user gets a precise message;
when the registry still refuses (the pod changed meanwhile), its 409 is told apart the same way.
"""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING, Callable, Dict, List, Mapping, Optional, TypedDict

from cpctl import catalogue
from cpctl.errors import CpctlError, ExitCode
from cpctl.probes.kubeapi import ApiError, ApiFailure, KubeClient, client_for
from cpctl.probes.shape import ShapeError, get_object, get_objects, get_str

if TYPE_CHECKING:
    from cpctl.core.node import Node

API_CALL = 5.0     # seconds one API request of ``wait_running`` may take at most

# The registry's words (storage.go setPodHostAndAnnotations), after "Operation cannot be fulfilled
# on pods/binding "NAME": ".
_ASSIGNED = re.compile(r'is already assigned to node "([^"]*)"')
_DELETING = re.compile(r"is being deleted")
_GATED = re.compile(r"has non-empty \.spec\.schedulingGates")
_STALE_UID = re.compile(r"UID in precondition")


def client_of(node: "Node") -> KubeClient:
    """An API client from the node's kubeconfig (a path on that node, read through its Host)."""
    return client_for(node.host, node.kubeconfig)


def _bad_pod(namespace: str, name: str, exc: ShapeError) -> CpctlError:
    return CpctlError("API answered a malformed pod %s/%s: %s" % (namespace, name, exc), ExitCode.API)


def scheduling_gates(pod: Mapping[str, object]) -> List[str]:
    """The names of the pod's ``spec.schedulingGates`` (1.27+): while any is left, no scheduler
    places the pod and the registry refuses a binding."""
    spec = get_object(pod, "spec", "pod")
    return [get_str(gate, "name", "schedulingGate") or "?" for gate in get_objects(spec, "schedulingGates", "pod.spec")]


def unbindable(pod: Mapping[str, object], namespace: str, pod_name: str) -> Optional[str]:
    """Why the registry would refuse to bind this pod (409), or None; the registry's order."""
    meta, spec = get_object(pod, "metadata", "pod"), get_object(pod, "spec", "pod")
    if get_str(meta, "deletionTimestamp", "pod.metadata"):
        return "pod %s/%s is being deleted" % (namespace, pod_name)
    current = get_str(spec, "nodeName", "pod.spec")
    if current:
        return ("pod %s/%s is already bound to node %s (nodeName is immutable; delete and re-create the pod "
                "to move it)" % (namespace, pod_name, current))
    gates = scheduling_gates(pod)
    if gates:
        return ("pod %s/%s has scheduling gates (%s): no scheduler and no binding may place it until they "
                "are removed from spec.schedulingGates" % (namespace, pod_name, ", ".join(gates)))
    return None


def bind(client: KubeClient, namespace: str, pod_name: str, node_name: str, dry_run: bool = False
         ) -> Dict[str, object]:
    """Bind ``pod_name`` to ``node_name``; return the pod as the API now reports it.

    ``dry_run`` makes every check and returns the pod unchanged, without the POST."""
    if client.get_node(node_name) is None:
        raise CpctlError("node %r not found (see: kubectl get nodes)" % node_name, ExitCode.NOT_FOUND)
    pod = client.get_pod(namespace, pod_name)
    if pod is None:
        raise CpctlError("pod %s/%s not found" % (namespace, pod_name), ExitCode.NOT_FOUND)
    try:
        refusal = unbindable(pod, namespace, pod_name)
    except ShapeError as exc:
        raise _bad_pod(namespace, pod_name, exc) from None
    if refusal:
        raise CpctlError(refusal, ExitCode.CONFLICT)
    if dry_run:
        return pod
    try:
        client.bind(namespace, pod_name, node_name)
    except ApiError as exc:
        raise binding_refused(exc, namespace, pod_name) from None
    return client.get_pod(namespace, pod_name) or {}


def binding_refused(exc: ApiError, namespace: str, pod_name: str) -> CpctlError:
    """The registry's refusal of a binding, told apart: the pod changed between the checks and the POST."""
    what, words = "pod %s/%s" % (namespace, pod_name), exc.status_message
    if exc.status == 404:
        return CpctlError("%s was deleted meanwhile" % what, ExitCode.NOT_FOUND)
    if exc.status == 400:
        return CpctlError("the API refused the binding of %s as malformed: %s" % (what, words or exc.message),
                          ExitCode.API)
    if exc.status != 409:
        return exc
    assigned = _ASSIGNED.search(words)
    if assigned:
        return CpctlError("%s was bound to node %s by someone else meanwhile" % (what, assigned.group(1)),
                          ExitCode.CONFLICT)
    if _DELETING.search(words):
        return CpctlError("%s is being deleted (since after the checks)" % what, ExitCode.CONFLICT)
    if _GATED.search(words):
        return CpctlError("%s got scheduling gates meanwhile (spec.schedulingGates): remove them first" % what,
                          ExitCode.CONFLICT)
    if _STALE_UID.search(words):
        return CpctlError("%s was deleted and re-created meanwhile (another UID): check it and bind again" % what,
                          ExitCode.CONFLICT)
    return CpctlError("the API refused the binding of %s (409): %s" % (what, words or exc.message),
                      ExitCode.CONFLICT)


def pending(client: KubeClient, namespace: Optional[str]) -> List[PendingPod]:
    """Pods no scheduler has placed yet (no nodeName), with what they wait for: a scheduler
    (``scheduler``), or - when ``gated`` - the removal of their scheduling gates (``gates``), which
    no scheduler and no ``cpctl bind`` can get past."""
    rows: List[PendingPod] = []
    for pod in client.list_pods(namespace, field_selector="spec.nodeName="):
        try:
            rows.extend(_pending_row(pod))
        except ShapeError as exc:
            raise CpctlError("API answered a malformed pod list: %s" % exc, ExitCode.API) from None
    return rows


class PendingPod(TypedDict):
    """A pod ``pending`` lists: where it is, which scheduler it waits for, or the gates it waits on."""

    namespace: str
    name: str
    scheduler: str
    gated: bool
    gates: List[str]
    waiting_for: str
    created: str
    phase: str


def _pending_row(pod: Mapping[str, object]) -> List[PendingPod]:
    meta, spec = get_object(pod, "metadata", "pod"), get_object(pod, "spec", "pod")
    if get_str(spec, "nodeName", "pod.spec") or get_str(meta, "deletionTimestamp", "pod.metadata"):
        return []
    gates = scheduling_gates(pod)
    scheduler = get_str(spec, "schedulerName", "pod.spec") or catalogue.DEFAULT_SCHEDULER_NAME
    return [{"namespace": get_str(meta, "namespace", "pod.metadata"), "name": get_str(meta, "name", "pod.metadata"),
             "scheduler": scheduler, "gated": bool(gates), "gates": gates,
             "waiting_for": "scheduling gates: %s" % ", ".join(gates) if gates else "scheduler %s" % scheduler,
             "created": get_str(meta, "creationTimestamp", "pod.metadata"),
             "phase": get_str(get_object(pod, "status", "pod"), "phase", "pod.status")}]


def wait_running(client: KubeClient, namespace: str, pod_name: str, timeout: float,
                 progress: Optional[Callable[[str], None]] = None, poll: float = 0.1) -> str:
    """Wait until the kubelet of the bound node reports the pod Running; return the phase.

    A failed read (the API erring, hanging or answering garbage) is retried until the deadline:
    then the TIMEOUT error says what was last seen, or that the pod could not be read."""
    deadline = time.monotonic() + timeout
    phase, problem = "?", ""
    while True:
        try:
            pod = client.get_pod(namespace, pod_name, timeout=max(0.2, min(API_CALL, deadline - time.monotonic())))
            if pod is None:
                raise CpctlError("pod %s/%s was deleted while waiting for it to run" % (namespace, pod_name),
                                 ExitCode.NOT_FOUND)
            phase, problem = get_str(get_object(pod, "status", "pod"), "phase", "pod.status") or "?", ""
        except (ApiFailure, ShapeError) as exc:
            problem = exc.message if isinstance(exc, CpctlError) else str(exc)
        if phase in ("Running", "Succeeded", "Failed") and not problem:
            return phase
        if time.monotonic() >= deadline:
            seen = "could not be read (%s)" % problem if problem else "still %s" % phase
            raise CpctlError("pod %s/%s %s after %.0fs" % (namespace, pod_name, seen, timeout),
                             ExitCode.TIMEOUT, hint="kubectl describe pod -n %s %s" % (namespace, pod_name))
        if progress:
            progress("pod %s/%s is %s" % (namespace, pod_name, phase if not problem else "not readable"))
        time.sleep(max(0.0, min(poll, deadline - time.monotonic())))
