"""RBAC for the lab's simulated kube-apiserver: bootstrap policy, the evaluator, request attributes, reviews.

What is modelled, and where it comes from (kubernetes/kubernetes):

* Rule matching -- ``pkg/apis/rbac/v1/evaluation_helpers.go`` and ``plugin/pkg/auth/authorizer/rbac/rbac.go``
  (``RuleAllows``): verbs, API groups and resources match exactly or by ``*``; ``*/status`` matches that
  subresource of any resource; a rule with ``resourceNames`` only matches requests that name one of
  them (so never a ``create``, whose request carries no name); non-resource URLs match exactly, by
  ``*`` or by a trailing ``*`` prefix.
* Which rules apply -- ``pkg/registry/rbac/validation/rule.go`` (``VisitRulesFor``): every
  ClusterRoleBinding first, then the RoleBindings of the request's namespace; a RoleBinding may
  point at a Role of its own namespace or at a ClusterRole, whose rules then apply in that
  namespace only; subjects are Users and Groups by name and ServiceAccounts as
  ``system:serviceaccount:NS:NAME`` (a subject without namespace takes the binding's).
* Decisions and messages -- the RBAC authorizer never denies, it allows (reason ``RBAC: allowed by
  ClusterRoleBinding "X" of ClusterRole "Y" to User "Z"``) or has no opinion (reason empty, or
  ``RBAC: <errors>`` when a referenced role is missing); the 403 text is the apiserver's
  ``forbiddenMessage`` (``staging/src/k8s.io/apiserver/pkg/endpoints/handlers/responsewriters/errors.go``).
* Request attributes -- ``staging/src/k8s.io/apiserver/pkg/endpoints/request/requestinfo.go``: verb
  from method (GET list/watch/get, DELETE of a collection is ``deletecollection``), a list or watch
  with ``fieldSelector=metadata.name=X`` is a request for the name ``X``, ``/api/v1/namespaces/X``
  is in namespace ``X``.
* Bootstrap policy -- ``plugin/pkg/auth/authorizer/rbac/bootstrappolicy`` (policy.go,
  namespace_policy.go and their ``testdata/*.yaml``), the subset a kubeadm control plane relies on,
  as of v1.30 (the version the lab's ``/version`` reports): ``system:kube-scheduler`` may create
  any Lease but get/update only the Lease ``kube-scheduler``; kube-system's
  ``system::leader-locking-kube-scheduler`` Role covers the ConfigMap lock only. Plus kubeadm's
  ``kubeadm:cluster-admins`` ClusterRoleBinding (cluster-admin for the group admin.conf carries).
* Reviews -- ``pkg/registry/authorization/*accessreview``, ``selfsubjectrulesreview`` and
  ``pkg/apis/authorization/validation``: (Self|Local)SubjectAccessReview, SelfSubjectRulesReview
  (``kubectl auth can-i [--list]``); AlwaysAllow (the lab without ``rbac``) allows everything.
* Component identities -- a kube-scheduler or kube-controller-manager authenticates with the
  kubeconfig it is given (scheduler.conf: ``system:kube-scheduler``; admin.conf: ``kubernetes-admin``
  in ``kubeadm:cluster-admins``), as the client certificate's CN/O would say.
* Protobuf -- ``kubectl create rolebinding|clusterrolebinding`` post protobuf; the RBAC kinds are
  decoded (``staging/src/k8s.io/api/rbac/v1/generated.proto``).

Deviations: no escalation check on writing Roles/Bindings (``escalate``/``bind`` verbs), no Node
authorizer, no aggregated ClusterRoles (admin/edit/view are not seeded), impersonation is always
permitted (the only real client is the lab's admin identity).

Version note: newer bootstrap policy (plugin/pkg/auth/authorizer/rbac/bootstrappolicy/testdata/
namespace-roles.yaml in a release with LeaseCandidates) gives kube-system's
``system::leader-locking-kube-scheduler`` Role get/list/watch/create/update on *every* Lease, which
would let a second scheduler in kube-system take its Lease without a grant; the lab models v1.30.
"""

from __future__ import annotations

import base64
import copy
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Optional, Union

import yaml

from .store import ApiError, Obj, Store, invalid

RBAC_GROUP = "rbac.authorization.k8s.io"
AUTHZ_GROUP = "authorization.k8s.io"
RBAC_RESOURCES = ("roles", "rolebindings", "clusterroles", "clusterrolebindings")
ADMIN_USER = "kubernetes-admin"
ADMIN_GROUPS = ("kubeadm:cluster-admins", "system:authenticated")
AUTHENTICATED = "system:authenticated"
UNAUTHENTICATED = "system:unauthenticated"
ANONYMOUS = "system:anonymous"
SA_PREFIX = "system:serviceaccount:"

#: The identity each control-plane component's kubeconfig (scheduler.conf, controller-manager.conf)
#: carries: the client certificate's CN, no organisation.
COMPONENT_USERS = {
    "kube-scheduler": "system:kube-scheduler",
    "kube-controller-manager": "system:kube-controller-manager",
}

