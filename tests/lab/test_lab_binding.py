"""Binding in the lab behaves like the real pod registry (pkg/registry/core/pod/storage/storage.go).

Each refusal has the real code and wording: 400 when the URL and body names differ, 404 for a
missing pod, 409 Conflicts on ``pods/binding`` for a pod being deleted, already bound or still
gated, a storage precondition failure for a stale UID; the target node is never checked; success
is 201 with a ``Status`` body. Also the legacy ``bindings`` collection (``kubectl create -f``) and
``spec.schedulingGates`` (SchedulingGated condition, the scheduler waits, gates can only be removed).
"""

# ruff: noqa: F811  (pytest fixtures are imported by name and then used as parameters)
from __future__ import annotations

import json
from typing import Any

from tests.labfixture import api, get_pod, kubectl, lab, wait_for  # noqa: F401

PODS = "/api/v1/namespaces/default/pods"
SUCCESS = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}


def pending_pod(handle: Any, name: str, scheduler: str = "nobody", **spec: Any) -> dict[str, Any]:
    """Create a pod no running scheduler serves, so it stays unbound until the test binds it."""
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"schedulerName": scheduler, "containers": [{"name": "c", "image": "busybox:1.36"}], **spec},
    }
    code, pod = api(handle, "POST", PODS, body)
    assert code == 201, pod
    return pod


