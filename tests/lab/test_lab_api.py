"""The lab's API server subset, driven by the real kubectl and by urllib."""

# ruff: noqa: F811  (pytest fixtures are imported by name and then used as parameters)
from __future__ import annotations

import json
import subprocess
import time
import urllib.request

from cpctl_lab.control import start_lab
from tests.labfixture import FAST, KUBECTL, api, get_pod, kubectl, lab, wait_for  # noqa: F401

AGG_ACCEPT = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"
DS = """apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent, namespace: kube-system}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      tolerations: [{operator: Exists}]
      containers: [{name: agent, image: "busybox:1.36"}]
"""


def test_get_nodes_and_pods(lab):
    out = kubectl(lab, "get", "nodes", "-o", "wide").stdout
    assert "lab-master1" in out and "control-plane" in out and "lab-worker1" in out and "INTERNAL-IP" in out
    out = kubectl(lab, "get", "pods", "-A", "-o", "wide").stdout.splitlines()
    assert out[0].split()[:6] == ["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert "NODE" in out[0] and "IP" in out[0]
    names = {line.split()[1] for line in out[1:]}
    assert names == {
        f"{c}-lab-master1" for c in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
    }
    assert all("1/1" in line and "Running" in line and "lab-master1" in line for line in out[1:])
    pods = json.loads(kubectl(lab, "get", "pods", "-n", "kube-system", "-o", "json").stdout)
    assert pods["kind"] == "List" and len(pods["items"]) == 4
    p = pods["items"][0]
    ann = p["metadata"]["annotations"]
    assert ann["kubernetes.io/config.mirror"] == ann["kubernetes.io/config.hash"]
    assert ann["kubernetes.io/config.source"] == "file" and "kubernetes.io/config.seen" in ann
    assert p["metadata"]["ownerReferences"][0]["kind"] == "Node"
    assert p["metadata"]["ownerReferences"][0]["controller"] is True
    assert {"operator": "Exists", "effect": "NoExecute"} in p["spec"]["tolerations"]
    assert p["status"]["containerStatuses"][0]["containerID"].startswith("containerd://")


def test_run_is_scheduled_to_worker_with_event(lab):
    kubectl(lab, "run", "web", "--image=nginx")
    pod = wait_for(lambda: (p := get_pod(lab, "default", "web")) and p["status"]["phase"] == "Running" and p)
    assert pod["spec"]["nodeName"] == "lab-worker1"
    assert pod["spec"]["schedulerName"] == "default-scheduler"
    evs = kubectl(lab, "get", "events", "-n", "default").stdout
    assert "Scheduled" in evs and "Successfully assigned default/web to lab-worker1" in evs


def test_binding_rest_and_conflicts(lab):
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "manual"},
        "spec": {"schedulerName": "nobody", "containers": [{"name": "c", "image": "busybox"}]},
    }
    code, pod = api(lab, "POST", "/api/v1/namespaces/default/pods", body)
    assert code == 201 and pod["status"]["phase"] == "Pending" and pod["metadata"]["uid"]
    code, st = api(lab, "POST", "/api/v1/namespaces/default/pods", body)
    assert code == 409 and st["kind"] == "Status" and st["reason"] == "AlreadyExists"
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "manual"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "lab-master1"},
    }
    code, st = api(lab, "POST", "/api/v1/namespaces/default/pods/manual/binding", binding)
    assert code == 201, st
    wait_for(lambda: get_pod(lab, "default", "manual")["status"]["phase"] == "Running", what="Running")
    assert get_pod(lab, "default", "manual")["spec"]["nodeName"] == "lab-master1"
    code, st = api(lab, "POST", "/api/v1/namespaces/default/pods/manual/binding", binding)
    assert code == 409 and st["reason"] == "Conflict" and "already assigned" in st["message"]
    proc = kubectl(lab, "patch", "pod", "manual", "-p", '{"spec":{"nodeName":"lab-worker1"}}', check=False)
    assert proc.returncode != 0 and "Forbidden" in proc.stderr
    code, st = api(
        lab,
        "PATCH",
        "/api/v1/namespaces/default/pods/manual",
        {"spec": {"nodeName": "x"}},
        ctype="application/merge-patch+json",
    )
    assert code == 422 and st["reason"] == "Invalid"
    code, st = api(lab, "GET", "/api/v1/namespaces/default/pods/nope")
    assert code == 404 and st["reason"] == "NotFound" and st["code"] == 404
    code, st = api(lab, "GET", "/api/v1/namespaces/default/pods/manual/status")
    assert code == 200 and st["metadata"]["name"] == "manual"
    code, st = api(
        lab, "DELETE", "/api/v1/namespaces/default/pods/manual", {"preconditions": {"uid": "not-the-uid"}}
    )
    assert code == 409 and "Precondition failed" in st["message"]
    code, st = api(lab, "DELETE", "/api/v1/namespaces/default/pods/manual", {"gracePeriodSeconds": 0})
    assert code == 200
    assert get_pod(lab, "default", "manual") is None