READ = ["get", "list", "watch"]
EVENTS_RULE: Obj = {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch", "update"]}
DISCOVERY_URLS = [
    "/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi", "/openapi/*", "/readyz",
    "/version", "/version/",
]
PUBLIC_INFO_URLS = ["/healthz", "/livez", "/readyz", "/version", "/version/"]


@dataclass(frozen=True)
class UserInfo:
    """An authenticated identity: a user name and its groups."""

    name: str
    groups: tuple[str, ...] = ()


ADMIN = UserInfo(ADMIN_USER, ADMIN_GROUPS)

#: kubeadm's kubeconfigs, by the user name they give their credentials (the client certificate's CN;
#: the groups are its O): admin.conf, super-admin.conf, scheduler.conf, controller-manager.conf.
KUBEADM_IDENTITIES = {
    ADMIN_USER: ADMIN,
    "kubernetes-super-admin": UserInfo("kubernetes-super-admin", ("system:masters", AUTHENTICATED)),
    **{user: UserInfo(user, (AUTHENTICATED,)) for user in COMPONENT_USERS.values()},
}


@dataclass(frozen=True)
class Attributes:
    """What the authorizer decides on (k8s.io/apiserver authorizer.Attributes)."""

    user: UserInfo
    verb: str
    resource_request: bool = True
    api_group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    path: str = ""


@dataclass(frozen=True)
class Decision:
    """The authorizer's answer: allowed or not, and the reason it gives."""

    allowed: bool
    reason: str = ""


# --------------------------------------------------------------------------- bootstrap policy


def _rule(groups: Iterable[str], resources: Iterable[str], verbs: Iterable[str], names: Iterable[str] = ()) -> Obj:
    rule: Obj = {"apiGroups": list(groups), "resources": list(resources), "verbs": list(verbs)}
    if names:
        rule["resourceNames"] = list(names)
    return rule


def _urls(urls: Iterable[str], verbs: Iterable[str] = ("get",)) -> Obj:
    return {"nonResourceURLs": list(urls), "verbs": list(verbs)}


def _subject(kind: str, name: str, namespace: str = "") -> Obj:
    if kind == "ServiceAccount":
        return {"kind": kind, "name": name, "namespace": namespace}
    return {"apiGroup": RBAC_GROUP, "kind": kind, "name": name}


def _bootstrap_meta(name: str, namespace: str = "", bootstrapping: bool = True) -> Obj:
    meta: Obj = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    if bootstrapping:
        meta["labels"] = {"kubernetes.io/bootstrapping": "rbac-defaults"}
        meta["annotations"] = {"rbac.authorization.kubernetes.io/autoupdate": "true"}
    return meta


def _role(kind: str, name: str, rules: list[Obj], namespace: str = "") -> Obj:
    return {"apiVersion": f"{RBAC_GROUP}/v1", "kind": kind, "metadata": _bootstrap_meta(name, namespace),
            "rules": rules}


def _binding(kind: str, name: str, role_kind: str, role: str, subjects: list[Obj], namespace: str = "",
             bootstrapping: bool = True) -> Obj:
    return {
        "apiVersion": f"{RBAC_GROUP}/v1",
        "kind": kind,
        "metadata": _bootstrap_meta(name, namespace, bootstrapping),
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": role_kind, "name": role},
        "subjects": subjects,
    }


def _scheduler_rules() -> list[Obj]:
    """ClusterRole system:kube-scheduler (bootstrappolicy/policy.go, testdata/cluster-roles.yaml)."""
    return [
        EVENTS_RULE,
        _rule(["coordination.k8s.io"], ["leases"], ["create"]),
        _rule(["coordination.k8s.io"], ["leases"], ["get", "update"], ["kube-scheduler"]),
        _rule([""], ["nodes"], READ),
        _rule([""], ["pods"], ["delete", "get", "list", "watch"]),
        _rule([""], ["bindings", "pods/binding"], ["create"]),
        _rule([""], ["pods/status"], ["patch", "update"]),
        _rule([""], ["replicationcontrollers", "services"], READ),
        _rule(["apps", "extensions"], ["replicasets"], READ),
        _rule(["apps"], ["statefulsets"], READ),
        _rule(["policy"], ["poddisruptionbudgets"], READ),
        _rule([""], ["persistentvolumeclaims", "persistentvolumes"], READ),
        _rule(["authentication.k8s.io"], ["tokenreviews"], ["create"]),
        _rule([AUTHZ_GROUP], ["subjectaccessreviews"], ["create"]),
        _rule(["storage.k8s.io"], ["csinodes"], READ),
        _rule([""], ["namespaces"], READ),
        _rule(["storage.k8s.io"], ["csidrivers"], READ),
        _rule(["storage.k8s.io"], ["csistoragecapacities"], READ),
    ]


def _controller_manager_rules() -> list[Obj]:
    """ClusterRole system:kube-controller-manager (bootstrappolicy/policy.go, testdata/cluster-roles.yaml)."""
    return [
        EVENTS_RULE,
        _rule(["coordination.k8s.io"], ["leases"], ["create"]),
        _rule(["coordination.k8s.io"], ["leases"], ["get", "update"], ["kube-controller-manager"]),
        _rule([""], ["secrets", "serviceaccounts"], ["create"]),
        _rule([""], ["secrets"], ["delete"]),
        _rule([""], ["configmaps", "namespaces", "secrets", "serviceaccounts"], ["get"]),
        _rule([""], ["secrets", "serviceaccounts"], ["update"]),
        _rule(["authentication.k8s.io"], ["tokenreviews"], ["create"]),
        _rule([AUTHZ_GROUP], ["subjectaccessreviews"], ["create"]),
        _rule(["*"], ["*"], ["list", "watch"]),
        _rule([""], ["serviceaccounts/token"], ["create"]),
    ]


def bootstrap_objects() -> list[tuple[str, str, Obj]]:
    """(resource, namespace, object) for the RBAC objects a fresh kubeadm v1.30 control plane has."""
    scheduler, kcm = COMPONENT_USERS["kube-scheduler"], COMPONENT_USERS["kube-controller-manager"]
    cluster_roles = [
        _role("ClusterRole", "cluster-admin", [_rule(["*"], ["*"], ["*"]), _urls(["*"], ["*"])]),
        _role("ClusterRole", "system:discovery", [_urls(DISCOVERY_URLS)]),
        _role("ClusterRole", "system:public-info-viewer", [_urls(PUBLIC_INFO_URLS)]),
        _role("ClusterRole", "system:basic-user", [
            _rule([AUTHZ_GROUP], ["selfsubjectaccessreviews", "selfsubjectrulesreviews"], ["create"]),
            _rule(["authentication.k8s.io"], ["selfsubjectreviews"], ["create"]),
        ]),
        _role("ClusterRole", "system:kube-scheduler", _scheduler_rules()),
        _role("ClusterRole", "system:volume-scheduler", [
            _rule([""], ["persistentvolumes"], ["get", "list", "patch", "update", "watch"]),
            _rule(["storage.k8s.io"], ["storageclasses"], READ),
            _rule([""], ["persistentvolumeclaims"], ["get", "list", "patch", "update", "watch"]),
        ]),
        _role("ClusterRole", "system:kube-controller-manager", _controller_manager_rules()),
    ]
    crb = "ClusterRoleBinding"
    cluster_bindings = [
        _binding(crb, "cluster-admin", "ClusterRole", "cluster-admin", [_subject("Group", "system:masters")]),
        _binding(crb, "kubeadm:cluster-admins", "ClusterRole", "cluster-admin",
                 [_subject("Group", "kubeadm:cluster-admins")], bootstrapping=False),
        _binding(crb, "system:discovery", "ClusterRole", "system:discovery", [_subject("Group", AUTHENTICATED)]),
        _binding(crb, "system:basic-user", "ClusterRole", "system:basic-user", [_subject("Group", AUTHENTICATED)]),
        _binding(crb, "system:public-info-viewer", "ClusterRole", "system:public-info-viewer",
                 [_subject("Group", AUTHENTICATED), _subject("Group", UNAUTHENTICATED)]),
        _binding(crb, "system:kube-scheduler", "ClusterRole", "system:kube-scheduler", [_subject("User", scheduler)]),
        _binding(crb, "system:volume-scheduler", "ClusterRole", "system:volume-scheduler",
                 [_subject("User", scheduler)]),
        _binding(crb, "system:kube-controller-manager", "ClusterRole", "system:kube-controller-manager",
                 [_subject("User", kcm)]),
    ]
    ns = "kube-system"
    roles = [
        _role("Role", "extension-apiserver-authentication-reader",
              [_rule([""], ["configmaps"], READ, ["extension-apiserver-authentication"])], ns),
        _role("Role", "system::leader-locking-kube-controller-manager", [
            _rule([""], ["configmaps"], ["watch"]),
            _rule([""], ["configmaps"], ["get", "update"], ["kube-controller-manager"]),
        ], ns),
        _role("Role", "system::leader-locking-kube-scheduler", [
            _rule([""], ["configmaps"], ["watch"]),
            _rule([""], ["configmaps"], ["get", "update"], ["kube-scheduler"]),
        ], ns),
    ]
    rb = "RoleBinding"
    role_bindings = [
        _binding(rb, "system::extension-apiserver-authentication-reader", "Role",
                 "extension-apiserver-authentication-reader", [_subject("User", kcm), _subject("User", scheduler)], ns),
        _binding(rb, "system::leader-locking-kube-controller-manager", "Role",
                 "system::leader-locking-kube-controller-manager",
                 [_subject("User", kcm), _subject("ServiceAccount", "kube-controller-manager", ns)], ns),
        _binding(rb, "system::leader-locking-kube-scheduler", "Role", "system::leader-locking-kube-scheduler",
                 [_subject("User", scheduler), _subject("ServiceAccount", "kube-scheduler", ns)], ns),
    ]
    return (
        [("clusterroles", "", o) for o in cluster_roles]
        + [("clusterrolebindings", "", o) for o in cluster_bindings]
        + [("roles", ns, o) for o in roles]
        + [("rolebindings", ns, o) for o in role_bindings]
    )


def seed(store: Store) -> None:
    """Store the bootstrap policy, as kube-apiserver's ``rbac/bootstrap-roles`` post-start hook does."""
    for resource, namespace, obj in bootstrap_objects():
        if store.get(resource, namespace, obj["metadata"]["name"]) is None:
            store.create(resource, namespace, obj)


# --------------------------------------------------------------------------- rule matching


def _has(values: Iterable[str], wanted: str) -> bool:
    return any(v == "*" or v == wanted for v in values)


def _resource_matches(rule_resources: Iterable[str], combined: str, subresource: str) -> bool:
    for res in rule_resources:
        if res in ("*", combined):
            return True
        if subresource and res == f"*/{subresource}":
            return True
    return False


def _url_matches(rule_urls: Iterable[str], path: str) -> bool:
    for url in rule_urls:
        if url in ("*", path):
            return True
        if url.endswith("*") and path.startswith(url.rstrip("*")):
            return True
    return False


def rule_allows(attrs: Attributes, rule: Obj) -> bool:
    """Whether one PolicyRule covers the request (RuleAllows)."""
    if not _has(rule.get("verbs") or [], attrs.verb):
        return False
    if not attrs.resource_request:
        return _url_matches(rule.get("nonResourceURLs") or [], attrs.path)
    combined = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
    names = rule.get("resourceNames") or []
    return (
        _has(rule.get("apiGroups") or [], attrs.api_group)
        and _resource_matches(rule.get("resources") or [], combined, attrs.subresource)
        and (not names or attrs.name in names)
    )


def _subject_applies(subject: Obj, user: UserInfo, binding_namespace: str) -> bool:
    kind, name = subject.get("kind"), subject.get("name", "")
    if kind == "User":
        return user.name == name
    if kind == "Group":
        return name in user.groups
    if kind == "ServiceAccount":
        namespace = subject.get("namespace") or binding_namespace
        return bool(namespace) and user.name == f"{SA_PREFIX}{namespace}:{name}"
    return False


def _describe_subject(subject: Obj, binding_namespace: str) -> str:
    if subject.get("kind") == "ServiceAccount":
        namespace = subject.get("namespace") or binding_namespace
        return f'ServiceAccount "{subject.get("name", "")}/{namespace}"'
    return f'{subject.get("kind", "")} "{subject.get("name", "")}"'


def _role_rules(store: Store, role_ref: Obj, binding_namespace: str) -> list[Obj]:
    """The rules a roleRef points at (GetRoleReferenceRules); ApiError-free, raises LookupError."""
    kind, name = role_ref.get("kind"), role_ref.get("name", "")
    if kind == "Role":
        role = store.get("roles", binding_namespace, name)
        if role is None:
            raise LookupError(f'role.{RBAC_GROUP} "{name}" not found')
    elif kind == "ClusterRole":
        role = store.get("clusterroles", "", name)
        if role is None:
            raise LookupError(f'clusterrole.{RBAC_GROUP} "{name}" not found')
    else:
        raise LookupError(f'unsupported role reference kind: "{kind}"')
    return list(role.get("rules") or [])


def _applicable_bindings(store: Store, namespace: str) -> list[tuple[str, Obj]]:
    """ClusterRoleBindings, then the RoleBindings of ``namespace`` (the order VisitRulesFor uses)."""
    found = [("ClusterRoleBinding", b) for b in store.list("clusterrolebindings")]
    if namespace:
        found += [("RoleBinding", b) for b in store.list("rolebindings", namespace)]
    return found


@dataclass(frozen=True)
class Grant:
    """A binding that applies to a user, with its role's rules (or why they could not be read)."""

    kind: str
    binding: Obj
    namespace: str
    subject: Obj
    rules: tuple[Obj, ...] = ()
    error: str = ""

    def describe(self) -> str:
        """The source as the RBAC authorizer names it in an ``allowed by`` reason."""
        ref = self.binding.get("roleRef") or {}
        name = self.binding["metadata"]["name"] + (f"/{self.namespace}" if self.namespace else "")
        return (f'{self.kind} "{name}" of {ref.get("kind")} "{ref.get("name")}" to '
                f"{_describe_subject(self.subject, self.namespace)}")


def grants(store: Store, user: UserInfo, namespace: str) -> Iterator[Grant]:
    """Every binding that applies to ``user`` for a request in ``namespace``, in evaluation order."""
    for kind, binding in _applicable_bindings(store, namespace):
        binding_ns = binding["metadata"].get("namespace", "") if kind == "RoleBinding" else ""
        subject = next((s for s in binding.get("subjects") or [] if _subject_applies(s, user, binding_ns)), None)
        if subject is None:
            continue
        try:
            rules = _role_rules(store, binding.get("roleRef") or {}, binding_ns)
        except LookupError as exc:
            yield Grant(kind, binding, binding_ns, subject, error=str(exc))
            continue
        yield Grant(kind, binding, binding_ns, subject, tuple(rules))


def _errors_reason(errors: list[str]) -> str:
    if not errors:
        return ""
    return "RBAC: " + (errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]")


def evaluate(store: Store, attrs: Attributes) -> Decision:
    """The RBAC authorizer: allowed by the first binding whose role has a matching rule."""
    errors: list[str] = []
    for grant in grants(store, attrs.user, attrs.namespace):
        if grant.error:
            errors.append(grant.error)
        elif any(rule_allows(attrs, r) for r in grant.rules):
            return Decision(True, f"RBAC: allowed by {grant.describe()}")
    return Decision(False, _errors_reason(errors))


def allowed(store: Store, user: str, groups: Iterable[str], verb: str, group: str, resource: str,
            namespace: str = "", name: str = "") -> bool:
    """Whether RBAC lets ``user`` (with ``groups``) ``verb`` the resource; ``resource`` may be ``pods/binding``."""
    base, _, sub = resource.partition("/")
    attrs = Attributes(UserInfo(user, tuple(groups)), verb, True, group, base, sub, namespace, name)
    return evaluate(store, attrs).allowed


# --------------------------------------------------------------------------- requests


def _name_from_field_selector(selector: str) -> str:
    for term in selector.split(","):
        key, sep, value = term.partition("=")
        key = key.rstrip("=").strip()
        value = value.lstrip("=").strip()
        if sep and key == "metadata.name" and value and "/" not in value and "%" not in value:
            return value
    return ""


def request_attributes(user: UserInfo, method: str, path: str, query: dict[str, str]) -> Attributes:
    """Map an HTTP request to authorizer attributes, as the apiserver's RequestInfoFactory does."""
    parts = [p for p in path.split("/") if p]
    method_verb = "get" if method in ("GET", "HEAD") else method.lower()
    rest: list[str] = []
    group = ""
    if parts[:1] == ["api"] and len(parts) >= 3:
        rest = parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 4:
        group, rest = parts[1], parts[3:]
    if not rest:
        return Attributes(user, method_verb, resource_request=False, path=path or "/")
    namespace = ""
    if rest[0] == "namespaces" and len(rest) > 1:
        namespace = rest[1]
        if len(rest) > 2 and rest[2] not in ("status", "finalize"):
            rest = rest[2:]
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    sub = rest[2] if len(rest) > 2 else ""
    verb = {"GET": "get", "HEAD": "get", "POST": "create", "PUT": "update", "PATCH": "patch",
            "DELETE": "delete"}.get(method, method.lower())
    if not name and verb == "delete":
        verb = "deletecollection"
    if not name and verb == "get":
        verb = "watch" if query.get("watch") in ("1", "true", "True") else "list"
        name = _name_from_field_selector(query.get("fieldSelector", ""))
    return Attributes(user, verb, True, group, resource, sub, namespace, name, path)


#: The lab's ``--token-auth-file`` (in the lab dir): ``token,user,uid,"group1,group2"`` a line, as the
#: real static token authenticator reads it. A request with ``Authorization: Bearer TOKEN`` is that user
#: (an unknown token is 401); a request without credentials stays the lab's admin.
TOKEN_FILE = "token-auth.csv"


def component_token(user: str) -> str:
    """The bearer token the lab writes into a component's kubeconfig (scheduler.conf,
    controller-manager.conf): where kubeadm puts a client certificate whose CN is ``user``."""
    import hashlib
    return "lab-" + hashlib.sha256(user.encode()).hexdigest()[:24]


#: Every lab's component credentials (what the client certificates in kubeadm's kubeconfigs are).
COMPONENT_TOKENS = {component_token(user): KUBEADM_IDENTITIES[user] for user in COMPONENT_USERS.values()}


def read_tokens(path: Optional[Any]) -> dict[str, UserInfo]:
    """token -> user: the components' own (``COMPONENT_TOKENS``) and those of a static token file."""
    import csv
    tokens: dict[str, UserInfo] = dict(COMPONENT_TOKENS)
    try:
        with open(str(path), encoding="utf-8", newline="") as handle:
            rows = list(csv.reader(handle))
    except (OSError, TypeError):
        return tokens
    for row in rows:
        if len(row) >= 3 and row[0].strip() and not row[0].startswith("#"):
            groups = [g.strip() for g in row[3].split(",") if g.strip()] if len(row) > 3 else []
            tokens[row[0].strip()] = UserInfo(row[1].strip(), tuple(dict.fromkeys(groups + [AUTHENTICATED])))
    return tokens


def authenticated(headers: Any, tokens: dict[str, UserInfo]) -> UserInfo:
    """Who the request's credentials say: a bearer token of ``tokens`` (401 for another one), else
    the lab's admin (its kubeconfigs carry no credentials)."""
    auth = str(headers.get("Authorization") or "")
    if not auth.startswith("Bearer "):
        return ADMIN
    user = tokens.get(auth[len("Bearer "):].strip())
    if user is None:
        raise ApiError(401, "Unauthorized", "Unauthorized")
    return user


def identity(headers: Any, tokens: Optional[dict[str, UserInfo]] = None) -> UserInfo:
    """The request's user: who its credentials say (``authenticated``), or whoever
    ``Impersonate-User``/``Impersonate-Group`` name.

    Like the real impersonation filter, an impersonated user is also in ``system:authenticated``
    (service accounts also in ``system:serviceaccounts`` and ``system:serviceaccounts:NS``)."""
    name = headers.get("Impersonate-User")
    groups = list(headers.get_all("Impersonate-Group") or []) if hasattr(headers, "get_all") else []
    if not name:
        if groups:
            raise ApiError(500, "", f"requested impersonation of groups {groups} without impersonating a user")
        return authenticated(headers, tokens or {})
    if name.startswith(SA_PREFIX):
        namespace = name[len(SA_PREFIX):].split(":", 1)[0]
        groups += ["system:serviceaccounts", f"system:serviceaccounts:{namespace}"]
    if name == ANONYMOUS:
        groups.append(UNAUTHENTICATED)
    elif AUTHENTICATED not in groups:
        groups.append(AUTHENTICATED)
    return UserInfo(name, tuple(dict.fromkeys(groups)))


def _kubeconfig_user(path: str) -> tuple[str, str]:
    """(the user entry name of a kubeconfig's current context, its bearer token) - ("", "") when unreadable."""
    try:
        with open(path, encoding="utf-8") as handle:
            cfg = yaml.safe_load(handle) or {}
        context = next(c for c in cfg.get("contexts") or [] if c.get("name") == cfg.get("current-context"))
        name = str((context.get("context") or {}).get("user") or "")
        entry = next((u.get("user") or {} for u in cfg.get("users") or [] if u.get("name") == name), {})
        return name, str(entry.get("token") or "")
    except (OSError, yaml.YAMLError, StopIteration, AttributeError, TypeError):
        return "", ""


def component_identity(role: str, kubeconfig: Optional[str],
                       tokens: Optional[dict[str, UserInfo]] = None) -> Optional[UserInfo]:
    """Who a component authenticates as: the user its kubeconfig's bearer token stands for (the
    credential decides, never the entry's name), else the kubeadm identity its kubeconfig (a host
    path) holds (kubeadm names the entry after its certificate's CN), else its role's own
    (scheduler.conf, controller-manager.conf); None for other containers."""
    user, token = _kubeconfig_user(kubeconfig) if kubeconfig else ("", "")
    if token and token in (tokens or {}):
        return (tokens or {})[token]
    if user in KUBEADM_IDENTITIES:
        return KUBEADM_IDENTITIES[user]
    name = COMPONENT_USERS.get(role)
    return UserInfo(name, (AUTHENTICATED,)) if name else None


def forbidden(attrs: Attributes, reason: str = "") -> ApiError:
    """The 403 the apiserver answers for a request the authorizer did not allow."""
    who = f'User "{attrs.user.name}"'
    if not attrs.resource_request:
        text = f'{who} cannot {attrs.verb} path "{attrs.path}"'
    else:
        res = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
        scope = f'in the namespace "{attrs.namespace}"' if attrs.namespace else "at the cluster scope"
        text = f'{who} cannot {attrs.verb} resource "{res}" in API group "{attrs.api_group}" {scope}'
    if reason:
        text += f": {reason}"
    if not attrs.resource_request:
        return ApiError(403, "Forbidden", f"forbidden: {text}", {})
    qualified = f"{attrs.resource}.{attrs.api_group}" if attrs.api_group else attrs.resource
    named = f'{qualified} "{attrs.name}"' if attrs.name else qualified
    return ApiError(403, "Forbidden", f"{named} is forbidden: {text}",
                    {"name": attrs.name, "group": attrs.api_group, "kind": attrs.resource})


class Authorizer:
    """The apiserver's authorization: RBAC when ``enabled()`` (``--authorization-mode=Node,RBAC``),
    otherwise AlwaysAllow. Also remembers which denials the lab's own components were told about,
    so each is reported once rather than on every leader-election retry."""

    def __init__(self, store: Store, enabled: Callable[[], bool]) -> None:
        self.store = store
        self.enabled = enabled
        self._reported: dict[tuple[str, str], str] = {}
        self._identities: dict[str, UserInfo] = {}

    def identify(self, container_id: str, user: Optional[UserInfo]) -> None:
        """Remember whom a starting component container authenticates as (see component_identity)."""
        if user is not None:
            self._identities[container_id] = user

    def decide(self, attrs: Attributes) -> Decision:
        if not self.enabled():
            return Decision(True, "")
        return evaluate(self.store, attrs)

    def check(self, attrs: Attributes) -> None:
        """Raise the real 403 unless the request is allowed."""
        decision = self.decide(attrs)
        if not decision.allowed:
            raise forbidden(attrs, decision.reason)

    def component_denial(self, container_id: str, role: str, verb: str, namespace: str, name: str) -> Optional[str]:
        """The error text a component's ``verb`` on Lease ``namespace/name`` gets, or None if allowed.

        ``create`` carries no name, as in the real request (POST to the collection)."""
        user = self._identities.get(container_id) or component_identity(role, None)
        if user is None:
            return None
        attrs = Attributes(user, verb, True, "coordination.k8s.io", "leases", "", namespace,
                           "" if verb == "create" else name)
        decision = self.decide(attrs)
        return None if decision.allowed else forbidden(attrs, decision.reason).message

    def first_report(self, key: tuple[str, str], message: Optional[str]) -> bool:
        """Record the current denial for ``key`` (None: allowed again); True when it is new."""
        if message is None:
            self._reported.pop(key, None)
            return False
        if self._reported.get(key) == message:
            return False
        self._reported[key] = message
        return True


# --------------------------------------------------------------------------- leader election

#: What client-go's leaderelection.go logs when a step of tryAcquireOrRenew fails.
LEADER_ELECTION_ERRORS = {
    "get": "error retrieving resource lock {lock}: {err}",
    "create": "error initially creating leader election record: {err}",
    "update": "Failed to update lock: {err}",
}


def leader_election_error(verb: str, namespace: str, name: str, err: str) -> str:
    """The error line a component's leader election logs when ``verb`` on its Lease failed."""
    return LEADER_ELECTION_ERRORS[verb].format(lock=f"{namespace}/{name}", err=err)


# --------------------------------------------------------------------------- validation


def _go_strings(values: Iterable[str]) -> str:
    return "[]string{" + ", ".join(f'"{v}"' for v in values) + "}"


def _validate_rules(rules: Any, namespaced: bool) -> list[tuple[str, str]]:
    causes: list[tuple[str, str]] = []
    for i, rule in enumerate(rules if isinstance(rules, list) else []):
        path = f"rules[{i}]"
        if not isinstance(rule, dict):
            causes.append((path, "Invalid value: must be an object"))
            continue
        if not rule.get("verbs"):
            causes.append((f"{path}.verbs", "Required value: verbs must contain at least one value"))
        urls = rule.get("nonResourceURLs") or []
        if urls:
            if namespaced:
                causes.append((f"{path}.nonResourceURLs", f"Invalid value: {_go_strings(urls)}: "
                                                          "namespaced rules cannot apply to non-resource URLs"))
            if rule.get("apiGroups") or rule.get("resources"):
                causes.append((f"{path}.nonResourceURLs", f"Invalid value: {_go_strings(urls)}: "
                                                          "rules cannot apply to both regular resources and "
                                                          "non-resource URLs"))
            continue
        if not rule.get("apiGroups"):
            causes.append((f"{path}.apiGroups", "Required value: resource rules must supply at least one api group"))
        if not rule.get("resources"):
            causes.append((f"{path}.resources", "Required value: resource rules must supply at least one resource"))
    return causes


def _supported(path: str, value: str, choices: Iterable[str]) -> tuple[str, str]:
    listed = ", ".join(f'"{c}"' for c in choices)
    return path, f'Unsupported value: "{value}": supported values: {listed}'


def _validate_binding(obj: Obj, namespaced: bool) -> list[tuple[str, str]]:
    causes: list[tuple[str, str]] = []
    ref = obj.get("roleRef") or {}
    if ref.get("apiGroup") != RBAC_GROUP:
        causes.append(_supported("roleRef.apiGroup", str(ref.get("apiGroup", "")), [RBAC_GROUP]))
    kinds = ["Role", "ClusterRole"] if namespaced else ["ClusterRole"]
    if ref.get("kind") not in kinds:
        causes.append(_supported("roleRef.kind", str(ref.get("kind", "")), kinds))
    if not ref.get("name"):
        causes.append(("roleRef.name", "Required value"))
    for i, subject in enumerate(obj.get("subjects") or []):
        path, kind = f"subjects[{i}]", subject.get("kind")
        if not subject.get("name"):
            causes.append((f"{path}.name", "Required value"))
        if kind == "ServiceAccount":
            if subject.get("apiGroup"):
                causes.append(_supported(f"{path}.apiGroup", subject["apiGroup"], [""]))
            if not namespaced and not subject.get("namespace"):
                causes.append((f"{path}.namespace", "Required value"))
        elif kind in ("User", "Group"):
            if subject.get("apiGroup") != RBAC_GROUP:
                causes.append(_supported(f"{path}.apiGroup", str(subject.get("apiGroup", "")), [RBAC_GROUP]))
        else:
            causes.append(_supported(f"{path}.kind", str(kind or ""), ["ServiceAccount", "User", "Group"]))
    return causes


def default_object(resource: str, obj: Obj) -> None:
    """rbac/v1 defaulting: roleRef.apiGroup and User/Group subjects' apiGroup."""
    if resource not in ("rolebindings", "clusterrolebindings"):
        return
    ref = obj.get("roleRef")
    if isinstance(ref, dict) and not ref.get("apiGroup"):
        ref["apiGroup"] = RBAC_GROUP
    for subject in obj.get("subjects") or []:
        if isinstance(subject, dict) and subject.get("kind") in ("User", "Group") and not subject.get("apiGroup"):
            subject["apiGroup"] = RBAC_GROUP


def validate(resource: str, kind: str, obj: Obj, old: Optional[Obj] = None) -> None:
    """Raise the real 422 for an invalid Role/ClusterRole/RoleBinding/ClusterRoleBinding (create or update)."""
    if resource not in RBAC_RESOURCES:
        return
    default_object(resource, obj)
    namespaced = resource in ("roles", "rolebindings")
    if resource in ("roles", "clusterroles"):
        causes = _validate_rules(obj.get("rules"), namespaced)
    else:
        causes = _validate_binding(obj, namespaced)
        if old is not None and (old.get("roleRef") or {}) != (obj.get("roleRef") or {}):
            ref = obj.get("roleRef") or {}
            causes.append(("roleRef", f'Invalid value: rbac.RoleRef{{APIGroup:"{ref.get("apiGroup", "")}", '
                                      f'Kind:"{ref.get("kind", "")}", Name:"{ref.get("name", "")}"}}: '
                                      "cannot change roleRef"))
    if causes:
        raise invalid(kind, obj["metadata"].get("name", ""), causes, RBAC_GROUP)


# --------------------------------------------------------------------------- access reviews


def _review_invalid(kind: str, causes: list[tuple[str, str]]) -> ApiError:
    return invalid(kind, "", causes, AUTHZ_GROUP)


def _attributes_from_spec(spec: Obj, user: UserInfo) -> Attributes:
    res = spec.get("resourceAttributes")
    if isinstance(res, dict):
        return Attributes(user, str(res.get("verb") or ""), True, str(res.get("group") or ""),
                          str(res.get("resource") or ""), str(res.get("subresource") or ""),
                          str(res.get("namespace") or ""), str(res.get("name") or ""))
    non = spec.get("nonResourceAttributes") or {}
    return Attributes(user, str(non.get("verb") or ""), False, path=str(non.get("path") or ""))


def _check_spec(kind: str, spec: Obj, needs_user: bool) -> None:
    causes: list[tuple[str, str]] = []
    has_res, has_non = spec.get("resourceAttributes") is not None, spec.get("nonResourceAttributes") is not None
    if has_res and has_non:
        causes.append(("spec.nonResourceAttributes",
                       "Invalid value: cannot be specified in combination with resourceAttributes"))
    if not has_res and not has_non:
        causes.append(("spec.resourceAttributes",
                       'Invalid value: "null": exactly one of nonResourceAttributes or resourceAttributes '
                       "must be specified"))
    if needs_user and not spec.get("user") and not spec.get("groups"):
        causes.append(("spec.user", 'Invalid value: "": at least one of user or group must be specified'))
    if causes:
        raise _review_invalid(kind, causes)


def review(authorizer: Authorizer, kind: str, body: Obj, requester: UserInfo, namespace: str = "") -> Obj:
    """Answer a SubjectAccessReview, LocalSubjectAccessReview or SelfSubjectAccessReview.

    Subject reviews ask about ``spec.user``/``spec.groups`` exactly as given; a self review asks about
    the requester (for an impersonating client: the impersonated user)."""
    spec = body.get("spec")
    if not isinstance(spec, dict):
        spec = {}
    self_review = kind == "SelfSubjectAccessReview"
    _check_spec(kind, spec, needs_user=not self_review)
    if kind == "LocalSubjectAccessReview":
        res_ns = (spec.get("resourceAttributes") or {}).get("namespace", "")
        if spec.get("nonResourceAttributes") is not None or res_ns != namespace:
            raise ApiError(400, "BadRequest", f"spec.resourceAttributes.namespace must match namespace: {namespace}")
    user = requester if self_review else UserInfo(str(spec.get("user") or ""), tuple(spec.get("groups") or []))
    decision = authorizer.decide(_attributes_from_spec(spec, user))
    status: Obj = {"allowed": decision.allowed}
    if decision.reason:
        status["reason"] = decision.reason
    out: Obj = {
        "kind": kind,
        "apiVersion": f"{AUTHZ_GROUP}/v1",
        "metadata": copy.deepcopy(body.get("metadata") or {}),
        "spec": copy.deepcopy(spec),
        "status": status,
    }
    out["metadata"].setdefault("creationTimestamp", None)
    if namespace:
        out["metadata"]["namespace"] = namespace
    if self_review:
        out["spec"].pop("user", None)
        out["spec"].pop("groups", None)
    return out


ALL_RULES = ({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}, {"verbs": ["*"], "nonResourceURLs": ["*"]})


def rules_review(authorizer: Authorizer, body: Obj, requester: UserInfo) -> Obj:
    """Answer a SelfSubjectRulesReview (``kubectl auth can-i --list``): every rule that applies to
    the requester in ``spec.namespace``; AlwaysAllow answers with wildcards."""
    spec = body.get("spec") if isinstance(body.get("spec"), dict) else {}
    namespace = str((spec or {}).get("namespace") or "")
    if not namespace:
        raise ApiError(400, "BadRequest", "no namespace on request")
    errors: list[str] = []
    rules: list[Obj] = []
    if authorizer.enabled():
        for grant in grants(authorizer.store, requester, namespace):
            errors += [grant.error] if grant.error else []
            rules += [copy.deepcopy(r) for r in grant.rules]
    else:
        rules = [copy.deepcopy(r) for r in ALL_RULES]
    status: Obj = {
        "resourceRules": [{k: r[k] for k in ("verbs", "apiGroups", "resources", "resourceNames") if k in r}
                          for r in rules if not r.get("nonResourceURLs")],
        "nonResourceRules": [{"verbs": r.get("verbs") or [], "nonResourceURLs": r["nonResourceURLs"]}
                             for r in rules if r.get("nonResourceURLs")],
        "incomplete": bool(errors),
    }
    if errors:
        status["evaluationError"] = _errors_reason(errors)
    return {
        "kind": "SelfSubjectRulesReview",
        "apiVersion": f"{AUTHZ_GROUP}/v1",
        "metadata": {"creationTimestamp": None},
        "spec": {"namespace": namespace},
        "status": status,
    }


# --------------------------------------------------------------------------- protobuf bodies

#: ``kubectl create rolebinding|clusterrolebinding`` send their object as Kubernetes protobuf (a
#: ``k8s\\x00`` magic, then runtime.Unknown{typeMeta, raw}); field numbers from
#: staging/src/k8s.io/api/rbac/v1/generated.proto and apimachinery's meta/v1 and runtime protos.
ProtoSchema = dict[int, tuple[str, str, bool]]  # field number -> (JSON name, type, repeated)
PB_MAGIC = b"k8s\x00"
PB_TYPE_META: ProtoSchema = {1: ("apiVersion", "string", False), 2: ("kind", "string", False)}
PB_UNKNOWN: ProtoSchema = {1: ("typeMeta", "TypeMeta", False), 2: ("raw", "bytes", False)}
PB_OBJECT_META: ProtoSchema = {
    1: ("name", "string", False), 2: ("generateName", "string", False), 3: ("namespace", "string", False),
    5: ("uid", "string", False), 6: ("resourceVersion", "string", False), 7: ("generation", "int", False),
    11: ("labels", "map", True), 12: ("annotations", "map", True), 14: ("finalizers", "string", True),
}
PB_MAP_ENTRY: ProtoSchema = {1: ("key", "string", False), 2: ("value", "string", False)}
PB_BYTES_ENTRY: ProtoSchema = {1: ("key", "string", False), 2: ("value", "bytes", False)}
PB_SUBJECT: ProtoSchema = {
    1: ("kind", "string", False), 2: ("apiGroup", "string", False), 3: ("name", "string", False),
    4: ("namespace", "string", False),
}
PB_ROLE_REF: ProtoSchema = {
    1: ("apiGroup", "string", False), 2: ("kind", "string", False), 3: ("name", "string", False),
}
PB_POLICY_RULE: ProtoSchema = {
    1: ("verbs", "string", True), 2: ("apiGroups", "string", True), 3: ("resources", "string", True),
    4: ("resourceNames", "string", True), 5: ("nonResourceURLs", "string", True),
}
PB_BINDING: ProtoSchema = {
    1: ("metadata", "ObjectMeta", False), 2: ("subjects", "Subject", True), 3: ("roleRef", "RoleRef", False),
}
PB_ROLE: ProtoSchema = {1: ("metadata", "ObjectMeta", False), 2: ("rules", "PolicyRule", True)}
#: ``kubectl create configmap`` of a release that posts built-in kinds as protobuf (the kubectl a
#: v1.33+ lab gets): staging/src/k8s.io/api/core/v1/generated.proto's ConfigMap.
PB_CONFIG_MAP: ProtoSchema = {
    1: ("metadata", "ObjectMeta", False), 2: ("data", "map", True), 3: ("binaryData", "bytesmap", True),
    4: ("immutable", "bool", False),
}
PB_MESSAGES: dict[str, ProtoSchema] = {
    "TypeMeta": PB_TYPE_META, "ObjectMeta": PB_OBJECT_META, "MapEntry": PB_MAP_ENTRY, "Subject": PB_SUBJECT,
    "RoleRef": PB_ROLE_REF, "PolicyRule": PB_POLICY_RULE,
    "RoleBinding": PB_BINDING, "ClusterRoleBinding": PB_BINDING, "Role": PB_ROLE, "ClusterRole": PB_ROLE,
    "ConfigMap": PB_CONFIG_MAP,
}
#: The kinds a protobuf body may carry (the rest: 415, as a server that cannot decode them).
PB_KINDS = ("RoleBinding", "ClusterRoleBinding", "Role", "ClusterRole", "ConfigMap")


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _pb_fields(data: bytes) -> Iterable[tuple[int, Union[int, bytes]]]:
    """(field number, value) pairs of one message: ints for varints, bytes for length-delimited."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
            yield number, value
        elif wire == 2:
            size, pos = _varint(data, pos)
            if pos + size > len(data):
                raise ValueError("truncated field")
            yield number, data[pos:pos + size]
            pos += size
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
        else:
            raise ValueError(f"unsupported wire type {wire}")


def _pb_message(data: bytes, schema: ProtoSchema) -> Obj:
    out: Obj = {}
    for number, value in _pb_fields(data):
        if number not in schema:
            continue
        name, kind, repeated = schema[number]
        if kind in ("int", "bool"):
            decoded: Any = bool(value) if kind == "bool" else value
        elif not isinstance(value, bytes):
            raise ValueError(f"field {name} has the wrong wire type")
        elif kind == "string":
            decoded = value.decode()
        elif kind == "bytes":
            decoded = value
        elif kind in ("map", "bytesmap"):       # map<string, bytes>: base64 in the JSON form
            entry = _pb_message(value, PB_MAP_ENTRY if kind == "map" else PB_BYTES_ENTRY)
            item = entry.get("value", b"" if kind == "bytesmap" else "")
            out.setdefault(name, {})[entry.get("key", "")] = \
                base64.b64encode(item).decode() if isinstance(item, bytes) else item
            continue
        else:
            decoded = _pb_message(value, PB_MESSAGES[kind])
        if repeated:
            out.setdefault(name, []).append(decoded)
        elif decoded not in ("", 0):  # proto2 sends empty optionals; their JSON form omits them
            out[name] = decoded
    return out


def decode_protobuf(body: bytes) -> Obj:
    """An RBAC object or a ConfigMap sent as ``application/vnd.kubernetes.protobuf``, as its JSON form."""
    if not body.startswith(PB_MAGIC):
        raise ApiError(400, "BadRequest", "unable to decode request body: protobuf body without the k8s magic")
    try:
        envelope = _pb_message(body[len(PB_MAGIC):], PB_UNKNOWN)
        type_meta = envelope.get("typeMeta") or {}
        kind = str(type_meta.get("kind") or "")
        if kind not in PB_KINDS:
            raise ApiError(415, "UnsupportedMediaType",
                           f'the body of the request was in an unknown format - accepted media types include: '
                           f'application/json, application/yaml (the lab decodes protobuf for RBAC kinds and '
                           f'ConfigMaps only, not "{kind}")')
        obj = _pb_message(envelope.get("raw", b""), PB_MESSAGES[kind])
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, "BadRequest", f"unable to decode request body: {exc}") from None
    default = "v1" if kind == "ConfigMap" else f"{RBAC_GROUP}/v1"
    return {"apiVersion": type_meta.get("apiVersion", default), "kind": kind, **obj}


# --------------------------------------------------------------------------- tables


def role_row(obj: Obj) -> list[Union[str, int]]:
    """Role/ClusterRole columns: NAME, CREATED AT (pkg/printers/internalversion)."""
    return [obj["metadata"]["name"], obj["metadata"].get("creationTimestamp") or ""]


def _subjects(obj: Obj, kind: str) -> str:
    names = []
    for s in obj.get("subjects") or []:
        if s.get("kind") != kind:
            continue
        names.append(f'{s.get("namespace", "")}/{s.get("name", "")}' if kind == "ServiceAccount" else s.get("name", ""))
    return ", ".join(names)


def binding_row(obj: Obj, age: Callable[[Optional[str]], str]) -> list[Union[str, int]]:
    """RoleBinding/ClusterRoleBinding columns: NAME, ROLE, AGE, USERS, GROUPS, SERVICEACCOUNTS."""
    ref = obj.get("roleRef") or {}
    return [
        obj["metadata"]["name"],
        f'{ref.get("kind", "")}/{ref.get("name", "")}',
        age(obj["metadata"].get("creationTimestamp")),
        _subjects(obj, "User"),
        _subjects(obj, "Group"),
        _subjects(obj, "ServiceAccount"),
    ]

