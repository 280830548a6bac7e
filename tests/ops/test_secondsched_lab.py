"""`cpctl scheduler add/remove` against the lab (simulated kubeadm master) with the real kubectl.

The lab's scheduler serves the profiles of a running kube-scheduler's --config file and only
while that scheduler holds its Lease, so these tests see what an operator would: pods naming
my-scheduler get scheduled, pods naming an unknown scheduler stay Pending, and parking the
default scheduler leaves my-scheduler's pods unaffected.
"""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

pytest.importorskip("cpctl_lab.control")
from cpctl_lab.control import start_lab  # noqa: E402
from tests.coreutil import CLI, check_result, schema_valid  # noqa: E402
from tests.labfixture import FAST, KUBECTL, get_pod, kubectl, wait_for  # noqa: E402

pytestmark = pytest.mark.skipif(not os.path.exists(KUBECTL), reason="kubectl not installed")


@pytest.fixture
def lab(tmp_path):
    """A one-master lab whose state dir is private, as cpctl insists (the lab may create it 0755)."""
    with start_lab(tmp_path / "lab", masters=1, **FAST) as handle:
        if handle.state_dir().exists():
            os.chmod(handle.state_dir(), 0o700)
        yield handle


def cpctl(handle, *args: str, rc: int = 0, timeout: float = 90) -> subprocess.CompletedProcess:
    env = dict(os.environ, **handle.env)
    for name in ("CPCTL_PROBE", "CPCTL_DEBUG"):
        env.pop(name, None)
    proc = subprocess.run(CLI + list(args), env=env, capture_output=True, text=True, timeout=timeout)
    check_result(proc, rc)
    return proc


def run_pod(handle, name: str, scheduler: str = "") -> None:
    overrides = ["--overrides", json.dumps({"apiVersion": "v1", "spec": {"schedulerName": scheduler}})] \
        if scheduler else []
    kubectl(handle, "run", name, "--image=registry.k8s.io/pause:3.9", "--restart=Never", *overrides)


def running(handle, name: str) -> bool:
    pod = get_pod(handle, "default", name) or {}
    return (pod.get("status") or {}).get("phase") == "Running" and bool(pod["spec"].get("nodeName"))


def stays_pending(handle, name: str, seconds: float = 1.5) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        pod = get_pod(handle, "default", name) or {}
        if (pod.get("spec") or {}).get("nodeName") or (pod.get("status") or {}).get("phase") != "Pending":
            return False
        time.sleep(0.1)
    return True


def test_second_scheduler_schedules_its_pods_only(lab):
    config_dir = lab.manifests_dir().parent / "second-schedulers"   # below the node's /etc/kubernetes
    config_dir.mkdir()
    out = cpctl(lab, "scheduler", "add", "my-scheduler", "--config-dir", str(config_dir), "--timeout", "30").stdout
    assert "Running and Ready" in out and "lease my-scheduler renewed" in out, out
    lease = json.loads(kubectl(lab, "get", "lease", "-n", "kube-system", "my-scheduler", "-o", "json").stdout)
    assert lease["spec"]["holderIdentity"]
    assert kubectl(lab, "get", "pod", "-n", "kube-system", "my-scheduler-" + lab.node_name()).returncode == 0

    run_pod(lab, "mine", "my-scheduler")
    run_pod(lab, "nobodys", "no-such-scheduler")
    wait_for(lambda: running(lab, "mine"), timeout=10, what="pod mine Running")
    assert stays_pending(lab, "nobodys")
    events = kubectl(lab, "get", "events", "-n", "default", "--field-selector", "involvedObject.name=mine").stdout
    assert "my-scheduler" in events or "Scheduled" in events

    cpctl(lab, "stop", "scheduler", "--reason", "second scheduler test")
    run_pod(lab, "default-pod")
    run_pod(lab, "mine-2", "my-scheduler")
    wait_for(lambda: running(lab, "mine-2"), timeout=10, what="pod mine-2 Running")
    assert stays_pending(lab, "default-pod")

    cpctl(lab, "start", "scheduler")
    wait_for(lambda: running(lab, "default-pod"), timeout=10, what="default-pod Running")

    listing = json.loads(cpctl(lab, "-o", "json", "scheduler", "list").stdout)["schedulers"]
    assert [(r["name"], r["state"]) for r in listing] == [("my-scheduler", "present")]
    assert (listing[0]["observed"] or {}).get("ready") is True and listing[0]["pod_state"] == "running"


