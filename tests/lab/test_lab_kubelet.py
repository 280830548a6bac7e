"""The lab's kubelet: static pod file source, mirror pods, and API availability following the static pods."""

# ruff: noqa: F811  (pytest fixtures are imported by name and then used as parameters)
from __future__ import annotations

import json
import shutil
import socket
import urllib.request

import pytest

from tests.labfixture import api, get_pod, is_ready, kubectl, lab, mirror, wait_for  # noqa: F401


def _refused(handle) -> bool:
    port = int(handle.api_url.rsplit(":", 1)[1])
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
    except ConnectionRefusedError:
        return True
    return False


def _log(handle) -> str:
    return (handle.dir / "lab.log").read_text()


def test_parked_scheduler_removes_mirror_and_leaves_pods_pending(lab, tmp_path):
    mdir = lab.manifests_dir()
    parked = tmp_path / "parked"
    parked.mkdir()
    (mdir / "kube-scheduler.yaml").rename(parked / "kube-scheduler.yaml")
    wait_for(lambda: mirror(lab, "kube-scheduler") is None, what="scheduler mirror gone")
    kubectl(lab, "run", "waiting", "--image=nginx")
    pod = get_pod(lab, "default", "waiting")
    assert pod["status"]["phase"] == "Pending" and not pod["spec"].get("nodeName")
    (parked / "kube-scheduler.yaml").rename(mdir / "kube-scheduler.yaml")
    wait_for(
        lambda: get_pod(lab, "default", "waiting")["spec"].get("nodeName") == "lab-worker1",
        what="scheduled after restore",
    )
    wait_for(lambda: is_ready(mirror(lab, "kube-scheduler")), what="scheduler mirror back")


def test_deleted_mirror_is_recreated_with_same_hash(lab):
    old = mirror(lab, "kube-controller-manager")
    kubectl(lab, "delete", "pod", "-n", "kube-system", old["metadata"]["name"])
    new = wait_for(
        lambda: (
            (m := mirror(lab, "kube-controller-manager"))
            and m["metadata"]["uid"] != old["metadata"]["uid"]
            and m
        ),
        what="mirror recreated",
    )
    h = "kubernetes.io/config.hash"
    assert new["metadata"]["annotations"][h] == old["metadata"]["annotations"][h]
    # the static pod itself kept running: the new mirror reports the same container
    wait_for(lambda: mirror(lab, "kube-controller-manager")["status"].get("containerStatuses"))
    new = mirror(lab, "kube-controller-manager")
    cid = old["status"]["containerStatuses"][0]["containerID"]
    assert new["status"]["containerStatuses"][0]["containerID"] == cid


def test_dot_files_ignored_bak_duplicate_reported_invalid_skipped(lab):
    mdir = lab.manifests_dir()
    before = mirror(lab, "kube-scheduler")["metadata"]["annotations"]["kubernetes.io/config.hash"]
    text = (mdir / "kube-scheduler.yaml").read_text()
    (mdir / ".kube-scheduler.yaml.swp").write_text(text.replace("name: kube-scheduler\n", "name: dotted\n"))
    (mdir / "broken.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: [unclosed\n")
    (mdir / "notapod.json").write_text(
        json.dumps({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "svc"}})
    )
    shutil.copy(mdir / "kube-scheduler.yaml", mdir / "kube-scheduler.yaml.bak")
    # identical content at another path -> another hash; the .bak (last in sorted order) wins
    after = wait_for(
        lambda: (
            (m := mirror(lab, "kube-scheduler"))
            and m["metadata"]["annotations"]["kubernetes.io/config.hash"] != before
            and m
        ),
        what="bak copy took over",
    )
    assert is_ready(
        wait_for(lambda: is_ready(mirror(lab, "kube-scheduler")) and mirror(lab, "kube-scheduler"))
    )
    assert get_pod(lab, "kube-system", "dotted-lab-master1") is None
    log = _log(lab)
    assert "duplicate static pod kube-system/kube-scheduler-lab-master1" in log
    assert "broken.yaml" in log and "notapod.json" in log
    events = kubectl(lab, "get", "events", "-n", "kube-system").stdout
    assert "DuplicateStaticPod" in events
    # a full re-list keeps the same winner, so nothing flaps
    assert after["metadata"]["annotations"]["kubernetes.io/config.hash"] != before


