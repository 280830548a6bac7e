"""May a second scheduler take its own leader-election Lease? Ask the API, and grant it on request.

client-go's leader election first GETs its Lease; when that is forbidden it gives up and retries,
so a scheduler whose identity may not get/update ``kube-system/NAME`` never takes the Lease and
never schedules (it does not "take it but fail to renew"). Whether kubeadm's bootstrap policy
allows it depends on the release: the ClusterRole ``system:kube-scheduler`` allows get/update only
on the Lease named ``kube-scheduler``; newer releases also bind a kube-system Role that allows
every Lease there. A SubjectAccessReview answers for the cluster at hand, whatever its version
(real-node-facts.md "RBAC for a second scheduler"; bootstrappolicy/namespace_policy.go).

The identity is the one the API server authenticates for the kubeconfig the scheduler runs with
(kubeadm's scheduler.conf: the client certificate's CN ``system:kube-scheduler``) - never the name
of the kubeconfig's user *entry*, which is only a label. cpctl asks the API (a SelfSubjectReview
with that kubeconfig, ``kubectl auth whoami``, GA in 1.28), else reads the client certificate's
subject (CN: user, O: groups). The Role and RoleBinding cpctl creates carry its label and the
scheduler's name (``ANNOTATION``); one that already exists under their names is checked, not
trusted: cpctl's own is fixed, anyone else's refused. ``scheduler remove`` deletes only objects that
carry cpctl's mark for that scheduler.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Tuple

from cpctl.core.node import Node
from cpctl.errors import CpctlError, ExitCode

if TYPE_CHECKING:
    from cpctl.probes.kubeapi import KubeClient

LEASE_VERBS = ("get", "update")        # on the scheduler's own Lease, by name
# ... and ``create`` on Leases: RBAC cannot limit a create by name (the object's name is not part of
# the request it authorizes), so a rule allowing it names no Lease. kubeadm's system:kube-scheduler has
# it; another identity needs it once, to create its Lease on the first election.
CREATE = "create"
NAMESPACE = "kube-system"


@dataclass
class LeaseAccess:
    """The answer: ``allowed`` None when the API could not be asked (``why`` says why)."""

    identity: str
    allowed: Optional[bool]
    denied: List[str] = field(default_factory=list)
    why: str = ""
    granted: bool = False
    create_rule: bool = False         # the identity could not create Leases: the Role includes that rule

    def to_dict(self) -> Dict[str, Any]:
        return {"identity": self.identity, "allowed": self.allowed, "denied": self.denied, "why": self.why,
                "granted": self.granted}


class LeaseForbidden(CpctlError):
    """The scheduler could never take its Lease: refused before anything is written (``yaml``
    holds the Role and RoleBinding that would allow it)."""

    def __init__(self, message: str, yaml: str, dry_run: str = "cpctl scheduler add --dry-run") -> None:
        super().__init__(message, ExitCode.REFUSED, hint="rerun with --grant-rbac, or apply the Role and "
                                                          "RoleBinding that %s prints" % dry_run)
        self.yaml = yaml


@dataclass
class Identity:
    """Who a kubeconfig authenticates as, and how cpctl knows (``source``); ``user`` "" when unknown."""

    user: str
    groups: List[str] = field(default_factory=list)
    source: str = ""


def identity_of(node: Node, kubeconfig: str) -> Identity:
    """The identity the API server authenticates for ``kubeconfig`` (a path on the node): asked
    (SelfSubjectReview), else the client certificate's subject; unknown ("") when neither says."""
    from cpctl.probes.kubeapi import KubeClient, load_kubeconfig
    try:
        access = load_kubeconfig(node.host, kubeconfig)
    except CpctlError as exc:
        return Identity("", source="cannot read %s: %s" % (kubeconfig, exc.message))
    asked = ""
    try:
        answer = KubeClient(node.host, access, timeout=5.0).request("POST", SELF_REVIEW, {
            "apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
        found = _user_info(answer)
        if found is not None:
            return found
        asked = "a malformed SelfSubjectReview answer"
    except CpctlError as exc:
        asked = exc.message
    subject = _certificate_subject(node, access.tls)
    if subject is not None:
        return subject
    return Identity("", source="the API did not say (%s) and %s has no client certificate" % (asked, kubeconfig))


SELF_REVIEW = "/apis/authentication.k8s.io/v1/selfsubjectreviews"


def _user_info(answer: Mapping[str, object]) -> Optional[Identity]:
    """The identity in a SelfSubjectReview answer (untrusted: type-checked), None if there is none."""
    status = answer.get("status")
    info = status.get("userInfo") if isinstance(status, dict) else None
    name = info.get("username") if isinstance(info, dict) else None
    if not isinstance(info, dict) or not isinstance(name, str) or not name:
        return None
    groups: List[object] = info["groups"] if isinstance(info.get("groups"), list) else []
    return Identity(name[:253], [g for g in groups if isinstance(g, str)][:64], "SelfSubjectReview")


def _certificate_subject(node: Node, tls: Mapping[str, object]) -> Optional[Identity]:
    """CN and O of the kubeconfig's client certificate (how the API server names a certificate user)."""
    from cpctl.ops import x509name
    try:
        cert_file = tls.get("cert_file")
        pem = tls.get("cert_data") or (node.host.read_file(cert_file, 1 << 20) if isinstance(cert_file, str) else b"")
    except OSError:
        return None
    subject = x509name.subject(pem) if isinstance(pem, bytes) and pem else None
    if subject is None or not subject.get("CN"):
        return None
    return Identity(subject["CN"][0], list(subject.get("O") or []) + ["system:authenticated"], "client certificate")


def check(node: Node, lease: str, identity: Identity) -> LeaseAccess:
    """Ask the API (with the node's admin kubeconfig) whether ``identity`` may get and update the Lease,
    and create Leases (its first election creates it)."""
    from cpctl.ops.scheduling import client_of
    if not identity.user:
        return LeaseAccess("", None, why="cannot tell which identity the scheduler authenticates as: %s"
                           % identity.source)
    try:
        client = client_of(node)
        denied = [verb for verb in LEASE_VERBS if not _allowed(client, identity, verb, lease)]
        denied += [CREATE] if not _allowed(client, identity, CREATE, "") else []
    except CpctlError as exc:
        return LeaseAccess(identity.user, None, why=exc.message)
    return LeaseAccess(identity.user, not denied, denied, create_rule=CREATE in denied)


def _allowed(client: Any, identity: Identity, verb: str, lease: str) -> bool:
    """Whether ``identity`` may ``verb`` Lease ``lease`` ("": any Lease, as a create asks), by a SubjectAccessReview."""
    attributes = {"namespace": NAMESPACE, "verb": verb, "group": "coordination.k8s.io", "resource": "leases"}
    if lease:
        attributes["name"] = lease
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
              "spec": {"user": identity.user, "groups": identity.groups or ["system:authenticated"],
                       "resourceAttributes": attributes}}
    answer = client.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", review)
    status = answer.get("status")
    return isinstance(status, dict) and status.get("allowed") is True


RBAC_PATH = "/apis/rbac.authorization.k8s.io/v1/namespaces/%s/%s" % (NAMESPACE, "%s")
ANNOTATION = "cpctl/scheduler"
MANAGED = {"app.kubernetes.io/managed-by": "cpctl"}


def grant(node: Node, lease: str, identity: str, create: bool = False) -> None:
    """Create the Role and RoleBinding that let ``identity`` get/update the Lease (and, with ``create``,
    create Leases in kube-system: see :data:`CREATE`). One that already
    exists under that name is checked: cpctl's own (its label and this scheduler's name) is
    replaced with the right content, anyone else's refused (exit 4) - never trusted unread."""
    from cpctl.ops.scheduling import client_of
    from cpctl.probes.kubeapi import ApiError
    client = client_of(node)
    for path, body in (("roles", role(lease, create)), ("rolebindings", role_binding(lease, identity))):
        try:
            client.request("POST", RBAC_PATH % path, body)
        except ApiError as exc:
            if exc.status != 409:
                raise
            _reconcile(client, path, lease, body)


def _reconcile(client: "KubeClient", path: str, lease: str, want: Mapping[str, object]) -> None:
    """An object of our name exists: leave it when it says what we want, fix it when it is ours,
    refuse when it is someone else's."""
    name, kind = object_name(lease), str(want["kind"])
    found = client.request("GET", RBAC_PATH % path + "/" + name)
    fields = ("rules",) if kind == "Role" else ("roleRef", "subjects")
    if all(found.get(k) == want[k] for k in fields) and ours(found, lease):
        return
    if not ours(found, lease):
        raise CpctlError("%s %s/%s already exists and was not created by cpctl for this scheduler (%s): cpctl "
                         "neither trusts nor changes it; remove or rename it, or grant the Lease by hand"
                         % (kind, NAMESPACE, name, _differs(found, want, fields)), ExitCode.REFUSED)
    fixed = dict(found, **{k: want[k] for k in fields})
    client.request("PUT", RBAC_PATH % path + "/" + name, fixed)


def _differs(found: Mapping[str, object], want: Mapping[str, object], fields: Tuple[str, ...]) -> str:
    diff = [k for k in fields if found.get(k) != want[k]]
    return "its %s differ from what cpctl grants" % " and ".join(diff) if diff else "no cpctl mark"


def ours(obj: object, scheduler: str) -> bool:
    """True when ``obj`` carries cpctl's label and the annotation naming this scheduler."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if not isinstance(meta, dict):
        return False
    labels: Mapping[str, object] = meta["labels"] if isinstance(meta.get("labels"), dict) else {}
    notes: Mapping[str, object] = meta["annotations"] if isinstance(meta.get("annotations"), dict) else {}
    return all(labels.get(k) == v for k, v in MANAGED.items()) and notes.get(ANNOTATION) == scheduler


def revoke(node: Node, lease: str) -> List[str]:
    """Delete the RoleBinding and Role cpctl created for scheduler ``lease`` - only those carrying
    its mark; returns one line per object (deleted, left because not cpctl's, absent, failed)."""
    from cpctl.ops.scheduling import client_of
    from cpctl.probes.kubeapi import ApiError
    said = []
    try:
        client = client_of(node)
    except CpctlError as exc:
        return ["Lease RBAC not removed: %s" % exc.message]
    for path, kind in (("rolebindings", "RoleBinding"), ("roles", "Role")):
        where = "%s %s/%s" % (kind, NAMESPACE, object_name(lease))
        try:
            found = client.request("GET", RBAC_PATH % path + "/" + object_name(lease))
            if not ours(found, lease):
                said.append("%s left in place: not created by cpctl for %s" % (where, lease))
                continue
            client.request("DELETE", RBAC_PATH % path + "/" + object_name(lease))
            said.append("%s deleted" % where)
        except ApiError as exc:
            if exc.status != 404:
                said.append("%s not deleted: %s" % (where, exc.message))
        except CpctlError as exc:
            said.append("%s not deleted: %s" % (where, exc.message))
    return said


def object_name(lease: str) -> str:
    return "cpctl:%s-lease" % lease


def _meta(lease: str) -> Dict[str, object]:
    return {"name": object_name(lease), "namespace": NAMESPACE, "labels": dict(MANAGED),
            "annotations": {ANNOTATION: lease}}


def role(lease: str, create: bool = False) -> Dict[str, Any]:
    """The Role: get/update of the Lease by name; with ``create``, also create of Leases (unnamed)."""
    rules = [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": [lease],
              "verbs": list(LEASE_VERBS)}]
    if create:
        rules.insert(0, {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": [CREATE]})
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": _meta(lease), "rules": rules}


def role_binding(lease: str, identity: str) -> Dict[str, Any]:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": _meta(lease),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": object_name(lease)},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": identity}]}


def as_yaml(lease: str, identity: str, create: bool = False) -> str:
    """The Role and RoleBinding as one YAML stream (``kubectl apply -f -``)."""
    import yaml
    return yaml.safe_dump_all([role(lease, create), role_binding(lease, identity)], sort_keys=False)


def ensure(node: Node, lease: str, kubeconfig: str, allow_grant: bool) -> LeaseAccess:
    """Check, and with ``allow_grant`` grant, before a second scheduler is written; refuse
    (``LeaseForbidden``, exit 4) when it could never take its Lease, and refuse a grant for an
    identity cpctl could not learn (it would bind a name nobody authenticates as)."""
    identity = identity_of(node, kubeconfig)
    access = check(node, lease, identity)
    if access.allowed is None and allow_grant and not identity.user:
        raise CpctlError("--grant-rbac: %s; grant the Lease by hand (%s prints the Role and RoleBinding for a user "
                         "you name)" % (access.why, node.command("scheduler", "add", "--dry-run")), ExitCode.REFUSED)
    if access.allowed is False and allow_grant:
        create_rule = access.create_rule
        grant(node, lease, identity.user, create_rule)
        access = check(node, lease, identity)
        access.granted, access.create_rule = True, create_rule
    if access.allowed is False:
        raise LeaseForbidden("%s may not %s Lease %s/%s, so the scheduler would never take it and never schedule"
                             % (identity.user, " and ".join(access.denied), NAMESPACE, lease),
                             as_yaml(lease, identity.user, access.create_rule),
                             node.command("scheduler", "add", "--dry-run"))
    return access
