"""`cpctl scheduler add|remove|list` on real files through the real CLI (no cluster needed).

The node is a kubeadm v1.30-like manifests dir in a tmp dir; --probe none, so only the files
are checked here (tests/ops/test_secondsched_lab.py runs the same commands against the lab).
"""

from __future__ import annotations

import json
import os
import socket
import stat
from typing import Optional

import pytest
import yaml

from cpctl.core import manifests
from cpctl.host.local import LocalHost
from cpctl.ops import scheduler as secondsched
from cpctl.probes.base import PodTarget
from cpctl.probes.lease import lease_name, uses_lease
from tests.coreutil import NodeDirs, check_result, snapshot

SCHEDULER = """\
apiVersion: v1
kind: Pod
metadata:
  labels:
    component: kube-scheduler
    tier: control-plane
  name: kube-scheduler
  namespace: kube-system
spec:
  containers:
  - command:
    - kube-scheduler
    - --authentication-kubeconfig=/etc/kubernetes/scheduler.conf
    - --authorization-kubeconfig=/etc/kubernetes/scheduler.conf
    - --bind-address=127.0.0.1
    - --kubeconfig=/etc/kubernetes/scheduler.conf
    - --leader-elect=true
    image: registry.k8s.io/kube-scheduler:{version}
    imagePullPolicy: IfNotPresent
    livenessProbe:
      failureThreshold: 8
      httpGet:
        host: 127.0.0.1
        path: /healthz
        port: 10259
        scheme: HTTPS
      initialDelaySeconds: 10
    name: kube-scheduler
    readinessProbe:
      httpGet:
        host: 127.0.0.1
        path: /healthz
        port: 10259
        scheme: HTTPS
    startupProbe:
      failureThreshold: 24
      httpGet:
        host: 127.0.0.1
        path: /healthz
        port: 10259
        scheme: HTTPS
    volumeMounts:
    - mountPath: /etc/kubernetes/scheduler.conf
      name: kubeconfig
      readOnly: true
  hostNetwork: true
  priority: 2000001000
  priorityClassName: system-node-critical
  securityContext:
    seccompProfile:
      type: RuntimeDefault
  volumes:
  - hostPath:
      path: /etc/kubernetes/scheduler.conf
      type: FileOrCreate
    name: kubeconfig
status: {}
"""

CUSTOM = """\
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: kube-system
spec:
  containers:
  - name: c
    image: registry.k8s.io/pause:3.9
    command: [pause, --secure-port={port}]
  hostNetwork: true
"""


def scheduler_yaml(version: str = "v1.30.4") -> bytes:
    return SCHEDULER.replace("{version}", version).encode()


class Node(NodeDirs):
    """A node dir plus a config dir; ``cli`` runs cpctl and returns (proc, parsed JSON or None)."""

    def __init__(self, root: str, files: dict) -> None:
        super().__init__(root, files=files)
        self.config_dir = os.path.join(root, "etc-kubernetes")
        os.makedirs(self.config_dir)

    def cli(self, *args: str, rc: Optional[int] = 0) -> tuple:
        proc = self.run("-o", "json", "scheduler", *args, rc=rc)
        return proc, (json.loads(proc.stdout) if proc.returncode == 0 else None)

    def add(self, name: str = "my-scheduler", *extra: str, rc: Optional[int] = 0) -> tuple:
        return self.cli("add", name, "--config-dir", self.config_dir, *extra, rc=rc)

    def read(self, *parts: str) -> bytes:
        with open(os.path.join(*parts), "rb") as handle:
            return handle.read()

    def snap(self) -> dict:
        return snapshot(self.manifests, self.config_dir, self.state)


@pytest.fixture
def node(tmp_path) -> Node:
    return Node(str(tmp_path), {"kube-scheduler.yaml": scheduler_yaml()})


def _container(pod: dict) -> dict:
    return pod["spec"]["containers"][0]


