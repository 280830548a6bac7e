"""RBAC in the lab: bootstrap policy, the evaluator, SubjectAccessReviews, impersonation, and
leader election of a second scheduler under RBAC.

The evaluator is checked directly against a store holding the bootstrap policy (fast, every rule
shape); the rest against running labs with the real kubectl (``kubectl auth can-i --as``,
``kubectl create role/rolebinding``, which sends protobuf) and raw HTTP for the review shapes.
"""

# ruff: noqa: F811  (pytest fixtures are imported by name and then used as parameters)
from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from cpctl_lab import rbac
from cpctl_lab.control import LabHandle, start_lab
from cpctl_lab.store import Store
from tests.labfixture import FAST, api, get_pod, kubectl, lab, lab_factory, wait_for  # noqa: F401

SCHED = "system:kube-scheduler"
SAR = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
SSAR = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
LEASE_RULE = {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "update"]}


@pytest.fixture
def rbac_lab(tmp_path: Path) -> Iterator[LabHandle]:
    """A single-master lab whose API server and components run under RBAC."""
    with start_lab(tmp_path / "lab", masters=1, rbac=True, **FAST) as handle:
        yield handle


@pytest.fixture
def policy() -> Store:
    """A store holding only the bootstrap policy, for the evaluator."""
    store = Store()
    rbac.seed(store)
    return store


def rb(name: str, ns: str, role_kind: str, role: str, *subjects: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": ns},
        "roleRef": {"apiGroup": rbac.RBAC_GROUP, "kind": role_kind, "name": role},
        "subjects": list(subjects),
    }


def test_evaluator_follows_the_bootstrap_policy(policy):
    def can(verb: str, resource: str, ns: str = "kube-system", name: str = "", user: str = SCHED) -> bool:
        return rbac.allowed(policy, user, ["system:authenticated"], verb, "coordination.k8s.io"
                            if resource == "leases" else "", resource, ns, name)

    assert can("create", "leases")  # create carries no name
    assert can("get", "leases", name="kube-scheduler") and can("update", "leases", name="kube-scheduler")
    assert not can("get", "leases", name="my-scheduler") and not can("update", "leases", name="my-scheduler")
    assert not can("list", "leases")  # resourceNames never match a request without a name
    assert can("create", "pods/binding", ns="default") and can("create", "bindings", ns="default")
    assert not can("create", "pods", ns="default")
    assert can("get", "leases", name="kube-controller-manager", user="system:kube-controller-manager")
    assert not can("get", "leases", name="kube-scheduler", user="system:kube-controller-manager")
    assert rbac.allowed(policy, "kubernetes-admin", rbac.ADMIN_GROUPS, "delete", "apps", "daemonsets", "x", "y")
    assert not rbac.allowed(policy, "kubernetes-admin", ["system:authenticated"], "delete", "", "pods", "x", "y")
    assert rbac.allowed(policy, "nobody", ["system:masters"], "escalate", rbac.RBAC_GROUP, "roles", "x", "y")


def test_component_identities_and_lease_denials(policy, tmp_path):
    authz = rbac.Authorizer(policy, lambda: True)
    kcm = "kube-controller-manager"
    assert authz.component_denial("c1", kcm, "get", "kube-system", kcm) is None
    assert authz.component_denial("c1", kcm, "create", "kube-system", "kcm-2") is None  # create has no name
    assert authz.component_denial("c1", kcm, "update", "kube-system", "kcm-2") == (
        'leases.coordination.k8s.io "kcm-2" is forbidden: User "system:kube-controller-manager" cannot update '
        'resource "leases" in API group "coordination.k8s.io" in the namespace "kube-system"')
    assert rbac.Authorizer(policy, lambda: False).component_denial("c1", kcm, "get", "kube-system", "x") is None
    admin_conf = tmp_path / "admin.conf"
    admin_conf.write_text(kubeconfig("http://127.0.0.1:1", "kubernetes-admin"))
    authz.identify("c2", rbac.component_identity("kube-scheduler", str(admin_conf)))
    assert authz.component_denial("c2", "kube-scheduler", "get", "kube-system", "anything") is None
    odd = tmp_path / "odd.conf"
    odd.write_text(kubeconfig("http://127.0.0.1:1", "someone-else"))  # not a kubeadm identity: the role's
    assert rbac.component_identity("kube-scheduler", str(odd)) == rbac.UserInfo(SCHED, ("system:authenticated",))
    assert rbac.component_identity("etcd", None) is None


