"""Issue #3: the CKA manual-scheduling task end to end, through the real cpctl CLI and kubectl.

Every step is checked on its own (exit code, message, what kubectl sees), not only "the demo
passed"; a second test runs ``cpctl lab demo`` itself.
"""

# ruff: noqa: F811  (pytest fixtures are imported by name and then used as parameters)
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

import pytest

from cpctl.timeutil import parse_rfc3339 as parse_time
from cpctl_lab.control import LabHandle
from tests.labfixture import kubectl, lab, wait_for  # noqa: F401
from tests.labfixture import run_cpctl as cpctl


def jsonpath(handle: LabHandle, *args: str) -> str:
    *what, path = args
    return kubectl(handle, "get", *what, "-o", "jsonpath={%s}" % path).stdout.strip()


def lease_renew(handle: LabHandle) -> float:
    text = jsonpath(handle, "-n", "kube-system", "lease", "kube-scheduler", ".spec.renewTime")
    value = parse_time(text)
    assert value, "unparsable renewTime %r" % text
    return value


def test_manual_scheduling_step_by_step(lab: LabHandle) -> None:
    master, worker = lab.node_name(1), lab.worker
    mirror = "kube-scheduler-%s" % master
    old_uid = jsonpath(lab, "-n", "kube-system", "pod", mirror, ".metadata.uid")
    assert old_uid

    # 1. stop the scheduler: verified gone, and the API agrees
    proc = cpctl(lab, "stop", "scheduler", "--reason", "CKA manual scheduling")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert "kube-scheduler: stopped (manifest parked)" in proc.stdout
    assert "pod %s gone (api)" % mirror in proc.stdout
    gone = kubectl(lab, "-n", "kube-system", "get", "pod", mirror, check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr
    assert not (lab.manifests_dir() / "kube-scheduler.yaml").exists()
    assert (lab.state_dir() / "parked" / "kube-scheduler.yaml").is_file()

    # 2. a new pod stays Pending: no node after a full second
    kubectl(lab, "run", "manual-schedule", "--image=httpd:2.4-alpine")
    time.sleep(1.2)
    assert jsonpath(lab, "pod", "manual-schedule", ".spec.nodeName") == ""
    assert jsonpath(lab, "pod", "manual-schedule", ".status.phase") == "Pending"
    proc = cpctl(lab, "pending")
    assert proc.returncode == 0, proc.stderr
    header, *rows = proc.stdout.splitlines()
    assert header.split() == ["NAMESPACE", "NAME", "WAITING", "FOR", "CREATED"]
    assert [r.split()[:4] for r in rows] == [["default", "manual-schedule", "scheduler", "default-scheduler"]]
    proc = cpctl(lab, "-o", "json", "pending")
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(proc.stdout)["pending"]
    assert row["namespace"] == "default" and row["name"] == "manual-schedule"
    assert row["scheduler"] == "default-scheduler" and row["phase"] == "Pending" and row["created"]

    # 3. be the scheduler
    proc = cpctl(lab, "bind", "manual-schedule", "--node", master)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("pod default/manual-schedule bound to node %s" % master)
    assert jsonpath(lab, "pod", "manual-schedule", ".spec.nodeName") == master
    wait_for(lambda: jsonpath(lab, "pod", "manual-schedule", ".status.phase") == "Running", 30,
             "manual-schedule Running")
    assert jsonpath(lab, "pod", "manual-schedule", ".spec.nodeName") == master
    proc = cpctl(lab, "pending")
    assert proc.returncode == 0 and proc.stdout.strip() == "(no pending pods)"

    # 4. start the scheduler: a new mirror pod (same config.hash) and a renewed Lease
    renew_before = lease_renew(lab)
    proc = cpctl(lab, "start", "scheduler")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert "kube-scheduler: started (manifest restored)" in proc.stdout
    assert "Running and Ready (api), lease kube-scheduler renewed by " in proc.stdout
    assert jsonpath(lab, "-n", "kube-system", "pod", mirror, ".status.phase") == "Running"
    new_uid = jsonpath(lab, "-n", "kube-system", "pod", mirror, ".metadata.uid")
    assert new_uid and new_uid != old_uid
    assert lease_renew(lab) > renew_before
    assert (lab.manifests_dir() / "kube-scheduler.yaml").is_file()
    assert not (lab.state_dir() / "parked" / "kube-scheduler.yaml").exists()

    # 5. the scheduler places the next pod by itself, on the worker
    kubectl(lab, "run", "manual-schedule2", "--image=httpd:2.4-alpine")
    wait_for(lambda: jsonpath(lab, "pod", "manual-schedule2", ".status.phase") == "Running", 30,
             "manual-schedule2 Running")
    assert jsonpath(lab, "pod", "manual-schedule2", ".spec.nodeName") == worker
    # the manually bound pod did not move
    assert jsonpath(lab, "pod", "manual-schedule", ".spec.nodeName") == master

    # 6. both changes are on record
    proc = cpctl(lab, "-o", "json", "history", "scheduler")
    assert proc.returncode == 0, proc.stderr
    actions = [(r["action"], r["component"]) for r in json.loads(proc.stdout)["history"]]
    assert actions == [("stop", "kube-scheduler"), ("start", "kube-scheduler")]


def demo_env(tmp_path: Path, **extra: str) -> Dict[str, str]:
    """No lab settings from the caller's shell; HOME (kubectl's cache) and TMPDIR in the test dir."""
    env = dict(os.environ)
    for key in ("KUBECONFIG", "CPCTL_MANIFESTS_DIR", "CPCTL_STATE_DIR", "CPCTL_NODE_NAME", "CPCTL_CRICTL",
                "CPCTL_PROBE", "CPCTL_KUBELET_DIR"):
        env.pop(key, None)
    (tmp_path / "tmp").mkdir(exist_ok=True)
    env.update(HOME=str(tmp_path), TMPDIR=str(tmp_path / "tmp"), **extra)
    return env


def demo_dirs(tmp_path: Path) -> List[str]:
    return [name for name in os.listdir(tmp_path / "tmp") if name.startswith("cpctl-demo-")]


@pytest.mark.lab       # starts a lab through `cpctl lab ...` (no fixture says so)
def test_lab_demo_command(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "cpctl", "lab", "demo"],
                          capture_output=True, text=True, env=demo_env(tmp_path), timeout=240)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
    assert "manual-schedule2" in proc.stdout and "Demo complete" not in proc.stdout
    # the broken flag is the component's own words, then the rollback (exit 11, expected by the demo)
    assert 'invalid argument \\"maybe\\" for \\"--profiling\\"' in proc.stdout or \
        'invalid argument "maybe" for "--profiling"' in proc.stdout, proc.stdout[-3000:]
    assert "ROLLED BACK to the previous version" in proc.stdout
    # it ends with what to try next, and leaves no temp dir behind
    lines = proc.stdout.rstrip().splitlines()
    tail = lines[max(i for i, line in enumerate(lines) if line.startswith("Next, try it yourself")):]
    assert tail[0].startswith("Next, try it yourself in a lab of your own")
    assert tail[1].split("#")[0].strip() == 'eval "$(cpctl lab up)"' and tail[2].startswith("  cpctl status")
    assert tail[-1].split("#")[0].strip() == "cpctl lab down"
    assert demo_dirs(tmp_path) == []


def test_lab_demo_needs_kubectl_and_says_so_first(tmp_path: Path) -> None:
    bare = tmp_path / "bin"
    bare.mkdir()
    proc = subprocess.run([sys.executable, "-m", "cpctl", "lab", "demo"], capture_output=True, text=True,
                          env=demo_env(tmp_path, PATH=str(bare)), timeout=60)
    assert proc.returncode == 7 and proc.stdout == "", proc
    (line,) = proc.stderr.splitlines()
    assert "needs kubectl" in line and "https://kubernetes.io/docs/tasks/tools/" in line
    assert demo_dirs(tmp_path) == []          # nothing was started


@pytest.mark.lab       # starts a lab through `cpctl lab ...` (no fixture says so)
def test_lab_demo_interrupted_cleans_up(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "cpctl", "lab", "demo"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=demo_env(tmp_path))
    wait_for(lambda: any((tmp_path / "tmp" / d / "lab.json").exists() for d in demo_dirs(tmp_path)), 60,
             "the demo's lab")
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out[-2000:] + err
    assert "demo interrupted: its lab is stopped and its temp dir removed" in err and "Traceback" not in err
    assert demo_dirs(tmp_path) == []
