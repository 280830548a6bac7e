"""Manual scheduling: bind a Pending pod to a node, list what waits for a scheduler.

``spec.nodeName`` of an existing pod is immutable; the pods/binding subresource is the one way
to place it, exactly what a scheduler does. Every check the API would make is made first so
that the user gets a precise message instead of a raw 404/409.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Optional

from cpctl.errors import CpctlError, ExitCode
from cpctl.probes.kubeapi import ApiError, KubeClient, client_for


def client_of(node: Any) -> KubeClient:
    """An API client from the node's kubeconfig (a path on that node, read through its Host)."""
    return client_for(node.host, node.kubeconfig)


def bind(client: KubeClient, namespace: str, pod_name: str, node_name: str, dry_run: bool = False) -> dict:
    """Bind ``pod_name`` to ``node_name``; return the pod as the API now reports it.

    ``dry_run`` makes every check and returns the pod unchanged, without the POST."""
    if client.get_node(node_name) is None:
        raise CpctlError("node %r not found (see: kubectl get nodes)" % node_name, ExitCode.NOT_FOUND)
    pod = client.get_pod(namespace, pod_name)
    if pod is None:
        raise CpctlError("pod %s/%s not found" % (namespace, pod_name), ExitCode.NOT_FOUND)
    current = (pod.get("spec") or {}).get("nodeName")
    if current:
        raise CpctlError("pod %s/%s is already bound to node %s (nodeName is immutable; delete and "
                         "re-create the pod to move it)" % (namespace, pod_name, current), ExitCode.CONFLICT)
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        raise CpctlError("pod %s/%s is being deleted" % (namespace, pod_name), ExitCode.CONFLICT)
    if dry_run:
        return pod
    try:
        client.bind(namespace, pod_name, node_name)
    except ApiError as exc:
        if exc.status == 409:
            raise CpctlError("pod %s/%s was bound by someone else meanwhile: %s" % (namespace, pod_name, exc.message),
                             ExitCode.CONFLICT) from None
        raise
    return client.get_pod(namespace, pod_name) or {}


def pending(client: KubeClient, namespace: Optional[str]) -> list:
    """Pods no scheduler has placed yet (no nodeName), with the scheduler they wait for."""
    pods = client.list_pods(namespace, field_selector="spec.nodeName=")
    rows = []
    for pod in pods:
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        if spec.get("nodeName") or meta.get("deletionTimestamp"):
            continue
        rows.append({"namespace": meta.get("namespace"), "name": meta.get("name"),
                     "scheduler": spec.get("schedulerName") or "default-scheduler",
                     "created": meta.get("creationTimestamp"), "phase": (pod.get("status") or {}).get("phase")})
    return rows


def wait_running(client: KubeClient, namespace: str, pod_name: str, timeout: float,
                 progress: Optional[Callable[[str], None]] = None, poll: float = 0.1) -> str:
    """Wait until the kubelet of the bound node reports the pod Running; return the phase."""
    deadline = time.monotonic() + timeout
    while True:
        pod = client.get_pod(namespace, pod_name) or {}
        phase = (pod.get("status") or {}).get("phase") or "?"
        if phase in ("Running", "Succeeded", "Failed"):
            return phase
        if time.monotonic() >= deadline:
            raise CpctlError("pod %s/%s still %s after %.0fs" % (namespace, pod_name, phase, timeout),
                             ExitCode.TIMEOUT, hint="kubectl describe pod -n %s %s" % (namespace, pod_name))
        if progress:
            progress("pod %s/%s is %s" % (namespace, pod_name, phase))
        time.sleep(poll)