def test_evaluator_rule_shapes_bindings_and_reasons(policy):
    policy.create("roles", "team", {"metadata": {"name": "status-writer"}, "rules": [
        {"apiGroups": ["*"], "resources": ["*/status"], "verbs": ["update"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["*"], "resourceNames": ["cfg"]},
    ]})
    policy.create("clusterroles", "", {"metadata": {"name": "lease-reader"}, "rules": [LEASE_RULE]})
    policy.create("clusterroles", "", {"metadata": {"name": "metrics"}, "rules": [
        {"nonResourceURLs": ["/metrics/*"], "verbs": ["get"]}]})
    policy.create("rolebindings", "team", rb("sw", "team", "Role", "status-writer",
                                             {"kind": "ServiceAccount", "name": "bot"}))
    policy.create("rolebindings", "team", rb("lr", "team", "ClusterRole", "lease-reader",
                                             {"kind": "Group", "name": "ops", "apiGroup": rbac.RBAC_GROUP}))
    policy.create("rolebindings", "team", rb("dangling", "team", "Role", "gone",
                                             {"kind": "User", "name": "carol", "apiGroup": rbac.RBAC_GROUP}))
    policy.create("clusterrolebindings", "", rb("m", "", "ClusterRole", "metrics",
                                                {"kind": "User", "name": "prom", "apiGroup": rbac.RBAC_GROUP}))
    bot = rbac.UserInfo("system:serviceaccount:team:bot", ("system:serviceaccounts",))
    attrs = rbac.Attributes(bot, "update", True, "apps", "deployments", "status", "team", "d")
    decision = rbac.evaluate(policy, attrs)
    assert decision.allowed  # */status in any group; the SA subject took the binding's namespace
    assert decision.reason == ('RBAC: allowed by RoleBinding "sw/team" of Role "status-writer" to '
                               'ServiceAccount "bot/team"')
    assert not rbac.evaluate(policy, rbac.Attributes(bot, "update", True, "apps", "deployments", "", "team")).allowed
    assert rbac.allowed(policy, bot.name, bot.groups, "delete", "", "configmaps", "team", "cfg")
    assert not rbac.allowed(policy, bot.name, bot.groups, "delete", "", "configmaps", "team", "other")
    assert not rbac.allowed(policy, bot.name, bot.groups, "update", "apps", "deployments/status", "other", "d")
    # a RoleBinding to a ClusterRole grants it in the binding's namespace only
    assert rbac.allowed(policy, "dave", ["ops"], "get", "coordination.k8s.io", "leases", "team", "x")
    assert not rbac.allowed(policy, "dave", ["ops"], "get", "coordination.k8s.io", "leases", "kube-system", "x")
    assert not rbac.allowed(policy, "dave", ["ops"], "get", "coordination.k8s.io", "leases", "", "x")
    missing = rbac.evaluate(policy, rbac.Attributes(rbac.UserInfo("carol"), "get", True, "", "pods", "", "team"))
    assert missing == rbac.Decision(False, 'RBAC: role.rbac.authorization.k8s.io "gone" not found')
    prom = rbac.UserInfo("prom")
    assert rbac.evaluate(policy, rbac.Attributes(prom, "get", False, path="/metrics/slis")).allowed
    assert not rbac.evaluate(policy, rbac.Attributes(prom, "get", False, path="/metrics")).allowed


def test_request_attributes_and_forbidden_messages():
    user = rbac.UserInfo(SCHED)
    attrs = rbac.request_attributes(user, "GET", "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/x", {})
    assert (attrs.verb, attrs.api_group, attrs.resource, attrs.namespace, attrs.name) == (
        "get", "coordination.k8s.io", "leases", "kube-system", "x")
    watch = rbac.request_attributes(user, "GET", "/api/v1/pods", {"watch": "true",
                                                                    "fieldSelector": "metadata.name=p1"})
    assert (watch.verb, watch.name, watch.namespace) == ("watch", "p1", "")
    assert rbac.request_attributes(user, "DELETE", "/api/v1/namespaces/d/pods", {}).verb == "deletecollection"
    ns = rbac.request_attributes(user, "GET", "/api/v1/namespaces/team", {})
    assert (ns.resource, ns.name, ns.namespace) == ("namespaces", "team", "team")
    binding = rbac.request_attributes(user, "POST", "/api/v1/namespaces/d/pods/p/binding", {})
    assert (binding.verb, binding.resource, binding.subresource, binding.name) == ("create", "pods", "binding", "p")
    assert not rbac.request_attributes(user, "GET", "/apis/apps/v1", {}).resource_request
    assert rbac.forbidden(attrs).message == (
        'leases.coordination.k8s.io "x" is forbidden: User "system:kube-scheduler" cannot get resource "leases" '
        'in API group "coordination.k8s.io" in the namespace "kube-system"')
    assert rbac.forbidden(watch).message == (
        'pods "p1" is forbidden: User "system:kube-scheduler" cannot watch resource "pods" in API group "" '
        "at the cluster scope")
    path = rbac.request_attributes(user, "GET", "/metrics", {})
    assert rbac.forbidden(path, "RBAC: x").message == 'forbidden: User "system:kube-scheduler" cannot get path ' \
                                                    '"/metrics": RBAC: x'


def test_rbac_objects_are_served_to_kubectl(lab):
    out = kubectl(lab, "get", "clusterroles").stdout
    assert out.splitlines()[0].split() == ["NAME", "CREATED", "AT"] and "system:kube-scheduler " in out
    role = json.loads(kubectl(lab, "get", "clusterrole", "system:kube-scheduler", "-o", "json").stdout)
    assert {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["kube-scheduler"],
            "verbs": ["get", "update"]} in role["rules"]
    wide = kubectl(lab, "get", "clusterrolebinding", "kubeadm:cluster-admins", "system:kube-scheduler",
                   "-o", "wide").stdout.splitlines()
    assert wide[0].split() == ["NAME", "ROLE", "AGE", "USERS", "GROUPS", "SERVICEACCOUNTS"]
    assert wide[1].split()[:2] == ["kubeadm:cluster-admins", "ClusterRole/cluster-admin"]
    assert wide[1].split()[-1] == "kubeadm:cluster-admins" and wide[2].split()[-1] == SCHED

    manifest = lab.dir / "role.yaml"
    manifest.write_text(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: lease-my-scheduler\n"
        "  namespace: kube-system\nrules:\n- apiGroups: [coordination.k8s.io]\n  resources: [leases]\n"
        "  resourceNames: [my-scheduler]\n  verbs: [get, update]\n"
    )
    assert "role.rbac.authorization.k8s.io/lease-my-scheduler created" in kubectl(lab, "apply", "-f",
                                                                                   str(manifest)).stdout
    kubectl(lab, "create", "rolebinding", "lease-my-scheduler", "-n", "kube-system",
            "--role=lease-my-scheduler", f"--user={SCHED}")  # kubectl sends this one as protobuf
    binding = json.loads(kubectl(lab, "get", "rolebinding", "lease-my-scheduler", "-n", "kube-system",
                                 "-o", "json").stdout)
    assert binding["roleRef"] == {"apiGroup": rbac.RBAC_GROUP, "kind": "Role", "name": "lease-my-scheduler"}
    assert binding["subjects"] == [{"apiGroup": rbac.RBAC_GROUP, "kind": "User", "name": SCHED}]
    assert "lease-my-scheduler" in kubectl(lab, "get", "role", "-n", "kube-system").stdout

    code, st = api(lab, "PATCH", "/apis/rbac.authorization.k8s.io/v1/namespaces/kube-system/rolebindings/"
                   "lease-my-scheduler", {"roleRef": {"name": "other"}}, ctype="application/merge-patch+json")
    assert code == 422 and 'RoleBinding.rbac.authorization.k8s.io "lease-my-scheduler" is invalid: roleRef' \
        in st["message"] and "cannot change roleRef" in st["message"]
    code, st = api(lab, "POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles",
                   {"metadata": {"name": "broken"}, "rules": [{"resources": ["pods"]}]})
    assert code == 422 and "rules[0].verbs: Required value: verbs must contain at least one value" in st["message"]
    assert "rules[0].apiGroups: Required value: resource rules must supply at least one api group" in st["message"]
    code, st = api(lab, "POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
                   rb("x", "", "Role", "r", {"kind": "User", "name": "u"}))
    assert code == 422 and 'roleRef.kind: Unsupported value: "Role": supported values: "ClusterRole"' \
        in st["message"]
    # without RBAC (the default) the authorizer is AlwaysAllow, like --authorization-mode=AlwaysAllow
    assert kubectl(lab, "auth", "can-i", "--as", "nobody", "delete", "nodes").stdout.strip() == "yes"
    everything = kubectl(lab, "auth", "can-i", "--list", "--as", "nobody").stdout.splitlines()
    assert [line.split() for line in everything[1:]] == [["*.*", "[]", "[]", "[*]"], ["[*]", "[]", "[*]"]]


def test_subject_access_reviews(rbac_lab):
    def sar(user: str, verb: str, name: str, **extra: Any) -> tuple[int, Any]:
        spec = {"user": user, "resourceAttributes": {"namespace": "kube-system", "verb": verb,
                                                     "group": "coordination.k8s.io", "resource": "leases",
                                                     "name": name}, **extra}
        return api(rbac_lab, "POST", SAR, {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                                           "spec": spec})

    code, review = sar(SCHED, "get", "kube-scheduler")
    assert code == 201 and review["kind"] == "SubjectAccessReview" and review["spec"]["user"] == SCHED
    assert review["status"] == {"allowed": True, "reason": 'RBAC: allowed by ClusterRoleBinding '
                                '"system:kube-scheduler" of ClusterRole "system:kube-scheduler" to User '
                                '"system:kube-scheduler"'}
    assert sar(SCHED, "get", "my-scheduler")[1]["status"] == {"allowed": False}
    assert sar("someone", "get", "x", groups=["system:masters"])[1]["status"]["allowed"] is True
    code, st = api(rbac_lab, "POST", SAR, {"spec": {"resourceAttributes": {"verb": "get", "resource": "pods"}}})
    assert code == 422 and 'spec.user: Invalid value: "": at least one of user or group must be specified' \
        in st["message"]
    code, st = api(rbac_lab, "POST", SSAR, {"spec": {"nonResourceAttributes": {"path": "/api", "verb": "get"}}})
    assert code == 201 and st["status"]["allowed"] is True  # the lab's admin asks about itself
    code, st = api(rbac_lab, "POST", "/apis/authorization.k8s.io/v1/namespaces/default/localsubjectaccessreviews",
                   {"spec": {"user": SCHED, "resourceAttributes": {"namespace": "other", "verb": "get",
                                                                   "resource": "pods"}}})
    assert code == 400 and st["message"] == "spec.resourceAttributes.namespace must match namespace: default"
    assert api(rbac_lab, "GET", SAR)[0] == 405


def test_kubectl_auth_can_i_and_impersonation(rbac_lab):
    def can_i(*args: str) -> str:
        return kubectl(rbac_lab, "auth", "can-i", "--as", SCHED, *args, check=False).stdout.strip()

    assert can_i("get", "leases/foo", "-n", "kube-system") == "no"
    assert can_i("get", "leases/kube-scheduler", "-n", "kube-system") == "yes"
    assert can_i("create", "leases", "-n", "kube-system") == "yes"
    assert can_i("create", "pods", "--subresource=binding", "-n", "default") == "yes"
    assert can_i("create", "pods/binding", "-n", "default") == "no"  # kubectl reads TYPE/NAME: the pod "binding"
    assert can_i("delete", "nodes") == "no"
    assert kubectl(rbac_lab, "auth", "can-i", "delete", "nodes").stdout.strip() == "yes"  # admin.conf's identity
    proc = kubectl(rbac_lab, "--as", SCHED, "get", "lease", "foo", "-n", "kube-system", check=False)
    assert proc.returncode != 0 and (
        'Error from server (Forbidden): leases.coordination.k8s.io "foo" is forbidden: User "system:kube-scheduler" '
        'cannot get resource "leases" in API group "coordination.k8s.io" in the namespace "kube-system"'
    ) in proc.stderr
    assert "kube-scheduler" in kubectl(rbac_lab, "--as", SCHED, "get", "lease", "kube-scheduler",
                                       "-n", "kube-system").stdout
    rules = [line.split() for line in can_i("--list", "-n", "kube-system").splitlines()]  # SelfSubjectRulesReview
    assert ["leases.coordination.k8s.io", "[]", "[kube-scheduler]", "[get", "update]"] in rules
    assert ["leases.coordination.k8s.io", "[]", "[]", "[create]"] in rules


def kubeconfig(server: str, user: str) -> str:
    """A kubeconfig like kubeadm's, whose credentials are named after their certificate's CN."""
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": f"{user}@lab",
        "clusters": [{"name": "lab", "cluster": {"server": server}}],
        "contexts": [{"name": f"{user}@lab", "context": {"cluster": "lab", "user": user}}],
        "users": [{"name": user, "user": {}}],
    })


