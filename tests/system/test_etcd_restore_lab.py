"""docs/etcd-restore.md, followed against the lab: a single-master and an HA (3 stacked etcd members)
etcd restore with cpctl (issue #23, item 3).

The lab's etcd opens ``<data-dir>/member/snap/db`` on its node and logs the cluster ID it finds
(:mod:`cpctl_lab.etcddata`); ``cpctl lab etcdctl snapshot-restore`` writes a new data dir like
``etcdctl snapshot restore`` (a new cluster ID from --initial-cluster and the token). So the test
sees whether etcd really runs on the restored dir after cpctl changed the parked manifest.
"""

from __future__ import annotations

import json
import os
import urllib.request
from typing import Any, Dict, List

import pytest

from tests.labfixture import is_ready, kubectl, mirror, run_cpctl, wait_for

pytestmark = pytest.mark.end_to_end


@pytest.fixture(autouse=True)
def _imitation(monkeypatch: Any) -> None:
    """These tests read the Python imitation's own "starting local member" line (its data dir and the
    cluster ID it made up): they run on it. tests/lab/test_lab_realetcd.py follows the page's lab
    section with the real etcd and etcdutl."""
    monkeypatch.setenv("CPCTL_LAB_ETCD", "none")

EDITOR = "sed -i -e s#/var/lib/etcd$#/var/lib/etcd-restore#"


def _cpctl(env: Dict[str, str], *args: str, rc: int = 0, **extra: str) -> str:
    proc = run_cpctl(env, *args, **extra)
    assert proc.returncode == rc, "cpctl %s: %s%s" % (" ".join(args), proc.stdout, proc.stderr)
    return proc.stdout + proc.stderr


def _lab(lab: Any, *args: str) -> str:
    proc = run_cpctl(lab, "lab", *args, "--dir", str(lab.dir))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def _member_line(env: Dict[str, str]) -> Dict[str, Any]:
    """etcd's "starting local member" line of its current container (through crictl)."""
    proc = run_cpctl(env, "-o", "json", "logs", "etcd")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    lines = [json.loads(line) for line in doc["lines"] if '"starting local member"' in line]
    assert lines, doc["lines"]
    return lines[-1]


def _flag(env: Dict[str, str], name: str) -> str:
    proc = run_cpctl(env, "-o", "json", "flags", "etcd")
    assert proc.returncode == 0, proc.stderr
    listed = json.loads(proc.stdout)
    return next(f["value"] for f in listed["flags"] if f["name"] == name)


def _health(env: Dict[str, str]) -> Dict[str, Any]:
    metrics = _flag(env, "listen-metrics-urls").split(",")[0]
    with urllib.request.urlopen(metrics + "/health", timeout=5) as answer:
        return dict(json.loads(answer.read()))


def _restore(lab: Any, masters: List[int], snapshot: str, initial_cluster: str) -> Dict[int, str]:
    """The drill on each master: park etcd and the API server, restore into a new dir, point the parked
    manifest at it (refused by --set alone: the dir must be on a hostPath), start, check."""
    envs = {m: lab.env_for(m) for m in masters}
    for env in envs.values():
        _cpctl(env, "stop", "apiserver", "etcd", "--reason", "etcd restore")
    ids = {}
    for m, env in envs.items():
        out = _lab(lab, "etcdctl", "snapshot-restore", snapshot, "--data-dir", "/var/lib/etcd-restore",
                   "--master", str(m), "--name", lab.node_name(m), "--initial-cluster", initial_cluster,
                   "--bump-revision", "1000000000", "--mark-compacted")
        ids[m] = out.rsplit("cluster-id ", 1)[1].rstrip(")\n")
        assert "--data-dir=/var/lib/etcd" in _cpctl(env, "flags", "etcd", "--parked").splitlines()
        refused = _cpctl(env, "flags", "etcd", "--parked", "--set", "data-dir=/var/lib/etcd-restore", rc=4)
        assert "is on no hostPath volume" in refused
        assert "hint: change the hostPath with the flag: `cpctl edit etcd --parked`" in refused, refused
        assert "cpctl edit etcd --parked" in refused and "--force" not in refused
        _cpctl(env, "edit", "etcd", "--parked", "--yes", "--reason", "etcd restore", EDITOR=EDITOR)
        assert _cpctl(env, "flags", "etcd", "--parked").count("--data-dir=/var/lib/etcd-restore") == 1
    for env in envs.values():
        # with several members, one alone has no quorum: start them all, then wait for each
        _cpctl(env, "start", "etcd", "--new-member", *(["--no-wait"] if len(masters) > 1 else []))
    for env in envs.values():
        # already in place: waits until healthy
        _cpctl(env, "start", "etcd", "--new-member", "--timeout", "60")
        _cpctl(env, "start", "apiserver", "--timeout", "60")
    for m, env in envs.items():
        line = _member_line(env)
        assert line["data-dir"] == "/var/lib/etcd-restore" and line["db"] == "opened existing", line
        assert line["cluster-id"] == ids[m]
        assert _health(env) == {"health": "true", "reason": ""}
        _cpctl(env, "restart", "controller-manager", "scheduler", "--timeout", "60")
        history = json.loads(run_cpctl(env, "-o", "json", "history", "etcd").stdout)["history"]
        assert [r["action"] for r in history][-3:] == ["stop", "edit", "start"]
        assert history[-2].get("parked") is True
    return ids


