"""The lab's simulated kube-apiserver: the subset of the Kubernetes REST API that kubectl and cpctl use.

Served over plain HTTP on 127.0.0.1 (the kubeconfig the lab writes has no credentials).
Discovery is offered both as aggregated discovery (apidiscovery.k8s.io/v2, what kubectl >= 1.30
asks for first) and legacy (APIVersions/APIGroupList/APIResourceList) by content negotiation.
Lists and gets are rendered as ``meta.k8s.io/v1 Table`` when the client asks ``as=Table`` (that is
how ``kubectl get`` prints columns), and as JSON otherwise. ``/openapi/v2`` and ``/openapi/v3`` are
served as empty documents: kubectl then skips client-side schema validation (see the lab docstring).

Every request is made by admin.conf's identity (``kubernetes-admin``, group ``kubeadm:cluster-admins``)
unless it impersonates someone (``Impersonate-User``/``Impersonate-Group``, ``kubectl --as``). With
the lab's ``rbac`` setting every request is authorized by RBAC (:mod:`cpctl_lab.rbac`: the bootstrap
policy is stored at start, Roles and bindings are served, SubjectAccessReviews answered); without
it the authorizer is AlwaysAllow. Bindings follow the pod registry (404/400/409/201, scheduling
gates). Fault rules (:mod:`cpctl_lab.faults`) may claim any request on any API listener first.
"""

from __future__ import annotations

import copy
import io
import json
import random
import re
import string
import time
import urllib.parse
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any, Optional

import yaml

from . import configfiles, faults, noderestriction, rbac
from .store import (
    ApiError,
    Obj,
    Store,
    conflict,
    invalid,
    json_patch,
    merge_patch,
    not_found,
    now_rfc3339,
    parse_time,
    precondition_failed,
    selector_pred,
)

K8S_VERSION = {
    "major": "1",
    "minor": "30",
    "gitVersion": "v1.30.4-lab",
    "gitCommit": "lab",
    "gitTreeState": "clean",
    "buildDate": "2024-08-14T00:00:00Z",
    "goVersion": "go1.22.5",
    "compiler": "gc",
    "platform": "linux/amd64",
}

VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
CREATE_ONLY = ("create",)
MIRROR_ANN = "kubernetes.io/config.mirror"
SCHEDULING_GATED = "SchedulingGated"
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


@dataclass(frozen=True)
class Res:
    """A served resource type (enough for discovery, routing and storage)."""

    plural: str
    kind: str
    group: str
    version: str
    namespaced: bool
    short: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    verbs: tuple[str, ...] = VERBS

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def singular(self) -> str:
        return self.kind.lower()


AUTHN_GROUP = "authentication.k8s.io"

RESOURCES = [
    Res("pods", "Pod", "", "v1", True, ("po",), ("binding", "log", "status"), ("all",)),
    Res("nodes", "Node", "", "v1", False, ("no",), ("status",)),
    Res("namespaces", "Namespace", "", "v1", False, ("ns",), ("status",)),
    Res("events", "Event", "", "v1", True, ("ev",)),
    Res("configmaps", "ConfigMap", "", "v1", True, ("cm",)),
    Res("leases", "Lease", "coordination.k8s.io", "v1", True),
    Res("daemonsets", "DaemonSet", "apps", "v1", True, ("ds",), ("status",), ("all",)),
    Res("bindings", "Binding", "", "v1", True, verbs=CREATE_ONLY),
    Res("roles", "Role", rbac.RBAC_GROUP, "v1", True),
    Res("rolebindings", "RoleBinding", rbac.RBAC_GROUP, "v1", True),
    Res("clusterroles", "ClusterRole", rbac.RBAC_GROUP, "v1", False),
    Res("clusterrolebindings", "ClusterRoleBinding", rbac.RBAC_GROUP, "v1", False),
    Res("subjectaccessreviews", "SubjectAccessReview", rbac.AUTHZ_GROUP, "v1", False, verbs=CREATE_ONLY),
    Res("selfsubjectaccessreviews", "SelfSubjectAccessReview", rbac.AUTHZ_GROUP, "v1", False, verbs=CREATE_ONLY),
    Res("localsubjectaccessreviews", "LocalSubjectAccessReview", rbac.AUTHZ_GROUP, "v1", True, verbs=CREATE_ONLY),
    Res("selfsubjectrulesreviews", "SelfSubjectRulesReview", rbac.AUTHZ_GROUP, "v1", False, verbs=CREATE_ONLY),
    Res("selfsubjectreviews", "SelfSubjectReview", AUTHN_GROUP, "v1", False, verbs=CREATE_ONLY),
]
BY_GV = {(r.group, r.version, r.plural): r for r in RESOURCES}
BY_PLURAL = {r.plural: r for r in RESOURCES}
GROUPS = ["coordination.k8s.io", "apps", rbac.RBAC_GROUP, rbac.AUTHZ_GROUP, AUTHN_GROUP]
REVIEW_KINDS = {r.plural: r.kind for r in RESOURCES if r.group == rbac.AUTHZ_GROUP}

POD_FIELDS = [
    "metadata.name",
    "metadata.namespace",
    "spec.nodeName",
    "status.phase",
    "spec.schedulerName",
    "spec.restartPolicy",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.podIP",
    "status.nominatedNodeName",
]
GENERIC_FIELDS = ["metadata.name", "metadata.namespace"]
EVENT_FIELDS = GENERIC_FIELDS + [
    "involvedObject.kind",
    "involvedObject.name",
    "involvedObject.namespace",
    "involvedObject.uid",
    "reason",
    "type",
    "source",
    "reportingComponent",
]

PRIORITY_CLASSES = {"system-node-critical": 2000001000, "system-cluster-critical": 2000000000}

POD_UPDATE_FORBIDDEN = (
    "pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
    "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
    "(allow it to be set to 1 if it was previously negative)"
)


# --------------------------------------------------------------------------- discovery


def subresource_kind_verbs(r: Res, sub: str) -> tuple[str, list[str]]:
    """The kind and verbs discovery lists for subresource ``sub`` of ``r``: ``pods/binding`` is a
    Binding one creates, ``pods/log`` is read only (its answer is text, the kind says Pod as on a
    real API server), ``status`` is read and written."""
    if sub == "binding":
        return "Binding", ["create"]
    if sub == "log":
        return r.kind, ["get"]
    return r.kind, ["get", "patch", "update"]


