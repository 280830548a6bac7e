"""The canary gate (``start``/``restart scheduler --verify``): a throw-away pod must get a node.

It creates and deletes a pod, so it is not a probe (probes only look): it is a ``Gate`` that
``ops/wiring.open_node`` adds to the node's waiter when the run asks for it (``Settings.canary``).
It runs after the Lease gate, for a scheduler only (the default one, or a second scheduler
cpctl generated: that one serves the schedulerName equal to its pod name).
"""

from __future__ import annotations

import secrets
from typing import Any, Dict

from cpctl import catalogue
from cpctl.errors import CpctlError
from cpctl.probes.base import PodTarget, Unavailable
from cpctl.probes.gates import API_CALL, GateResult, GateRun
from cpctl.probes.kubeapi import ApiFailure, KubeClient
from cpctl.probes.lease import uses_lease
from cpctl.probes.shape import ShapeError, get_object, get_str

CLEANUP_BUDGET = 2.0    # seconds the canary's deletion may take
NAMESPACE = "default"


class CanaryGate:
    """A pod with this scheduler's name must be scheduled; it is always deleted again."""

    name = "canary"

    def applies(self, target: PodTarget) -> bool:
        """Schedulers only: a leader-elected component other than the controller-manager."""
        return uses_lease(target) and target.component != catalogue.KUBE_CONTROLLER_MANAGER

    def before(self, target: PodTarget, run: GateRun) -> object:
        return None

    def check(self, target: PodTarget, before: object, run: GateRun) -> GateResult:
        if run.stale:
            return GateResult(", canary not run (the API's view of node %s is stale)" % target.node, False)
        name = "cpctl-canary-%s" % secrets.token_hex(4)
        try:
            client = run.client()
            client.create_pod(NAMESPACE, canary_pod(name, target), timeout=min(API_CALL, run.clock.budget()))
        except (Unavailable, ApiFailure) as exc:
            return GateResult(", canary not verified: pod %s/%s not created (%s)" % (NAMESPACE, name, _why(exc)),
                              False)
        try:
            result = self._scheduled(client, name, run)
        finally:
            cleanup = _delete(client, name)
        return GateResult(result.text + cleanup, result.verified)

    @staticmethod
    def _scheduled(client: KubeClient, name: str, run: GateRun) -> GateResult:
        """Poll the canary until it has a node (TIMEOUT at the deadline while it has none)."""
        while True:
            try:
                pod = client.get_pod(NAMESPACE, name, timeout=min(API_CALL, run.clock.budget()))
                node = get_str(get_object(pod or {}, "spec", "pod"), "nodeName", "pod.spec")
            except (ApiFailure, ShapeError) as exc:
                if run.clock.expired():
                    return GateResult(", canary not verified: pod %s/%s could not be read (%s)"
                                      % (NAMESPACE, name, _why(exc)), False)
                run.pause("canary pod %s/%s could not be read" % (NAMESPACE, name))
                continue
            if node:
                return GateResult(", canary pod %s scheduled to %s" % (name, node), True)
            run.tick("canary pod %s/%s not scheduled yet" % (NAMESPACE, name))


def canary_pod(name: str, target: PodTarget) -> Dict[str, Any]:
    """The throw-away pod: a pause container for the target's scheduler, never restarted."""
    scheduler = catalogue.DEFAULT_SCHEDULER_NAME if target.component == catalogue.KUBE_SCHEDULER else target.component
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "cpctl"}},
            "spec": {"containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.9"}],
                     "restartPolicy": "Never", "terminationGracePeriodSeconds": 0, "schedulerName": scheduler}}


def _delete(client: KubeClient, name: str) -> str:
    """"" when deleted, else the note telling the user to delete it by hand."""
    try:
        client.delete_pod(NAMESPACE, name, timeout=CLEANUP_BUDGET)
    except ApiFailure as exc:
        return " (canary pod %s/%s NOT deleted: %s; delete it by hand)" % (NAMESPACE, name, exc.message)
    return ""


def _why(exc: Exception) -> str:
    return exc.message if isinstance(exc, CpctlError) else str(exc)
