"""crictl shim, leader Leases, health endpoints, scheduler profiles, multi-master, and the lab CLI."""

# ruff: noqa: F811  (pytest fixtures are imported by name and then used as parameters)
from __future__ import annotations

import json
import os
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
import yaml

from cpctl_lab.control import package_root, read_state
from cpctl_lab.httpserve import free_port
from tests.labfixture import api, get_pod, is_ready, kubectl, lab, lab3, mirror, wait_for  # noqa: F401


def crictl(path: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([path, *args], capture_output=True, text=True, timeout=10)


def _get(url: str) -> int:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, timeout=2, context=ctx) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_crictl_shapes(lab, tmp_path):
    pods = json.loads(
        crictl(lab.crictl, "pods", "--name", "^kube-scheduler-lab-master1$", "-o", "json").stdout
    )
    assert len(pods["items"]) == 1
    sb = pods["items"][0]
    assert sb["state"] == "SANDBOX_READY" and sb["metadata"]["namespace"] == "kube-system"
    assert int(sb["createdAt"]) > 10**18
    uid = mirror(lab, "kube-scheduler")["metadata"]["annotations"]["kubernetes.io/config.hash"]
    assert sb["metadata"]["uid"] == sb["labels"]["io.kubernetes.pod.uid"] == uid
    assert sb["annotations"]["kubernetes.io/config.source"] == "file"
    ps = json.loads(crictl(lab.crictl, "ps", "--name", "^kube-scheduler$", "-o", "json").stdout)
    (ctr,) = ps["containers"]
    assert ctr["podSandboxId"] == sb["id"] and ctr["state"] == "CONTAINER_RUNNING" and len(ctr["id"]) == 64
    assert ctr["labels"]["io.kubernetes.container.name"] == "kube-scheduler"
    assert ctr["image"]["image"].startswith("registry.k8s.io/kube-scheduler:")
    ids = crictl(lab.crictl, "ps", "-q", "--pod", sb["id"]).stdout.split()
    assert ids == [ctr["id"]]
    # unanchored regex, like the real crictl
    assert len(json.loads(crictl(lab.crictl, "ps", "--name", "kube", "-o", "json").stdout)["containers"]) == 3
    assert (
        len(json.loads(crictl(lab.crictl, "pods", "--namespace", "system", "-o", "json").stdout)["items"])
        == 4
    )
    info = json.loads(crictl(lab.crictl, "inspect", ctr["id"]).stdout)
    assert info["status"]["id"] == ctr["id"] and info["info"]["pid"] > 0 and info["status"]["startedAt"]
    assert json.loads(crictl(lab.crictl, "inspectp", sb["id"]).stdout)["status"]["id"] == sb["id"]
    assert "RuntimeName:  containerd" in crictl(lab.crictl, "version").stdout
    table = crictl(lab.crictl, "ps").stdout.splitlines()
    assert table[0].split()[:2] == ["CONTAINER", "IMAGE"] and len(table) == 5
    # parked -> exited container stays listed under -a, gone from the default listing
    mdir = lab.manifests_dir()
    (mdir / "kube-scheduler.yaml").rename(tmp_path / "kube-scheduler.yaml")
    wait_for(lambda: not crictl(lab.crictl, "ps", "-q", "--name", "^kube-scheduler$").stdout.strip())
    exited = json.loads(crictl(lab.crictl, "ps", "-a", "--name", "^kube-scheduler$", "-o", "json").stdout)
    assert [c["state"] for c in exited["containers"]] == ["CONTAINER_EXITED"]
    assert json.loads(crictl(lab.crictl, "ps", "--state", "exited", "-o", "json").stdout)["containers"]
    notready = json.loads(crictl(lab.crictl, "pods", "--name", "scheduler", "-o", "json").stdout)["items"]
    assert [s["state"] for s in notready] == ["SANDBOX_NOTREADY"]
    assert crictl(lab.crictl, "inspect", "0000000").returncode != 0


def test_leases_renew_only_while_component_runs(lab, tmp_path):
    def lease(name: str) -> dict:
        return api(lab, "GET", f"/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/{name}")[1][
            "spec"
        ]

    first = lease("kube-scheduler")
    assert first["holderIdentity"].startswith("lab-master1_")
    wait_for(lambda: lease("kube-scheduler")["renewTime"] != first["renewTime"], what="renewal")
    assert lease("kube-scheduler")["holderIdentity"] == first["holderIdentity"]
    assert lease("kube-controller-manager")["holderIdentity"].startswith("lab-master1_")
    mdir = lab.manifests_dir()
    (mdir / "kube-scheduler.yaml").rename(tmp_path / "kube-scheduler.yaml")
    wait_for(lambda: mirror(lab, "kube-scheduler") is None)
    parked = lease("kube-scheduler")
    time.sleep(0.6)  # three renew periods
    assert lease("kube-scheduler")["renewTime"] == parked["renewTime"]
    (tmp_path / "kube-scheduler.yaml").rename(mdir / "kube-scheduler.yaml")
    back = wait_for(lambda: (s := lease("kube-scheduler"))["holderIdentity"] and s, what="new leader")
    assert back["holderIdentity"] != first["holderIdentity"]
    assert back["leaseTransitions"] == first["leaseTransitions"] + 1