def _legacy_resource_list(group: str, version: str) -> Obj:
    items = []
    for r in RESOURCES:
        if r.group != group or r.version != version:
            continue
        entry: Obj = {
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": list(r.verbs),
            "storageVersionHash": "",
        }
        if r.short:
            entry["shortNames"] = list(r.short)
        if r.categories:
            entry["categories"] = list(r.categories)
        items.append(entry)
        for sub in r.subresources:
            kind, verbs = subresource_kind_verbs(r, sub)
            items.append(
                {
                    "name": f"{r.plural}/{sub}",
                    "singularName": "",
                    "namespaced": r.namespaced,
                    "kind": kind,
                    "verbs": verbs,
                }
            )
    gv = f"{group}/{version}" if group else version
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": items}


def _aggregated(core: bool, api_version: str) -> Obj:
    groups = [""] if core else GROUPS
    items = []
    for g in groups:
        resources = []
        for r in RESOURCES:
            if r.group != g:
                continue
            entry: Obj = {
                "resource": r.plural,
                "responseKind": {"group": g, "version": r.version, "kind": r.kind},
                "scope": "Namespaced" if r.namespaced else "Cluster",
                "singularResource": r.singular,
                "verbs": list(r.verbs),
            }
            if r.short:
                entry["shortNames"] = list(r.short)
            if r.categories:
                entry["categories"] = list(r.categories)
            subs = []
            for sub in r.subresources:
                kind, verbs = subresource_kind_verbs(r, sub)
                subs.append(
                    {
                        "subresource": sub,
                        "responseKind": {"group": g, "version": r.version, "kind": kind},
                        "verbs": verbs,
                    }
                )
            if subs:
                entry["subresources"] = subs
            resources.append(entry)
        item: Obj = {
            "metadata": {"name": g, "creationTimestamp": None},
            "versions": [{"version": "v1", "resources": resources, "freshness": "Current"}],
        }
        items.append(item)
    return {"kind": "APIGroupDiscoveryList", "apiVersion": api_version, "metadata": {}, "items": items}


def _group_obj(g: str) -> Obj:
    gv = {"groupVersion": f"{g}/v1", "version": "v1"}
    return {"kind": "APIGroup", "apiVersion": "v1", "name": g, "versions": [gv], "preferredVersion": gv}


def openapi_v3(gv_path: str) -> Optional[Obj]:
    """Just enough OpenAPI v3 for kubectl's field-validation probe: every PATCH operation declares
    the ``fieldValidation`` query parameter, so kubectl leaves validation to the server instead of
    downloading a full client-side schema (the lab accepts any fields)."""
    gvs = {"api/v1": ("", "v1")}
    gvs.update({f"apis/{g}/v1": (g, "v1") for g in GROUPS})
    if not gv_path:
        return {"paths": {p: {"serverRelativeURL": f"/openapi/v3/{p}?hash=CPCTLLAB"} for p in gvs}}
    if gv_path not in gvs:
        return None
    group, version = gvs[gv_path]
    params = [
        {"name": n, "in": "query", "schema": {"type": "string", "uniqueItems": True}}
        for n in ("dryRun", "fieldManager", "fieldValidation", "force")
    ]
    paths: Obj = {}
    for r in RESOURCES:  # create-only kinds too (Binding): kubectl's probe only looks at PATCH operations
        if r.group != group or r.version != version:
            continue
        base = (
            f"/{gv_path}/namespaces/{{namespace}}/{r.plural}/{{name}}"
            if r.namespaced
            else f"/{gv_path}/{r.plural}/{{name}}"
        )
        paths[base] = {
            "patch": {
                "operationId": f"patch{r.kind}",
                "parameters": params,
                "responses": {},
                "x-kubernetes-action": "patch",
                "x-kubernetes-group-version-kind": {"group": group, "version": version, "kind": r.kind},
            }
        }
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes (cpctl lab)", "version": "v1.30.4"},
        "paths": paths,
        "components": {"schemas": {}},
    }


# --------------------------------------------------------------------------- tables


def human_age(ts: Optional[str]) -> str:
    """kubectl's HumanDuration, close enough: 42s, 3m12s, 25m, 5h, 3d."""
    if not ts:
        return "<unknown>"
    secs = max(0, int(time.time() - parse_time(ts)))
    if secs < 120:
        return f"{secs}s"
    mins = secs // 60
    if mins < 10:
        return f"{mins}m{secs % 60}s" if secs % 60 else f"{mins}m"
    if mins < 180:
        return f"{mins}m"
    hours = mins // 60
    if hours < 48:
        return f"{hours}h"
    return f"{hours // 24}d"


def _col(name: str, typ: str = "string", priority: int = 0, fmt: str = "") -> Obj:
    return {"name": name, "type": typ, "format": fmt, "description": name, "priority": priority}


def pod_status_text(pod: Obj) -> str:
    st = pod.get("status") or {}
    reason = st.get("phase") or "Pending"
    if st.get("reason"):
        reason = st["reason"]
    if any(
        c.get("type") == "PodScheduled" and c.get("reason") == SCHEDULING_GATED for c in st.get("conditions") or []
    ):
        reason = SCHEDULING_GATED
    for cs in st.get("containerStatuses") or []:
        state = cs.get("state") or {}
        if "waiting" in state and state["waiting"].get("reason"):
            reason = state["waiting"]["reason"]
        elif "terminated" in state and state["terminated"].get("reason"):
            reason = state["terminated"]["reason"]
    if pod["metadata"].get("deletionTimestamp"):
        reason = "Terminating"
    return reason


def pod_row(pod: Obj) -> list[Any]:
    st = pod.get("status") or {}
    spec = pod.get("spec") or {}
    total = len(spec.get("containers") or [])
    ready = sum(1 for c in st.get("containerStatuses") or [] if c.get("ready"))
    restarts = sum(int(c.get("restartCount") or 0) for c in st.get("containerStatuses") or [])
    gates = spec.get("readinessGates")
    return [
        pod["metadata"]["name"],
        f"{ready}/{total}",
        pod_status_text(pod),
        restarts,
        human_age(pod["metadata"].get("creationTimestamp")),
        st.get("podIP") or "<none>",
        spec.get("nodeName") or "<none>",
        st.get("nominatedNodeName") or "<none>",
        "<none>" if not gates else f"0/{len(gates)}",
    ]