def test_content_change_gives_new_hash_and_new_pod(lab):
    mdir = lab.manifests_dir()
    old = mirror(lab, "kube-scheduler")
    path = mdir / "kube-scheduler.yaml"
    tmp = mdir / ".kube-scheduler.yaml.new"
    tmp.write_text(path.read_text().replace("cpu: 100m", "cpu: 150m"))
    tmp.rename(path)
    new = wait_for(
        lambda: (
            (m := mirror(lab, "kube-scheduler"))
            and is_ready(m)
            and m["metadata"]["annotations"]["kubernetes.io/config.hash"]
            != old["metadata"]["annotations"]["kubernetes.io/config.hash"]
            and m
        ),
        what="new hash",
    )
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    assert (
        new["status"]["containerStatuses"][0]["containerID"]
        != old["status"]["containerStatuses"][0]["containerID"]
    )
    # restoring identical content at the same path gives the identical hash back
    tmp.write_text(path.read_text().replace("cpu: 150m", "cpu: 100m"))
    tmp.rename(path)
    wait_for(
        lambda: (
            mirror(lab, "kube-scheduler")["metadata"]["annotations"]["kubernetes.io/config.hash"]
            == old["metadata"]["annotations"]["kubernetes.io/config.hash"]
        ),
        what="old hash back",
    )


def test_apiserver_parked_refuses_connections_and_keeps_old_mirror(lab, tmp_path):
    mdir = lab.manifests_dir()
    old = mirror(lab, "kube-apiserver")
    (mdir / "kube-apiserver.yaml").rename(tmp_path / "kube-apiserver.yaml")
    wait_for(lambda: _refused(lab), what="API refused")
    with pytest.raises(OSError):
        urllib.request.urlopen(lab.api_url + "/version", timeout=2)
    (tmp_path / "kube-apiserver.yaml").rename(mdir / "kube-apiserver.yaml")
    wait_for(lambda: api(lab, "GET", "/version")[0] == 200, what="API back")
    new = wait_for(lambda: (m := mirror(lab, "kube-apiserver")) and is_ready(m) and m, what="apiserver ready")
    # nobody could delete the mirror while the API was down: same mirror object, new container
    assert new["metadata"]["uid"] == old["metadata"]["uid"]
    assert (
        new["status"]["containerStatuses"][0]["containerID"]
        != old["status"]["containerStatuses"][0]["containerID"]
    )


def test_etcd_parked_gives_api_errors(lab, tmp_path):
    mdir = lab.manifests_dir()
    (mdir / "etcd.yaml").rename(tmp_path / "etcd.yaml")
    wait_for(lambda: api(lab, "GET", "/api/v1/namespaces/default/pods")[0] == 500, what="etcd errors")
    code, st = api(lab, "GET", "/api/v1/nodes")
    assert code == 500 and st["kind"] == "Status" and "etcdserver: request timed out" in st["message"]
    with pytest.raises(urllib.error.HTTPError):
        urllib.request.urlopen(lab.api_url + "/readyz", timeout=2)
    proc = kubectl(lab, "get", "pods", check=False)
    assert proc.returncode != 0 and "etcdserver: request timed out" in proc.stderr
    (tmp_path / "etcd.yaml").rename(mdir / "etcd.yaml")
    wait_for(lambda: api(lab, "GET", "/api/v1/nodes")[0] == 200, what="etcd back")
    wait_for(lambda: is_ready(mirror(lab, "etcd")), what="etcd mirror ready")
