"""The ``api`` probe: the mirror pod ``<pod>-<node>`` in the API server.

Only a real "not found" (a 404 with a Kubernetes Status) means "gone". Every other failure - an
error status (403, 429, 5xx...), no answer, an answer that is not a pod - is "could not look"
(``Unavailable``): a blind probe must never read as a stopped pod.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

from cpctl.host.base import Host, HttpRequest
from cpctl.probes.base import API_TIMEOUT, PodState, PodTarget, ProbeOptions, Unavailable
from cpctl.probes.kubeapi import ApiFailure, ApiUnreachable, KubeClient
from cpctl.probes.shape import ShapeError, get_object, get_objects, get_str
from cpctl.timeutil import parse_rfc3339

DEFAULT_TIMEOUT = API_TIMEOUT   # at most this long per request, however long the wait has left
MIN_CALL = 0.2          # the least time one request gets, even at the very end of a wait


class ApiProbe:
    """The mirror pod in the API server (``via_api``; its uid identifies an instance)."""

    name = "api"
    max_call = DEFAULT_TIMEOUT
    via_api = True
    identifies = True

    def __init__(self, host: Host, kubeconfig: str, options: Optional[ProbeOptions] = None) -> None:
        self.host = host
        self.options = options or ProbeOptions(host, kubeconfig)
        # (namespace, name) -> the pod one list gave, or the text of that list's "no answer"
        self._listed: Dict[Tuple[str, str], object] = {}

    @classmethod
    def from_options(cls, options: ProbeOptions) -> "ApiProbe":
        """The probe sharing the run's API client."""
        return cls(options.host, options.kubeconfig, options)

    @property
    def client(self) -> KubeClient:
        """The API client; ``ProbeMissing`` when the kubeconfig is unusable (it stays so this run)."""
        return self.options.client()

    def prefetch(self, targets: Sequence[PodTarget]) -> None:
        """Before several looks (``status``): one list of each namespace's pods on the targets'
        node (``fieldSelector=spec.nodeName``) instead of a GET per mirror pod; each listed mirror
        pod then answers the next ``observe`` of it, once. A pod the list does not hold is asked
        for by name as before (only a 404 means gone), and so is every pod when the list is
        refused or malformed (RBAC may grant get and not list); a list with no answer at all is
        the answer of each of its pods (the same server would not answer their GETs either)."""
        self._listed = {}
        for (namespace, node), names in _lists(targets).items():
            try:
                pods = self.client.list_pods(namespace, field_selector="spec.nodeName=%s" % node,
                                             timeout=DEFAULT_TIMEOUT)
            except ApiUnreachable as exc:
                self._listed.update({(namespace, name): exc.message for name in names})
                continue
            except (ApiFailure, Unavailable):   # refused, malformed, or no usable kubeconfig: GETs decide
                continue
            for pod in pods:
                meta = pod.get("metadata")
                if not isinstance(meta, dict) or meta.get("namespace") not in (namespace, None):
                    continue
                name = meta.get("name")
                if isinstance(name, str) and name in names:
                    self._listed[(namespace, name)] = pod

    def prefetch_requests(self, targets: Sequence[PodTarget]) -> List[HttpRequest]:
        """The lists ``prefetch(targets)`` asks, as requests (``Host.http_ahead``); none without a
        usable kubeconfig (``prefetch`` then asks nothing either)."""
        try:
            client = self.client
        except (ApiFailure, Unavailable):
            return []
        return [client.list_pods_request(namespace, field_selector="spec.nodeName=%s" % node, timeout=DEFAULT_TIMEOUT)
                for namespace, node in _lists(targets)]

    def observe(self, target: PodTarget, timeout: Optional[float] = None) -> PodState:
        budget = DEFAULT_TIMEOUT if timeout is None else max(MIN_CALL, min(DEFAULT_TIMEOUT, timeout))
        listed = self._listed.pop((target.namespace, target.mirror_name), None) if self._listed else None
        if isinstance(listed, str):
            raise Unavailable(listed)
        try:
            pod = listed if isinstance(listed, dict) else \
                self.client.get_pod(target.namespace, target.mirror_name, timeout=budget)
        except ApiFailure as exc:
            raise Unavailable(exc.message) from None
        if pod is None:
            return PodState(False, source=self.name)
        try:
            return pod_state(pod, self.name)
        except ShapeError as exc:
            raise Unavailable("API answered a malformed pod %s: %s" % (target.mirror_name, exc)) from None


def pod_state(pod: Dict[str, Any], source: str) -> PodState:
    """The observation a pod object gives; a pod being deleted counts as gone (its phase says
    Terminating). Fields of the wrong type raise ``ShapeError``."""
    meta = get_object(pod, "metadata", "pod")
    uid = get_str(meta, "uid", "pod.metadata")
    if get_str(meta, "deletionTimestamp", "pod.metadata"):
        return PodState(False, phase="Terminating", uid=uid, source=source)
    status = get_object(pod, "status", "pod")
    ready = any(get_str(c, "type", "condition") == "Ready" and get_str(c, "status", "condition") == "True"
                for c in get_objects(status, "conditions", "pod.status"))
    statuses = get_objects(status, "containerStatuses", "pod.status")
    ids = tuple(get_str(c, "containerID", "containerStatus") for c in statuses)
    starts = [parse_rfc3339(get_str(get_object(get_object(c, "state", "containerStatus"), "running", "state"),
                                    "startedAt", "state.running")) for c in statuses]
    started = max((s for s in starts if s), default=None)
    counts = [c.get("restartCount") for c in statuses]
    restarts = sum(n for n in counts if isinstance(n, int) and not isinstance(n, bool) and n >= 0) if statuses \
        else None
    return PodState(True, ready, get_str(status, "phase", "pod.status"), uid, tuple(i for i in ids if i), started,
                    parse_rfc3339(get_str(meta, "creationTimestamp", "pod.metadata")), source, restarts=restarts)


def _lists(targets: Sequence[PodTarget]) -> Dict[Tuple[str, str], Set[str]]:
    """(namespace, node) -> the mirror pods ``prefetch`` lists there: where two or more are wanted
    (one GET costs what the list would)."""
    wanted: Dict[Tuple[str, str], Set[str]] = {}
    for target in targets:
        wanted.setdefault((target.namespace, target.node.lower()), set()).add(target.mirror_name)
    return {key: names for key, names in wanted.items() if len(names) >= 2}