def second_scheduler(handle: LabHandle, name: str, user: str = SCHED) -> None:
    """Drop a static pod for a scheduler serving ``name`` with its own Lease ``name``; its kubeconfig
    holds ``user``'s credentials (scheduler.conf's, by default)."""
    conf = handle.dir / name
    conf.mkdir()
    (conf / "config.yaml").write_text(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
        f"clientConnection:\n  kubeconfig: /etc/kubernetes/{name}/scheduler.conf\n"
        f"leaderElection:\n  leaderElect: true\n  resourceName: {name}\n  resourceNamespace: kube-system\n"
        f"profiles:\n- schedulerName: {name}\n"
    )
    (conf / "scheduler.conf").write_text(kubeconfig(handle.api_url, user))
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "kube-system", "labels": {"component": name}},
        "spec": {
            "hostNetwork": True,
            "containers": [{
                "name": name,
                "image": "registry.k8s.io/kube-scheduler:v1.30.4",
                "command": ["kube-scheduler", f"--config=/etc/kubernetes/{name}/config.yaml"],
                "volumeMounts": [{"name": "conf", "mountPath": f"/etc/kubernetes/{name}", "readOnly": True}],
            }],
            "volumes": [{"name": "conf", "hostPath": {"path": str(conf), "type": "Directory"}}],
        },
    }
    (handle.manifests_dir() / f"{name}.yaml").write_text(json.dumps(pod))
    mirror = f"{name}-{handle.node_name()}"
    wait_for(lambda: (get_pod(handle, "kube-system", mirror) or {}).get("status", {}).get("phase") == "Running",
             timeout=10, what=f"{mirror} Running")


