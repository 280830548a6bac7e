"""The lab explains itself (issue #23 item 7): a lab node's hostPaths are node paths (as kubeadm
writes them) found under that node's root dir, by the lab's kubelet and components and by cpctl
(``CPCTL_NODE_ROOT``): a file written to the node's ``/etc/kubernetes/audit`` is where both look.
And docs/lab.md's recipe to reach a lab master over SSH on 127.0.0.1 runs as written."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, List

import pytest
import yaml

from tests.labfixture import is_ready, mirror, run_cpctl, wait_for
from tests.sshfixture import *  # noqa: F401,F403  (fixtures: sshd, ...)
from tests.sshfixture import SSHServer
from tests.system.test_readme import REPO, check_step, lab_shell_env, marked_blocks, steps_of

POLICY = "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n"


def _with_audit(data: str) -> str:
    """The CKA audit task: a policy file and a log dir, each mounted from the node's /etc/kubernetes/audit."""
    pod = yaml.safe_load(data)
    container = pod["spec"]["containers"][0]
    container["command"] += ["--audit-policy-file=/etc/kubernetes/audit/policy.yaml",
                             "--audit-log-path=/etc/kubernetes/audit/logs/audit.log"]
    container["volumeMounts"].append({"name": "audit", "mountPath": "/etc/kubernetes/audit"})
    pod["spec"]["volumes"].append({"name": "audit", "hostPath": {"path": "/etc/kubernetes/audit",
                                                                 "type": "Directory"}})
    return yaml.safe_dump(pod)


def test_hostpaths_are_node_paths_under_the_node_root(lab: Any, tmp_path: Path) -> None:
    root = lab.root_dir()
    assert lab.env["CPCTL_NODE_ROOT"] == str(root)
    apiserver = (lab.manifests_dir() / "kube-apiserver.yaml").read_text()
    paths = [v["hostPath"]["path"] for v in yaml.safe_load(apiserver)["spec"]["volumes"]]
    assert "/etc/kubernetes/pki" in paths and not [p for p in paths if p.startswith(str(lab.dir))]
    new = tmp_path / "kube-apiserver.yaml"
    new.write_text(_with_audit(apiserver))
    # Not on the node yet: cpctl looks under the node's root and refuses, nothing changes.
    refused = run_cpctl(lab, "apply", "apiserver", "-f", str(new))
    assert refused.returncode == 4, refused.stdout + refused.stderr
    assert "/etc/kubernetes/audit (type Directory) does not exist on the node" in refused.stderr
    # Written to the node's /etc/kubernetes/audit: cpctl and the lab's kube-apiserver find it there.
    (root / "etc/kubernetes/audit/logs").mkdir(parents=True)
    (root / "etc/kubernetes/audit/policy.yaml").write_text(POLICY)
    done = run_cpctl(lab, "apply", "apiserver", "-f", str(new), "--timeout", "60", "--settle", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    wait_for(lambda: is_ready(mirror(lab, "kube-apiserver")), 30, "kube-apiserver Ready with the audit policy")


def test_the_lab_kubelet_and_components_look_under_the_node_root(lab: Any, tmp_path: Path) -> None:
    """A manifest written by hand (no cpctl) with a hostPath /etc/kubernetes/audit: the lab's kubelet
    mounts it from the node's root dir and its kube-apiserver reads the policy there."""
    root = lab.root_dir()
    (root / "etc/kubernetes/audit/logs").mkdir(parents=True)
    (root / "etc/kubernetes/audit/policy.yaml").write_text(POLICY)
    target = lab.manifests_dir() / "kube-apiserver.yaml"
    staged = tmp_path / "staged.yaml"
    staged.write_text(_with_audit(target.read_text()))
    staged.rename(target)

    def audited() -> bool:
        pod = mirror(lab, "kube-apiserver")
        command = ((pod or {}).get("spec") or {}).get("containers", [{}])[0].get("command") or []
        return is_ready(pod) and "--audit-policy-file=/etc/kubernetes/audit/policy.yaml" in command
    wait_for(audited, 30, "the new kube-apiserver Ready (its Directory hostPath and policy file found)")


DOC = REPO / "docs" / "lab.md"
MARKER = "<!-- lab-ssh-tested -->"


@pytest.mark.end_to_end
@pytest.mark.timeout(600)
def test_the_ssh_recipe_of_docs_lab_md_runs_as_written(lab_factory: Callable[..., Any], sshd: SSHServer,
                                                       tmp_path: Path) -> None:
    """docs/lab.md's SSH recipe against a lab and a real sshd on 127.0.0.1 (root, key auth): the
    ssh_config entry it shows is written to ~/.ssh/config (with this sshd's port and keys)."""
    blocks = marked_blocks(DOC.read_text(encoding="utf-8"), MARKER)
    assert blocks, "docs/lab.md lost its SSH recipe"
    steps = [step for first, body in blocks for step in steps_of(first, body)]
    assert any(" -H lab-master1 " in step.command for step in steps)
    handle = lab_factory()
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True, mode=0o700)
    (home / ".ssh" / "config").write_text(sshd.config_block("lab-master1"))
    env = lab_shell_env(handle, home)
    env.pop("SSH_AUTH_SOCK", None)
    failures: List[str] = []
    for step in steps:
        problem = check_step(step, env, tmp_path)
        if problem:
            failures.append(problem.replace("README.md", "docs/lab.md"))
    assert not failures, "\n\n".join(failures)
    assert os.path.exists(os.path.join(str(handle.root_dir()), "etc/kubernetes/manifests/kube-scheduler.yaml"))