# --- the generated files ------------------------------------------------------------------------
def test_add_writes_a_valid_pod_and_config(node):
    _, data = node.add()
    manifest = node.read(node.manifests, "my-scheduler.yaml")
    pod = manifests.parse_pod(manifest)
    meta, ctr = pod["metadata"], _container(pod)
    assert (meta["name"], meta["namespace"]) == ("my-scheduler", "kube-system")
    assert meta["labels"] == {"component": "my-scheduler", "tier": "control-plane"}
    assert meta["annotations"][secondsched.GENERATED_BY] == "scheduler-add"
    config_path = os.path.join(node.config_dir, "my-scheduler-config.yaml")
    args = ctr["command"]
    assert args[0] == "kube-scheduler" and "--config=%s" % config_path in args
    assert "--bind-address=127.0.0.1" in args and "--authentication-kubeconfig=/etc/kubernetes/scheduler.conf" in args
    assert not [a for a in args if a.startswith(("--kubeconfig", "--leader-elect", "--scheduler-name",
                                                 "--lock-object"))]
    port = data["port"]
    assert port != 10259 and port >= secondsched.FIRST_PORT and "--secure-port=%d" % port in args
    assert [ctr[k]["httpGet"]["port"] for k in ("livenessProbe", "readinessProbe", "startupProbe")] == [port] * 3
    volume = [v for v in pod["spec"]["volumes"] if v["hostPath"]["path"] == config_path]
    mount = [m for m in ctr["volumeMounts"] if m["mountPath"] == config_path]
    assert volume[0]["hostPath"]["type"] == "File" and mount[0]["readOnly"] is True
    assert volume[0]["name"] == mount[0]["name"]
    config = yaml.safe_load(node.read(config_path))
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1" and config["kind"] == "KubeSchedulerConfiguration"
    assert config["profiles"] == [{"schedulerName": "my-scheduler"}]
    assert config["leaderElection"] == {"leaderElect": True, "resourceName": "my-scheduler",
                                        "resourceNamespace": "kube-system"}
    assert config["clientConnection"]["kubeconfig"] == "/etc/kubernetes/scheduler.conf"
    assert stat.S_IMODE(os.stat(config_path).st_mode) == 0o644
    assert stat.S_IMODE(os.stat(os.path.join(node.manifests, "my-scheduler.yaml")).st_mode) == 0o600
    assert [r["action"] for r in node.history()] == ["scheduler-add"]
    assert node.history()[0]["config"] == config_path and node.history()[0]["port"] == port


def test_source_untouched_and_no_temp_files(node):
    before = node.read(node.manifests, "kube-scheduler.yaml")
    node.add()
    assert node.read(node.manifests, "kube-scheduler.yaml") == before
    assert sorted(os.listdir(node.manifests)) == ["kube-scheduler.yaml", "my-scheduler.yaml"]
    assert sorted(os.listdir(node.config_dir)) == ["my-scheduler-config.yaml"]


def test_kubeconfig_from_authentication_flag_and_split_args(tmp_path):
    pod = yaml.safe_load(scheduler_yaml())
    ctr = _container(pod)
    ctr["args"] = [a for a in ctr["command"][1:] if not a.startswith("--kubeconfig")]
    ctr["args"] = [a.replace("/etc/kubernetes/scheduler.conf", "/srv/s.conf") for a in ctr["args"]]
    ctr["command"] = ["kube-scheduler"]
    node = Node(str(tmp_path), {"kube-scheduler.yaml": yaml.safe_dump(pod).encode()})
    node.add()
    new = manifests.parse_pod(node.read(node.manifests, "my-scheduler.yaml"))
    assert "args" not in _container(new) and "--bind-address=127.0.0.1" in _container(new)["command"]
    config = yaml.safe_load(node.read(node.config_dir, "my-scheduler-config.yaml"))
    assert config["clientConnection"]["kubeconfig"] == "/srv/s.conf"