def test_second_scheduler_takes_its_lease_only_once_granted(rbac_lab):
    second_scheduler(rbac_lab, "my-scheduler")
    kubectl(rbac_lab, "run", "mine", "--image=busybox:1.36", "--restart=Never",
            "--overrides", json.dumps({"apiVersion": "v1", "spec": {"schedulerName": "my-scheduler"}}))
    expected = ('error retrieving resource lock kube-system/my-scheduler: leases.coordination.k8s.io "my-scheduler" '
                'is forbidden: User "system:kube-scheduler" cannot get resource "leases" in API group '
                '"coordination.k8s.io" in the namespace "kube-system"')
    events = wait_for(lambda: [e for e in json.loads(kubectl(rbac_lab, "get", "events", "-n", "kube-system", "-o",
                                                            "json").stdout)["items"]
                               if e["reason"] == "LeaderElection"], what="LeaderElection warning")
    assert [(e["type"], e["involvedObject"]["name"], e["message"]) for e in events] == [
        ("Warning", f"my-scheduler-{rbac_lab.node_name()}", expected)]
    # it never took (or created) its Lease, so it never schedules, however many retry periods pass
    lease_path = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/my-scheduler"
    deadline = time.monotonic() + 8 * FAST["lease_renew"]
    while time.monotonic() < deadline:
        assert api(rbac_lab, "GET", lease_path)[0] == 404
        assert not get_pod(rbac_lab, "default", "mine")["spec"].get("nodeName")
        time.sleep(FAST["lease_renew"] / 2)
    kubectl(rbac_lab, "create", "role", "my-scheduler-lease", "-n", "kube-system", "--verb=get,update",
            "--resource=leases", "--resource-name=my-scheduler")
    kubectl(rbac_lab, "create", "rolebinding", "my-scheduler-lease", "-n", "kube-system",
            "--role=my-scheduler-lease", f"--user={SCHED}")
    pod = wait_for(lambda: (p := get_pod(rbac_lab, "default", "mine")) and p["spec"].get("nodeName") and p,
                   what="pod mine bound")
    assert pod["spec"]["nodeName"] == "lab-worker1"
    code, lease = api(rbac_lab, "GET", lease_path)
    assert code == 200 and lease["spec"]["holderIdentity"].startswith(f"{rbac_lab.node_name()}_")
    assert "lab-worker1" in kubectl(rbac_lab, "get", "events", "-n", "default").stdout
    assert f"leaderelection.go:332] {expected}" in (rbac_lab.dir / "lab.log").read_text()
    (ctr,) = subprocess.run([rbac_lab.crictl, "ps", "-q", "--name", "^my-scheduler$"], capture_output=True,
                            text=True, timeout=10, check=True).stdout.split()
    logs = subprocess.run([rbac_lab.crictl, "logs", ctr], capture_output=True, text=True, timeout=10, check=True)
    (line,) = [x for x in logs.stderr.splitlines() if "leaderelection.go" in x]
    assert line.startswith("E") and line.endswith(f"leaderelection.go:332] {expected}")