def _kubeadm_findings(env: Dict[str, str]) -> List[Dict[str, Any]]:
    proc = run_cpctl(env, "check", "--kubeadm", "-o", "json")
    assert proc.returncode in (0, 1, 2), proc.stderr
    return [f for f in json.loads(proc.stdout)["findings"] if f["kind"].startswith("kubeadm_")]


def test_single_master_etcd_restore(lab: Any, tmp_path: Any) -> None:
    """The page, then an upgrade: objects made after the snapshot are gone, check --kubeadm names the
    data dir the next upgrade would leave behind (no --force in its fix), the data dir kept as
    etcd.local.dataDir, and after `lab kubeadm-upgrade` etcd still runs on the restored data."""
    env = lab.env_for(1)
    snapshot = str(tmp_path / "snap.db")
    before = _member_line(env)["cluster-id"]
    assert _kubeadm_findings(env) == []
    _lab(lab, "etcdctl", "snapshot-save", snapshot)
    kubectl(lab, "-n", "default", "create", "configmap", "after-snapshot", "--from-literal=k=v")
    initial = _flag(env, "initial-cluster")
    ids = _restore(lab, [1], snapshot, initial)
    assert ids[1] != before, "a restore starts a new cluster"
    assert _member_line(env)["restored-from-cluster-id"] == before
    assert kubectl(lab, "get", "--raw", "/readyz/etcd").stdout == "ok"
    gone = kubectl(lab, "-n", "default", "get", "configmap", "after-snapshot", check=False)
    assert gone.returncode == 1 and "NotFound" in gone.stderr, gone.stdout + gone.stderr
    rv = json.loads(kubectl(lab, "-n", "kube-system", "get", "configmap", "kubeadm-config", "-o", "json").stdout)
    listed = json.loads(kubectl(lab, "get", "--raw", "/api/v1/configmaps").stdout)
    assert int(rv["metadata"]["resourceVersion"]) < 1000000000 < int(listed["metadata"]["resourceVersion"])  # bumped
    found = _kubeadm_findings(env)
    assert [f["kind"] for f in found] == ["kubeadm_data_dir"] and found[0]["severity"] == "critical", found
    assert "/var/lib/etcd-restore" in found[0]["message"] and "--force" not in found[0]["fix"]
    assert found[0]["fix"].startswith("cpctl flags etcd --set data-dir=/var/lib/etcd-restore --keep-in kubeadm-config")
    kept = _cpctl(env, "flags", "etcd", "--set", "data-dir=/var/lib/etcd-restore", "--keep-in", "kubeadm-config")
    assert "kept with the flags: etcd.local.dataDir /var/lib/etcd-restore" in kept, kept
    assert _kubeadm_findings(env) == []
    _lab(lab, "kubeadm-upgrade", "--to", "1.31")
    line = _member_line(env)
    assert line["data-dir"] == "/var/lib/etcd-restore" and line["db"] == "opened existing", line
    assert line["cluster-id"] == ids[1]
    members = json.loads(kubectl(lab, "-n", "kube-system", "get", "pods", "-l", "component=etcd", "-o", "json").stdout)
    assert [p["spec"]["nodeName"] for p in members["items"]] == [lab.node_name(1)]
    wait_for(lambda: is_ready(mirror(lab, "etcd")), 30, "etcd's mirror pod Ready")


def test_ha_etcd_restore(lab_factory: Any, tmp_path: Any) -> None:
    lab = lab_factory(profile="ha")
    snapshot = str(tmp_path / "snap.db")
    before = _member_line(lab.env_for(1))["cluster-id"]
    _lab(lab, "etcdctl", "snapshot-save", snapshot, "--master", "1")
    peers = ",".join("%s=%s" % (lab.node_name(m), _flag(lab.env_for(m), "initial-advertise-peer-urls"))
                     for m in (1, 2, 3))
    ids = _restore(lab, [1, 2, 3], snapshot, peers)
    assert len(set(ids.values())) == 1 and ids[1] != before, "one new cluster, the same on every member"
    assert kubectl(lab, "get", "--raw", "/readyz/etcd").stdout == "ok"
    members = json.loads(kubectl(lab, "-n", "kube-system", "get", "pods", "-l", "component=etcd", "-o", "json").stdout)
    ready = {p["spec"]["nodeName"] for p in members["items"]
             if any(c.get("type") == "Ready" and c.get("status") == "True" for c in p["status"].get("conditions", []))}
    assert ready == {lab.node_name(m) for m in (1, 2, 3)}, members
    assert os.path.exists(str(lab.root_dir(2)) + "/var/lib/etcd-restore/member/snap/db")
