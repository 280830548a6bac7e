"""The ``api`` probe: the mirror pod ``<pod>-<node>`` in the API server."""

from __future__ import annotations

from typing import Optional

from cpctl.errors import CpctlError
from cpctl.host.base import Host
from cpctl.probes.base import PodState, PodTarget, Unavailable
from cpctl.probes.kubeapi import ApiError, ApiUnreachable, KubeClient, load_kubeconfig
from cpctl.timeutil import parse_rfc3339


class ApiProbe:
    name = "api"

    def __init__(self, host: Host, kubeconfig: str) -> None:
        self.host = host
        self.kubeconfig = kubeconfig
        self._client: Optional[KubeClient] = None

    @property
    def client(self) -> KubeClient:
        if self._client is None:
            try:
                self._client = KubeClient(self.host, load_kubeconfig(self.host, self.kubeconfig), timeout=3.0)
            except CpctlError as exc:
                raise Unavailable(exc.message) from None
        return self._client

    def observe(self, target: PodTarget) -> PodState:
        try:
            pod = self.client.get_pod(target.namespace, target.pod_name)
        except ApiUnreachable as exc:
            raise Unavailable(exc.message) from None
        except ApiError as exc:
            if exc.status >= 500:
                raise Unavailable(exc.message) from None
            raise
        if pod is None:
            return PodState(False, source=self.name)
        if pod.get("metadata", {}).get("deletionTimestamp"):
            return PodState(False, phase="Terminating", uid=pod["metadata"].get("uid", ""), source=self.name)
        return pod_state(pod, self.name)


def pod_state(pod: dict, source: str) -> PodState:
    status = pod.get("status") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    statuses = status.get("containerStatuses") or []
    ids = tuple(c["containerID"] for c in statuses if c.get("containerID"))
    starts = [parse_rfc3339((c.get("state") or {}).get("running", {}).get("startedAt")) for c in statuses]
    started = max((s for s in starts if s), default=None)
    meta = pod.get("metadata") or {}
    return PodState(True, ready, status.get("phase", ""), meta.get("uid", ""), ids, started,
                    parse_rfc3339(meta.get("creationTimestamp")), source)
