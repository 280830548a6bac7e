"""The lab's kubeadm-config ConfigMap and `cpctl lab kubeadm-upgrade` (real-node-facts.md, "kubeadm
upgrade and the manifests dir"): the ClusterConfiguration renders the lab's own manifests, an upgrade
drops hand-made flags and keeps extraArgs, backs up under /etc/kubernetes/tmp, and can halt half-way."""

# ruff: noqa: F811  (pytest fixtures are imported by name and then used as parameters)
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from cpctl_lab import kubeadmconfig
from cpctl_lab.control import LabHandle
from tests.labfixture import kubectl, lab_factory, wait_for  # noqa: F401


def upgrade(handle: LabHandle, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cpctl", "lab", "kubeadm-upgrade", "--dir", str(handle.dir), *args],
                          capture_output=True, text=True, timeout=120)


def cluster_config(handle: LabHandle) -> dict[str, Any]:
    cm = yaml.safe_load(kubectl(handle, "-n", "kube-system", "get", "configmap", "kubeadm-config", "-o", "yaml").stdout)
    cfg: dict[str, Any] = yaml.safe_load(cm["data"]["ClusterConfiguration"])
    return cfg


def command(handle: LabHandle, comp: str) -> list[str]:
    pod = yaml.safe_load((handle.manifests_dir() / f"{comp}.yaml").read_text())
    return list(pod["spec"]["containers"][0]["command"])


def test_extra_args_shapes_and_merge() -> None:
    v3 = {"kind": "ClusterConfiguration", "apiVersion": "kubeadm.k8s.io/v1beta3",
          "apiServer": {"extraArgs": {"audit-log-maxage": "7"}}}
    v4 = {"kind": "ClusterConfiguration", "apiVersion": "kubeadm.k8s.io/v1beta4",
          "etcd": {"local": {"extraArgs": [{"name": "snapshot-count", "value": "5"}]}}}
    assert kubeadmconfig.extra_args(v3, "apiServer") == [("audit-log-maxage", "7")]
    assert kubeadmconfig.extra_args(v4, "etcd") == [("snapshot-count", "5")]
    extras = [("snapshot-count", "5"), ("a", "x")]
    merged = kubeadmconfig.merge_command(["etcd", "--b=1", "--snapshot-count=10000"], extras)
    assert merged == ["etcd", "--a=x", "--b=1", "--snapshot-count=5"]
    with pytest.raises(kubeadmconfig.ConfigError, match="does not parse"):
        kubeadmconfig.parse("kind: [unclosed")
    with pytest.raises(kubeadmconfig.ConfigError, match="apiVersion"):
        kubeadmconfig.parse("kind: ClusterConfiguration\napiVersion: kubeadm.k8s.io/v1beta2\n")


@pytest.mark.parametrize("api_version", ["v1beta3", "v1beta4"])
def test_configmap_renders_the_seeded_manifests(lab_factory: Any, api_version: str, tmp_path: Path) -> None:
    handle = lab_factory(kubeadm_api=api_version)
    cfg = cluster_config(handle)
    assert cfg["apiVersion"] == f"kubeadm.k8s.io/{api_version}"
    assert cfg["kubernetesVersion"] == handle.profile["kubernetes_version"]
    # Upgrading to the same release changes nothing: the ClusterConfiguration renders the seeds.
    before = {c: (handle.manifests_dir() / f"{c}.yaml").read_bytes() for c in kubeadmconfig.COMPONENTS}
    proc = upgrade(handle, "--to", "classic")
    assert proc.returncode == 0, proc.stderr
    assert "upgraded nothing" in proc.stdout
    assert before == {c: (handle.manifests_dir() / f"{c}.yaml").read_bytes() for c in kubeadmconfig.COMPONENTS}


