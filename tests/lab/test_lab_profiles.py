"""Lab profiles reproduce real kubeadm nodes (real-node-facts.md, kubelet-kubeadm.md), one test per fact.

Each test starts its own lab (seconds), with the profile or options under test, and looks at it the
way a tool on a real node would: lab.json, the kubelet's files, the manifests, the real kubectl,
the crictl shim and the health endpoints over HTTP(S).
"""

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
from pathlib import Path
from typing import Any, Optional

import pytest
import yaml

from cpctl_lab.control import LabHandle, package_root, read_state
from tests.labfixture import (  # noqa: F401
    KUBECTL,
    api,
    crictl,
    get_pod,
    is_ready,
    kubectl,
    lab_factory,
    mirror,
    wait_for,
)

COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
VERSIONS = {"1.30": "v1.30.", "1.31": "v1.31.", "1.32": "v1.32.", "1.33": "v1.33.", "1.34": "v1.34."}


# --------------------------------------------------------------------------- helpers


def manifest(handle: LabHandle, component: str, master: int = 1) -> dict[str, Any]:
    return yaml.safe_load((handle.manifests_dir(master) / f"{component}.yaml").read_text())


def container(pod: dict[str, Any]) -> dict[str, Any]:
    return pod["spec"]["containers"][0]


def flag(pod: dict[str, Any], name: str) -> Optional[str]:
    """The value of ``--name=value`` in the pod's command (None if absent)."""
    for arg in container(pod)["command"]:
        if arg.startswith(f"--{name}="):
            return str(arg.split("=", 1)[1])
    return None


