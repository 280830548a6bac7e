"""Control-plane containers that cannot start crash-loop like on a real node (for cpctl apply's rollback).

A command line the real binary rejects -- an unknown flag, a value its flag type cannot parse, an
unknown admission plugin, a file (through the volume mounts) that is not there -- makes the
container exit; the kubelet restarts it after CrashLoopBackOff (10 s, 20 s, 40 s ... times the
lab's time_scale), the pod is Running but not Ready, and ``crictl ps -a`` / ``crictl logs`` show
the attempts and what the component wrote. A missing ``File``/``Directory`` hostPath keeps the pod
in ContainerCreating (FailedMount). Time scale 0.05: back-offs of 0.5 s, 1 s, 2 s.
"""

# ruff: noqa: F811  (pytest fixtures are imported by name and then used as parameters)
from __future__ import annotations

import json
import re
import socket
import time
from typing import Any, Optional

import yaml

from cpctl_lab.control import LabHandle
from tests.labfixture import api, crictl, get_pod, is_ready, kubectl, lab_factory, mirror, wait_for  # noqa: F401

SCALE = 0.05
KLOG = re.compile(r"^[IWE]\d{4} \d\d:\d\d:\d\d\.\d{6} {7}1 [\w./-]+:\d+\] ")


def edit_manifest(lab: LabHandle, component: str, extra: list[str], drop: str = "") -> dict[str, Any]:
    """Append flags to a component's command (dropping ``--drop=...``), written as kubeadm writes."""
    path = lab.manifests_dir() / f"{component}.yaml"
    pod = yaml.safe_load(path.read_text())
    ctr = pod["spec"]["containers"][0]
    ctr["command"] = [a for a in ctr["command"] if not (drop and a.startswith(f"--{drop}="))] + extra
    tmp = path.parent / f".{path.name}.tmp"
    tmp.write_text(yaml.safe_dump(pod, sort_keys=False))
    tmp.rename(path)
    return pod


def attempts(lab: LabHandle, name: str) -> list[dict[str, Any]]:
    """``crictl ps -a`` entries of container ``name`` in the newest sandbox, oldest first."""
    out = json.loads(crictl(lab.crictl, "ps", "-a", "--name", f"^{name}$", "-o", "json").stdout)["containers"]
    newest = max(out, key=lambda c: int(c["createdAt"]))["podSandboxId"] if out else ""
    return sorted((c for c in out if c["podSandboxId"] == newest), key=lambda c: int(c["createdAt"]))


def logs(lab: LabHandle, cid: str, *args: str) -> tuple[int, str, str]:
    proc = crictl(lab.crictl, "logs", *args, cid)
    return proc.returncode, proc.stdout, proc.stderr


def status_of(pod: Optional[dict[str, Any]]) -> dict[str, Any]:
    return ((pod or {}).get("status", {}).get("containerStatuses") or [{}])[0]


def refused(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) != 0


def crashlooping(lab: LabHandle, component: str, restarts: int = 2) -> dict[str, Any]:
    """Wait until the component's mirror shows CrashLoopBackOff with at least ``restarts`` restarts."""
    def looping() -> Optional[dict[str, Any]]:
        pod = mirror(lab, component)
        st = status_of(pod)
        waiting = (st.get("state") or {}).get("waiting") or {}
        return pod if waiting.get("reason") == "CrashLoopBackOff" and st["restartCount"] >= restarts else None

    return wait_for(looping, timeout=30, what=f"{component} in CrashLoopBackOff")


# --------------------------------------------------------------------------- (b) values the flag cannot parse