def test_scheduler_with_admin_credentials_needs_no_grant(rbac_lab):
    second_scheduler(rbac_lab, "admin-scheduler", user="kubernetes-admin")  # admin.conf: kubeadm:cluster-admins
    kubectl(rbac_lab, "run", "theirs", "--image=busybox:1.36", "--restart=Never",
            "--overrides", json.dumps({"apiVersion": "v1", "spec": {"schedulerName": "admin-scheduler"}}))
    wait_for(lambda: get_pod(rbac_lab, "default", "theirs")["spec"].get("nodeName"), what="pod theirs bound")
    lease = api(rbac_lab, "GET", "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/admin-scheduler")[1]
    assert lease["spec"]["holderIdentity"]
    assert "LeaderElection" not in kubectl(rbac_lab, "get", "events", "-n", "kube-system").stdout


def _pb(number: int, value: bytes) -> bytes:
    """One length-delimited protobuf field (the test's own encoder: varint key and length)."""
    def varint(n: int) -> bytes:
        out = b""
        while n > 0x7F:
            out, n = out + bytes([n & 0x7F | 0x80]), n >> 7
        return out + bytes([n])
    return varint(number << 3 | 2) + varint(len(value)) + value


def test_a_configmap_posted_as_protobuf_decodes_as_its_json_form() -> None:
    """kubectl of v1.33+ posts `create configmap` as protobuf (runtime.Unknown around core/v1 ConfigMap:
    metadata 1, data 2, binaryData 3, immutable 4 a varint); the lab answered 415 for it."""
    meta = _pb(1, b"after-snapshot") + _pb(3, b"default")
    body = (_pb(1, meta) + _pb(2, _pb(1, b"k") + _pb(2, b"v")) + _pb(2, _pb(1, b"empty"))
            + _pb(3, _pb(1, b"bin") + _pb(2, b"\x00\xff")) + bytes([4 << 3, 1]))
    unknown = _pb(1, _pb(1, b"v1") + _pb(2, b"ConfigMap")) + _pb(2, body)
    assert rbac.decode_protobuf(rbac.PB_MAGIC + unknown) == {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "after-snapshot", "namespace": "default"},
        "data": {"k": "v", "empty": ""}, "binaryData": {"bin": "AP8="}, "immutable": True}
    other = _pb(1, _pb(1, b"v1") + _pb(2, b"Secret")) + _pb(2, b"")
    with pytest.raises(rbac.ApiError) as refused:
        rbac.decode_protobuf(rbac.PB_MAGIC + other)
    assert refused.value.code == 415 and 'not "Secret"' in str(refused.value.status())


def test_kubectl_creates_a_configmap_on_a_v1_34_lab(lab_factory: Any) -> None:
    """docs/etcd-restore.md's `kubectl create configmap` on a v1.34 lab: a kubectl matched to that
    release posts it as protobuf (one of an older release as JSON): either way it is created."""
    handle = lab_factory(profile="kubeadm-1.34")
    made = kubectl(handle, "-n", "default", "create", "configmap", "after-snapshot", "--from-literal=k=v")
    assert "configmap/after-snapshot created" in made.stdout, made.stdout + made.stderr
    got = json.loads(kubectl(handle, "-n", "default", "get", "configmap", "after-snapshot", "-o", "json").stdout)
    assert got["data"] == {"k": "v"} and got["metadata"]["namespace"] == "default"