def http_status(url: str) -> int:
    """GET ``url`` (TLS unverified, as kubelet probes do); the HTTP status code."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, timeout=3, context=ctx) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def refused(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as sock:
        sock.settimeout(1)
        return sock.connect_ex((host, port)) != 0


def probe_url(pod: dict[str, Any], kind: str) -> str:
    """The URL a kubelet probes for ``kind`` (named port resolved through ``ports``)."""
    ctr = container(pod)
    get = ctr[kind]["httpGet"]
    port = get["port"]
    if isinstance(port, str):
        port = next(p["containerPort"] for p in ctr["ports"] if p["name"] == port)
    host = f"[{get['host']}]" if ":" in get["host"] else get["host"]
    return f"{get['scheme'].lower()}://{host}:{port}{get['path']}"


def put_manifest(path: Path, pod: dict[str, Any]) -> None:
    """Write a manifest the way kubeadm does: a dot-prefixed temp file, then a rename."""
    tmp = path.parent / f".{path.name}.tmp"
    tmp.write_text(yaml.safe_dump(pod, sort_keys=False))
    tmp.rename(path)


def running_ids(handle: LabHandle, name: str, master: int = 1) -> list[str]:
    path = handle.crictl if master == 1 else handle.crictl_for(master)
    return crictl(path, "ps", "-q", "--name", f"^{name}$").stdout.split()


def lease_holder(handle: LabHandle, name: str) -> str:
    code, body = api(handle, "GET", f"/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/{name}")
    assert code == 200, body
    return str(body["spec"]["holderIdentity"])


def kubectl_with(kubeconfig: str, handle: LabHandle, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, KUBECONFIG=kubeconfig, HOME=str(handle.dir))
    return subprocess.run([KUBECTL, "--cache-dir", str(handle.dir / "kcache2"), *args],
                          capture_output=True, text=True, env=env, timeout=15)


def phase_and_ready(pod: Optional[dict[str, Any]]) -> tuple[str, bool]:
    return ((pod or {}).get("status", {}).get("phase", ""), is_ready(pod))


# --------------------------------------------------------------------------- profile, kubelet files, node files


def test_default_profile_is_recorded_with_the_kubelet_files(lab_factory):
    lab = lab_factory()
    prof = read_state(lab.dir)["profile"]
    assert prof["profile"] == "default" and prof["k8s_version"] == "classic"
    assert (prof["ip_family"], prof["node_naming"], prof["local_mode"], prof["rbac"]) == ("ipv4", "short", False, False)
    kdir = lab.kubelet_dir()
    assert lab.env["CPCTL_KUBELET_DIR"] == str(kdir) == str(lab.dir / "kubelet-lab-master1")
    assert lab.env["CPCTL_NODE_NAME"] == "lab-master1"
    assert lab.env["CPCTL_MANIFESTS_DIR"] == str(lab.manifests_dir())
    config = yaml.safe_load((kdir / "config.yaml").read_text())
    assert config["apiVersion"] == "kubelet.config.k8s.io/v1beta1" and config["kind"] == "KubeletConfiguration"
    assert config["staticPodPath"] == str(lab.manifests_dir())
    assert config["fileCheckFrequency"] == "1s"  # the FAST re-list period of the fixture
    assert config["authorization"]["mode"] == "Webhook" and config["cgroupDriver"] == "systemd"
    assert (kdir / "kubeadm-flags.env").read_text() == (
        'KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock '
        '--pod-infra-container-image=registry.k8s.io/pause:3.9"\n'
    )


def test_every_hostpath_is_a_node_path_and_the_files_flags_name_exist(lab_factory):
    lab = lab_factory()
    root = lab.root_dir()
    assert (root / "etc/kubernetes/super-admin.conf").is_file()  # the kubeadm init node
    checked = 0
    for comp in COMPONENTS:
        pod = manifest(lab, comp)
        vols = {v["name"]: str(root) + v["hostPath"]["path"] for v in pod["spec"]["volumes"]}
        assert not [v for v in pod["spec"]["volumes"] if v["hostPath"]["path"].startswith(str(lab.dir))], \
            "hostPaths are node paths, as kubeadm writes them (the node's / is the root dir)"
        mounts = container(pod)["volumeMounts"]
        assert all(not m["mountPath"].startswith(str(lab.dir)) for m in mounts)
        for arg in container(pod)["command"][1:]:
            value = arg.split("=", 1)[-1]
            if not value.startswith("/etc/kubernetes/"):
                continue
            mount = max((m for m in mounts if value.startswith(m["mountPath"])), key=lambda m: len(m["mountPath"]))
            on_host = vols[mount["name"]] + value[len(mount["mountPath"]):]
            assert os.path.isfile(on_host), (comp, arg, on_host)
            checked += 1
    assert checked > 20


@pytest.mark.parametrize("version", list(VERSIONS))
def test_kubeadm_release_manifests_versions_and_probes(lab_factory, version):
    lab = lab_factory(profile=f"kubeadm-{version}")
    assert lab.profile["k8s_version"] == version
    nodes = json.loads(kubectl(lab, "get", "nodes", "-o", "json").stdout)["items"]
    assert all(n["status"]["nodeInfo"]["kubeletVersion"].startswith(VERSIONS[version]) for n in nodes)
    assert api(lab, "GET", "/version")[1]["gitVersion"].startswith(VERSIONS[version])
    minor = int(version.split(".")[1])
    for comp in COMPONENTS:
        pod = manifest(lab, comp)
        ctr = container(pod)
        tag = ctr["image"].rsplit(":", 1)[1]
        want = ("3.6." if minor >= 34 else "3.5.") if comp == "etcd" else VERSIONS[version]
        assert tag.startswith(want), (comp, tag)
        ports = [(p.get("name"), p["containerPort"]) for p in ctr.get("ports") or []]
        probes = [ctr[k] for k in ("livenessProbe", "readinessProbe", "startupProbe") if k in ctr]
        if minor >= 34:  # kubernetes#132776: named port probe-port on every component
            assert [name for name, _ in ports] == ["probe-port"]
            assert all(p["httpGet"]["port"] == "probe-port" for p in probes)
        else:
            assert ports == [] and all(isinstance(p["httpGet"]["port"], int) for p in probes)
        assert ctr["startupProbe"]["initialDelaySeconds"] == 10 and ctr["startupProbe"]["failureThreshold"] == 24
        for kind in ("livenessProbe", "readinessProbe", "startupProbe"):
            if kind in ctr:
                assert http_status(probe_url(pod, kind)) == 200, (comp, kind, probe_url(pod, kind))
    etcd = container(manifest(lab, "etcd"))
    if minor == 30:  # kubernetes#110744
        assert etcd["livenessProbe"]["httpGet"]["path"] == "/health?exclude=NOSPACE&serializable=true"
        assert etcd["startupProbe"]["httpGet"]["path"] == "/health?serializable=false"
        assert "readinessProbe" not in etcd
    else:  # kubernetes#124465
        assert [etcd[k]["httpGet"]["path"] for k in ("livenessProbe", "readinessProbe", "startupProbe")] == [
            "/livez", "/readyz", "/readyz"]
    gates = [a for a in etcd["command"] if "corrupt-check" in a or "InitialCorruptCheck" in a]
    assert gates == (["--feature-gates=InitialCorruptCheck=true"] if minor >= 34
                     else ["--experimental-initial-corrupt-check=true"])
    api_probes = container(manifest(lab, "kube-apiserver"))
    assert [api_probes[k]["httpGet"]["path"] for k in ("livenessProbe", "readinessProbe", "startupProbe")] == [
        "/livez", "/readyz", "/livez"]
    for comp in ("kube-controller-manager", "kube-scheduler"):
        ctr = container(manifest(lab, comp))
        assert "readinessProbe" not in ctr
        assert ctr["livenessProbe"]["httpGet"]["path"] == ctr["startupProbe"]["httpGet"]["path"] == "/healthz"


@pytest.mark.lab       # starts a lab through `cpctl lab ...` (no fixture says so)
def test_cli_up_with_a_profile_and_the_profile_list(tmp_path):
    env = dict(os.environ, PYTHONPATH=package_root())
    cmd = [sys.executable, "-m", "cpctl_lab"]
    listing = subprocess.run([*cmd, "profiles"], capture_output=True, text=True, env=env, timeout=30)
    assert listing.returncode == 0
    assert all(name in listing.stdout for name in ("default", "kubeadm-1.34", "fqdn", "override", "ipv6", "ha"))
    bad = subprocess.run([*cmd, "up", "--dir", str(tmp_path / "bad"), "--profile", "ha", "--node-name", "x"],
                         capture_output=True, text=True, env=env, timeout=30)
    assert bad.returncode == 2 and "single-master" in bad.stderr and "Traceback" not in bad.stderr
    d = tmp_path / "cli"
    fast = ["--start-lag", "0.05", "--ready-lag", "0.05", "--stop-lag", "0.05"]
    up = subprocess.run([*cmd, "up", "--dir", str(d), "--profile", "override", "--k8s-version", "1.34", *fast],
                        capture_output=True, text=True, env=env, timeout=60)
    try:
        assert up.returncode == 0, up.stderr
        assert [ln.split("=", 1)[0] for ln in up.stdout.splitlines()] == [
            "export CPCTL_STATE_DIR", "export KUBECONFIG", "export CPCTL_CRICTL", "export CPCTL_KUBELET_DIR",
            "export CPCTL_NODE_ROOT"]
        state = read_state(d)
        assert (state["profile"]["profile"], state["profile"]["k8s_version"]) == ("override", "1.34")
        assert state["profile"]["kubernetes_version"].startswith("v1.34.")
    finally:
        down = subprocess.run([*cmd, "down", "--dir", str(d)], capture_output=True, text=True, env=env, timeout=30)
    assert down.returncode == 0, down.stderr


# --------------------------------------------------------------------------- node identity


def test_fqdn_node_name_without_node_env(lab_factory):
    lab = lab_factory(profile="fqdn")
    node, host = lab.node_name(), lab.hostname()
    assert node == "lab-master1.cpctl.test" and host != node and host.lower() == node
    env = lab.env
    assert "CPCTL_NODE_NAME" not in env and "CPCTL_MANIFESTS_DIR" not in env
    config = yaml.safe_load((Path(env["CPCTL_KUBELET_DIR"]) / "config.yaml").read_text())
    assert config["staticPodPath"] == str(lab.manifests_dir())
    assert "hostname-override" not in (lab.kubelet_dir() / "kubeadm-flags.env").read_text()
    # the crictl shim in the environment selects its node by itself
    shim_env = {k: v for k, v in os.environ.items() if k not in ("CPCTL_NODE_NAME", "CPCTL_LAB_NODE")}
    out = subprocess.run([env["CPCTL_CRICTL"], "pods", "-o", "json"], capture_output=True, text=True,
                         env=shim_env, timeout=10)
    names = {p["metadata"]["name"] for p in json.loads(out.stdout)["items"]}
    assert names == {f"{c}-{node}" for c in COMPONENTS}
    assert is_ready(mirror(lab, "kube-scheduler"))
    # Lease holders are "<kernel host name>_<uuid>": the host name's case, not the node name's
    assert lease_holder(lab, "kube-scheduler").startswith(host + "_")


def test_hostname_override_in_kubeadm_flags(lab_factory):
    lab = lab_factory(profile="override", node_name="cp-node-a")
    assert lab.node_name() == "cp-node-a" and lab.hostname() != "cp-node-a"
    flags = (lab.kubelet_dir() / "kubeadm-flags.env").read_text()
    assert "--hostname-override=cp-node-a" in flags and flags.startswith('KUBELET_KUBEADM_ARGS="')
    assert "CPCTL_NODE_NAME" not in lab.env and "CPCTL_MANIFESTS_DIR" not in lab.env
    nodes = kubectl(lab, "get", "nodes", "-o", "name").stdout.split()
    assert "node/cp-node-a" in nodes
    assert is_ready(mirror(lab, "kube-apiserver"))
    assert lease_holder(lab, "kube-controller-manager").startswith(lab.hostname() + "_")


def test_ipv6_single_stack_listens_on_loopback_v6_only(lab_factory):
    lab = lab_factory(profile="ipv6")
    assert lab.api_url.startswith("http://[::1]:")
    conf = yaml.safe_load(Path(lab.kubeconfig).read_text())
    assert conf["clusters"][0]["cluster"]["server"].startswith("http://[::1]:")
    node = json.loads(kubectl(lab, "get", "node", lab.node_name(), "-o", "json").stdout)
    assert {"type": "InternalIP", "address": "::1"} in node["status"]["addresses"]
    apiserver = manifest(lab, "kube-apiserver")
    assert flag(apiserver, "advertise-address") == "::1"
    assert flag(apiserver, "etcd-servers") == f"https://[::1]:{lab.ports()['etcd-client']}"
    assert all(container(apiserver)[k]["httpGet"]["host"] == "::1"
               for k in ("livenessProbe", "readinessProbe", "startupProbe"))
    etcd = manifest(lab, "etcd")
    assert flag(etcd, "listen-metrics-urls") == f"http://[::1]:{lab.ports()['etcd-metrics']}"
    assert container(etcd)["livenessProbe"]["httpGet"]["host"] == "::1"
    assert http_status(probe_url(apiserver, "readinessProbe")) == 200
    assert http_status(probe_url(etcd, "readinessProbe")) == 200
    assert refused("127.0.0.1", lab.ports()["apiserver"]) and refused("127.0.0.1", lab.ports()["etcd-metrics"])
    assert mirror(lab, "etcd")["status"]["hostIP"] == "::1"


# --------------------------------------------------------------------------- HA: LB, local mode, stacked etcd


def test_ha_local_mode_leaves_a_parked_apiservers_node_stale(lab_factory, tmp_path):
    lab = lab_factory(profile="ha")
    assert lab.masters == ["lab-master1", "lab-master2", "lab-master3"]
    own = [lab.api_url_for(i) for i in (1, 2, 3)]
    assert len({*own, lab.api_url}) == 4
    assert kubectl_with(lab.kubeconfig_for(2), lab, "get", "pods", "-n", "kube-system").returncode == 0
    for i in (1, 2, 3):
        apiserver, etcd = manifest(lab, "kube-apiserver", i), manifest(lab, "etcd", i)
        assert flag(apiserver, "etcd-servers") == f"https://127.0.0.1:{lab.ports(i)['etcd-client']}"
        assert flag(etcd, "initial-cluster-state") == (None if i == 1 else "existing")
        assert (lab.root_dir(i) / "etc/kubernetes/super-admin.conf").exists() == (i == 1)
    m2 = lab.manifests_dir(2)
    (m2 / "kube-apiserver.yaml").rename(tmp_path / "api2.yaml")
    port2 = int(own[1].rsplit(":", 1)[1])
    wait_for(lambda: refused("127.0.0.1", port2), what="master2's own API closed")
    assert kubectl_with(lab.kubeconfig_for(2), lab, "get", "pods").returncode != 0
    (m2 / "kube-scheduler.yaml").rename(tmp_path / "sch2.yaml")
    wait_for(lambda: not running_ids(lab, "kube-scheduler", 2), what="scheduler2 stopped")
    time.sleep(0.5)
    # the load balancer still serves master2's mirror pods, stale: nobody on master2 can update them
    stale = mirror(lab, "kube-scheduler", 2)
    assert stale is not None and phase_and_ready(stale) == ("Running", True)
    assert mirror(lab, "kube-apiserver", 2) is not None
    (tmp_path / "api2.yaml").rename(m2 / "kube-apiserver.yaml")
    wait_for(lambda: mirror(lab, "kube-scheduler", 2) is None, what="kubelet2 deletes the orphan once back")


def test_ha_without_local_mode_updates_through_the_load_balancer(lab_factory, tmp_path):
    lab = lab_factory(profile="ha", local_mode=False)
    m2 = lab.manifests_dir(2)
    (m2 / "kube-apiserver.yaml").rename(tmp_path / "api2.yaml")
    (m2 / "kube-scheduler.yaml").rename(tmp_path / "sch2.yaml")
    wait_for(lambda: mirror(lab, "kube-scheduler", 2) is None, what="orphan deleted through the LB")
    wait_for(lambda: mirror(lab, "kube-apiserver", 2) is None, what="apiserver2 mirror deleted")


def test_stacked_etcd_apiserver_is_unready_without_its_own_etcd(lab_factory, tmp_path):
    lab = lab_factory(profile="ha")
    readyz2 = probe_url(manifest(lab, "kube-apiserver", 2), "readinessProbe")
    assert http_status(readyz2) == 200
    (lab.manifests_dir(2) / "etcd.yaml").rename(tmp_path / "etcd2.yaml")
    wait_for(lambda: http_status(readyz2) == 500, what="apiserver2 /readyz fails")
    own2 = urllib.request.Request(lab.api_url_for(2) + "/api/v1/nodes")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(own2, timeout=3)
    assert err.value.code == 500
    assert api(lab, "GET", "/api/v1/nodes")[0] == 200  # etcd1 and etcd3 keep quorum behind the LB
    assert http_status(probe_url(manifest(lab, "kube-apiserver", 1), "readinessProbe")) == 200
    # with every member listed (not stacked), the same parked etcd leaves apiserver2 ready
    flat = lab_factory("flat", masters=3)
    (flat.manifests_dir(2) / "etcd.yaml").rename(tmp_path / "flat-etcd2.yaml")
    wait_for(lambda: mirror(flat, "etcd", 2) is None, what="flat etcd2 gone")
    assert http_status(probe_url(manifest(flat, "kube-apiserver", 2), "readinessProbe")) == 200


# --------------------------------------------------------------------------- realistic timing


def test_realistic_relist_period_and_restart_spends_time_unready(lab_factory, tmp_path):
    lab = lab_factory(profile="realistic", time_scale=0.1, file_check_frequency=None, start_lag=None,
                      ready_lag=None, stop_lag=None)
    config = yaml.safe_load((lab.kubelet_dir() / "config.yaml").read_text())
    assert config["fileCheckFrequency"] == "2s"  # 20 s x 0.1
    m = lab.manifests_dir()
    (m / "kube-controller-manager.yaml").rename(tmp_path / "kcm.yaml")
    wait_for(lambda: mirror(lab, "kube-controller-manager") is None, what="kcm mirror gone")
    (tmp_path / "kcm.yaml").rename(m / "kube-controller-manager.yaml")
    states = []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (not states or states[-1] != ("Running", True)):
        state = phase_and_ready(mirror(lab, "kube-controller-manager"))
        if not states or states[-1] != state:
            states.append(state)
        time.sleep(0.03)
    assert ("Running", False) in states and states[-1] == ("Running", True), states


def test_realistic_grace_period_for_a_pid1_that_ignores_sigterm(lab_factory):
    lab = lab_factory(profile="realistic", time_scale=0.1, start_lag=None, ready_lag=None, stop_lag=None)
    kubectl(lab, "run", "sleeper", "--image=busybox", "--overrides",
            '{"spec": {"terminationGracePeriodSeconds": 60}}', "--", "sleep", "3600")
    kubectl(lab, "run", "web", "--image=nginx")
    for name in ("sleeper", "web"):
        wait_for(lambda name=name: phase_and_ready(get_pod(lab, "default", name)) == ("Running", True),
                 timeout=10, what=f"{name} ready")
    kubectl(lab, "delete", "pod", "web", "sleeper", "--wait=false")
    wait_for(lambda: get_pod(lab, "default", "web") is None, timeout=5, what="web gone after SIGTERM")
    # sleep as PID 1 ignores SIGTERM: it is killed only at the end of its 60 s (x 0.1) grace period
    assert get_pod(lab, "default", "sleeper") is not None
    wait_for(lambda: get_pod(lab, "default", "sleeper") is None, timeout=15, what="sleeper killed")


def test_realistic_quick_restore_keeps_the_mirror_a_late_one_gets_a_new_one(lab_factory, tmp_path):
    lab = lab_factory(profile="realistic", time_scale=0.2, start_lag=None, ready_lag=None, stop_lag=None,
                      timeout=30)
    m = lab.manifests_dir()
    old = mirror(lab, "kube-scheduler")
    (m / "kube-scheduler.yaml").rename(tmp_path / "s.yaml")
    (tmp_path / "s.yaml").rename(m / "kube-scheduler.yaml")  # back before termination finished
    cid = old["status"]["containerStatuses"][0]["containerID"]
    back = wait_for(lambda: (p := mirror(lab, "kube-scheduler")) and is_ready(p)
                    and p["status"]["containerStatuses"][0]["containerID"] != cid and p,
                    timeout=10, what="scheduler restarted")
    assert back["metadata"]["uid"] == old["metadata"]["uid"]  # same mirror object, new container
    (m / "kube-scheduler.yaml").rename(tmp_path / "s.yaml")
    wait_for(lambda: mirror(lab, "kube-scheduler") is None, what="orphan deleted by housekeeping")
    (tmp_path / "s.yaml").rename(m / "kube-scheduler.yaml")
    new = wait_for(lambda: mirror(lab, "kube-scheduler"), what="new mirror")
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    assert new["metadata"]["annotations"]["kubernetes.io/config.hash"] == (
        old["metadata"]["annotations"]["kubernetes.io/config.hash"])


# --------------------------------------------------------------------------- kubelet file source (all profiles)


def config_hash(pod: Optional[dict[str, Any]]) -> str:
    return str(((pod or {}).get("metadata") or {}).get("annotations", {}).get("kubernetes.io/config.hash", ""))


def relisted(lab: LabHandle, marker: str) -> None:
    """Return right after the kubelet's next full re-list (it logs ``marker`` on every re-list)."""
    def count() -> int:
        return (lab.dir / "lab.log").read_text().count(marker)

    seen = count()
    wait_for(lambda: count() > seen, timeout=30, what="a re-list")


