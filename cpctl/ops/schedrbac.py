"""May a second scheduler take its own leader-election Lease? Ask the API, and grant it on request.

client-go's leader election first GETs its Lease; when that is forbidden it gives up and retries,
so a scheduler whose identity may not get/update ``kube-system/NAME`` never takes the Lease and
never schedules (it does not "take it but fail to renew"). Whether kubeadm's bootstrap policy
allows it depends on the release: the ClusterRole ``system:kube-scheduler`` allows get/update only
on the Lease named ``kube-scheduler``; newer releases also bind a kube-system Role that allows
every Lease there. A SubjectAccessReview answers for the cluster at hand, whatever its version
(real-node-facts.md "RBAC for a second scheduler"; bootstrappolicy/namespace_policy.go).

The identity is the user of the kubeconfig the scheduler runs with (kubeadm's scheduler.conf names
it ``system:kube-scheduler``, the CN of its client certificate).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from cpctl.core.node import Node
from cpctl.errors import CpctlError, ExitCode

DEFAULT_IDENTITY = "system:kube-scheduler"
LEASE_VERBS = ("get", "update")
NAMESPACE = "kube-system"


@dataclass
class LeaseAccess:
    """The answer: ``allowed`` None when the API could not be asked (``why`` says why)."""

    identity: str
    allowed: Optional[bool]
    denied: List[str] = field(default_factory=list)
    why: str = ""
    granted: bool = False

    def to_dict(self) -> Dict[str, Any]:
        return {"identity": self.identity, "allowed": self.allowed, "denied": self.denied, "why": self.why,
                "granted": self.granted}


class LeaseForbidden(CpctlError):
    """The scheduler could never take its Lease: refused before anything is written (``yaml``
    holds the Role and RoleBinding that would allow it)."""

    def __init__(self, message: str, yaml: str) -> None:
        super().__init__(message, ExitCode.REFUSED, hint="rerun with --grant-rbac, or apply the Role and "
                                                          "RoleBinding that cpctl scheduler add --dry-run prints")
        self.yaml = yaml


def identity_of(node: Node, kubeconfig: str) -> str:
    """The user the scheduler authenticates as: its kubeconfig's current user, on the node."""
    import yaml
    try:
        config = yaml.safe_load(node.host.read_file(kubeconfig, 1 << 20).decode("utf-8", "replace"))
    except (OSError, yaml.YAMLError):
        return DEFAULT_IDENTITY
    if not isinstance(config, dict):
        return DEFAULT_IDENTITY
    current = config.get("current-context")
    for context in config.get("contexts") or []:
        if isinstance(context, dict) and context.get("name") == current:
            user = (context.get("context") or {}).get("user")
            return user if isinstance(user, str) and user else DEFAULT_IDENTITY
    return DEFAULT_IDENTITY


def check(node: Node, lease: str, identity: str) -> LeaseAccess:
    """Ask the API (with the node's admin kubeconfig) whether ``identity`` may get and update the Lease."""
    from cpctl.ops.scheduling import client_of
    try:
        client = client_of(node)
        denied = [verb for verb in LEASE_VERBS if not _allowed(client, identity, verb, lease)]
    except CpctlError as exc:
        return LeaseAccess(identity, None, why=exc.message)
    return LeaseAccess(identity, not denied, denied)


def _allowed(client: Any, identity: str, verb: str, lease: str) -> bool:
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
              "spec": {"user": identity, "groups": ["system:authenticated"],
                       "resourceAttributes": {"namespace": NAMESPACE, "verb": verb, "group": "coordination.k8s.io",
                                              "resource": "leases", "name": lease}}}
    answer = client.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", review)
    status = answer.get("status")
    return isinstance(status, dict) and status.get("allowed") is True


def grant(node: Node, lease: str, identity: str) -> None:
    """Create the Role and RoleBinding that let ``identity`` get/update the Lease (an existing one
    of that name is left as it is and the access checked again)."""
    from cpctl.ops.scheduling import client_of
    from cpctl.probes.kubeapi import ApiError
    client = client_of(node)
    for path, body in (("roles", role(lease)), ("rolebindings", role_binding(lease, identity))):
        try:
            client.request("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/%s/%s" % (NAMESPACE, path), body)
        except ApiError as exc:
            if exc.status != 409:
                raise


def object_name(lease: str) -> str:
    return "cpctl:%s-lease" % lease


def role(lease: str) -> Dict[str, Any]:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": object_name(lease), "namespace": NAMESPACE,
                         "labels": {"app.kubernetes.io/managed-by": "cpctl"}},
            "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": [lease],
                       "verbs": list(LEASE_VERBS)}]}


def role_binding(lease: str, identity: str) -> Dict[str, Any]:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": object_name(lease), "namespace": NAMESPACE,
                         "labels": {"app.kubernetes.io/managed-by": "cpctl"}},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": object_name(lease)},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": identity}]}


def as_yaml(lease: str, identity: str) -> str:
    """The Role and RoleBinding as one YAML stream (``kubectl apply -f -``)."""
    import yaml
    return yaml.safe_dump_all([role(lease), role_binding(lease, identity)], sort_keys=False)


def ensure(node: Node, lease: str, kubeconfig: str, allow_grant: bool) -> LeaseAccess:
    """Check, and with ``allow_grant`` grant, before a second scheduler is written; refuse
    (``LeaseForbidden``, exit 4) when it could never take its Lease."""
    identity = identity_of(node, kubeconfig)
    access = check(node, lease, identity)
    if access.allowed is False and allow_grant:
        grant(node, lease, identity)
        access = check(node, lease, identity)
        access.granted = True
    if access.allowed is False:
        raise LeaseForbidden("%s may not %s Lease %s/%s, so the scheduler would never take it and never schedule"
                             % (identity, " and ".join(access.denied), NAMESPACE, lease), as_yaml(lease, identity))
    return access