def test_unparsable_port_crashloops_with_backoff_and_status(lab_factory):
    lab = lab_factory(time_scale=SCALE)
    port = lab.ports()["scheduler"]
    edit_manifest(lab, "kube-scheduler", ["--secure-port=abc"], drop="secure-port")
    pod = crashlooping(lab, "kube-scheduler")
    st = status_of(pod)
    assert pod["status"]["phase"] == "Running" and not is_ready(pod)
    assert st["ready"] is False and st["started"] is False
    assert st["lastState"]["terminated"]["exitCode"] == 1 and st["lastState"]["terminated"]["reason"] == "Error"
    assert re.match(r"back-off \d+s restarting failed container=kube-scheduler pod=kube-scheduler-lab-master1_"
                    r"kube-system\(\w+\)$", st["state"]["waiting"]["message"])
    assert "CrashLoopBackOff" in kubectl(lab, "get", "pods", "-n", "kube-system").stdout
    assert refused(port)  # the health endpoint of a crashing component refuses connections
    runs = attempts(lab, "kube-scheduler")
    assert [c["metadata"]["attempt"] for c in runs] == list(range(len(runs))) and len(runs) >= 2
    assert all(c["state"] == "CONTAINER_EXITED" for c in runs[:-1])
    # restartCount is the attempt number of the newest container (the one in back-off included)
    assert st["restartCount"] >= 1 and f"containerd://{runs[st['restartCount']]['id']}" == st["containerID"]
    info = json.loads(crictl(lab.crictl, "inspect", runs[0]["id"]).stdout)["status"]
    assert info["exitCode"] == 1 and info["reason"] == "Error"
    code, out, err = logs(lab, runs[0]["id"], "--tail", "1")
    assert code == 0 and out == ""  # the component writes to stderr, crictl logs keeps the stream
    assert err == ('Error: invalid argument "abc" for "--secure-port" flag: '
                   'strconv.ParseInt: parsing "abc": invalid syntax\n')
    assert "Usage:\n  kube-scheduler [flags]" in logs(lab, runs[0]["id"])[2]


def test_backoff_doubles_and_restart_count_grows(lab_factory):
    lab = lab_factory(time_scale=SCALE)
    edit_manifest(lab, "kube-controller-manager", ["--v=x"])
    messages: list[str] = []
    deadline = time.monotonic() + 4.5
    while time.monotonic() < deadline and len(messages) < 3:
        waiting = (status_of(mirror(lab, "kube-controller-manager")).get("state") or {}).get("waiting") or {}
        text = str(waiting.get("message", ""))
        backoff = text.split(" restarting")[0]
        if backoff.startswith("back-off") and backoff not in messages:
            messages.append(backoff)
        time.sleep(0.03)
    assert messages == ["back-off 10s", "back-off 20s", "back-off 40s"]
    first = attempts(lab, "kube-controller-manager")[0]
    assert logs(lab, first["id"])[2].splitlines()[-1] == (
        'Error: invalid argument "x" for "-v, --v" flag: strconv.ParseInt: parsing "x": invalid syntax')


# --------------------------------------------------------------------------- (a) unknown flags


def test_unknown_flag_on_the_apiserver_takes_the_api_down_and_back(lab_factory, tmp_path):
    lab = lab_factory(time_scale=SCALE)
    good = (lab.manifests_dir() / "kube-apiserver.yaml").read_text()
    edit_manifest(lab, "kube-apiserver", ["--enable-admision-plugins=NodeRestriction"])
    wait_for(lambda: refused(int(lab.api_url.rsplit(":", 1)[1])), what="API down")
    runs = wait_for(lambda: len(r := attempts(lab, "kube-apiserver")) >= 2 and r, what="restarts")
    code, out, err = logs(lab, runs[0]["id"])
    assert err.splitlines()[-1] == "Error: unknown flag: --enable-admision-plugins"
    assert err.startswith("Usage:\n  kube-apiserver [flags]\n")
    assert refused(lab.ports()["apiserver"])
    path = lab.manifests_dir() / "kube-apiserver.yaml"
    (tmp_path / "api.yaml").write_text(good)
    (tmp_path / "api.yaml").rename(path)  # what cpctl apply's rollback does
    wait_for(lambda: api(lab, "GET", "/version")[0] == 200, timeout=30, what="API back")
    wait_for(lambda: is_ready(mirror(lab, "kube-apiserver")), timeout=30, what="apiserver Ready")