def test_removing_either_duplicate_drops_the_pod_until_the_next_relist(lab_factory):
    lab = lab_factory(file_check_frequency=2.0)
    m = lab.manifests_dir()
    original = config_hash(mirror(lab, "kube-scheduler"))
    (m / "kube-scheduler.yaml.bak").write_text((m / "kube-scheduler.yaml").read_text())
    wait_for(lambda: config_hash(mirror(lab, "kube-scheduler")) not in ("", original), what="bak took over")
    before = running_ids(lab, "kube-scheduler")
    relisted(lab, "duplicate static pod")  # each re-list reports the duplicate: ~2 s until the next one
    (m / "kube-scheduler.yaml.bak").unlink()  # the pod key is gone although kube-scheduler.yaml defines it
    wait_for(lambda: not running_ids(lab, "kube-scheduler"), timeout=1.5, what="scheduler stopped")
    after = wait_for(lambda: running_ids(lab, "kube-scheduler"), timeout=30, what="back after re-list")
    assert after != before


def test_chmod_of_the_remaining_file_brings_the_pod_back_at_once(lab_factory):
    lab = lab_factory(file_check_frequency=60)
    m = lab.manifests_dir()
    (m / "kube-scheduler.yaml.bak").write_text((m / "kube-scheduler.yaml").read_text())
    time.sleep(0.3)
    (m / "kube-scheduler.yaml.bak").unlink()
    wait_for(lambda: not running_ids(lab, "kube-scheduler"), what="scheduler stopped")
    os.chmod(m / "kube-scheduler.yaml", 0o600)  # an inotify Chmod re-parses that file
    wait_for(lambda: running_ids(lab, "kube-scheduler"), timeout=20, what="back without a re-list")  # re-list: 60 s