def test_null_volumes_and_mounts_are_empty_lists(tmp_path):
    """The kubelet decodes ``volumes: null`` and ``volumeMounts: null`` as empty: so does add (it
    ended in an internal error, exit 70)."""
    pod = yaml.safe_load(scheduler_yaml())
    pod["spec"]["volumes"] = None
    _container(pod)["volumeMounts"] = None
    node = Node(str(tmp_path), {"kube-scheduler.yaml": yaml.safe_dump(pod).encode()})
    node.add()
    new = manifests.parse_pod(node.read(node.manifests, "my-scheduler.yaml"))
    config_path = os.path.join(node.config_dir, "my-scheduler-config.yaml")
    assert [v["hostPath"]["path"] for v in new["spec"]["volumes"]] == [config_path]
    assert [m["mountPath"] for m in _container(new)["volumeMounts"]] == [config_path]


@pytest.mark.parametrize("version,api", [("v1.23.17", "v1beta3"), ("v1.24.0", "v1beta3"), ("v1.25.0", "v1"),
                                         ("v1.30.4", "v1"), ("v1.31.0-rc.1", "v1")])
def test_config_api_follows_image_version(tmp_path, version, api):
    node = Node(str(tmp_path), {"kube-scheduler.yaml": scheduler_yaml(version)})
    node.add()
    config = yaml.safe_load(node.read(node.config_dir, "my-scheduler-config.yaml"))
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/" + api


@pytest.mark.parametrize("version", ["v1.22.17", "v1.18.0", "latest", "", "v1"])
def test_old_or_unknown_version_refused(tmp_path, version):
    data = scheduler_yaml(version).replace(b"kube-scheduler:\n", b"kube-scheduler\n")
    node = Node(str(tmp_path), {"kube-scheduler.yaml": data})
    before = node.snap()
    proc, _ = node.add(rc=4)
    assert ("too old" in proc.stderr) if version.startswith("v1.") and version != "v1" else "version" in proc.stderr
    assert node.snap() == before


def test_image_version_parsing():
    assert secondsched.image_version("registry.k8s.io/kube-scheduler:v1.30.4") == (1, 30)
    assert secondsched.image_version("reg.local:5000/k8s/kube-scheduler:v1.24.2@sha256:" + "0" * 64) == (1, 24)
    with pytest.raises(secondsched.CpctlError):
        secondsched.image_version("reg.local:5000/kube-scheduler")


def test_drop_flags_handles_two_token_forms():
    args = ["--kubeconfig", "/a", "--leader-elect", "--leader-elect-resource-name", "x", "--lock-object-name=y",
            "--scheduler-name=z", "--v=2", "--secure-port", "10259", "--bind-address=0.0.0.0"]
    assert secondsched.drop_flags(args) == ["--v=2", "--bind-address=0.0.0.0"]


# --- refusals -----------------------------------------------------------------------------------
def test_no_scheduler_manifest_is_not_found(tmp_path):
    node = Node(str(tmp_path), {"etcd.yaml": CUSTOM.format(name="etcd", port=2381).encode()})
    proc, _ = node.add(rc=3)
    assert "no kube-scheduler manifest" in proc.stderr


@pytest.mark.parametrize("name", ["My-Scheduler", "my_scheduler", "-x", "x-", "a" * 64, "../x", "a.b", "é"])
def test_invalid_name_is_usage(node, name):
    before = node.snap()
    node.add(name, rc=2)
    assert node.snap() == before


@pytest.mark.parametrize("name", ["default-scheduler", "kube-scheduler", "scheduler", "etcd", "apiserver"])
def test_reserved_name_refused(node, name):
    before = node.snap()
    proc, _ = node.add(name, rc=4)
    assert "reserved" in proc.stderr and node.snap() == before


def test_clash_with_pod_file_or_parked_refused(tmp_path):
    files = {"kube-scheduler.yaml": scheduler_yaml(), "other.yaml": CUSTOM.format(name="podname", port=9).encode(),
             "batch.yaml": CUSTOM.format(name="batch", port=8).encode()}
    node = Node(str(tmp_path), files)
    for name in ("podname", "other"):
        node.add(name, rc=4)
    node.run("stop", "batch")
    before = node.snap()
    proc, _ = node.add("batch", rc=4)
    assert "parked" in proc.stderr and node.snap() == before