def test_etcd_flag_errors_exit_2_with_go_flag_messages(lab_factory):
    lab = lab_factory(time_scale=SCALE)
    edit_manifest(lab, "etcd", ["--quota-backend-bytes=lots", "--experimental-foo"])
    wait_for(lambda: api(lab, "GET", "/api/v1/nodes")[0] == 500, what="no etcd quorum")
    runs = wait_for(lambda: len(r := attempts(lab, "etcd")) >= 2 and r, what="etcd restarted")
    info = json.loads(crictl(lab.crictl, "inspect", runs[0]["id"]).stdout)["status"]
    assert info["exitCode"] == 2
    err = logs(lab, runs[0]["id"])[2]
    assert err.splitlines()[0] == 'invalid value "lots" for flag -quota-backend-bytes: parse error'


# --------------------------------------------------------------------------- values validated after parsing


def test_unknown_admission_plugin_is_a_runtime_error_in_klog_format(lab_factory):
    lab = lab_factory(time_scale=SCALE)
    edit_manifest(lab, "kube-apiserver", ["--enable-admission-plugins=NodeRestriction,PodSecurityPolicy"],
                  drop="enable-admission-plugins")
    runs = wait_for(lambda: len(r := attempts(lab, "kube-apiserver")) >= 2 and r, what="apiserver restarted")
    lines = logs(lab, runs[0]["id"])[2].splitlines()
    assert all(KLOG.match(line) for line in lines), lines
    assert lines[-1].startswith("E") and lines[-1].endswith(
        ' run.go:72] "command failed" err="enable-admission-plugins plugin \\"PodSecurityPolicy\\" is unknown"')


# --------------------------------------------------------------------------- (c) files through the volume mounts


def test_missing_file_crashloops_until_it_appears_on_the_node(lab_factory):
    lab = lab_factory(time_scale=SCALE)
    edit_manifest(lab, "kube-controller-manager", ["--root-ca-file=/etc/kubernetes/pki/extra-ca.crt"],
                  drop="root-ca-file")
    crashlooping(lab, "kube-controller-manager", restarts=1)
    first = attempts(lab, "kube-controller-manager")[0]
    assert logs(lab, first["id"])[2].splitlines()[-1].endswith(
        '"command failed" err="open /etc/kubernetes/pki/extra-ca.crt: no such file or directory"')
    # the pki dir is a hostPath volume: the file on the node side is what the container sees
    (lab.root_dir() / "etc/kubernetes/pki/extra-ca.crt").write_text((lab.root_dir() / "etc/kubernetes/pki/ca.crt")
                                                                      .read_text())
    wait_for(lambda: is_ready(mirror(lab, "kube-controller-manager")), timeout=30, what="healthy once the file exists")
    assert status_of(mirror(lab, "kube-controller-manager"))["restartCount"] >= 1


def test_a_flag_path_outside_every_mount_is_missing(lab_factory):
    lab = lab_factory(time_scale=SCALE)
    edit_manifest(lab, "kube-scheduler", ["--kubeconfig=/etc/kubernetes/other.conf"], drop="kubeconfig")
    crashlooping(lab, "kube-scheduler", restarts=1)
    first = attempts(lab, "kube-scheduler")[0]
    assert logs(lab, first["id"])[2].splitlines()[-1].endswith(
        '"command failed" err="stat /etc/kubernetes/other.conf: no such file or directory"')


def test_a_deleted_kubeconfig_comes_back_empty_through_file_or_create(lab_factory, tmp_path):
    lab = lab_factory(time_scale=SCALE)
    conf = lab.root_dir() / "etc/kubernetes/scheduler.conf"
    m = lab.manifests_dir() / "kube-scheduler.yaml"
    m.rename(tmp_path / "s.yaml")
    wait_for(lambda: mirror(lab, "kube-scheduler") is None, what="scheduler parked")
    conf.unlink()
    (tmp_path / "s.yaml").rename(m)
    crashlooping(lab, "kube-scheduler", restarts=1)
    assert conf.is_file() and conf.stat().st_size == 0  # the kubelet created it (FileOrCreate), empty
    first = attempts(lab, "kube-scheduler")[0]
    assert logs(lab, first["id"])[2].splitlines()[-1].endswith(
        '"command failed" err="invalid configuration: no configuration has been provided, try setting '
        'KUBERNETES_MASTER environment variable"')