def test_upgrade_drops_hand_made_flags_keeps_extra_args(lab_factory: Any) -> None:
    handle = lab_factory(kubeadm_api="v1beta4")
    # extraArgs through the API (as `kubectl edit cm kubeadm-config` would), a flag by hand in the file.
    cm = yaml.safe_load(kubectl(handle, "-n", "kube-system", "get", "cm", "kubeadm-config", "-o", "yaml").stdout)
    cfg = yaml.safe_load(cm["data"]["ClusterConfiguration"])
    cfg["scheduler"]["extraArgs"] = [{"name": "v", "value": "3"}]
    cm["data"]["ClusterConfiguration"] = yaml.safe_dump(cfg)
    (handle.dir / "cm.yaml").write_text(yaml.safe_dump(cm))
    kubectl(handle, "replace", "-f", str(handle.dir / "cm.yaml"))
    path = handle.manifests_dir() / "kube-scheduler.yaml"
    pod = yaml.safe_load(path.read_text())
    pod["spec"]["containers"][0]["command"].append("--profiling=false")
    path.write_text(yaml.safe_dump(pod, sort_keys=False))
    handed = path.read_bytes()
    wait_for(lambda: handle.ready(), timeout=20)

    proc = upgrade(handle, "--to", "1.31")
    assert proc.returncode == 0, proc.stderr
    assert "kubeadm upgrade: v1.30.4 -> v1.31.12" in proc.stdout
    cmd = command(handle, "kube-scheduler")
    assert "--v=3" in cmd and "--profiling=false" not in cmd
    pod = yaml.safe_load(path.read_text())
    assert pod["spec"]["containers"][0]["image"] == "registry.k8s.io/kube-scheduler:v1.31.12"
    tmp = handle.root_dir() / "etc/kubernetes/tmp"
    backups = sorted(tmp.glob("kubeadm-backup-manifests-*"))
    assert len(backups) == 1 and (backups[0] / "kube-scheduler.yaml").read_bytes() == handed
    assert not list(tmp.glob("kubeadm-upgraded-manifests-*"))  # staged dir removed after success
    assert cluster_config(handle)["kubernetesVersion"] == "v1.31.12"
    wait_for(lambda: handle.ready(), timeout=30)


def test_upgrade_halted_half_way_leaves_manifests_and_fresh_tmp(lab_factory: Any) -> None:
    handle = lab_factory()
    before = command(handle, "kube-apiserver")
    proc = upgrade(handle, "--halt")
    assert proc.returncode == 0, proc.stderr
    assert "upgrade in flight" in proc.stdout
    staged = list((handle.root_dir() / "etc/kubernetes/tmp").glob("kubeadm-upgraded-manifests-*/kube-apiserver.yaml"))
    assert len(staged) == 1 and command(handle, "kube-apiserver") == before
    assert cluster_config(handle)["kubernetesVersion"] == handle.profile["kubernetes_version"]


def test_upgrade_refuses_a_configuration_that_does_not_parse(lab_factory: Any) -> None:
    handle = lab_factory()
    kubectl(handle, "-n", "kube-system", "patch", "cm", "kubeadm-config", "--type", "merge",
            "-p", '{"data": {"ClusterConfiguration": "kind: [unclosed"}}')
    before = command(handle, "kube-apiserver")
    proc = upgrade(handle)
    assert proc.returncode == 1
    assert proc.stderr.strip().startswith("cpctl lab: kubeadm upgrade: ClusterConfiguration does not parse")
    assert command(handle, "kube-apiserver") == before
    assert not (handle.root_dir() / "etc/kubernetes/tmp").exists()


def test_upgrade_refused_while_a_component_is_parked(lab_factory: Any) -> None:
    """kubeadm's StaticPodManifest preflight: no upgrade while the scheduler's manifest is not on disk."""
    handle = lab_factory()
    parked = handle.dir / "parked-scheduler.yaml"
    (handle.manifests_dir() / "kube-scheduler.yaml").rename(parked)
    proc = upgrade(handle)
    assert proc.returncode == 1
    assert "[ERROR StaticPodManifest]" in proc.stderr and "kube-scheduler.yaml" in proc.stderr
    assert not (handle.root_dir() / "etc/kubernetes/tmp").exists()


def _spec(tmp_path: Path) -> kubeadmconfig.NodeSpec:
    ports = {"apiserver": 6443, "controller-manager": 10257, "scheduler": 10259, "etcd-client": 2379,
             "etcd-peer": 2380, "etcd-metrics": 2381}
    return kubeadmconfig.NodeSpec("m1", tmp_path, ports, {"m1": ports}, "127.0.0.1", False)