def test_second_add_of_same_name_refused(node):
    node.add()
    before = node.snap()
    node.add(rc=4)
    assert node.snap() == before


def test_foreign_config_file_not_overwritten(node):
    path = os.path.join(node.config_dir, "my-scheduler-config.yaml")
    with open(path, "w") as handle:
        handle.write("mine: true\n")
    proc, _ = node.add(rc=4)
    assert "already exists" in proc.stderr and node.read(path) == b"mine: true\n"
    assert not os.path.exists(os.path.join(node.manifests, "my-scheduler.yaml"))


def test_rerun_after_interrupted_add_reuses_identical_config(node):
    node.add()
    os.unlink(os.path.join(node.manifests, "my-scheduler.yaml"))   # as if killed between the two writes
    node.add()
    assert os.path.exists(os.path.join(node.manifests, "my-scheduler.yaml"))


# --- ports --------------------------------------------------------------------------------------
def _listen(port: int = 0) -> Optional[socket.socket]:
    sock = socket.socket()
    try:
        sock.bind(("127.0.0.1", port))
    except OSError:
        sock.close()
        return None
    sock.listen(1)
    return sock


def test_explicit_port_used_by_a_manifest_or_listening_refused(node):
    before = node.snap()
    proc, _ = node.add("my-scheduler", "--port", "10259", rc=4)
    assert "10259" in proc.stderr
    sock = _listen()
    assert sock is not None
    try:
        proc, _ = node.add("my-scheduler", "--port", str(sock.getsockname()[1]), rc=4)
        assert "listening" in proc.stderr
    finally:
        sock.close()
    assert node.snap() == before


def test_explicit_free_port_taken_as_is(node):
    sock = _listen()
    assert sock is not None
    port = sock.getsockname()[1]
    sock.close()
    _, data = node.add("my-scheduler", "--port", str(port))
    assert data["port"] == port


def test_auto_port_skips_manifest_parked_and_listening_ports(tmp_path):
    files = {"kube-scheduler.yaml": scheduler_yaml(), "a.yaml": CUSTOM.format(name="a", port=10260).encode(),
             "b.yaml": CUSTOM.format(name="b", port=10261).encode()}
    node = Node(str(tmp_path), files)
    node.run("stop", "b")
    sock = _listen(10262)
    try:
        _, data = node.add()
    finally:
        if sock:
            sock.close()
    assert data["port"] >= 10263 if sock else data["port"] >= 10262
    _, second = node.add("second")
    assert second["port"] not in (10259, 10260, 10261, data["port"])


# --- dry run ------------------------------------------------------------------------------------
def test_dry_run_changes_nothing_and_shows_plan(node):
    before = node.snap()
    proc = node.run("scheduler", "add", "my-scheduler", "--config-dir", node.config_dir, "--dry-run")
    assert node.snap() == before and not os.path.exists(node.state)
    assert "dry run" in proc.stdout and "schedulerName: my-scheduler" in proc.stdout
    assert "-    - --leader-elect=true" in proc.stdout and "+    - --config=" in proc.stdout
    _, data = node.add("my-scheduler", "--dry-run")
    assert data["changed"] is False and manifests.parse_pod(data["manifest"].encode())
    assert node.snap() == before


def test_remove_dry_run_changes_nothing(node):
    node.add()
    before = node.snap()
    _, data = node.cli("remove", "my-scheduler", "--dry-run")
    assert len(data["files"]) == 2 and node.snap() == before


# --- remove and list ----------------------------------------------------------------------------
def test_remove_restores_the_dirs_and_keeps_the_files(node):
    manifests_before, config_before = snapshot(node.manifests), snapshot(node.config_dir)
    _, added = node.add()
    generated = node.read(node.manifests, "my-scheduler.yaml")
    _, data = node.cli("remove", "my-scheduler")
    assert snapshot(node.manifests) == manifests_before and snapshot(node.config_dir) == config_before
    removed = data["removed_dir"]
    assert os.path.dirname(removed) == os.path.join(node.state, "removed")
    assert sorted(os.listdir(removed)) == ["my-scheduler-config.yaml", "my-scheduler.yaml"]
    assert node.read(removed, "my-scheduler.yaml") == generated
    assert stat.S_IMODE(os.stat(removed).st_mode) == 0o700
    assert [r["action"] for r in node.history()] == ["scheduler-add", "scheduler-remove"]
    node.cli("remove", "my-scheduler", rc=3)
    node.add()   # the name is free again
    assert added["port"] == node.cli("list")[1]["schedulers"][0]["port"]


