"""Each lab master has its own /etc/kubernetes: the manifests dir lives in the node's root.

A kubeadm node keeps its static pod manifests in /etc/kubernetes/manifests, next to its own
kubeconfigs and pki. cpctl relies on that: `cpctl scheduler add` writes NAME-config.yaml into the
directory holding the manifests dir. The lab used to keep every master's manifests dir directly in
the lab dir, so all masters shared that parent: a `scheduler remove` on master1 took away the config
master2's scheduler runs with, and master2 then listed it as "(config missing)".
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

from cpctl_lab.control import LabError, LabHandle, read_state, start_lab
from tests.labfixture import KUBECTL, is_ready, mirror, run_cpctl, wait_for

SCHEDULER = "my-scheduler"


def scheduler_cli(lab: LabHandle, master: int, *args: str) -> subprocess.CompletedProcess:
    """`cpctl scheduler ...` as the node agent of ``master`` (its env from lab.json); must succeed."""
    proc = run_cpctl(lab.env_for(master), "scheduler", *args, timeout=60)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, (proc.args, proc.stdout, proc.stderr)
    return proc


def listed(lab: LabHandle, master: int) -> list[dict[str, Any]]:
    """The schedulers `cpctl -o json scheduler list` reports on ``master``."""
    proc = run_cpctl(lab.env_for(master), "-o", "json", "scheduler", "list", timeout=60)
    assert proc.returncode == 0, proc.stderr
    return list(json.loads(proc.stdout)["schedulers"])


def server_of(kubeconfig: Path) -> str:
    """The API server URL a kubeadm kubeconfig names."""
    return str(yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"])


@pytest.mark.skipif(not os.path.exists(KUBECTL), reason="kubectl not installed")
def test_remove_on_master1_leaves_master2s_scheduler_config(lab_factory: Callable[..., LabHandle]) -> None:
    """The reported bug, with the real CLI on a 3-master HA lab (RBAC enforced, hence --grant-rbac)."""
    lab = lab_factory(profile="ha")
    configs = {i: lab.manifests_dir(i).parent / f"{SCHEDULER}-config.yaml" for i in (1, 2)}
    for master in (1, 2):
        out = scheduler_cli(lab, master, "add", SCHEDULER, "--grant-rbac", "--timeout", "30").stdout
        assert f"config {configs[master]}," in out, out
        assert configs[master].is_file()
    kept = configs[2].read_bytes()

    out = scheduler_cli(lab, 1, "remove", SCHEDULER, "--timeout", "30").stdout
    assert "removed" in out, out
    assert not configs[1].exists() and listed(lab, 1) == []

    text = scheduler_cli(lab, 2, "list").stdout      # a lost config is flagged "missing" in the table
    assert SCHEDULER in text and str(configs[2]) in text and "missing" not in text, text
    (row,) = listed(lab, 2)
    assert (row["name"], row["config"], row["config_present"]) == (SCHEDULER, str(configs[2]), True)
    assert configs[2].read_bytes() == kept
    assert is_ready(mirror(lab, SCHEDULER, 2))


def test_each_master_has_its_own_etc_kubernetes(lab_factory: Callable[..., LabHandle]) -> None:
    """Manifests dir, kubelet staticPodPath, env and `cpctl lab env` all point into the node's root,
    whose etc/kubernetes holds that node's kubeconfigs; the state dirs stay outside."""
    lab = lab_factory(masters=3)
    state = read_state(lab.dir) or {}
    for master in (1, 2, 3):
        mdir = lab.manifests_dir(master)
        etc = lab.root_dir(master) / "etc" / "kubernetes"
        assert mdir == etc / "manifests" and mdir.is_dir()
        assert sorted(p.name for p in mdir.iterdir()) == [
            "etcd.yaml", "kube-apiserver.yaml", "kube-controller-manager.yaml", "kube-scheduler.yaml"]
        assert (etc / "admin.conf").is_file() and (etc / "pki" / "ca.crt").is_file()
        assert server_of(etc / "scheduler.conf") == lab.api_url_for(master)   # this node's apiserver
        assert (etc / "super-admin.conf").is_file() == (master == 1)           # the `kubeadm init` node only

        config = yaml.safe_load((lab.kubelet_dir(master) / "config.yaml").read_text())
        assert config["staticPodPath"] == str(mdir)
        assert state["masters"][master - 1]["manifests_dir"] == str(mdir)
        assert lab.env_for(master)["CPCTL_MANIFESTS_DIR"] == str(mdir)
        printed = subprocess.run([sys.executable, "-m", "cpctl_lab", "env", "--dir", str(lab.dir),
                                  "--master", str(master)], capture_output=True, text=True, timeout=30)
        assert f"export CPCTL_MANIFESTS_DIR={mdir}\n" in printed.stdout, printed.stderr

        state_dir = lab.state_dir(master)
        assert state_dir == lab.dir / f"state-{lab.node_name(master)}"
        assert mdir not in state_dir.parents and state_dir not in mdir.parents
    assert not list(lab.dir.glob("manifests-*"))
    wait_for(lambda: all(is_ready(mirror(lab, "kube-scheduler", m)) for m in (1, 2, 3)), what="schedulers Ready")


def old_layout_dir(base: Path) -> Path:
    """A stopped lab dir as an older cpctl lab left it: manifests dirs beside the node roots."""
    lab_dir = base / "old-lab"
    (lab_dir / "manifests-lab-master1").mkdir(parents=True)
    (lab_dir / "manifests-lab-master1" / "kube-scheduler.yaml").write_text("kind: Pod\n")
    (lab_dir / "root-lab-master1" / "etc" / "kubernetes" / "pki").mkdir(parents=True)
    (lab_dir / "state-lab-master1").mkdir(mode=0o700)
    return lab_dir


def test_lab_up_on_an_old_layout_dir_says_so_and_starts_nothing(tmp_path: Path) -> None:
    lab_dir = old_layout_dir(tmp_path)
    before = sorted(str(p.relative_to(lab_dir)) for p in lab_dir.rglob("*"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CPCTL_") and k != "KUBECONFIG"}
    env["HOME"] = str(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "cpctl", "lab", "up", "--dir", str(lab_dir)], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 7 and proc.stdout == "", (proc.stdout, proc.stderr)   # environment (README)
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"cpctl lab: {lab_dir} was laid out by an older cpctl lab (manifests-lab-master1;")
    assert f"remove {lab_dir} or use another --dir" in line
    assert sorted(str(p.relative_to(lab_dir)) for p in lab_dir.rglob("*")) == before

    with pytest.raises(LabError, match="older cpctl lab"):
        start_lab(lab_dir, masters=1)
    assert not (lab_dir / "lab.json").exists()