POD_COLUMNS = [
    _col("Name", fmt="name"),
    _col("Ready"),
    _col("Status"),
    _col("Restarts", "string"),
    _col("Age"),
    _col("IP", priority=1),
    _col("Node", priority=1),
    _col("Nominated Node", priority=1),
    _col("Readiness Gates", priority=1),
]


def node_row(node: Obj) -> list[Any]:
    labels = node["metadata"].get("labels") or {}
    roles = sorted(k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/"))
    conds = {c["type"]: c["status"] for c in (node.get("status") or {}).get("conditions") or []}
    status = "Ready" if conds.get("Ready") == "True" else "NotReady"
    if (node.get("spec") or {}).get("unschedulable"):
        status += ",SchedulingDisabled"
    info = (node.get("status") or {}).get("nodeInfo") or {}
    ip = next(
        (
            a["address"]
            for a in (node.get("status") or {}).get("addresses") or []
            if a.get("type") == "InternalIP"
        ),
        "<none>",
    )
    return [
        node["metadata"]["name"],
        status,
        ",".join(roles) or "<none>",
        human_age(node["metadata"].get("creationTimestamp")),
        info.get("kubeletVersion", ""),
        ip,
        "<none>",
        info.get("osImage", ""),
        info.get("kernelVersion", ""),
        info.get("containerRuntimeVersion", ""),
    ]


NODE_COLUMNS = [
    _col("Name", fmt="name"),
    _col("Status"),
    _col("Roles"),
    _col("Age"),
    _col("Version"),
    _col("Internal-IP", priority=1),
    _col("External-IP", priority=1),
    _col("OS-Image", priority=1),
    _col("Kernel-Version", priority=1),
    _col("Container-Runtime", priority=1),
]


def event_row(ev: Obj) -> list[Any]:
    io = ev.get("involvedObject") or {}
    last = ev.get("lastTimestamp") or ev.get("eventTime") or ev["metadata"].get("creationTimestamp")
    return [
        human_age(last),
        ev.get("type", ""),
        ev.get("reason", ""),
        f"{(io.get('kind') or '').lower()}/{io.get('name', '')}",
        ev.get("message", ""),
    ]


EVENT_COLUMNS = [_col("Last Seen"), _col("Type"), _col("Reason"), _col("Object"), _col("Message")]


def generic_row(obj: Obj) -> list[Any]:
    return [obj["metadata"]["name"], human_age(obj["metadata"].get("creationTimestamp"))]


def namespace_row(obj: Obj) -> list[Any]:
    return [
        obj["metadata"]["name"],
        (obj.get("status") or {}).get("phase", "Active"),
        human_age(obj["metadata"].get("creationTimestamp")),
    ]


def lease_row(obj: Obj) -> list[Any]:
    return [
        obj["metadata"]["name"],
        (obj.get("spec") or {}).get("holderIdentity") or "",
        human_age(obj["metadata"].get("creationTimestamp")),
    ]


ROLE_COLUMNS = [_col("Name", fmt="name"), _col("Created At", "date")]
BINDING_COLUMNS = [
    _col("Name", fmt="name"),
    _col("Role"),
    _col("Age"),
    _col("Users", priority=1),
    _col("Groups", priority=1),
    _col("ServiceAccounts", priority=1),
]


def binding_row(obj: Obj) -> list[Any]:
    return rbac.binding_row(obj, human_age)


TABLES: dict[str, tuple[list[Obj], Any]] = {
    "pods": (POD_COLUMNS, pod_row),
    "nodes": (NODE_COLUMNS, node_row),
    "events": (EVENT_COLUMNS, event_row),
    "namespaces": ([_col("Name", fmt="name"), _col("Status"), _col("Age")], namespace_row),
    "leases": ([_col("Name", fmt="name"), _col("Holder"), _col("Age")], lease_row),
    "roles": (ROLE_COLUMNS, rbac.role_row),
    "clusterroles": (ROLE_COLUMNS, rbac.role_row),
    "rolebindings": (BINDING_COLUMNS, binding_row),
    "clusterrolebindings": (BINDING_COLUMNS, binding_row),
}


def make_table(res: Res, objs: list[Obj], rv: str, include: str, headers: bool = True) -> Obj:
    cols, rowfn = TABLES.get(res.plural, ([_col("Name", fmt="name"), _col("Age")], generic_row))
    rows = []
    for o in objs:
        row: Obj = {"cells": rowfn(o)}
        if include == "Object":
            full = copy.deepcopy(o)
            full.setdefault("kind", res.kind)
            full.setdefault("apiVersion", res.api_version)
            row["object"] = full
        elif include != "None":
            row["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": copy.deepcopy(o["metadata"]),
            }
        rows.append(row)
    table: Obj = {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": rv},
        "rows": rows,
    }
    table["columnDefinitions"] = cols if headers else []
    return table


# --------------------------------------------------------------------------- pod semantics


def _rand_suffix(n: int = 5) -> str:
    return "".join(random.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(n))


def default_pod(pod: Obj) -> Obj:
    """Apply the API server's defaults and admission (DefaultTolerationSeconds, Priority)."""
    spec = pod.setdefault("spec", {})
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("securityContext", {})
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    spec.setdefault("priority", PRIORITY_CLASSES.get(spec.get("priorityClassName", ""), 0))
    mirror = noderestriction.MIRROR in ((pod.get("metadata") or {}).get("annotations") or {})
    if not spec.get("hostNetwork") and not mirror:     # ServiceAccount admission skips mirror pods
        spec.setdefault("serviceAccountName", "default")
        spec.setdefault("serviceAccount", spec["serviceAccountName"])
    for c in spec.get("containers") or []:
        image = str(c.get("image", ""))
        tag = image.rsplit("/", 1)[-1]
        latest = ":" not in tag or tag.endswith(":latest")
        c.setdefault("imagePullPolicy", "Always" if latest and "@" not in image else "IfNotPresent")
        c.setdefault("terminationMessagePath", "/dev/termination-log")
        c.setdefault("terminationMessagePolicy", "File")
        c.setdefault("resources", {})
    tols = spec.setdefault("tolerations", [])
    for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
        if not any(t.get("key") == key for t in tols):
            tols.append({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300})
    status = pod.setdefault("status", {})
    status.setdefault("phase", "Pending")
    status.setdefault(
        "qosClass",
        "Burstable"
        if any((c.get("resources") or {}).get("requests") for c in spec.get("containers") or [])
        else "BestEffort",
    )
    return pod


QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
QUALIFIED_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def apply_scheduling_gated_condition(pod: Obj) -> None:
    """On create, a pod with scheduling gates gets PodScheduled=False/SchedulingGated
    (pkg/registry/core/pod/strategy.go, applySchedulingGatedCondition)."""
    if not (pod.get("spec") or {}).get("schedulingGates"):
        return
    conds = pod.setdefault("status", {}).setdefault("conditions", [])
    if any(c.get("type") == "PodScheduled" for c in conds):
        return
    conds.append(
        {
            "type": "PodScheduled",
            "status": "False",
            "reason": SCHEDULING_GATED,
            "message": "Scheduling is blocked due to non-empty scheduling gates",
            "lastProbeTime": None,
            "lastTransitionTime": now_rfc3339(),
        }
    )


def _qualified_name_error(name: str) -> Optional[str]:
    """ValidateQualifiedName: ``[prefix/]name``, as for label keys and scheduling gate names."""
    prefix, _, part = name.rpartition("/")
    if not part:
        return "name part must be non-empty"
    if not QUALIFIED_NAME.match(part) or len(part) > 63:
        return (
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
            "with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
            "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
        )
    if "/" in name and not QUALIFIED_PREFIX.match(prefix):
        return "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters"
    return None


def validate_scheduling_gates(spec: Obj) -> list[tuple[str, str]]:
    """Gate names are qualified names without duplicates; a gated pod may not name its node yet."""
    causes: list[tuple[str, str]] = []
    gates = spec.get("schedulingGates") or []
    seen: set[str] = set()
    for i, gate in enumerate(gates):
        name = str((gate or {}).get("name") or "")
        err = _qualified_name_error(name)
        if err:
            causes.append((f"spec.schedulingGates[{i}].name", f'Invalid value: "{name}": {err}'))
        if name in seen:
            causes.append((f"spec.schedulingGates[{i}]", f'Duplicate value: "{name}"'))
        seen.add(name)
    if gates and spec.get("nodeName"):
        causes.append(("spec.nodeName", "Forbidden: cannot be set until all schedulingGates have been cleared"))
    return causes


def validate_pod(pod: Obj) -> list[tuple[str, str]]:
    causes = []
    name = pod["metadata"].get("name", "")
    if (
        not name
        or len(name) > 253
        or not all(ch in string.ascii_lowercase + string.digits + "-." for ch in name)
        or not name[0].isalnum()
    ):
        causes.append(
            (
                "metadata.name",
                f'Invalid value: "{name}": a lowercase RFC 1123 subdomain '
                "must consist of lower case alphanumeric characters, '-' or '.'",
            )
        )
    containers = (pod.get("spec") or {}).get("containers") or []
    if not containers:
        causes.append(("spec.containers", "Required value"))
    for i, c in enumerate(containers):
        if not c.get("name"):
            causes.append((f"spec.containers[{i}].name", "Required value"))
        if not c.get("image"):
            causes.append((f"spec.containers[{i}].image", "Required value"))
    return causes + validate_scheduling_gates(pod.get("spec") or {})


def _mask_mutable(spec: Obj) -> Obj:
    s = copy.deepcopy(spec)
    for key in ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds", "schedulingGates"):
        s.pop(key, None)
    for lst in ("containers", "initContainers"):
        for c in s.get(lst) or []:
            c.pop("image", None)
    return s


def validate_pod_update(old: Obj, new: Obj) -> None:
    name = old["metadata"]["name"]
    oa = (old["metadata"].get("annotations") or {}).get(MIRROR_ANN)
    na = (new["metadata"].get("annotations") or {}).get(MIRROR_ANN)
    if oa != na:
        msg = "may not remove or update mirror pod annotation" if oa else "may not add mirror pod annotation"
        raise invalid("Pod", name, [(f"metadata.annotations[{MIRROR_ANN}]", f'Invalid value: "{na}": {msg}')])
    if _mask_mutable(old.get("spec") or {}) != _mask_mutable(new.get("spec") or {}):
        raise invalid("Pod", name, [("spec", "Forbidden: " + POD_UPDATE_FORBIDDEN)])
    old_gates = {(g or {}).get("name") for g in (old.get("spec") or {}).get("schedulingGates") or []}
    added = [
        (i, (g or {}).get("name"))
        for i, g in enumerate((new.get("spec") or {}).get("schedulingGates") or [])
        if (g or {}).get("name") not in old_gates
    ]
    if added:
        raise invalid(
            "Pod",
            name,
            [
                (f"spec.schedulingGates[{i}].name", f"Forbidden: only deletion is allowed, but found new scheduling "
                 f"gate '{gate}'")
                for i, gate in added
            ],
        )


# --------------------------------------------------------------------------- request handling


class Api:
    """Resource operations with Kubernetes semantics, shared by HTTP handlers and the lab's kubelets."""

    def __init__(self, store: Store, lab: Any) -> None:
        self.store = store
        self.lab = lab
        self.authz = rbac.Authorizer(store, lambda: bool(getattr(lab, "rbac", False)))
        self.faults = faults.FaultInjector()
        rbac.seed(store)  # the apiserver's rbac/bootstrap-roles post-start hook

    def _check_ns(self, res: Res, ns: str) -> None:
        if res.namespaced and self.store.get("namespaces", "", ns) is None:
            raise not_found("namespaces", ns)

    def create(self, res: Res, ns: str, obj: Obj, user: Optional[rbac.UserInfo] = None) -> Obj:
        """Create ``obj``; ``user`` (the requester) is held to NodeRestriction when it is a node."""
        meta = obj.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + _rand_suffix()
        if not meta.get("name"):
            raise invalid(
                res.kind, "", [("metadata.name", "Required value: name or generateName is required")], res.group
            )
        if res.namespaced and meta.get("namespace") and meta["namespace"] != ns:
            raise ApiError(
                400,
                "BadRequest",
                "the namespace of the provided object does not match the namespace sent on the request",
            )
        self._check_ns(res, ns)
        obj["kind"], obj["apiVersion"] = res.kind, res.api_version
        for k in ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp"):
            meta.pop(k, None)
        if res.plural == "pods":
            default_pod(obj)
            causes = validate_pod(obj)
            if causes:
                raise invalid("Pod", meta["name"], causes)
            apply_scheduling_gated_condition(obj)
        rbac.validate(res.plural, res.kind, obj)
        noderestriction.admit_create(user, res.plural, obj, self.store.get)
        if res.plural == "namespaces":
            obj.setdefault("spec", {"finalizers": ["kubernetes"]})
            obj["status"] = {"phase": "Active"}
            meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta["name"]
        if res.plural == "daemonsets":
            meta.setdefault("generation", 1)
        return self.store.create(res.plural, ns if res.namespaced else "", obj)

    def update(self, res: Res, ns: str, name: str, obj: Obj, sub: str = "") -> Obj:
        ns = ns if res.namespaced else ""
        old = self.store.get(res.plural, ns, name)
        if old is None:
            raise not_found(res.plural, name, res.group)
        meta = obj.setdefault("metadata", {})
        if meta.get("name", name) != name:
            raise ApiError(400, "BadRequest", "the name of the object does not match the name on the URL")
        meta["name"] = name
        obj["kind"], obj["apiVersion"] = res.kind, res.api_version
        if sub == "status":
            new = copy.deepcopy(old)
            new["status"] = obj.get("status", {})
            new["metadata"]["resourceVersion"] = meta.get("resourceVersion", "")
            obj = new
        elif "status" in res.subresources:
            obj["status"] = old.get("status", {})
        if res.plural == "pods" and sub != "status":
            default_pod(obj)
            validate_pod_update(old, obj)
        rbac.validate(res.plural, res.kind, obj, old)
        if res.plural == "daemonsets" and obj.get("spec") != old.get("spec"):
            meta["generation"] = int(old["metadata"].get("generation", 1)) + 1
        return self.store.update(res.plural, ns, obj)

    def patch(self, res: Res, ns: str, name: str, ctype: str, body: bytes, sub: str = "") -> Obj:
        old = self.store.get(res.plural, ns if res.namespaced else "", name)
        if old is None:
            raise not_found(res.plural, name, res.group)
        if "json-patch" in ctype:
            new = json_patch(old, json.loads(body or b"[]"))
        else:
            patch = yaml.safe_load(body) if "yaml" in ctype else json.loads(body or b"{}")
            new = merge_patch(old, patch or {})
            if not (patch or {}).get("metadata", {}).get("resourceVersion"):
                new["metadata"]["resourceVersion"] = ""
        return self.update(res, ns, name, new, sub)

    def delete(self, res: Res, ns: str, name: str, opts: Obj, user: Optional[rbac.UserInfo] = None) -> Obj:
        ns = ns if res.namespaced else ""
        old = self.store.get(res.plural, ns, name)
        if old is None:
            raise not_found(res.plural, name, res.group)
        noderestriction.admit_delete(user, res.plural, name, old)
        check_preconditions(res, ns, old, opts.get("preconditions") or {})
        if res.plural == "namespaces" and name in SYSTEM_NAMESPACES:
            raise ApiError(
                403,
                "Forbidden",
                f'namespaces "{name}" is forbidden: this namespace may not be deleted',
                {"name": name, "kind": "namespaces"},
            )
        if res.plural == "pods":
            grace = opts.get("gracePeriodSeconds")
            if grace is None:
                grace = (old.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
            grace = int(grace)
            phase = (old.get("status") or {}).get("phase")
            if grace > 0 and (old.get("spec") or {}).get("nodeName") and phase not in ("Succeeded", "Failed"):
                meta = old["metadata"]
                if meta.get("deletionTimestamp") and int(meta.get("deletionGracePeriodSeconds", 0)) <= grace:
                    return old
                meta["deletionTimestamp"] = now_rfc3339(time.time() + grace)
                meta["deletionGracePeriodSeconds"] = grace
                return self.store.update("pods", ns, old, check_rv=False)
        return self.store.delete(res.plural, ns, name)

    def bind_request(self, ns: str, url_name: str, binding: Obj, dry_run: bool = False) -> Obj:
        """A Binding as a client posts it: ``pods/NAME/binding`` (``url_name``) or the legacy
        ``bindings`` collection (``url_name`` empty: the pod is the body's metadata.name)."""
        meta = binding.get("metadata") or {}
        if meta.get("namespace") and meta["namespace"] != ns:
            raise ApiError(
                400,
                "BadRequest",
                "the namespace of the provided object does not match the namespace sent on the request",
            )
        name = str(meta.get("name") or "")
        if url_name and name != url_name:
            raise ApiError(400, "BadRequest", "name in URL does not match name in Binding object")
        if not name:
            raise ApiError(400, "BadRequest", "Name parameter required.")
        return self.bind(ns, name, binding, dry_run)

    def bind(self, ns: str, name: str, binding: Obj, dry_run: bool = False) -> Obj:
        """Bind pod ``name`` as BindingREST does (pkg/registry/core/pod/storage/storage.go).

        The target node is not checked. Validation errors are not StatusErrors there, so they come
        back as 500; a failed precondition is a storage error (409 on ``pods``); the refusals of the
        update itself are 409 Conflicts on ``pods/binding``."""
        target = binding.get("target") or {}
        errors = []
        if target.get("kind") and target["kind"] != "Node":
            errors.append(f'target.kind: Unsupported value: "{target["kind"]}": supported values: "Node", "<empty>"')
        if not target.get("name"):
            errors.append("target.name: Required value")
        if errors:
            raise ApiError(500, "", errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]")
        pod = self.store.get("pods", ns, name)
        if pod is None:
            raise not_found("pods", name)
        check_preconditions(BY_PLURAL["pods"], ns, pod, binding.get("metadata") or {})
        spec = pod.setdefault("spec", {})
        if pod["metadata"].get("deletionTimestamp"):
            raise conflict("pods/binding", name, f"pod {name} is being deleted, cannot be assigned to a host")
        if spec.get("nodeName"):
            raise conflict("pods/binding", name, f'pod {name} is already assigned to node "{spec["nodeName"]}"')
        if spec.get("schedulingGates"):
            raise conflict("pods/binding", name, f"pod {name} has non-empty .spec.schedulingGates")
        spec["nodeName"] = target["name"]
        anns = (binding.get("metadata") or {}).get("annotations") or {}
        if anns:
            pod["metadata"].setdefault("annotations", {}).update(anns)
        status = pod.setdefault("status", {})
        conds = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
        conds.append(
            {
                "type": "PodScheduled",
                "status": "True",
                "lastProbeTime": None,
                "lastTransitionTime": now_rfc3339(),
            }
        )
        status["conditions"] = conds
        if not dry_run:
            self.store.update("pods", ns, pod, check_rv=False)
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    def review(self, res: Res, ns: str, body: Obj, requester: rbac.UserInfo) -> Obj:
        """Answer a (Self|Local)SubjectAccessReview or SelfSubjectRulesReview (nothing is stored)."""
        if res.kind == "SelfSubjectRulesReview":
            return rbac.rules_review(self.authz, body, requester)
        return rbac.review(self.authz, res.kind, body, requester, ns if res.namespaced else "")


def self_subject_review(user: rbac.UserInfo) -> Obj:
    """``kubectl auth whoami``: who the request authenticated as (authentication.k8s.io/v1, GA in 1.28)."""
    return {"kind": "SelfSubjectReview", "apiVersion": f"{AUTHN_GROUP}/v1", "metadata": {"creationTimestamp": None},
            "status": {"userInfo": {"username": user.name, "groups": list(user.groups)}}}


def _token_file(lab: Any) -> Optional[Any]:
    """The lab's static token file (``rbac.TOKEN_FILE`` in its dir), None for a context without a dir."""
    directory = getattr(lab, "dir", None)
    return directory / rbac.TOKEN_FILE if directory is not None else None


def check_preconditions(res: Res, ns: str, obj: Obj, pre: Obj) -> None:
    """UID and resourceVersion preconditions (DeleteOptions.preconditions, a Binding's metadata)."""
    meta = obj["metadata"]
    if pre.get("uid") and pre["uid"] != meta.get("uid"):
        detail = f"Precondition failed: UID in precondition: {pre['uid']}, UID in object meta: {meta.get('uid')}"
        raise precondition_failed(res.plural, ns, meta["name"], detail, res.group)
    if pre.get("resourceVersion") and pre["resourceVersion"] != meta.get("resourceVersion"):
        detail = (
            f"Precondition failed: ResourceVersion in precondition: {pre['resourceVersion']}, "
            f"ResourceVersion in object meta: {meta.get('resourceVersion')}"
        )
        raise precondition_failed(res.plural, ns, meta["name"], detail, res.group)


def method_not_allowed(method: str) -> ApiError:
    return ApiError(
        405,
        "MethodNotAllowed",
        f"the server does not allow this method on the requested resource ({method})",
    )


TRUE_WORDS = ("1", "t", "T", "TRUE", "true", "True")   # what Go's strconv.ParseBool reads as true


def pod_log(lab: Any, ns: str, name: str, q: dict[str, str]) -> bytes:
    """GET pods/NAME/log as the API server answers it (registry/core/pod LogLocation, then the
    kubelet's /containerLogs through the proxy): the pod must exist; ``container`` may be left out
    only when the pod has one container; a pod not bound to a node has no log yet (an empty
    answer); the kubelet's refusals come back as 400 BadRequest with its words, its 404s as a
    NotFound about ``pods/log``. ``tailLines`` and ``timestamps`` are honoured."""
    tail = _tail_lines(name, q.get("tailLines"))
    pod = lab.store.get("pods", ns, name)
    if pod is None:
        raise not_found("pods", name)
    container = _log_container(pod, name, q.get("container", ""))
    node = (pod.get("spec") or {}).get("nodeName") or ""
    if not node:
        return b""
    answer = lab.container_log(node, ns, name, container, q.get("previous", "") in TRUE_WORDS)
    if answer is None:
        raise not_found("nodes", node)
    code, text, lines = answer
    if code == 400:
        raise ApiError(400, "BadRequest", text)
    if code == 404:
        message = f"the server could not find the requested resource ( pods/log {name})"
        raise ApiError(404, "NotFound", message, {"name": name, "kind": "pods/log"})
    if code != 200:
        raise ApiError(500, "InternalError", f"Internal error occurred: {text}")
    if tail is not None:
        lines = lines[len(lines) - tail:] if tail else []
    stamps = q.get("timestamps", "") in TRUE_WORDS
    return "".join((_log_stamp(at) + " " if stamps else "") + text + "\n" for at, _stream, text in lines).encode()


def _tail_lines(name: str, raw: Optional[str]) -> Optional[int]:
    """``tailLines`` (None: every line); not a number is a 400, a negative number a 422 like the real one."""
    if raw is None or raw == "":
        return None
    try:
        tail = int(raw)
    except ValueError:
        raise ApiError(400, "BadRequest", f'strconv.ParseInt: parsing "{raw}": invalid syntax') from None
    if tail < 0:
        why = f"Invalid value: {tail}: must be greater than or equal to 0"
        raise invalid("PodLogOptions", name, [("tailLines", why)])
    return tail


def _log_container(pod: Obj, name: str, container: str) -> str:
    """The container whose log is asked for: given and valid, or the pod's only one (LogLocation)."""
    spec = pod.get("spec") or {}
    names = [str(c.get("name")) for c in spec.get("containers") or []]
    init_names = [str(c.get("name")) for c in spec.get("initContainers") or []]
    if container:
        if container not in names + init_names:
            raise ApiError(400, "BadRequest", f"container {container} is not valid for pod {name}")
        return container
    if len(names) == 1:
        return names[0]
    if not names:
        raise ApiError(400, "BadRequest", f"a container name must be specified for pod {name}")
    message = f"a container name must be specified for pod {name}, choose one of: [{' '.join(names)}]"
    if init_names:
        message += f" or one of the init containers: [{' '.join(init_names)}]"
    raise ApiError(400, "BadRequest", message)


def _log_stamp(at_ns: int) -> str:
    """The kubelet's timestamp of a log line (RFC 3339 with nanoseconds, fixed width, UTC)."""
    secs, frac = divmod(int(at_ns), 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs)) + f".{frac:09d}Z"


def parse_path(path: str) -> Optional[tuple[Res, str, str, str]]:
    """Map a REST path to (resource, namespace, name, subresource); None if it is not a resource path."""
    parts = [p for p in path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        group, version, rest = "", "v1", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    if not rest:
        return None
    ns = ""
    if rest[0] == "namespaces" and len(rest) >= 3:
        ns, rest = rest[1], rest[2:]
    res = BY_GV.get((group, version, rest[0]))
    if res is None:
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    name = rest[1] if len(rest) > 1 else ""
    sub = rest[2] if len(rest) > 2 else ""
    if sub and sub not in res.subresources:
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    return res, ns, name, sub


class ApiHandler(BaseHTTPRequestHandler):
    """HTTP front end; ``self.server.context`` is the Lab (or a view of it with its own ``etcd_ok``).

    Per request: fault rules first, then the requester's identity and authorization, then routing."""

    protocol_version = "HTTP/1.1"
    server_version = "cpctl-lab-apiserver"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    # -- plumbing
    @property
    def lab(self) -> Any:
        return self.server.context  # type: ignore[attr-defined]

    def _send(self, code: int, payload: Any, ctype: str = "application/json") -> None:
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        audit_id = _rand_suffix(12)
        self.send_header("Audit-Id", audit_id)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        user = getattr(self, "audit_user", None)
        if user is not None:
            self.lab.audit_request(configfiles.audit_event(
                self.command, self.path, user.name, list(user.groups), code, audit_id,
                self.client_address[0], self.headers.get("User-Agent", "")))

    def _error(self, err: ApiError) -> None:
        self._send(err.code, err.status())

    def _body(self) -> bytes:
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def _json_body(self) -> Obj:
        raw = self._body()
        if not raw:
            return {}
        ctype = self.headers.get("Content-Type", "")
        if "protobuf" in ctype:
            return rbac.decode_protobuf(raw)
        try:
            data = yaml.safe_load(raw) if "yaml" in ctype else json.loads(raw)
        except (ValueError, yaml.YAMLError) as exc:
            raise ApiError(400, "BadRequest", f"unable to decode request body: {exc}") from None
        if not isinstance(data, dict):
            raise ApiError(400, "BadRequest", "request body must be an object")
        return data

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_HEAD(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def _stopping(self) -> bool:
        return bool(getattr(self.server, "stopping", False))

    def _dispatch(self, method: str) -> None:
        """Serve one request, unless an injected fault rule claims it first."""
        url = urllib.parse.urlsplit(self.path)
        query = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query, keep_blank_values=True).items()}
        path = url.path.rstrip("/") or "/"
        injector: faults.FaultInjector = self.lab.api.faults
        rule = injector.match(method, url.path, url.query)
        if rule is None:
            self._serve(method, path, query)
            return
        self.lab.log(f"apiserver: fault rule {rule.ident} ({rule.action}) applied to {method} {self.path}")
        server = faults.FaultServer(
            self,
            injector,
            self._stopping,
            replay=lambda: self._capture(method, path, query),
            serve_normally=lambda: self._serve(method, path, query),
        )
        try:
            server.apply(rule)
        except OSError:
            self.close_connection = True

    def _capture(self, method: str, path: str, query: dict[str, str]) -> bytes:
        """The raw HTTP response the API would send for this request (a watch ends after its
        initial events), for faults that replay it slowly or truncated."""
        if query.get("watch") in ("1", "true", "True"):
            query = dict(query, timeoutSeconds="0")
        real, buffer = self.wfile, io.BytesIO()
        self.wfile = buffer
        try:
            self._serve(method, path, query)
        finally:
            self.wfile = real
        return buffer.getvalue()

    def _serve(self, method: str, path: str, query: dict[str, str]) -> None:
        try:
            self._route(method, path, query)
        except ApiError as err:
            self._error(err)
        except (BrokenPipeError, ConnectionResetError):
            pass
        except Exception as exc:  # noqa: BLE001 -- a lab bug must answer 500, not drop the connection
            self.lab.log(f"apiserver: internal error on {method} {self.path}: {exc!r}")
            self._error(ApiError(500, "InternalError", f"Internal error occurred: {exc}"))

    def _route(self, method: str, path: str, q: dict[str, str]) -> None:
        accept = self.headers.get("Accept", "")
        api: Api = self.lab.api
        user = rbac.identity(self.headers, rbac.read_tokens(_token_file(self.lab)))
        self.audit_user = user
        api.authz.check(rbac.request_attributes(user, method, path, q))
        if path in ("/healthz", "/livez", "/readyz", "/healthz/etcd", "/livez/etcd", "/readyz/etcd"):
            if self.lab.etcd_ok():
                self._send(200, b"ok", "text/plain; charset=utf-8")
            else:
                self._send(
                    500,
                    f"[-]etcd failed: etcdserver: request timed out\n{path[1:]} check failed".encode(),
                    "text/plain; charset=utf-8",
                )
            return
        if path == "/version":
            self._send(200, K8S_VERSION)
            return
        if path in ("/api", "/apis"):
            self._discovery(path, accept)
            return
        if path.startswith("/apis/") and path.count("/") == 2:
            g = path.split("/")[2]
            if g not in GROUPS:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            self._send(200, _group_obj(g))
            return
        if path == "/api/v1" or (path.startswith("/apis/") and path.count("/") == 3):
            parts = path.split("/")
            group, version = ("", "v1") if path == "/api/v1" else (parts[2], parts[3])
            if group and group not in GROUPS or version != "v1":
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            self._send(200, _legacy_resource_list(group, version))
            return
        if path == "/openapi/v3" or path.startswith("/openapi/v3/"):
            doc = openapi_v3(path[len("/openapi/v3") :].strip("/"))
            if doc is None:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            self._send(200, doc)
            return
        if path == "/openapi/v2":
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        route = parse_path(path)
        if route is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        res, ns, name, sub = route
        if res.plural == "selfsubjectreviews":
            if method != "POST" or name:
                raise method_not_allowed(method)
            self._json_body()                        # read (and check) the request body, as for any create
            self._send(201, self_subject_review(user))
            return
        if res.plural in REVIEW_KINDS:
            if method != "POST" or name:
                raise method_not_allowed(method)
            self._send(201, api.review(res, ns, self._json_body(), user))
            return
        if not self.lab.etcd_ok():
            time.sleep(0.05)
            raise ApiError(500, "", "etcdserver: request timed out")
        if sub == "log":
            if method != "GET":
                raise method_not_allowed(method)
            self._send(200, pod_log(self.lab, ns, name, q), "text/plain")
            return
        if res.plural == "bindings":
            if method != "POST" or name:
                raise method_not_allowed(method)
            out = api.bind_request(ns, "", self._json_body(), q.get("dryRun") == "All")
            self.lab.kick()
            self._send(201, out)
            return
        if method == "GET" and not name:
            if q.get("watch") in ("1", "true", "True"):
                self._watch(res, ns, q, accept)
            else:
                self._list(res, ns, q, accept)
            return
        if method == "GET":
            obj = self.lab.store.get(res.plural, ns if res.namespaced else "", name)
            if obj is None:
                raise not_found(res.plural, name, res.group)
            self._send_obj(res, obj, accept, q)
            return
        if method == "POST" and sub == "binding":
            out = api.bind_request(ns, name, self._json_body(), q.get("dryRun") == "All")
            self.lab.kick()
            self._send(201, out)
            return
        if method == "POST" and not name:
            body = self._json_body()
            if q.get("dryRun") == "All":
                self._send(201, body)
                return
            out = api.create(res, ns, body, user)
            self.lab.kick()
            self._send(201, out)
            return
        if method == "PUT" and name:
            out = api.update(res, ns, name, self._json_body(), sub)
            self.lab.kick()
            self._send(200, out)
            return
        if method == "PATCH" and name:
            ctype = self.headers.get("Content-Type", "")
            if (
                "apply-patch" in ctype
                and self.lab.store.get(res.plural, ns if res.namespaced else "", name) is None
            ):
                out = api.create(res, ns, yaml.safe_load(self._body()) or {}, user)
                self.lab.kick()
                self._send(201, out)
                return
            out = api.patch(res, ns, name, ctype, self._body(), sub)
            self.lab.kick()
            self._send(200, out)
            return
        if method == "DELETE" and name:
            opts = self._json_body()
            if "gracePeriodSeconds" in q:
                opts["gracePeriodSeconds"] = int(q["gracePeriodSeconds"])
            out = api.delete(res, ns, name, opts, user)
            self.lab.kick()
            self._send(200, out)
            return
        raise method_not_allowed(method)

    def _discovery(self, path: str, accept: str) -> None:
        core = path == "/api"
        if "as=APIGroupDiscoveryList" in accept and self.lab.aggregated_discovery:
            for ver in ("v2", "v2beta1"):
                if f"v={ver};as=APIGroupDiscoveryList" in accept.replace(" ", ""):
                    self._send(
                        200,
                        _aggregated(core, f"apidiscovery.k8s.io/{ver}"),
                        f"application/json;g=apidiscovery.k8s.io;v={ver};as=APIGroupDiscoveryList",
                    )
                    return
        if core:
            self._send(
                200,
                {
                    "kind": "APIVersions",
                    "versions": ["v1"],
                    "serverAddressByClientCIDRs": [
                        {"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1:6443"}
                    ],
                },
            )
        else:
            self._send(
                200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": [_group_obj(g) for g in GROUPS]}
            )

    def _wants_table(self, accept: str) -> bool:
        return "as=Table" in accept

    def _send_obj(self, res: Res, obj: Obj, accept: str, q: dict[str, str]) -> None:
        obj.setdefault("kind", res.kind)
        obj.setdefault("apiVersion", res.api_version)
        if self._wants_table(accept):
            self._send(
                200,
                make_table(
                    res, [obj], obj["metadata"].get("resourceVersion", ""), q.get("includeObject", "Metadata")
                ),
                "application/json;as=Table;v=v1;g=meta.k8s.io",
            )
        else:
            self._send(200, obj)

    def _pred(self, res: Res, q: dict[str, str]) -> Any:
        allowed = (
            POD_FIELDS if res.plural == "pods" else EVENT_FIELDS if res.plural == "events" else GENERIC_FIELDS
        )
        return selector_pred(q.get("labelSelector", ""), q.get("fieldSelector", ""), allowed)

    def _list(self, res: Res, ns: str, q: dict[str, str], accept: str) -> None:
        pred = self._pred(res, q)
        with self.lab.store.lock:
            objs = self.lab.store.list(res.plural, ns if (res.namespaced and ns) else None, pred)
            rv = str(self.lab.store.rv)
        if self._wants_table(accept):
            self._send(
                200,
                make_table(res, objs, rv, q.get("includeObject", "Metadata")),
                "application/json;as=Table;v=v1;g=meta.k8s.io",
            )
            return
        for o in objs:
            o.setdefault("kind", res.kind)
            o.setdefault("apiVersion", res.api_version)
        self._send(
            200,
            {
                "kind": f"{res.kind}List",
                "apiVersion": res.api_version,
                "metadata": {"resourceVersion": rv},
                "items": objs,
            },
        )

    def _watch(self, res: Res, ns: str, q: dict[str, str], accept: str) -> None:
        """Stream watch events as newline-delimited JSON over chunked transfer encoding."""
        pred = self._pred(res, q)
        want_ns = ns if (res.namespaced and ns) else None
        table = self._wants_table(accept)
        include = q.get("includeObject", "Metadata")
        timeout = float(q.get("timeoutSeconds") or 1800)
        deadline = time.monotonic() + timeout
        store: Store = self.lab.store
        start = q.get("resourceVersion", "")
        initial: list[tuple[str, Obj]] = []
        with store.lock:
            if start in ("", "0"):
                since = store.rv
                initial = [("ADDED", o) for o in store.list(res.plural, want_ns, pred)]
            else:
                try:
                    since = int(start)
                except ValueError:
                    raise ApiError(400, "BadRequest", f"invalid resourceVersion {start!r}") from None
        self.send_response(200)
        self.send_header(
            "Content-Type", "application/json;as=Table;v=v1;g=meta.k8s.io" if table else "application/json"
        )
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        first = [True]

        def emit(etype: str, obj: Obj) -> None:
            obj.setdefault("kind", res.kind)
            obj.setdefault("apiVersion", res.api_version)
            payload = (
                make_table(res, [obj], obj["metadata"].get("resourceVersion", ""), include, headers=first[0])
                if table
                else obj
            )
            first[0] = False
            data = json.dumps({"type": etype, "object": payload}).encode() + b"\n"
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        try:
            for etype, obj in initial:
                emit(etype, obj)
            while not self.server.stopping:  # type: ignore[attr-defined]
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                events, too_old = store.events_since(since, min(left, 5.0))
                if too_old:
                    gone = ApiError(
                        410, "Expired", f"too old resource version: {since} ({store.oldest_rv()})"
                    ).status()
                    data = json.dumps({"type": "ERROR", "object": gone}).encode() + b"\n"
                    self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                    break
                for ev in events:
                    since = ev.rv
                    if ev.resource != res.plural:
                        continue
                    if want_ns is not None and ev.obj["metadata"].get("namespace") != want_ns:
                        continue
                    now_match = pred(ev.obj)
                    was_match = ev.prev is not None and pred(ev.prev)
                    if ev.type == "MODIFIED":
                        if now_match and was_match:
                            emit("MODIFIED", ev.obj)
                        elif now_match:
                            emit("ADDED", ev.obj)
                        elif was_match:
                            emit("DELETED", ev.obj)
                    elif now_match:
                        emit(ev.type, ev.obj)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (OSError, ValueError):
            pass
        self.close_connection = True