def test_remove_refuses_what_cpctl_did_not_create(tmp_path):
    node = Node(str(tmp_path), {"kube-scheduler.yaml": scheduler_yaml(),
                                "batch.yaml": CUSTOM.format(name="batch", port=8).encode()})
    before = node.snap()
    proc, _ = node.cli("remove", "batch", rc=4)
    assert "not created by" in proc.stderr and node.snap() == before
    node.cli("remove", "kube-scheduler", rc=4)
    node.cli("remove", "nothing-here", rc=3)
    assert node.snap() == before


def test_list_and_remove_a_parked_scheduler(node):
    node.add()
    node.add("batch-scheduler", "--no-wait")
    _, data = node.cli("list")
    assert [(r["name"], r["state"]) for r in data["schedulers"]] == [("batch-scheduler", "present"),
                                                                    ("my-scheduler", "present")]
    node.run("stop", "my-scheduler")
    _, data = node.cli("list")
    assert {r["name"]: r["state"] for r in data["schedulers"]} == {"batch-scheduler": "present",
                                                                 "my-scheduler": "parked"}
    _, removed = node.cli("remove", "my-scheduler")
    assert sorted(os.listdir(removed["removed_dir"])) == ["my-scheduler-config.yaml", "my-scheduler.yaml",
                                                          "my-scheduler.yaml.json"]
    assert node.parked_files() == [] and os.listdir(os.path.join(node.state, "meta")) == []
    text = node.run("scheduler", "list").stdout
    assert "batch-scheduler" in text and "my-scheduler" not in text


def test_remove_after_manifest_vanished_takes_config_from_history(node):
    node.add()
    os.unlink(os.path.join(node.manifests, "my-scheduler.yaml"))
    _, data = node.cli("remove", "my-scheduler")
    assert os.listdir(data["removed_dir"]) == ["my-scheduler-config.yaml"]
    assert os.listdir(node.config_dir) == []


def test_drift_baseline_follows_add_and_remove(node):
    node.run("baseline")
    node.add()
    node.run("check")       # the generated scheduler is expected, not a stray
    node.cli("remove", "my-scheduler")
    node.run("check")       # and its removal is not "missing"


def test_text_output_explains_usage(node):
    proc = node.run("scheduler", "add", "my-scheduler", "--config-dir", node.config_dir)
    assert "schedulerName: my-scheduler" in proc.stdout and "kind: RoleBinding" in proc.stdout
    check_result(proc, 0)


# --- verify.lease_name --------------------------------------------------------------------------
def test_lease_name_reads_the_config_file(node):
    node.add()
    pod = manifests.parse_pod(node.read(node.manifests, "my-scheduler.yaml"))
    target = PodTarget("my-scheduler", "kube-system", "cp-1", pod, "my-scheduler.yaml")
    assert uses_lease(target) and lease_name(target, LocalHost()) == "my-scheduler"
    config = os.path.join(node.config_dir, "my-scheduler-config.yaml")
    with open(config, "w") as handle:
        yaml.safe_dump({"leaderElection": {"resourceName": "elsewhere"}}, handle)
    assert lease_name(target, LocalHost()) == "elsewhere"
    os.unlink(config)
    assert lease_name(target, LocalHost()) == "my-scheduler"   # falls back to the component
    default = PodTarget("kube-scheduler", "kube-system", "cp-1", yaml.safe_load(scheduler_yaml()))
    assert lease_name(default, LocalHost()) == "kube-scheduler" and uses_lease(default)