def test_remove_stops_the_pod_and_its_pods_stay_pending(lab):
    config_dir = lab.manifests_dir().parent / "second-schedulers"   # below the node's /etc/kubernetes
    config_dir.mkdir()
    before = sorted(os.listdir(lab.manifests_dir()))
    cpctl(lab, "scheduler", "add", "my-scheduler", "--config-dir", str(config_dir), "--timeout", "30")
    out = cpctl(lab, "scheduler", "remove", "my-scheduler", "--timeout", "30").stdout
    assert "gone" in out, out
    assert sorted(os.listdir(lab.manifests_dir())) == before and os.listdir(config_dir) == []
    assert get_pod(lab, "kube-system", "my-scheduler-" + lab.node_name()) is None
    run_pod(lab, "orphan", "my-scheduler")
    assert stays_pending(lab, "orphan")
    run_pod(lab, "normal")
    wait_for(lambda: running(lab, "normal"), timeout=10, what="default scheduler still works")


@pytest.fixture
def rbac_lab(tmp_path):
    """A lab that enforces RBAC on the components' identities, as a kubeadm cluster does."""
    with start_lab(tmp_path / "lab", masters=1, rbac=True, **FAST) as handle:
        yield handle


def test_add_is_refused_before_writing_anything_when_the_lease_is_forbidden(rbac_lab):
    """kubeadm's RBAC lets system:kube-scheduler get/update only the Lease named kube-scheduler: a
    second scheduler would never take its own Lease (it used to be written anyway and time out)."""
    before = sorted(os.listdir(rbac_lab.manifests_dir()))
    dry = json.loads(cpctl(rbac_lab, "-o", "json", "scheduler", "add", "my-scheduler", "--dry-run").stdout)
    assert dry["rbac"]["allowed"] is False and dry["rbac"]["identity"] == "system:kube-scheduler"
    assert sorted(dry["rbac"]["denied"]) == ["get", "update"]
    refused = cpctl(rbac_lab, "scheduler", "add", "my-scheduler", rc=4)
    assert "system:kube-scheduler may not get and update Lease kube-system/my-scheduler" in refused.stderr
    assert "kind: RoleBinding" in refused.stdout and "name: cpctl:my-scheduler-lease" in refused.stdout
    assert sorted(os.listdir(rbac_lab.manifests_dir())) == before
    assert not (rbac_lab.manifests_dir().parent / "my-scheduler-config.yaml").exists()
    assert cpctl(rbac_lab, "-o", "json", "history").stdout.count('"action"') == 0


def test_grant_rbac_creates_the_role_and_the_scheduler_takes_its_lease(rbac_lab):
    out = cpctl(rbac_lab, "scheduler", "add", "my-scheduler", "--grant-rbac", "--timeout", "30").stdout
    assert "Lease RBAC granted" in out and "lease my-scheduler renewed" in out, out
    can = kubectl(rbac_lab, "auth", "can-i", "--as", "system:kube-scheduler", "update", "leases/my-scheduler",
                  "-n", "kube-system", check=False)
    assert can.stdout.strip() == "yes"
    run_pod(rbac_lab, "mine", "my-scheduler")
    wait_for(lambda: running(rbac_lab, "mine"), timeout=10, what="pod mine Running")
    record = schema_valid("history", json.loads(cpctl(rbac_lab, "-o", "json", "history").stdout))["history"][-1]
    assert (record["action"], record["rbac"]) == ("scheduler-add", "granted")