def test_a_symlinked_manifest_is_loaded_like_the_file(lab_factory, tmp_path):
    lab = lab_factory()
    m = lab.manifests_dir()
    old = mirror(lab, "kube-scheduler")["metadata"]["annotations"]["kubernetes.io/config.hash"]
    outside = tmp_path / "elsewhere.yaml"
    (m / "kube-scheduler.yaml").rename(outside)
    wait_for(lambda: mirror(lab, "kube-scheduler") is None, what="scheduler gone")
    os.symlink(outside, m / "kube-scheduler.yaml")
    back = wait_for(lambda: (p := mirror(lab, "kube-scheduler")) and is_ready(p) and p, what="loaded via symlink")
    # same decoded content at the same path: the same config.hash
    assert back["metadata"]["annotations"]["kubernetes.io/config.hash"] == old


def test_a_parse_error_on_write_keeps_the_pod_until_the_relist_drops_it(lab_factory):
    lab = lab_factory(file_check_frequency=2.0)
    m = lab.manifests_dir()
    (m / "README").write_text("not a pod\n")  # every re-list logs that it cannot process it
    before = running_ids(lab, "kube-scheduler")
    relisted(lab, "README")
    (m / "kube-scheduler.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: [broken\n")
    time.sleep(0.3)
    assert running_ids(lab, "kube-scheduler") == before  # the inotify event left the store alone
    wait_for(lambda: not running_ids(lab, "kube-scheduler"), timeout=30, what="re-list dropped it")