def test_watch_streams_changes(lab):
    kubectl(lab, "run", "watched", "--image=busybox", "--overrides", '{"spec":{"schedulerName":"nobody"}}')
    env = {"KUBECONFIG": lab.kubeconfig, "HOME": str(lab.dir), "PATH": "/usr/bin:/bin"}
    proc = subprocess.Popen(
        [KUBECTL, "--cache-dir", str(lab.dir / "kc"), "get", "pod", "watched", "-w", "--request-timeout=5s"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        first = proc.stdout.readline()
        assert first.split()[:1] == ["NAME"]
        assert "Pending" in proc.stdout.readline()
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": "watched"},
            "target": {"kind": "Node", "name": "lab-worker1"},
        }
        assert api(lab, "POST", "/api/v1/namespaces/default/pods/watched/binding", binding)[0] == 201
        seen = []
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not any("Running" in s for s in seen):
            seen.append(proc.stdout.readline())
        assert any("Running" in s for s in seen), seen
    finally:
        proc.kill()
        proc.wait()
    # raw watch protocol: newline-delimited events after a resourceVersion
    code, lst = api(lab, "GET", "/api/v1/namespaces/default/pods?fieldSelector=metadata.name%3Dwatched")
    rv = lst["metadata"]["resourceVersion"]
    api(lab, "DELETE", "/api/v1/namespaces/default/pods/watched", {"gracePeriodSeconds": 0})
    url = (
        f"{lab.api_url}/api/v1/namespaces/default/pods?watch=1&resourceVersion={rv}"
        "&fieldSelector=spec.nodeName%3Dlab-worker1&timeoutSeconds=1"
    )
    with urllib.request.urlopen(url, timeout=5) as resp:
        events = [json.loads(line) for line in resp.read().splitlines() if line.strip()]
    assert [e["type"] for e in events] == ["DELETED"]
    assert events[0]["object"]["metadata"]["name"] == "watched"


def test_selectors(lab):
    code, body = api(
        lab,
        "GET",
        "/api/v1/pods?labelSelector=component%20in%20(etcd,kube-scheduler)"
        "&fieldSelector=status.phase%3DRunning,spec.nodeName%3Dlab-master1",
    )
    assert code == 200 and sorted(p["metadata"]["labels"]["component"] for p in body["items"]) == [
        "etcd",
        "kube-scheduler",
    ]
    code, body = api(
        lab,
        "GET",
        "/api/v1/pods?fieldSelector=spec.schedulerName%3Ddefault-scheduler,metadata.namespace%3Dkube-system",
    )
    assert code == 200 and len(body["items"]) == 4
    code, body = api(lab, "GET", "/api/v1/pods?fieldSelector=spec.bogus%3Dx")
    assert code == 400 and body["kind"] == "Status"


def test_apply_daemonset_dry_run_and_generic_storage(lab):
    path = lab.dir / "ds.yaml"
    path.write_text(DS)
    out = kubectl(lab, "apply", "--dry-run=client", "-f", str(path)).stdout
    assert "daemonset.apps/agent created (dry run)" in out
    assert api(lab, "GET", "/apis/apps/v1/namespaces/kube-system/daemonsets/agent")[0] == 404
    kubectl(lab, "apply", "-f", str(path))
    assert "agent" in kubectl(lab, "get", "ds", "-n", "kube-system").stdout
    proc = kubectl(lab, "create", "-f", str(path), check=False)
    assert proc.returncode != 0 and "AlreadyExists" in proc.stderr
    kubectl(lab, "create", "configmap", "cm1", "--from-literal=a=b")
    assert json.loads(kubectl(lab, "get", "cm", "cm1", "-o", "json").stdout)["data"] == {"a": "b"}
    kubectl(lab, "delete", "-f", str(path))
    kubectl(lab, "create", "namespace", "team")
    assert "team" in kubectl(lab, "get", "ns").stdout


def test_discovery_both_ways(tmp_path):
    with start_lab(tmp_path / "legacy", aggregated_discovery=False, **FAST) as legacy:
        assert "lab-worker1" in kubectl(legacy, "get", "no").stdout
        req = urllib.request.Request(
            legacy.api_url + "/apis",
            headers={
                "Accept": AGG_ACCEPT
            },
        )
        with urllib.request.urlopen(req, timeout=5) as resp:
            assert json.loads(resp.read())["kind"] == "APIGroupList"
    with start_lab(tmp_path / "agg", **FAST) as agg:
        req = urllib.request.Request(
            agg.api_url + "/api",
            headers={
                "Accept": AGG_ACCEPT
            },
        )
        with urllib.request.urlopen(req, timeout=5) as resp:
            assert "as=APIGroupDiscoveryList" in resp.headers["Content-Type"]
            doc = json.loads(resp.read())
        pods = [r for r in doc["items"][0]["versions"][0]["resources"] if r["resource"] == "pods"][0]
        assert {s["subresource"] for s in pods["subresources"]} == {"binding", "log", "status"}
        assert "HOLDER" in kubectl(agg, "get", "leases", "-n", "kube-system").stdout
        assert "kube-scheduler" in kubectl(agg, "get", "leases", "-A").stdout