def _pod(text: str) -> dict[str, Any]:
    pod: dict[str, Any] = yaml.safe_load(text)
    return pod


def test_render_volumes_data_dir_repeats_and_patches_like_kubeadm(tmp_path: Path) -> None:
    """manifests.go/local.go/arguments.go/patches.go: extraVolumes become hostPath volumes and mounts,
    etcd.local.dataDir moves the etcd-data hostPath, its mount and --data-dir together (an extraArgs
    data-dir only the flag), repeated v1beta4 args all stay (sorted by name, then value), and patch
    files apply in name order with blind JSON-patch indexes (a `test` op is the only guard)."""
    rel = kubeadmconfig.profiles.RELEASES["1.33"]
    cfg = {"kind": "ClusterConfiguration", "apiVersion": "kubeadm.k8s.io/v1beta4",
           "etcd": {"local": {"dataDir": "/var/lib/etcd-restore"}},
           "apiServer": {"extraArgs": [{"name": "service-account-issuer", "value": "https://new.example"},
                                       {"name": "service-account-issuer", "value": "https://kubernetes.default.svc"},
                                       {"name": "audit-policy-file", "value": "/etc/kubernetes/audit/policy.yaml"}],
                         "extraVolumes": [{"name": "audit", "hostPath": "/etc/kubernetes/audit",
                                           "mountPath": "/etc/kubernetes/audit", "readOnly": True,
                                           "pathType": "DirectoryOrCreate"}]}}
    out = kubeadmconfig.render(cfg, _spec(tmp_path), rel)
    etcd = _pod(out["etcd"])
    assert {"hostPath": {"path": "/var/lib/etcd-restore", "type": "DirectoryOrCreate"}, "name": "etcd-data"} \
        in etcd["spec"]["volumes"]
    assert {"mountPath": "/var/lib/etcd-restore", "name": "etcd-data"} in etcd["spec"]["containers"][0]["volumeMounts"]
    assert "--data-dir=/var/lib/etcd-restore" in etcd["spec"]["containers"][0]["command"]
    api = _pod(out["kube-apiserver"])
    cmd = api["spec"]["containers"][0]["command"]
    issuers = [a for a in cmd if a.startswith("--service-account-issuer=")]
    assert issuers == ["--service-account-issuer=https://kubernetes.default.svc",
                       "--service-account-issuer=https://new.example"]
    assert {"hostPath": {"path": "/etc/kubernetes/audit", "type": "DirectoryOrCreate"}, "name": "audit"} \
        in api["spec"]["volumes"]
    assert {"mountPath": "/etc/kubernetes/audit", "name": "audit", "readOnly": True} \
        in api["spec"]["containers"][0]["volumeMounts"]
    # a flag-only data dir: the hostPath stays at dataDir (nothing mounts the new dir)
    flag_only = {"kind": "ClusterConfiguration", "apiVersion": "kubeadm.k8s.io/v1beta4",
                 "etcd": {"local": {"extraArgs": [{"name": "data-dir", "value": "/var/lib/etcd-restore"}]}}}
    etcd = _pod(kubeadmconfig.render(flag_only, _spec(tmp_path), rel)["etcd"])
    assert "--data-dir=/var/lib/etcd-restore" in etcd["spec"]["containers"][0]["command"]
    assert [v["hostPath"]["path"] for v in etcd["spec"]["volumes"] if v["name"] == "etcd-data"] == ["/var/lib/etcd"]

    patches = tmp_path / "patches"
    patches.mkdir()
    base = _pod(kubeadmconfig.render({"kind": "ClusterConfiguration"}, _spec(tmp_path), rel)["etcd"])
    index = base["spec"]["containers"][0]["command"].index("--snapshot-count=10000")
    (patches / "etcd+json.yaml").write_text(
        f"- {{op: test, path: /spec/containers/0/command/{index}, value: --snapshot-count=10000}}\n"
        f"- {{op: replace, path: /spec/containers/0/command/{index}, value: --snapshot-count=5000}}\n")
    (patches / "kube-scheduler.yaml").write_text("spec:\n  containers:\n  - name: kube-scheduler\n"
                                                 "    resources: {requests: {cpu: 50m}}\n")
    out = kubeadmconfig.render({"kind": "ClusterConfiguration"}, _spec(tmp_path), rel, patches)
    assert "--snapshot-count=5000" in _pod(out["etcd"])["spec"]["containers"][0]["command"]
    sched = _pod(out["kube-scheduler"])["spec"]["containers"][0]
    assert sched["resources"] == {"requests": {"cpu": "50m"}} and sched["command"][0] == "kube-scheduler"
    # 1.34 (etcd 3.6) renames two flags before --snapshot-count: the index moved, the test op fails
    with pytest.raises(kubeadmconfig.PatchError, match="etcd"):
        kubeadmconfig.render({"kind": "ClusterConfiguration"}, _spec(tmp_path),
                             kubeadmconfig.profiles.RELEASES["1.34"], patches)