BOMB = "".join("%s: &%s [%s]\n" % (name, name, ",".join([prev] * 9))
               for prev, name in zip(["x", "*a", "*b", "*c", "*d", "*e", "*f", "*g", "*h"], "abcdefghi"))


@pytest.mark.parametrize("text, error", [
    ("x: &a [*a]\n", "anchor value contains itself"),
    (BOMB, "document contains excessive aliasing"),
    ("apiVersion: v1\nkind: Pod\nmetadata: {name: big}\nspec: {priority: %s}\n" % ("9" * 5000), "yaml: "),
    ("[" * 12000 + "]" * 12000, "yaml: exceeded maximum nesting depth"),
    ("apiVersion: v1\nkind: Pod\nmetadata: {name: m, labels: {1: a, b: c}}\n"
     "spec: {containers: [{name: a, image: b}]}\n", "cannot be converted to JSON"),
])
def test_a_hostile_file_is_one_invalid_manifest_for_the_lab_kubelet(lab_factory, text, error):
    """Like the real kubelet (go-yaml's alias and depth limits), the lab's skips such a file and
    goes on: the other static pods keep running and re-lists keep happening."""
    lab = lab_factory(file_check_frequency=1.0)
    (lab.manifests_dir() / "hostile.yaml").write_text(text)
    relisted(lab, "hostile.yaml: ")
    assert error in (lab.dir / "lab.log").read_text()
    relisted(lab, "Could not process manifest file %s/hostile.yaml" % lab.manifests_dir())
    assert running_ids(lab, "kube-scheduler")