def binding(pod: str, node: str, **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": pod, **meta},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }


def test_binding_refusals_and_success_are_the_registry_s(lab):
    pod = pending_pod(lab, "p1")
    code, st = api(lab, "POST", f"{PODS}/p1/binding", binding("other", "lab-worker1"))
    assert (code, st["reason"]) == (400, "BadRequest")
    assert st["message"] == "name in URL does not match name in Binding object"
    code, st = api(lab, "POST", f"{PODS}/ghost/binding", binding("ghost", "lab-worker1"))
    assert (code, st["reason"], st["message"]) == (404, "NotFound", 'pods "ghost" not found')
    code, st = api(lab, "POST", f"{PODS}/p1/binding", {"metadata": {"name": "p1"}, "target": {"kind": "Node"}})
    assert code == 500 and st["message"] == "target.name: Required value"  # not a StatusError in the registry
    code, st = api(lab, "POST", f"{PODS}/p1/binding", binding("p1", "lab-worker1", uid="not-the-uid"))
    assert code == 409 and st["reason"] == "Conflict" and st["details"]["kind"] == "pods"
    assert st["message"].startswith('Operation cannot be fulfilled on pods "p1": StorageError: invalid object')
    assert f"UID in precondition: not-the-uid, UID in object meta: {pod['metadata']['uid']}" in st["message"]
    code, st = api(lab, "POST", f"{PODS}/p1/binding?dryRun=All", binding("p1", "lab-worker1"))
    assert code == 201 and not get_pod(lab, "default", "p1")["spec"].get("nodeName")

    # the node is not checked: a binding to a node that does not exist succeeds
    code, st = api(lab, "POST", f"{PODS}/p1/binding", binding("p1", "no-such-node", annotations={"why": "test"}))
    assert (code, st) == (201, SUCCESS)
    bound = get_pod(lab, "default", "p1")
    assert bound["spec"]["nodeName"] == "no-such-node" and bound["metadata"]["annotations"]["why"] == "test"
    assert {"type": "PodScheduled", "status": "True"}.items() <= bound["status"]["conditions"][-1].items()
    code, st = api(lab, "POST", f"{PODS}/p1/binding", binding("p1", "lab-worker1"))
    assert code == 409 and st["reason"] == "Conflict" and st["details"]["kind"] == "pods/binding"
    assert st["message"] == (
        'Operation cannot be fulfilled on pods/binding "p1": pod p1 is already assigned to node "no-such-node"'
    )

    # no kubelet runs on no-such-node, so a graceful delete leaves the pod Terminating
    assert api(lab, "DELETE", f"{PODS}/p1", {"gracePeriodSeconds": 30})[0] == 200
    assert get_pod(lab, "default", "p1")["metadata"]["deletionTimestamp"]
    code, st = api(lab, "POST", f"{PODS}/p1/binding", binding("p1", "lab-worker1"))
    assert code == 409 and st["message"] == (
        'Operation cannot be fulfilled on pods/binding "p1": pod p1 is being deleted, cannot be assigned to a host'
    )


def test_legacy_bindings_collection_with_kubectl_create(lab):
    pending_pod(lab, "web")
    path = lab.dir / "binding.yaml"
    path.write_text(
        "apiVersion: v1\nkind: Binding\nmetadata:\n  name: web\ntarget:\n  apiVersion: v1\n  kind: Node\n"
        "  name: lab-worker1\n"
    )
    kubectl(lab, "create", "-f", str(path))
    pod = wait_for(lambda: (p := get_pod(lab, "default", "web")) and p["status"].get("phase") == "Running" and p)
    assert pod["spec"]["nodeName"] == "lab-worker1"
    again = kubectl(lab, "create", "-f", str(path), check=False)
    assert again.returncode != 0 and 'pod web is already assigned to node "lab-worker1"' in again.stderr
    code, st = api(lab, "POST", "/api/v1/namespaces/default/bindings", binding("", "lab-worker1"))
    assert (code, st["message"]) == (400, "Name parameter required.")
    code, st = api(lab, "GET", "/api/v1/namespaces/default/bindings")
    assert code == 405 and st["reason"] == "MethodNotAllowed"
    resources = json.loads(kubectl(lab, "get", "--raw", "/api/v1").stdout)["resources"]
    assert {"name": "bindings", "namespaced": True, "kind": "Binding", "verbs": ["create"]}.items() <= next(
        r for r in resources if r["name"] == "bindings"
    ).items()


def test_scheduling_gates_hold_the_scheduler_until_removed(lab):
    gated = pending_pod(lab, "gated", scheduler="default-scheduler", schedulingGates=[{"name": "example.com/wait"}])
    (cond,) = [c for c in gated["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert (cond["status"], cond["reason"]) == ("False", "SchedulingGated")
    assert cond["message"] == "Scheduling is blocked due to non-empty scheduling gates"
    code, st = api(lab, "POST", f"{PODS}/gated/binding", binding("gated", "lab-worker1"))
    assert code == 409 and st["message"] == (
        'Operation cannot be fulfilled on pods/binding "gated": pod gated has non-empty .spec.schedulingGates'
    )
    # the scheduler skips it; the server-side table shows the gate in the STATUS column
    row = kubectl(lab, "get", "pod", "gated", "--no-headers").stdout.split()
    assert row[:3] == ["gated", "0/1", "SchedulingGated"]
    assert not get_pod(lab, "default", "gated")["spec"].get("nodeName")

    add = {"spec": {"schedulingGates": [{"name": "example.com/wait"}, {"name": "another"}]}}
    code, st = api(lab, "PATCH", f"{PODS}/gated", add, ctype="application/merge-patch+json")
    assert code == 422 and "only deletion is allowed, but found new scheduling gate 'another'" in st["message"]
    code, st = api(
        lab,
        "POST",
        PODS,
        {
            "metadata": {"name": "bad"},
            "spec": {
                "nodeName": "lab-worker1",
                "schedulingGates": [{"name": "x"}, {"name": "x"}],
                "containers": [{"name": "c", "image": "busybox:1.36"}],
            },
        },
    )
    assert code == 422 and 'spec.schedulingGates[1]: Duplicate value: "x"' in st["message"]
    assert "spec.nodeName: Forbidden: cannot be set until all schedulingGates have been cleared" in st["message"]

    kubectl(lab, "patch", "pod", "gated", "--type=json", "-p", '[{"op": "remove", "path": "/spec/schedulingGates"}]')
    pod = wait_for(lambda: (p := get_pod(lab, "default", "gated")) and p["status"].get("phase") == "Running" and p)
    assert pod["spec"]["nodeName"] == "lab-worker1"
    (cond,) = [c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert cond["status"] == "True"
