"""--dry-run on commands that change the cluster: every check runs, nothing changes."""

from __future__ import annotations

import os

from tests.labfixture import kubectl
from tests.labfixture import run_cpctl as cpctl


def test_bind_dry_run_checks_and_changes_nothing(lab) -> None:
    assert cpctl(lab, "stop", "scheduler").returncode == 0
    kubectl(lab, "run", "dry", "--image=httpd:2.4-alpine")
    proc = cpctl(lab, "bind", "dry", "--node", lab.node_name(1), "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert "would be bound to node %s" % lab.node_name(1) in proc.stdout
    assert kubectl(lab, "get", "pod", "dry", "-o", "jsonpath={.spec.nodeName}").stdout == ""
    missing = cpctl(lab, "bind", "dry", "--node", "no-such-node", "--dry-run")
    assert missing.returncode == 3 and "no-such-node" in missing.stderr


def test_stop_dry_run_prints_moves_and_diff(lab) -> None:
    proc = cpctl(lab, "stop", "scheduler", "etcd", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "1. stop kube-scheduler: move" in lines[1] and "2. stop etcd: move" in lines[2]
    assert "-kube-scheduler.yaml" in proc.stdout and "-etcd.yaml" in proc.stdout
    assert os.path.exists(os.path.join(lab.manifests_dir(1), "kube-scheduler.yaml"))