def test_the_last_file_in_sorted_order_wins_on_relist(lab_factory):
    lab = lab_factory(file_check_frequency=1.0)
    m = lab.manifests_dir()
    pod = manifest(lab, "kube-scheduler")
    container(pod)["resources"]["requests"]["cpu"] = "111m"
    put_manifest(m / "zz-scheduler.yaml", pod)
    container(pod)["resources"]["requests"]["cpu"] = "99m"
    put_manifest(m / "aa-scheduler.yaml", pod)  # written last, sorted first: loses on the re-list

    def cpu() -> str:
        return str(mirror(lab, "kube-scheduler")["spec"]["containers"][0]["resources"]["requests"]["cpu"])

    wait_for(lambda: cpu() == "111m", timeout=30, what="zz-scheduler.yaml wins")
    time.sleep(1.2)
    assert cpu() == "111m"


def test_only_the_first_yaml_document_is_decoded(lab_factory):
    lab = lab_factory()
    m = lab.manifests_dir()
    pod = manifest(lab, "kube-scheduler")
    second = dict(pod, metadata=dict(pod["metadata"], name="second-doc"))
    (m / ".multi.tmp").write_text(yaml.safe_dump_all([pod, second]))
    (m / ".multi.tmp").rename(m / "kube-scheduler.yaml")
    time.sleep(0.5)
    assert is_ready(mirror(lab, "kube-scheduler"))
    assert get_pod(lab, "kube-system", f"second-doc-{lab.node_name()}") is None