def test_missing_file_hostpath_keeps_the_pod_in_container_creating(lab_factory, tmp_path):
    lab = lab_factory(time_scale=SCALE)
    extra = "/etc/kubernetes/policy.yaml"                     # a node path: under the node's root dir
    on_node = lab.root_dir() / extra.lstrip("/")
    path = lab.manifests_dir() / "kube-scheduler.yaml"
    pod = yaml.safe_load(path.read_text())
    pod["spec"]["volumes"].append({"name": "policy", "hostPath": {"path": extra, "type": "File"}})
    pod["spec"]["containers"][0]["volumeMounts"].append({"name": "policy", "mountPath": "/etc/policy.yaml"})
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(pod))
    (tmp_path / "s.yaml").rename(path)

    def creating() -> Optional[dict[str, Any]]:
        pod = mirror(lab, "kube-scheduler")
        waiting = (status_of(pod).get("state") or {}).get("waiting") or {}
        return pod if waiting.get("reason") == "ContainerCreating" else None

    pod = wait_for(creating, what="ContainerCreating")
    assert pod["status"]["phase"] == "Pending" and not is_ready(pod)
    assert crictl(lab.crictl, "pods", "--name", "^kube-scheduler-", "--state", "ready", "-q").stdout.strip() == ""
    events = json.loads(kubectl(lab, "get", "events", "-n", "kube-system", "-o", "json").stdout)["items"]
    failed = [e["message"] for e in events if e["reason"] == "FailedMount"]
    assert failed == [f'MountVolume.SetUp failed for volume "policy" : hostPath type check failed: {extra} '
                      "is not a file"]
    on_node.write_text("kind: Policy\n")
    wait_for(lambda: is_ready(mirror(lab, "kube-scheduler")), timeout=30, what="started once the file exists")


# --------------------------------------------------------------------------- crictl logs


def test_crictl_logs_of_healthy_components_and_previous_attempts(lab_factory):
    lab = lab_factory(time_scale=SCALE)
    (cid,) = crictl(lab.crictl, "ps", "-q", "--name", "^kube-apiserver$").stdout.split()
    code, out, err = logs(lab, cid)
    assert code == 0 and out == "" and len(err.splitlines()) >= 2
    assert all(KLOG.match(line) for line in err.splitlines())
    assert logs(lab, cid, "--tail", "1")[2] == err.splitlines()[-1] + "\n"
    (etcd,) = crictl(lab.crictl, "ps", "-q", "--name", "^etcd$").stdout.split()
    records = [json.loads(line) for line in logs(lab, etcd)[2].splitlines()]
    assert records[0]["level"] == "info" and records[0]["msg"].startswith("Running")
    stamped = logs(lab, cid, "--timestamps", "--tail", "1")[2]
    assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z [IWE]\d{4} ", stamped)
    assert logs(lab, cid, "--previous")[0] != 0  # attempt 0 has no previous instance
    edit_manifest(lab, "kube-scheduler", ["--scheduler-name=my-scheduler"])  # removed in v1.22
    crashlooping(lab, "kube-scheduler", restarts=2)
    runs = attempts(lab, "kube-scheduler")
    code, _, previous = logs(lab, runs[1]["id"], "--previous")
    assert code == 0 and previous == logs(lab, runs[0]["id"])[2]
    assert previous.splitlines()[-1] == "Error: unknown flag: --scheduler-name"


def test_an_audit_policy_no_mount_covers_crashloops_with_the_real_line(lab_factory):
    lab = lab_factory(time_scale=SCALE)
    policy = lab.root_dir() / "etc/kubernetes/audit/policy.yaml"
    policy.parent.mkdir(parents=True)
    policy.write_text("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n")
    # the file is on the node, but no hostPath volume puts /etc/kubernetes/audit into the container
    edit_manifest(lab, "kube-apiserver", ["--audit-policy-file=/etc/kubernetes/audit/policy.yaml"])
    wait_for(lambda: refused(int(lab.api_url.rsplit(":", 1)[1])), what="API down")
    runs = wait_for(lambda: len(r := attempts(lab, "kube-apiserver")) >= 2 and r, what="restarts")
    assert logs(lab, runs[0]["id"])[2].splitlines()[-1].endswith(
        '"command failed" err="loading audit policy file: open /etc/kubernetes/audit/policy.yaml: no such file or '
        'directory"')
