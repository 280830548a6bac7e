"""``cpctl start --all-parked`` (issue #17): every parked manifest, in kubeadm's start order (etcd,
apiserver, controller-manager, scheduler, then any other static pod); "nothing parked" is exit 0;
with component names it is a usage error. Locally and per master over SSH.
"""

from __future__ import annotations

import json
import os
from typing import Any

from tests.coreutil import MANIFESTS, NODE, NodeDirs
from tests.remoteutil import Cli, clean_env, write_inventory
from tests.sshfixture import SSHServer

EXTRA = {"my-pod.yaml": MANIFESTS["kube-scheduler.yaml"].replace(b"name: kube-scheduler\n", b"name: my-pod\n")}


def test_nothing_parked_is_no_error(node: NodeDirs) -> None:
    proc = node.run("start", "--all-parked")
    assert proc.stdout == "nothing parked on node %s\n" % NODE and proc.stderr == ""
    data = json.loads(node.run("-o", "json", "start", "--all-parked").stdout)
    assert data["results"] == [] and data["changed"] is False and data["all_parked"] is True
    assert "nothing parked" in node.run("start", "--all-parked", "--dry-run").stdout
    assert node.history() == []


def test_names_and_all_parked_exclude_each_other(node: NodeDirs) -> None:
    node.run("stop", "etcd")
    assert "name no COMPONENT" in node.run("start", "etcd", "--all-parked", rc=2).stderr
    assert "--all-parked" in node.run("start", rc=2).stderr
    assert node.parked_files() == ["etcd.yaml"]


def test_starts_every_parked_manifest_in_order(tmp_path: Any) -> None:
    node = NodeDirs(str(tmp_path), files=dict(MANIFESTS, **EXTRA))
    node.run("stop", "scheduler", "my-pod", "etcd", "controller-manager")
    plan = node.run("start", "--all-parked", "--dry-run").stdout
    assert [line.split()[2] for line in plan.splitlines() if line.startswith("  ")][:4] == \
        ["etcd:", "kube-controller-manager:", "kube-scheduler:", "my-pod:"]
    assert node.parked_files() == ["etcd.yaml", "kube-controller-manager.yaml", "kube-scheduler.yaml", "my-pod.yaml"]
    proc = node.run("start", "--all-parked")
    assert [line.split(":")[0] for line in proc.stdout.splitlines()] == \
        ["etcd", "kube-controller-manager", "kube-scheduler", "my-pod"]
    assert node.parked_files() == [] and node.present() == sorted(node.files)
    starts = [r["component"] for r in node.history() if r["action"] == "start"]
    assert starts == ["etcd", "kube-controller-manager", "kube-scheduler", "my-pod"]


def test_each_master_starts_its_own_parked_manifests(sshd: SSHServer, tmp_path: Any) -> None:
    one, two = NodeDirs(str(tmp_path / "one")), NodeDirs(str(tmp_path / "two"))
    one.run("stop", "scheduler", "etcd")
    inventory = write_inventory(str(tmp_path / "inventory.yaml"), {
        name: {"host": sshd.alias, "manifests_dir": node.manifests, "state_dir": node.state, "node_name": name}
        for name, node in (("one", one), ("two", two))})
    cli = Cli(sshd.ssh_config, sshd.known_hosts, clean_env(str(tmp_path / "home"), CPCTL_PROBE="none"))
    doc = cli.json("-i", inventory, "start", "--all-parked")
    by_host = {h["host"]: h for h in doc["hosts"]}
    assert by_host["one"]["status"] == "changed" and by_host["two"]["status"] == "ok"
    assert [r["component"] for r in by_host["one"]["data"]["results"]] == ["etcd", "kube-scheduler"]
    assert by_host["two"]["data"]["results"] == []
    assert one.parked_files() == [] and os.path.exists(os.path.join(one.manifests, "etcd.yaml"))
    assert "== two: ok ==\nnothing parked on node two" in cli.run("-i", inventory, "start", "--all-parked").stdout