def test_health_endpoints_follow_pods(lab, tmp_path):
    ports = lab.ports()
    urls = {
        "kube-apiserver": f"https://127.0.0.1:{ports['apiserver']}/readyz",
        "kube-controller-manager": f"https://127.0.0.1:{ports['controller-manager']}/healthz",
        "kube-scheduler": f"https://127.0.0.1:{ports['scheduler']}/healthz",
        "etcd": f"http://127.0.0.1:{ports['etcd-metrics']}/readyz",
    }
    for url in urls.values():
        assert _get(url) == 200, url
    assert _get(f"https://127.0.0.1:{ports['apiserver']}/livez") == 200
    assert _get(f"http://127.0.0.1:{ports['etcd-metrics']}/livez") == 200
    mdir = lab.manifests_dir()
    (mdir / "kube-controller-manager.yaml").rename(tmp_path / "kcm.yaml")

    def down() -> bool:
        try:
            _get(urls["kube-controller-manager"])
        except urllib.error.URLError:
            return True
        return False

    wait_for(down, what="kcm health listener closed")
    (tmp_path / "kcm.yaml").rename(mdir / "kube-controller-manager.yaml")
    wait_for(lambda: _get(urls["kube-controller-manager"]) == 200, what="kcm healthy again")


SECOND = """apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection: {leaderElect: true, resourceName: my-scheduler, resourceNamespace: kube-system}
profiles:
- schedulerName: my-scheduler
"""


def test_scheduler_name_and_second_scheduler(lab, tmp_path):
    kubectl(lab, "run", "custom", "--image=nginx", "--overrides", '{"spec":{"schedulerName":"my-scheduler"}}')
    time.sleep(0.3)
    assert not get_pod(lab, "default", "custom")["spec"].get("nodeName")
    conf_dir = lab.root_dir() / "etc" / "my-scheduler"       # the node's /etc/my-scheduler
    conf_dir.mkdir()
    (conf_dir / "my-scheduler.yaml").write_text(SECOND)
    mdir = lab.manifests_dir()
    pod = yaml.safe_load((mdir / "kube-scheduler.yaml").read_text())
    c = pod["spec"]["containers"][0]
    pod["metadata"]["name"] = c["name"] = "my-scheduler"
    port = free_port()
    c["command"] = [a for a in c["command"] if not a.startswith("--secure-port")]
    c["command"] += ["--config=/etc/my-scheduler/my-scheduler.yaml", f"--secure-port={port}"]
    for key in ("livenessProbe", "startupProbe"):
        c[key]["httpGet"]["port"] = port
    c["volumeMounts"].append({"name": "conf", "mountPath": "/etc/my-scheduler", "readOnly": True})
    pod["spec"]["volumes"].append({"name": "conf", "hostPath": {"path": "/etc/my-scheduler", "type": "Directory"}})
    (tmp_path / "my.yaml").write_text(yaml.safe_dump(pod))
    (tmp_path / "my.yaml").rename(mdir / "my-scheduler.yaml")
    wait_for(
        lambda: get_pod(lab, "default", "custom")["spec"].get("nodeName") == "lab-worker1",
        what="my-scheduler bound the pod",
    )
    wait_for(lambda: _get(f"https://127.0.0.1:{port}/healthz") == 200, what="my-scheduler healthz")
    lease = api(lab, "GET", "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/my-scheduler")[1]
    assert lease["spec"]["holderIdentity"].startswith("lab-master1_")
    evs = json.loads(kubectl(lab, "get", "events", "-o", "json").stdout)["items"]
    assert any(e["reason"] == "Scheduled" and e["source"]["component"] == "my-scheduler" for e in evs)
    # default-scheduler pods are still served by the kubeadm scheduler
    kubectl(lab, "run", "plain", "--image=nginx")
    wait_for(lambda: get_pod(lab, "default", "plain")["spec"].get("nodeName"), what="default scheduled")