def test_upgrade_renews_certificates_unless_told_not_to(lab_factory: Any) -> None:
    """kubeadm upgrade apply --certificate-renewal (default true) renews the certificates of each
    component it moves (renewCertsByComponent), none of a component it skips."""
    handle = lab_factory(kubeadm_api="v1beta3")
    etc = handle.root_dir() / "etc/kubernetes"
    files = {p: p.read_bytes() for p in (etc / "pki/apiserver.crt", etc / "scheduler.conf")}

    def scheduler_v(value: str) -> None:
        cfg = cluster_config(handle)
        cfg["scheduler"] = {"extraArgs": {"v": value}}
        patch = {"data": {"ClusterConfiguration": yaml.safe_dump(cfg)}}
        kubectl(handle, "-n", "kube-system", "patch", "cm", "kubeadm-config", "--type", "merge",
                "-p", json.dumps(patch))
    scheduler_v("3")
    proc = upgrade(handle, "--to", "classic", "--certificate-renewal", "false")
    assert proc.returncode == 0 and "renewed" not in proc.stdout, proc.stdout + proc.stderr
    assert {p: p.read_bytes() for p in files} == files
    scheduler_v("4")
    proc = upgrade(handle, "--to", "classic")
    assert proc.returncode == 0 and "renewed 1 certificates" in proc.stdout, proc.stdout + proc.stderr
    assert (etc / "scheduler.conf").read_bytes() != files[etc / "scheduler.conf"]       # moved: renewed
    assert (etc / "pki/apiserver.crt").read_bytes() == files[etc / "pki/apiserver.crt"]  # skipped: kept


def test_version_policy_is_kubeadms_one_minor_release_at_a_time() -> None:
    """kubeadm's EnforceVersionPolicies: more than one minor release up or down is a mandatory error
    (the ha profile's v1.33 taken to 1.31 was carried out as a downgrade before)."""
    rel = kubeadmconfig.profiles.RELEASES
    for old, new in (("classic", "1.31"), ("1.33", "1.34"), ("1.33", "1.32"), ("1.30", "classic"), ("1.31", "1.31")):
        kubeadmconfig.version_policy(rel[old], rel[new])
    with pytest.raises(kubeadmconfig.ConfigError, match=r'to "v1.33.4" is too high; kubeadm can upgrade only 1'):
        kubeadmconfig.version_policy(rel["1.31"], rel["1.33"])
    with pytest.raises(kubeadmconfig.ConfigError, match=r'to "v1.31.12" is too low; kubeadm can downgrade only'):
        kubeadmconfig.version_policy(rel["1.33"], rel["1.31"])


def test_an_upgrade_too_far_moves_nothing(lab_factory: Any) -> None:
    handle = lab_factory(k8s_version="1.32")
    before = {comp: command(handle, comp) for comp in ("kube-apiserver", "kube-scheduler")}
    for to, word in (("1.30", "too low"), ("1.34", "too high")):
        proc = upgrade(handle, "--to", to)
        assert proc.returncode == 1 and proc.stderr.startswith("cpctl lab: kubeadm upgrade: Specified version"), \
            proc.stderr
        assert word in proc.stderr and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert {comp: command(handle, comp) for comp in before} == before
    assert cluster_config(handle)["kubernetesVersion"] == "v1.32.8"
    assert not list((handle.root_dir() / "etc/kubernetes/tmp").glob("kubeadm-*"))