def test_three_masters(lab3, tmp_path):
    assert lab3.masters == ["lab-master1", "lab-master2", "lab-master3"]
    out = kubectl(lab3, "get", "pods", "-n", "kube-system", "-l", "component=etcd").stdout
    assert out.count("Running") == 3
    leases = kubectl(lab3, "get", "leases", "-n", "kube-system", "-o", "json").stdout
    assert len(json.loads(leases)["items"]) == 2
    # one etcd member down keeps quorum; two down loses it
    m2, m3 = lab3.manifests_dir(2), lab3.manifests_dir(3)
    (m2 / "etcd.yaml").rename(tmp_path / "etcd2.yaml")
    wait_for(lambda: mirror(lab3, "etcd", 2) is None, what="etcd2 mirror gone")
    (m3 / "etcd.yaml").rename(tmp_path / "etcd3.yaml")
    wait_for(lambda: api(lab3, "GET", "/api/v1/nodes")[0] == 500, what="quorum lost")
    (tmp_path / "etcd3.yaml").rename(m3 / "etcd.yaml")
    wait_for(lambda: api(lab3, "GET", "/api/v1/nodes")[0] == 200, what="quorum back")
    # the API stays up while any apiserver runs
    (lab3.manifests_dir(1) / "kube-apiserver.yaml").rename(tmp_path / "api1.yaml")
    wait_for(lambda: mirror(lab3, "kube-apiserver", 1) is None, what="apiserver1 mirror gone")
    assert api(lab3, "GET", "/version")[0] == 200
    env2 = lab3.env_for(2)
    assert env2["CPCTL_NODE_NAME"] == "lab-master2" and env2["CPCTL_MANIFESTS_DIR"] == str(m2)
    ps = json.loads(crictl(env2["CPCTL_CRICTL"], "ps", "-o", "json").stdout)["containers"]
    assert {c["labels"]["io.kubernetes.pod.name"] for c in ps} == {
        "kube-apiserver-lab-master2",
        "kube-controller-manager-lab-master2",
        "kube-scheduler-lab-master2",
    }


@pytest.mark.lab       # starts a lab through `cpctl lab ...` (no fixture says so)
def test_cli_up_env_down(tmp_path):
    d = tmp_path / "cli"
    env = dict(os.environ, PYTHONPATH=package_root())
    cmd = [sys.executable, "-m", "cpctl_lab"]
    fast = ["--start-lag", "0.05", "--ready-lag", "0.05", "--stop-lag", "0.05"]
    up = subprocess.run(
        [*cmd, "up", "--dir", str(d), *fast], capture_output=True, text=True, env=env, timeout=30
    )
    try:
        assert up.returncode == 0, up.stderr
        lines = up.stdout.splitlines()
        assert [ln.split("=", 1)[0] for ln in lines] == [
            "export CPCTL_MANIFESTS_DIR",
            "export CPCTL_STATE_DIR",
            "export CPCTL_NODE_NAME",
            "export KUBECONFIG",
            "export CPCTL_CRICTL",
            "export CPCTL_KUBELET_DIR",
            "export CPCTL_NODE_ROOT",
        ]
        assert f"export CPCTL_STATE_DIR={d}/state-lab-master1" in lines
        assert (d / "env").read_text() == up.stdout
        again = subprocess.run(
            [*cmd, "up", "--dir", str(d)], capture_output=True, text=True, env=env, timeout=30
        )
        # like systemctl start: already up is success, and the env is printed again (eval-safe)
        assert again.returncode == 0 and "already running" in again.stderr and again.stdout == up.stdout
        assert len(again.stderr.strip().splitlines()) == 1
        out = subprocess.run(
            [*cmd, "env", "--dir", str(d)], capture_output=True, text=True, env=env, timeout=10
        )
        assert out.stdout == up.stdout
        bad = subprocess.run(
            [*cmd, "env", "--dir", str(d), "--master", "2"],
            capture_output=True,
            text=True,
            env=env,
            timeout=10,
        )
        assert bad.returncode != 0 and "Traceback" not in bad.stderr
        state = read_state(d)
        assert state["pid"] and state["control"]["url"] and state["masters"][0]["ports"]["apiserver"]
    finally:
        down = subprocess.run(
            [*cmd, "down", "--dir", str(d)], capture_output=True, text=True, env=env, timeout=30
        )
    assert down.returncode == 0, down.stderr
    assert read_state(d)["pid"] is None
    again = subprocess.run(
        [*cmd, "down", "--dir", str(d)], capture_output=True, text=True, env=env, timeout=30
    )
    assert again.returncode == 0 and "nothing to stop" in again.stdout


def test_free_ports_are_distinct_and_below_the_ephemeral_range(monkeypatch: pytest.MonkeyPatch) -> None:
    """The lab binds its ports well after choosing them: a port of the ephemeral range could
    meanwhile be some outgoing connection's local port (seen in CI: the API port held for 20 s).
    The default choice, so without a ``CPCTL_LAB_PORTS`` range of the one running the tests."""
    monkeypatch.delenv("CPCTL_LAB_PORTS", raising=False)
    from cpctl_lab import httpserve
    low = httpserve._ephemeral_low()
    ports = [free_port() for _ in range(40)]
    assert len(set(ports)) == len(ports)
    assert all(httpserve._LOWEST <= port < low for port in ports), (low, sorted(ports))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", ports[-1]))       # and free when handed out
