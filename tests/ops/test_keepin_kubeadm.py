"""``--keep-in kubeadm-config`` and ``--keep-in patches``: a flag change that survives ``kubeadm upgrade``
(issue 24, item 2), against the lab's real kubeadm-config ConfigMap and `cpctl lab kubeadm-upgrade`."""

# ruff: noqa: F811  (pytest fixtures are imported by name and then used as parameters)
from __future__ import annotations

import copy
import hashlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml

from cpctl.core import kubeadmconfig as kc
from cpctl_lab.control import LabHandle
from tests.coreutil import schema_valid
from tests.labfixture import kubectl, lab_factory, run_cpctl, wait_for  # noqa: F401


def upgrade(handle: LabHandle, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cpctl", "lab", "kubeadm-upgrade", "--dir", str(handle.dir), *args],
                          capture_output=True, text=True, timeout=120)


def configmap(handle: LabHandle) -> dict[str, Any]:
    cm: dict[str, Any] = yaml.safe_load(
        kubectl(handle, "-n", "kube-system", "get", "cm", "kubeadm-config", "-o", "yaml").stdout)
    return cm


def cluster_config(handle: LabHandle) -> dict[str, Any]:
    cfg: dict[str, Any] = yaml.safe_load(configmap(handle)["data"]["ClusterConfiguration"])
    return cfg


def command(handle: LabHandle, comp: str) -> list[str]:
    pod = yaml.safe_load((handle.manifests_dir() / f"{comp}.yaml").read_text())
    return list(pod["spec"]["containers"][0]["command"])


def snapshot(handle: LabHandle) -> tuple[dict[str, bytes], str]:
    files = {p.name: p.read_bytes() for p in handle.manifests_dir().iterdir()}
    return files, configmap(handle)["data"]["ClusterConfiguration"]


# --- pure parts ------------------------------------------------------------------------------------------
def test_with_flags_keeps_each_api_versions_shape() -> None:
    v3 = {"apiVersion": "kubeadm.k8s.io/v1beta3", "kind": "ClusterConfiguration",
          "apiServer": {"extraArgs": {"profiling": "true", "v": "2"}}}
    v4 = {"apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "ClusterConfiguration",
          "etcd": {"local": {"dataDir": "/var/lib/etcd"}}}
    change = kc.FlagChange([("profiling", "false"), ("audit-log-maxage", "7")], ["v"])
    out3 = kc.with_flags(v3, "apiServer", change)
    assert out3["apiServer"]["extraArgs"] == {"profiling": "false", "audit-log-maxage": "7"}
    out4 = kc.with_flags(v4, "etcd.local", kc.FlagChange([("snapshot-count", "5")]))
    assert out4["etcd"]["local"]["extraArgs"] == [{"name": "snapshot-count", "value": "5"}]
    assert v3["apiServer"]["extraArgs"] == {"profiling": "true", "v": "2"}        # the input is not changed
    with pytest.raises(kc.CpctlError) as bad:
        kc.parse_config("kind: [unclosed")
    assert bad.value.code == kc.ExitCode.REFUSED and "does not parse" in bad.value.message


def test_config_diff_redacts_credentials() -> None:
    v3 = {"apiVersion": "kubeadm.k8s.io/v1beta3", "kind": "ClusterConfiguration", "apiServer": {}}
    v4 = dict(v3, apiVersion="kubeadm.k8s.io/v1beta4")
    change = kc.FlagChange([("oidc-client-secret", "hunter2"), ("v", "4")])
    for cfg in (v3, v4):
        diff = kc.config_diff(kc.dump_config(cfg), kc.dump_config(kc.with_flags(cfg, "apiServer", change)))
        assert "hunter2" not in diff and "<redacted>" in diff and "oidc-client-secret" in diff
        assert ("v: '4'" in diff) or ("value: '4'" in diff), diff


def test_hostile_cluster_configuration_is_refused_in_bounded_time() -> None:
    """The ConfigMap comes from the cluster: an alias bomb is one refusal, not a hang or a memory blow-up."""
    lines = ["kind: ClusterConfiguration", "apiVersion: kubeadm.k8s.io/v1beta3",
             "a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += ["a%d: &a%d [%s]" % (i, i, ", ".join(["*a%d" % (i - 1)] * 10)) for i in range(1, 10)]
    with pytest.raises(kc.CpctlError) as bad:
        kc.parse_config("\n".join(lines) + "\n")
    assert bad.value.code == kc.ExitCode.REFUSED and "alias" in bad.value.message


def test_generated_json_patch_gives_the_command_cpctl_wrote() -> None:
    """RFC 6902 by the `jsonpatch` package (a real implementation, not cpctl's): add, replace, remove."""
    old_pod = {"spec": {"containers": [{"name": "kube-apiserver", "command": [
        "kube-apiserver", "--advertise-address=10.0.0.1", "--profiling=true", "--v=2", "--secure-port=6443"]}]}}
    change = kc.FlagChange([("profiling", "false"), ("audit-log-maxage", "7")], ["v"])
    new_pod = copy.deepcopy(old_pod)
    new_pod["spec"]["containers"][0]["command"] = [
        "kube-apiserver", "--advertise-address=10.0.0.1", "--profiling=false", "--secure-port=6443",
        "--audit-log-maxage=7"]
    ops = yaml.safe_load(kc.dump_patch(kc.patch_ops([], 0, old_pod["spec"]["containers"][0],
                                                    new_pod["spec"]["containers"][0], change)))
    assert {"op": "add", "path": "/spec/containers/0/command/-", "value": "--audit-log-maxage=7"} in ops
    assert {"op": "replace", "path": "/spec/containers/0/command/2", "value": "--profiling=false"} in ops
    assert ops[ops.index({"op": "replace", "path": "/spec/containers/0/command/2", "value": "--profiling=false"}) - 1] \
        == {"op": "test", "path": "/spec/containers/0/command/2", "value": "--profiling=true"}
    assert jsonpatch.apply_patch(old_pod, ops) == new_pod


def test_unknown_keep_in_target_is_a_usage_error() -> None:
    with pytest.raises(kc.CpctlError) as bad:
        kc.parse_keep_in("kubeadm-conf")
    assert bad.value.code == kc.ExitCode.USAGE


# --- against the lab -------------------------------------------------------------------------------------
@pytest.mark.parametrize("api_version", ["v1beta3", "v1beta4"])
def test_flag_kept_in_kubeadm_config_survives_upgrade(lab_factory: Any, api_version: str) -> None:
    handle = lab_factory(kubeadm_api=api_version)
    proc = run_cpctl(handle, "flags", "scheduler", "--set", "v=4", "--keep-in", "kubeadm-config", "--timeout", "30")
    assert proc.returncode == 0, proc.stderr
    assert "+    v:" in proc.stderr or "+  - name: v" in proc.stderr or "+    - name: v" in proc.stderr, proc.stderr
    assert "kept in: kube-system/kubeadm-config" in proc.stdout
    assert kc.extra_args(cluster_config(handle), "scheduler") == [("v", "4")]
    proc = run_cpctl(handle, "flags", "scheduler", "--set", "profiling=false", "--timeout", "30")
    assert proc.returncode == 0, proc.stderr

    proc = upgrade(handle, "--to", "1.31")
    assert proc.returncode == 0, proc.stderr
    cmd = command(handle, "kube-scheduler")
    assert "--v=4" in cmd                     # kept in the ClusterConfiguration: survives
    assert "--profiling=false" not in cmd     # only in the manifest: kubeadm dropped it


def test_failed_change_undoes_its_configmap_change(lab_factory: Any) -> None:
    handle = lab_factory()
    text = configmap(handle)["data"]["ClusterConfiguration"]
    # --force: past flag sanity (which would refuse the typo before anything is written), so that
    # the new pod really crash-loops and the change is rolled back
    proc = run_cpctl(handle, "flags", "scheduler", "--set", "bind-adress=0.0.0.0", "--keep-in", "kubeadm-config",
                     "--timeout", "10", "--force")
    assert proc.returncode == 11, proc.stderr
    assert "ROLLED BACK" in proc.stderr and "kube-system/kubeadm-config put back as it was" in proc.stderr
    cfg = yaml.safe_load(configmap(handle)["data"]["ClusterConfiguration"])
    assert kc.extra_args(cfg, "scheduler") == [] and cfg == yaml.safe_load(text)


def test_refused_change_never_writes_the_configmap(lab_factory: Any) -> None:
    """Flag sanity refuses a misspelled flag before anything is written: the ConfigMap is never
    updated (its resourceVersion stays), not written and undone."""
    handle = lab_factory()
    version = configmap(handle)["metadata"]["resourceVersion"]
    before = snapshot(handle)
    proc = run_cpctl(handle, "flags", "scheduler", "--set", "bind-adress=0.0.0.0", "--keep-in", "kubeadm-config",
                     "--timeout", "10")
    assert proc.returncode == 4, proc.stderr
    assert "bind-adress" in proc.stderr and "undone" not in proc.stderr, proc.stderr
    assert configmap(handle)["metadata"]["resourceVersion"] == version, "the ConfigMap was never written"
    assert snapshot(handle) == before


def test_keep_in_dry_run_shows_diff_changes_nothing(lab_factory: Any) -> None:
    handle = lab_factory(kubeadm_api="v1beta4")
    before = snapshot(handle)
    proc = run_cpctl(handle, "flags", "apiserver", "--set", "audit-log-maxage=7", "--keep-in", "kubeadm-config",
                     "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert "+  - name: audit-log-maxage" in proc.stdout or "+    - name: audit-log-maxage" in proc.stdout, proc.stdout
    assert snapshot(handle) == before


def test_unparsable_cluster_configuration_refused_nothing_changed(lab_factory: Any) -> None:
    handle = lab_factory()
    kubectl(handle, "-n", "kube-system", "patch", "cm", "kubeadm-config", "--type", "merge",
            "-p", '{"data": {"ClusterConfiguration": "kind: [unclosed"}}')
    before = snapshot(handle)
    proc = run_cpctl(handle, "flags", "scheduler", "--set", "v=4", "--keep-in", "kubeadm-config")
    assert proc.returncode == 4, proc.stderr
    assert proc.stderr.count("\n") == 1 and "does not parse" in proc.stderr and "nothing changed" in proc.stderr
    assert snapshot(handle) == before


def test_unknown_keep_in_target_refused_before_anything(lab_factory: Any) -> None:
    handle = lab_factory()
    before = snapshot(handle)
    proc = run_cpctl(handle, "flags", "scheduler", "--set", "v=4", "--keep-in", "kubeadm")
    assert proc.returncode == 2 and "unknown target" in proc.stderr
    assert snapshot(handle) == before


def _race(handle: LabHandle, times: int) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Run `flags --keep-in kubeadm-config` while another writer changes the ConfigMap during each of
    the first ``times`` PUTs (each held back 1.5 s by a lab fault rule before the API serves it)."""
    handle.inject_faults([{"method": "PUT", "path": "/configmaps/kubeadm-config$", "times": times,
                           "delay": 1.5, "action": "body"}])
    out: list[subprocess.CompletedProcess] = []
    worker = threading.Thread(target=lambda: out.append(run_cpctl(
        handle, "flags", "scheduler", "--set", "v=4", "--keep-in", "kubeadm-config", "--timeout", "30")))
    worker.start()
    others = []
    for n in range(1, times + 1):
        wait_for(lambda n=n: handle.faults()[0].get("hits", 0) >= n, timeout=30)
        others.append(f"other-{n}")
        kubectl(handle, "-n", "kube-system", "annotate", "cm", "kubeadm-config", f"{others[-1]}=x")
    worker.join(60)
    handle.clear_faults()
    return out[0], others


def test_configmap_changed_between_read_and_write_retried_once(lab_factory: Any) -> None:
    handle = lab_factory()
    proc, others = _race(handle, 1)
    assert proc.returncode == 0, proc.stderr
    cm = configmap(handle)
    assert set(others) <= set(cm["metadata"].get("annotations") or {})       # the other writer's change stays
    assert kc.extra_args(yaml.safe_load(cm["data"]["ClusterConfiguration"]), "scheduler") == [("v", "4")]
    assert "--v=4" in command(handle, "kube-scheduler")


def test_configmap_changed_twice_refused_nothing_changed(lab_factory: Any) -> None:
    handle = lab_factory()
    files, text = snapshot(handle)
    proc, _ = _race(handle, 2)
    assert proc.returncode == 10, proc.stderr
    assert "changed between cpctl's read and write, twice" in proc.stderr and "nothing changed" in proc.stderr
    assert snapshot(handle) == (files, text)


def test_keep_in_patches_writes_a_json_patch_through_the_journal(lab_factory: Any) -> None:
    handle = lab_factory()
    old = yaml.safe_load((handle.manifests_dir() / "kube-scheduler.yaml").read_text())
    proc = run_cpctl(handle, "flags", "scheduler", "--set", "v=4", "--set", "bind-address=0.0.0.0",
                     "--keep-in", "patches", "--timeout", "30")
    assert proc.returncode == 0, proc.stderr
    patch = handle.root_dir() / "etc/kubernetes/patches/kube-scheduler+json.yaml"
    ops = yaml.safe_load(patch.read_text())
    index = old["spec"]["containers"][0]["command"].index("--bind-address=127.0.0.1")
    assert ops == [{"op": "add", "path": "/spec/containers/0/command/-", "value": "--v=4"},
                   {"op": "test", "path": f"/spec/containers/0/command/{index}", "value": "--bind-address=127.0.0.1"},
                   {"op": "replace", "path": f"/spec/containers/0/command/{index}", "value": "--bind-address=0.0.0.0"}]
    assert "--patches /etc/kubernetes/patches" in proc.stdout and "kubeadm join" in proc.stdout
    new = yaml.safe_load((handle.manifests_dir() / "kube-scheduler.yaml").read_text())
    assert jsonpatch.apply_patch(old, ops) == new
    history = run_cpctl(handle, "history", "-o", "json")
    schema_valid("history", json.loads(history.stdout))       # keep-in's patch
    assert '"keep-in"' in history.stdout and "kube-scheduler+json.yaml" in history.stdout


EDITOR = """#!%s
import sys
path = sys.argv[1]
text = open(path).read()
open(path, "w").write(text.replace("    - --leader-elect=true\\n", "    - --leader-elect=true\\n    - --v=5\\n", 1))
"""


def test_apply_and_edit_keep_the_flags_that_differ(lab_factory: Any, tmp_path: Any) -> None:
    """apply/edit keep the flags that differ between the old and the new manifest (v1beta3: a map)."""
    handle = lab_factory(kubeadm_api="v1beta3")
    pod = yaml.safe_load((handle.manifests_dir() / "kube-scheduler.yaml").read_text())
    pod["spec"]["containers"][0]["command"].append("--profiling=false")
    new = tmp_path / "kube-scheduler.yaml"
    new.write_text(yaml.safe_dump(pod, sort_keys=False))
    proc = run_cpctl(handle, "apply", "scheduler", "-f", str(new), "--keep-in", "kubeadm-config", "--timeout", "30")
    assert proc.returncode == 0, proc.stderr
    assert cluster_config(handle)["scheduler"]["extraArgs"] == {"profiling": "false"}
    script = tmp_path / "editor"
    script.write_text(EDITOR % sys.executable)
    script.chmod(0o755)
    proc = run_cpctl(handle, "edit", "scheduler", "--yes", "--keep-in", "kubeadm-config", "--timeout", "30",
                     EDITOR=str(script), VISUAL="")
    assert proc.returncode == 0, proc.stderr
    assert "--v=5" in command(handle, "kube-scheduler")
    assert cluster_config(handle)["scheduler"]["extraArgs"] == {"profiling": "false", "v": "5"}


# --- kept whole, kept by name (issue 34) -------------------------------------------------------------------
def kubeadm_findings(handle: LabHandle) -> list[dict[str, Any]]:
    proc = run_cpctl(handle, "check", "--kubeadm", "-o", "json")
    assert proc.returncode in (0, 1, 2), proc.stderr
    data = json.loads(proc.stdout)
    items = data if isinstance(data, list) else [data]
    return [f for item in items for f in item["findings"]
            if f["kind"].startswith("kubeadm_") or f["kind"].startswith("upgrade_")]


def test_patches_etcd_change_across_1_33_to_1_34_fails_loudly_never_a_wrong_flag(lab_factory: Any) -> None:
    """etcd 3.6 (1.34) renames two flags sorted before --snapshot-count: the index cpctl's patch names
    shifts. The test op makes kubeadm fail before anything moves, instead of replacing another flag."""
    handle = lab_factory(k8s_version="1.33")
    assert kubeadm_findings(handle) == []                         # a fresh kubeadm layout: silent
    proc = run_cpctl(handle, "flags", "etcd", "--set", "snapshot-count=5000", "--keep-in", "patches",
                     "--timeout", "60")
    assert proc.returncode == 0, proc.stderr
    assert "--patches /etc/kubernetes/patches" in proc.stdout and "kubeadm upgrade node" in proc.stdout
    ops = yaml.safe_load((handle.root_dir() / "etc/kubernetes/patches/etcd+json.yaml").read_text())
    assert [o["op"] for o in ops] == ["test", "replace"] and ops[0]["value"] == "--snapshot-count=10000"
    assert kubeadm_findings(handle) == []                         # the patch keeps it: nothing dropped
    refused = run_cpctl(handle, "flags", "etcd", "--set", "data-dir=/var/lib/etcd", "--keep-in", "patches")
    assert refused.returncode == 4 and "etcd.local.dataDir with --keep-in kubeadm-config" in refused.stderr
    before = command(handle, "etcd")
    proc = upgrade(handle, "--to", "1.34", "--patches", "/etc/kubernetes/patches")
    assert proc.returncode == 1 and "failed to patch static Pod manifest file for 'etcd'" in proc.stderr, proc.stderr
    assert command(handle, "etcd") == before                      # nothing moved: every flag as it was
    assert "--trusted-ca-file=/etc/kubernetes/pki/etcd/ca.crt" in before and "--snapshot-count=5000" in before
    assert not [f for f in kubeadm_findings(handle) if f["kind"] == "upgrade_in_flight"]
    # the way that survives a re-render: by name, in the ClusterConfiguration
    proc = run_cpctl(handle, "flags", "etcd", "--set", "snapshot-count=5000", "--keep-in", "kubeadm-config",
                     "--timeout", "60")
    assert proc.returncode == 0, proc.stderr
    (handle.root_dir() / "etc/kubernetes/patches/etcd+json.yaml").unlink()
    proc = upgrade(handle, "--to", "1.34")
    assert proc.returncode == 0, proc.stderr
    after = command(handle, "etcd")
    assert "--snapshot-count=5000" in after and "--watch-progress-notify-interval=5s" in after
    assert "--trusted-ca-file=/etc/kubernetes/pki/etcd/ca.crt" in after
    assert json.loads(kubectl(handle, "version", "-o", "json").stdout)["serverVersion"]["gitVersion"] \
        == "v1.34.1-lab"


AUDIT_POLICY = "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n  - level: Metadata\n"


def test_audit_recipe_kept_in_kubeadm_config_survives_upgrade_with_its_mounts(lab_factory: Any,
                                                                               tmp_path: Any) -> None:
    handle = lab_factory(kubeadm_api="v1beta3")
    policy = tmp_path / "audit-policy.yaml"
    policy.write_text(AUDIT_POLICY)
    proc = run_cpctl(handle, "flags", "kube-apiserver", "--set", "audit-policy-file=/etc/kubernetes/audit/policy.yaml",
                     "--set", "audit-log-path=/var/log/kubernetes/audit/audit.log",
                     "--with-file", f"/etc/kubernetes/audit/policy.yaml={policy}", "--mount",
                     "--keep-in", "kubeadm-config", "--timeout", "60")
    assert proc.returncode == 0, proc.stderr
    assert "kept with the flags: volumes " in proc.stdout, proc.stdout
    api = cluster_config(handle)["apiServer"]
    assert api["extraArgs"]["audit-policy-file"] == "/etc/kubernetes/audit/policy.yaml"
    vols = {v["mountPath"]: v for v in api["extraVolumes"]}
    assert vols["/etc/kubernetes/audit/policy.yaml"]["hostPath"] == "/etc/kubernetes/audit/policy.yaml"
    assert vols["/etc/kubernetes/audit/policy.yaml"]["readOnly"] is True
    assert vols["/var/log/kubernetes/audit"]["readOnly"] is False
    assert kubeadm_findings(handle) == []
    proc = upgrade(handle, "--to", "1.31")
    assert proc.returncode == 0, proc.stderr                    # the new API server starts: its policy is mounted
    pod = yaml.safe_load((handle.manifests_dir() / "kube-apiserver.yaml").read_text())
    mounts = {m["mountPath"] for m in pod["spec"]["containers"][0]["volumeMounts"]}
    assert {"/etc/kubernetes/audit/policy.yaml", "/var/log/kubernetes/audit"} <= mounts
    assert "--audit-policy-file=/etc/kubernetes/audit/policy.yaml" in pod["spec"]["containers"][0]["command"]
    # a hand-made volume the ClusterConfiguration does not hold: named, with the command that keeps it
    cm = configmap(handle)
    cfg = yaml.safe_load(cm["data"]["ClusterConfiguration"])
    del cfg["apiServer"]["extraVolumes"]
    cm["data"]["ClusterConfiguration"] = yaml.safe_dump(cfg)
    (handle.dir / "cm.yaml").write_text(yaml.safe_dump(cm))
    kubectl(handle, "replace", "-f", str(handle.dir / "cm.yaml"))
    drops = [f for f in kubeadm_findings(handle) if f["kind"] == "kubeadm_drops"]
    assert len(drops) == 2 and all(f["volumes"] for f in drops), drops
    assert any("--set audit-policy-file=/etc/kubernetes/audit/policy.yaml --keep-in kubeadm-config" in f["fix"]
               for f in drops), drops


def test_not_kept_whole_is_refused_before_anything(lab_factory: Any, tmp_path: Any) -> None:
    """An image change has no place in the ClusterConfiguration: refused, nothing written."""
    handle = lab_factory()
    files, text = snapshot(handle)
    pod = yaml.safe_load((handle.manifests_dir() / "kube-scheduler.yaml").read_text())
    pod["spec"]["containers"][0]["command"].append("--v=3")
    pod["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "50m"}}
    new = tmp_path / "kube-scheduler.yaml"
    new.write_text(yaml.safe_dump(pod, sort_keys=False))
    proc = run_cpctl(handle, "apply", "scheduler", "-f", str(new), "--keep-in", "kubeadm-config", "--timeout", "30")
    assert proc.returncode == 4, proc.stderr
    assert "cannot keep this change of kube-scheduler whole" in proc.stderr and "Nothing changed" in proc.stderr
    assert snapshot(handle) == (files, text)


ISSUERS = ["https://kubernetes.default.svc.cluster.local", "https://issuer.example"]


def test_repeated_issuers_survive_keep_in_of_another_flag_and_of_the_issuer(lab_factory: Any,
                                                                           tmp_path: Any) -> None:
    """apply --keep-in of the issuers themselves keeps every instance, in order; a --keep-in of another
    flag leaves them alone; check --kubeadm reports no false drop; the upgrade renders both."""
    handle = lab_factory(kubeadm_api="v1beta4")
    path = handle.manifests_dir() / "kube-apiserver.yaml"
    pod = yaml.safe_load(path.read_text())
    cmd = pod["spec"]["containers"][0]["command"]
    cmd.insert(cmd.index(f"--service-account-issuer={ISSUERS[0]}") + 1, f"--service-account-issuer={ISSUERS[1]}")
    new = tmp_path / "kube-apiserver.yaml"
    new.write_text(yaml.safe_dump(pod, sort_keys=False))
    proc = run_cpctl(handle, "apply", "apiserver", "-f", str(new), "--keep-in", "kubeadm-config", "--timeout", "60")
    assert proc.returncode == 0, proc.stderr
    issuers = lambda: [v for n, v in kc.extra_args(cluster_config(handle), "apiServer")  # noqa: E731
                       if n == "service-account-issuer"]
    assert issuers() == ISSUERS
    assert kubeadm_findings(handle) == []                        # both instances kept: no false drop
    proc = run_cpctl(handle, "flags", "apiserver", "--set", "audit-log-maxage=7", "--keep-in", "kubeadm-config",
                     "--timeout", "60")
    assert proc.returncode == 0, proc.stderr
    assert issuers() == ISSUERS                                   # another flag: both issuers stay
    assert kubeadm_findings(handle) == []
    proc = upgrade(handle, "--to", "classic")          # the same release: only what the render changes moves
    assert proc.returncode == 0, proc.stderr
    assert [a for a in command(handle, "kube-apiserver") if a.startswith("--service-account-issuer=")] == [
        f"--service-account-issuer={v}" for v in sorted(ISSUERS)]          # ArgumentsToCommand: name, then value


def test_failed_upgrade_leftovers_are_reported_not_refused_for_20_minutes(lab_factory: Any) -> None:
    """A component that does not come back: kubeadm moves every manifest back and keeps its tmp dirs;
    cpctl says what happened and lets the operator repair (no 'in flight' refusal)."""
    handle = lab_factory(kubeadm_api="v1beta3")
    cm = configmap(handle)
    cfg = yaml.safe_load(cm["data"]["ClusterConfiguration"])
    cfg["scheduler"] = {"extraArgs": {"no-such-flag": "x"}}
    cm["data"]["ClusterConfiguration"] = yaml.safe_dump(cfg)
    (handle.dir / "cm.yaml").write_text(yaml.safe_dump(cm))
    kubectl(handle, "replace", "-f", str(handle.dir / "cm.yaml"))
    before = command(handle, "kube-scheduler")
    proc = upgrade(handle, "--to", "classic", "--timeout", "5")     # only the scheduler's render changes
    assert proc.returncode == 1 and "kube-scheduler" in proc.stderr and "recover" in proc.stderr, proc.stderr
    assert command(handle, "kube-scheduler") == before
    tmp = handle.root_dir() / "etc/kubernetes/tmp"
    assert list(tmp.glob("kubeadm-upgraded-manifests-*")) and list(tmp.glob("kubeadm-backup-manifests-*"))
    found: dict[str, Any] = {}

    def reported() -> bool:         # an empty staging dir counts once it is EMPTY_SETTLED seconds old
        answer = schema_valid("check", json.loads(run_cpctl(handle, "check", "-o", "json").stdout))
        found.update({f["kind"]: f for f in answer["findings"]})      # upgrade_failed: its components too
        return "upgrade_failed" in found
    wait_for(reported, 30, "upgrade_failed reported")
    assert "upgrade_in_flight" not in found and "failed and was rolled back" in found["upgrade_failed"]["message"]
    proc = run_cpctl(handle, "flags", "scheduler", "--set", "v=4", "--timeout", "30")
    assert proc.returncode == 0, proc.stderr


def _etcd_pod(data_dir: str = "/var/lib/etcd", host: str = "/var/lib/etcd") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "etcd"}, "spec": {
        "containers": [{"name": "etcd", "command": ["etcd", f"--data-dir={data_dir}", "--name=m1",
                                                     "--snapshot-count=10000"],
                        "volumeMounts": [{"mountPath": host, "name": "etcd-data"},
                                         {"mountPath": "/etc/kubernetes/pki/etcd", "name": "etcd-certs"}]}],
        "volumes": [{"hostPath": {"path": host, "type": "DirectoryOrCreate"}, "name": "etcd-data"},
                    {"hostPath": {"path": "/etc/kubernetes/pki/etcd", "type": "DirectoryOrCreate"},
                     "name": "etcd-certs"}]}}


V4 = {"apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "ClusterConfiguration",
      "etcd": {"local": {"dataDir": "/var/lib/etcd"}}}


def test_etcd_data_dir_is_kept_as_data_dir_never_as_a_flag() -> None:
    old, new = _etcd_pod(), _etcd_pod("/var/lib/etcd-restore", "/var/lib/etcd-restore")
    whole = kc.whole_change(old, new, 0, "etcd", kc.flag_change(old["spec"]["containers"][0],
                                                                new["spec"]["containers"][0]))
    assert whole.data_dir == "/var/lib/etcd-restore" and whole.flags.sets == [] and not whole.not_in_config
    flag_only = dict(V4, etcd={"local": {"dataDir": "/var/lib/etcd",
                                         "extraArgs": [{"name": "data-dir", "value": "/var/lib/etcd-restore"}]}})
    kept = kc.with_whole(flag_only, "etcd.local", whole)
    assert kept["etcd"]["local"] == {"dataDir": "/var/lib/etcd-restore"}      # the flag-only entry is gone
    # what runs vs the next render: the flag-only data dir is named, critical, fixed without --force
    drops = kc.next_upgrade_drops(new, 0, flag_only, "etcd")
    assert [d.kind for d in drops] == ["data_dir"] and drops[0].critical
    assert "no hostPath volume mounts" in drops[0].text and "empty member" in drops[0].text
    assert drops[0].fix.startswith("cpctl flags etcd --set data-dir=/var/lib/etcd-restore --keep-in kubeadm-config")
    assert "--force" not in drops[0].fix
    assert kc.next_upgrade_drops(new, 0, kept, "etcd") == []
    assert kc.next_upgrade_drops(old, 0, V4, "etcd") == []                   # fresh layout: silent
    # upstream's shorter variant: only the hostPath moved, --data-dir stays /var/lib/etcd inside
    short = _etcd_pod("/var/lib/etcd", "/var/lib/etcd")
    short["spec"]["volumes"][0]["hostPath"]["path"] = "/var/lib/etcd-restore"
    assert kc.whole_change(old, short, 0, "etcd", kc.FlagChange()).data_dir == "/var/lib/etcd-restore"


def test_repeated_flag_in_v1beta3_refused_and_positions_refused_for_patches() -> None:
    v3 = {"apiVersion": "kubeadm.k8s.io/v1beta3", "kind": "ClusterConfiguration", "apiServer": {}}
    two = kc.FlagChange([("service-account-issuer", "a"), ("service-account-issuer", "b")])
    with pytest.raises(kc.CpctlError, match="v1beta3"):
        kc.with_flags(v3, "apiServer", two)
    v4 = dict(v3, apiVersion="kubeadm.k8s.io/v1beta4", apiServer={"extraArgs": [
        {"name": "service-account-issuer", "value": "a"}, {"name": "v", "value": "2"},
        {"name": "service-account-issuer", "value": "b"}]})
    out = kc.with_flags(v4, "apiServer", kc.FlagChange([("v", "3")]))
    assert kc.extra_args(out, "apiServer") == [("service-account-issuer", "a"), ("v", "3"),
                                               ("service-account-issuer", "b")]
    container = {"command": ["kube-apiserver", "--service-account-issuer=a", "--service-account-issuer=b"]}
    with pytest.raises(kc.CpctlError, match="position"):
        kc.patch_ops([], 0, container, container, kc.FlagChange([("service-account-issuer", "c")]))


# --- undo is whole (issue 33 item 1) -------------------------------------------------------------------
FAST = ("--timeout", "60", "--settle", "1")


def _kept(handle: LabHandle) -> tuple[str, str]:
    cm = configmap(handle)
    return cm["data"]["ClusterConfiguration"], cm["metadata"]["resourceVersion"]


def test_rollback_and_an_unconfirmed_revert_put_the_kept_cluster_configuration_back(lab_factory: Any) -> None:
    """A --keep-in kubeadm-config change undone by ``rollback`` and by ``revert-unconfirmed``: the
    ClusterConfiguration is back as it was (only while its resourceVersion is the one cpctl wrote);
    a ConfigMap someone else changed since is left as it is, and the undo says so."""
    handle = lab_factory()
    text, _ = _kept(handle)
    # rollback
    proc = run_cpctl(handle, "flags", "scheduler", "--set", "v=4", "--keep-in", "kubeadm-config", *FAST)
    assert proc.returncode == 0, proc.stderr
    assert kc.extra_args(cluster_config(handle), "scheduler") == [("v", "4")]
    proc = run_cpctl(handle, "rollback", "scheduler", *FAST)
    assert proc.returncode == 0, proc.stderr
    assert "kube-system/kubeadm-config put back as it was" in proc.stdout, proc.stdout
    back, version = _kept(handle)
    assert back == text and "--v=4" not in command(handle, "kube-scheduler")
    history = run_cpctl(handle, "-o", "json", "history").stdout
    schema_valid("history", json.loads(history))              # keep-in-undone's configmap, resource_version
    assert '"keep-in-undone"' in history and version in history
    # an unconfirmed change's revert
    proc = run_cpctl(handle, "flags", "scheduler", "--set", "v=5", "--keep-in", "kubeadm-config",
                     "--confirm-within", "1h", *FAST)
    assert proc.returncode == 0, proc.stderr
    assert kc.extra_args(cluster_config(handle), "scheduler") == [("v", "5")]
    proc = run_cpctl(handle, "revert-unconfirmed", "scheduler")
    assert proc.returncode == 0, proc.stderr
    assert _kept(handle)[0] == text and "--v=5" not in command(handle, "kube-scheduler")
    # someone else changed the ConfigMap since (its metadata): the text is cpctl's, it goes back, theirs stays
    proc = run_cpctl(handle, "flags", "scheduler", "--set", "v=6", "--keep-in", "kubeadm-config", *FAST)
    assert proc.returncode == 0, proc.stderr
    kubectl(handle, "-n", "kube-system", "annotate", "cm", "kubeadm-config", "someone=else")
    proc = run_cpctl(handle, "rollback", "scheduler", *FAST)
    assert proc.returncode == 0, proc.stderr
    assert "kube-system/kubeadm-config put back as it was" in proc.stdout, proc.stdout
    assert _kept(handle)[0] == text and configmap(handle)["metadata"]["annotations"]["someone"] == "else"
    assert "--v=6" not in command(handle, "kube-scheduler")


def edit_cluster_config(handle: LabHandle, change: Any) -> None:
    """Another writer: ``kubectl replace`` of the ConfigMap with its ClusterConfiguration changed by
    ``change`` (a function of its value), over the resourceVersion read."""
    cm = json.loads(kubectl(handle, "-n", "kube-system", "get", "cm", "kubeadm-config", "-o", "json").stdout)
    cfg = yaml.safe_load(cm["data"]["ClusterConfiguration"])
    change(cfg)
    cm["data"]["ClusterConfiguration"] = yaml.safe_dump(cfg, sort_keys=True)
    path = handle.dir / "cm-edit.json"
    path.write_text(json.dumps(cm))
    kubectl(handle, "replace", "-f", str(path))


def _scheduler_args(cfg: dict[str, Any]) -> dict[str, str]:
    return dict(kc.extra_args(cfg, "scheduler"))


def test_a_reverted_kept_flag_never_outlives_its_revert(lab_factory: Any) -> None:
    """Issue 49 item 1: ``--keep-in kubeadm-config --confirm-within``, then someone else edits kubeadm-config
    (another key) while the change is armed: the revert takes exactly cpctl's flag out of the
    ClusterConfiguration and keeps theirs (it used to leave the reverted flag there for the next upgrade,
    and ``check --kubeadm`` said "no drift"). Where they changed cpctl's own key, the revert refuses
    loudly, the record stays (every command says so) and ``check --kubeadm`` reports the flag the next
    upgrade would add, until it is resolved."""
    handle = lab_factory(kubeadm_api="v1beta3")
    proc = run_cpctl(handle, "flags", "scheduler", "--set", "v=5", "--keep-in", "kubeadm-config",
                     "--confirm-within", "1h", *FAST)
    assert proc.returncode == 0, proc.stderr
    edit_cluster_config(handle, lambda c: c.setdefault("controllerManager", {}).setdefault(
        "extraArgs", {}).update(profiling="false"))
    proc = run_cpctl(handle, "revert-unconfirmed", "scheduler")
    assert proc.returncode == 0, proc.stderr
    cfg = cluster_config(handle)
    assert "v" not in _scheduler_args(cfg), cfg                       # cpctl's flag: gone with the revert
    assert dict(kc.extra_args(cfg, "controllerManager")) == {"profiling": "false"}     # theirs: kept
    assert "--v=5" not in command(handle, "kube-scheduler")
    assert not [f for f in kubeadm_findings(handle) if "--v=5" in json.dumps(f)]
    assert '"keep-in-undone"' in run_cpctl(handle, "-o", "json", "history").stdout
    # the same key changed by someone else: refused loudly, the record kept, check --kubeadm shows it
    proc = run_cpctl(handle, "flags", "scheduler", "--set", "v=6", "--keep-in", "kubeadm-config",
                     "--confirm-within", "1h", *FAST)
    assert proc.returncode == 0, proc.stderr
    edit_cluster_config(handle, lambda c: c["scheduler"]["extraArgs"].update(v="9"))
    proc = run_cpctl(handle, "revert-unconfirmed", "scheduler")
    assert proc.returncode == 0, proc.stderr
    assert "kube-system/kubeadm-config NOT put back: someone else changed scheduler.extraArgs.v too" in \
        proc.stdout + proc.stderr, (proc.stdout, proc.stderr)
    assert _scheduler_args(cluster_config(handle)) == {"v": "9"} and "--v=6" not in command(handle, "kube-scheduler")
    records = list((handle.state_dir() / "keepin").glob("kube-scheduler.yaml.*.json"))
    assert len(records) == 1, records
    status = run_cpctl(handle, "status")                             # every command says so again
    assert "NOT put back: someone else changed scheduler.extraArgs.v" in status.stderr, status.stderr
    # ... and the history says it once (it takes no lock and runs no recovery: it showed nothing)
    history = schema_valid("history", json.loads(run_cpctl(handle, "-o", "json", "history", "scheduler").stdout))
    conflicts = [r for r in history["history"] if r["action"] == "keep-in-conflict"]
    assert len(conflicts) == 1, history["history"]
    assert conflicts[0]["keys"] == ["scheduler.extraArgs.v"] and conflicts[0]["theirs"] == {
        "scheduler.extraArgs.v": "9"} and conflicts[0]["keepin_record"] == str(records[0]), conflicts
    assert conflicts[0]["resolve"] == "kubectl -n kube-system edit configmap kubeadm-config", conflicts
    assert "(theirs: scheduler.extraArgs.v=9)" in run_cpctl(handle, "history", "scheduler").stdout
    adds = [f for f in kubeadm_findings(handle) if f["kind"] == "kubeadm_adds"]
    assert {f["component"]: f["flags"] for f in adds} == {"kube-scheduler": ["--v=9"],       # theirs, both
                                                           "kube-controller-manager": ["--profiling=false"]}, adds
    # resolved: they put the value before back - the record goes, nothing left to add
    edit_cluster_config(handle, lambda c: c["scheduler"]["extraArgs"].pop("v"))
    status = run_cpctl(handle, "status")
    assert status.returncode == 0 and "NOT put back" not in status.stderr, status.stderr
    assert not list((handle.state_dir() / "keepin").glob("kube-scheduler.yaml.*.json"))
    assert not [f for f in kubeadm_findings(handle) if f["kind"] == "kubeadm_adds" and f["component"] ==
                "kube-scheduler"]


def test_a_kill_between_the_configmap_write_and_the_manifest_puts_the_configmap_back(lab_factory: Any) -> None:
    """cpctl SIGKILLed after the API applied its ClusterConfiguration write and before the manifest
    changed (the PUT's answer drips, one byte a second): the next command's recovery puts the
    ClusterConfiguration back (cpctl never learnt the resourceVersion: its own text there is the proof)."""
    handle = lab_factory()
    text, _ = _kept(handle)
    manifest = (handle.manifests_dir() / "kube-scheduler.yaml").read_bytes()
    handle.inject_faults([{"method": "PUT", "path": "/configmaps/kubeadm-config$", "action": "drip", "interval": 5}])
    env = dict(os.environ, **handle.env)
    env.pop("CPCTL_PROBE", None)
    proc = subprocess.Popen([sys.executable, "-m", "cpctl", "flags", "scheduler", "--set", "v=4", "--keep-in",
                             "kubeadm-config", *FAST], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: _kept(handle)[0] != text, timeout=60, what="the ConfigMap written")
    finally:
        proc.kill()
        proc.communicate(timeout=30)
    handle.clear_faults()
    assert (handle.manifests_dir() / "kube-scheduler.yaml").read_bytes() == manifest
    assert kc.extra_args(cluster_config(handle), "scheduler") == [("v", "4")]
    status = run_cpctl(handle, "status")
    assert status.returncode == 0, status.stderr
    assert "kube-system/kubeadm-config put back" in status.stderr, status.stderr
    assert _kept(handle)[0] == text
    # killed in the wait (the manifest changed, never verified): the rollback that undoes it puts the
    # ClusterConfiguration back too
    proc = subprocess.Popen([sys.executable, "-m", "cpctl", "flags", "scheduler", "--set", "v=7", "--keep-in",
                             "kubeadm-config", "--timeout", "120", "--settle", "30"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: "--v=7" in command(handle, "kube-scheduler"), timeout=60, what="the manifest written")
    finally:
        proc.kill()
        proc.communicate(timeout=30)
    assert kc.extra_args(cluster_config(handle), "scheduler") == [("v", "7")]
    proc2 = run_cpctl(handle, "rollback", "scheduler", *FAST)
    assert proc2.returncode == 0, proc2.stderr
    assert "kube-system/kubeadm-config put back" in proc2.stdout, proc2.stdout
    assert _kept(handle)[0] == text and (handle.manifests_dir() / "kube-scheduler.yaml").read_bytes() == manifest


def test_rollback_puts_the_kept_patch_file_back(lab_factory: Any) -> None:
    """--keep-in patches undone by ``rollback``: a patch file the change created is removed, one it
    changed gets its bytes before back (through the journal, on record); one someone else changed since
    is left as it is, and the rollback says so."""
    handle = lab_factory()
    patch = handle.root_dir() / "etc/kubernetes/patches/kube-scheduler+json.yaml"
    proc = run_cpctl(handle, "flags", "scheduler", "--set", "v=4", "--keep-in", "patches", *FAST)
    assert proc.returncode == 0, proc.stderr
    first = patch.read_bytes()
    proc = run_cpctl(handle, "flags", "scheduler", "--set", "profiling=false", "--keep-in", "patches", *FAST)
    assert proc.returncode == 0, proc.stderr
    assert patch.read_bytes() != first
    proc = run_cpctl(handle, "rollback", "scheduler", *FAST)
    assert proc.returncode == 0, proc.stderr
    assert "%s put back as it was" % patch in proc.stdout, proc.stdout
    assert patch.read_bytes() == first
    proc = run_cpctl(handle, "rollback", "scheduler", "--to", "1", *FAST)
    assert proc.returncode == 0, proc.stderr
    assert not patch.exists(), proc.stdout
    history = run_cpctl(handle, "-o", "json", "history").stdout
    assert history.count('"undo": true') == 2, history
    # someone else's patch since: left as it is
    proc = run_cpctl(handle, "flags", "scheduler", "--set", "v=6", "--keep-in", "patches", *FAST)
    assert proc.returncode == 0, proc.stderr
    patch.write_text(patch.read_text() + "# theirs\n")
    theirs = patch.read_bytes()
    proc = run_cpctl(handle, "rollback", "scheduler", *FAST)
    assert proc.returncode == 0, proc.stderr
    assert "changed by someone else since" in proc.stdout and patch.read_bytes() == theirs, proc.stdout


# --- a change is one typed value: its plan and its inverse (issue 33, the Plan) ------------------------------
def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _cm_text_sha(handle: LabHandle) -> str:
    return _sha(_kept(handle)[0].encode("utf-8"))


def _on_disk(part: dict[str, Any]) -> Any:
    """A plan's file part as the node holds it now: {"checksum", "size"}, None when absent."""
    path = Path(part["path"])
    if not path.exists():
        return None
    data = path.read_bytes()
    return {"checksum": _sha(data), "size": len(data)}


def _json(proc: subprocess.CompletedProcess) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(proc.stdout)
    return data


def test_the_dry_run_plan_is_what_the_real_run_applies_and_its_inverse_undoes_every_part(lab_factory: Any,
                                                                                          tmp_path: Any) -> None:
    """One change with a companion file, the mounts --mount adds and --keep-in kubeadm-config: the plan
    its dry run prints is the plan the real run applies (same parts, same bytes: the files and the
    ClusterConfiguration then hold its "after" side), and its inverse is what comes back - by
    the automatic rollback of a change that fails (a companion file present before gets its bytes back),
    by ``rollback`` (whose own plan is that inverse: a companion file absent before is removed), and by an
    unconfirmed change's revert (the ClusterConfiguration someone else changed since is left theirs)."""
    handle = lab_factory(kubeadm_api="v1beta3")
    policy = tmp_path / "audit-policy.yaml"
    policy.write_text(AUDIT_POLICY)
    node_policy = handle.root_dir() / "etc/kubernetes/audit/policy.yaml"
    manifest = handle.manifests_dir() / "kube-apiserver.yaml"
    original, text_before = manifest.read_bytes(), _kept(handle)[0]
    change = ("flags", "kube-apiserver", "--set", "audit-policy-file=/etc/kubernetes/audit/policy.yaml",
              "--set", "audit-log-path=/var/log/kubernetes/audit/audit.log",
              "--with-file", f"/etc/kubernetes/audit/policy.yaml={policy}", "--mount", "--keep-in", "kubeadm-config")
    dry = run_cpctl(handle, "-o", "json", *change, *FAST, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    plan = _json(dry)["plan"]
    assert plan["manifest"]["before"] == {"checksum": _sha(original), "size": len(original)}
    assert plan["companions"] == [{"path": str(node_policy), "mode": "0600", "before": None,
                                   "after": {"checksum": _sha(policy.read_bytes()), "size": len(AUDIT_POLICY)}}]
    mounts = {m["mount_path"]: m for m in plan["mounts"]}
    assert mounts["/etc/kubernetes/audit/policy.yaml"]["writable"] is False
    assert mounts["/etc/kubernetes/audit/policy.yaml"]["type"] == "File"
    assert (mounts["/var/log/kubernetes/audit"]["writable"], mounts["/var/log/kubernetes/audit"]["type"]) == \
        (True, "DirectoryOrCreate")
    config = plan["kubeadm_config"]
    assert config["changed"] and config["resource_version"] == _kept(handle)[1]
    assert config["before"]["checksum"] == _sha(text_before.encode("utf-8"))
    assert plan["inverse"]["manifest"] == {**plan["manifest"], "before": plan["manifest"]["after"],
                                           "after": plan["manifest"]["before"]}
    assert plan["inverse"]["companions"][0]["after"] is None and plan["inverse"]["kubeadm_config"] is not None
    text = run_cpctl(handle, *change, *FAST, "--dry-run")
    assert text.returncode == 0, text.stderr
    assert "  plan (what the real run applies" in text.stdout, text.stdout
    assert "companion %s (mode 0600): absent -> sha256 %s" % (node_policy, _sha(policy.read_bytes())[:12]) \
        in text.stdout, text.stdout
    assert "mount hostPath /var/log/kubernetes/audit (DirectoryOrCreate) at /var/log/kubernetes/audit" in text.stdout
    assert "undo: companion %s removed (absent before)" % node_policy in text.stdout, text.stdout
    assert (manifest.read_bytes(), _kept(handle)[0], node_policy.exists()) == (original, text_before, False)

    real = run_cpctl(handle, "-o", "json", *change, *FAST)
    assert real.returncode == 0, real.stderr
    assert _json(real)["plan"] == plan                          # what the dry run printed is what was applied
    assert _on_disk(plan["manifest"]) == plan["manifest"]["after"]
    assert _on_disk(plan["companions"][0]) == plan["companions"][0]["after"]
    assert _cm_text_sha(handle) == config["after"]["checksum"]

    # an automatic rollback: a second change (one more flag) rewrites the policy with one the API server
    # refuses; what comes back is its plan's inverse - the policy file present again with its bytes before
    first = plan
    good = policy.read_bytes()
    policy.write_text("apiVersion: audit.k8s.io/v1\nkind: Policy\n")        # no rules: it crash-loops
    second = (*change, "--set", "audit-log-maxage=7")
    dry = run_cpctl(handle, "-o", "json", *second, *FAST, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    plan = _json(dry)["plan"]
    assert plan["companions"][0]["before"] == {"checksum": _sha(good), "size": len(good)} and plan["mounts"] == []
    assert plan["kubeadm_config"]["before"] == first["kubeadm_config"]["after"]
    failed = run_cpctl(handle, *second, *FAST)
    assert failed.returncode == 11, failed.stderr
    assert "ROLLED BACK" in failed.stderr and "kube-system/kubeadm-config put back as it was" in failed.stderr
    assert _on_disk(plan["manifest"]) == plan["inverse"]["manifest"]["after"] == first["manifest"]["after"]
    assert _on_disk(plan["companions"][0]) == plan["inverse"]["companions"][0]["after"]
    assert node_policy.read_bytes() == good
    assert _cm_text_sha(handle) == plan["kubeadm_config"]["before"]["checksum"]

    # rollback: its own plan is the inverse of the first change's, and it leaves every part as that change
    # found it - the policy file absent, the ClusterConfiguration's text before it
    policy.write_bytes(good)
    plan = first
    back = run_cpctl(handle, "-o", "json", "rollback", "kube-apiserver", *FAST, "--dry-run")
    assert back.returncode == 0, back.stderr
    undo = _json(back)["plan"]
    assert undo["manifest"]["after"] == plan["inverse"]["manifest"]["after"]
    assert [(c["path"], c["after"]) for c in undo["companions"]] == \
        [(c["path"], c["after"]) for c in plan["inverse"]["companions"]]
    done = run_cpctl(handle, "rollback", "kube-apiserver", *FAST)
    assert done.returncode == 0, done.stderr
    assert "kube-system/kubeadm-config put back as it was" in done.stdout, done.stdout
    assert _on_disk(plan["manifest"]) == plan["inverse"]["manifest"]["after"]
    assert _on_disk(plan["companions"][0]) is None
    assert _cm_text_sha(handle) == config["before"]["checksum"]

    # an unconfirmed change's revert: manifest and companion file back; in the ClusterConfiguration someone
    # else changed since (another section), exactly cpctl's keys go back and theirs stays (issue 49)
    armed = run_cpctl(handle, "-o", "json", *change, *FAST, "--confirm-within", "1h")
    assert armed.returncode == 0, armed.stderr
    plan = _json(armed)["plan"]
    edit_cluster_config(handle, lambda c: c.setdefault("scheduler", {}).setdefault("extraArgs", {}).update(v="3"))
    reverted = run_cpctl(handle, "-o", "json", "revert-unconfirmed", "kube-apiserver")
    assert reverted.returncode == 0, reverted.stderr
    answer = _json(reverted)
    assert "kube-system/kubeadm-config: cpctl's apiServer." in answer["message"] and \
        "what others changed since kept" in answer["message"], answer
    assert answer["plan"]["manifest"]["after"] == plan["inverse"]["manifest"]["after"]      # the revert's plan is
    assert [(c["path"], c["after"]) for c in answer["plan"]["companions"]] == \
        [(c["path"], c["after"]) for c in plan["inverse"]["companions"]]                   # the change's inverse
    assert _on_disk(plan["manifest"]) == plan["inverse"]["manifest"]["after"]
    assert _on_disk(plan["companions"][0]) is None
    cfg = cluster_config(handle)
    assert _scheduler_args(cfg) == {"v": "3"} and cfg.get("apiServer", {}).get("extraVolumes") is None, cfg
    assert not [a for a, _ in kc.extra_args(cfg, "apiServer") if a.startswith("audit-")], cfg


# --- patches as kubeadm applies them (issue 49 item 2) --------------------------------------------------------
def test_keep_in_patches_builds_its_ops_against_what_kubeadm_renders(lab_factory: Any) -> None:
    """After ``flags scheduler --set v=7`` (in the manifest only), ``--set v=2 --keep-in patches`` used to
    write a ``test "--v=7"`` at the index --v=7 has in the manifest: kubeadm renders from the
    ClusterConfiguration, where there is no --v, and the next ``kubeadm upgrade --patches`` failed ("index
    out of bounds"). The ops are built against ``render_next``: an ``add`` of --v=2."""
    handle = lab_factory()
    proc = run_cpctl(handle, "flags", "scheduler", "--set", "v=7", *FAST)
    assert proc.returncode == 0, proc.stderr
    proc = run_cpctl(handle, "flags", "scheduler", "--set", "v=2", "--set", "bind-address=0.0.0.0",
                     "--keep-in", "patches", *FAST)
    assert proc.returncode == 0, proc.stderr
    patch = handle.root_dir() / "etc/kubernetes/patches/kube-scheduler+json.yaml"
    ops = yaml.safe_load(patch.read_text())
    assert {"op": "add", "path": "/spec/containers/0/command/-", "value": "--v=2"} in ops, ops
    assert not [o for o in ops if o.get("value") == "--v=7"], ops
    assert not [f for f in kubeadm_findings(handle) if f["kind"] == "kubeadm_patch_fails"]
    proc = upgrade(handle, "--patches", "/etc/kubernetes/patches")
    assert proc.returncode == 0, proc.stderr
    after = command(handle, "kube-scheduler")
    assert "--v=2" in after and "--v=7" not in after and "--bind-address=0.0.0.0" in after, after


def test_check_kubeadm_judges_every_rfc_6902_operation_as_kubeadm_does(lab_factory: Any) -> None:
    """A valid ``copy`` (and ``move``) in a patch file is applied as kubeadm applies it - by a real RFC 6902
    implementation - not reported as "the next kubeadm upgrade fails"; a ``test`` that does not hold still is."""
    handle = lab_factory()
    patches = handle.root_dir() / "etc/kubernetes/patches"
    patches.mkdir(parents=True, exist_ok=True)
    good = [{"op": "add", "path": "/metadata/annotations", "value": {"a": "x"}},
            {"op": "copy", "from": "/metadata/annotations/a", "path": "/metadata/annotations/b"},
            {"op": "move", "from": "/metadata/annotations/a", "path": "/metadata/annotations/c"}]
    (patches / "kube-scheduler+json.yaml").write_text(yaml.safe_dump(good))
    assert not [f for f in kubeadm_findings(handle) if f["kind"] == "kubeadm_patch_fails"]
    proc = upgrade(handle, "--patches", "/etc/kubernetes/patches")
    assert proc.returncode == 0, proc.stderr
    pod = yaml.safe_load((handle.manifests_dir() / "kube-scheduler.yaml").read_text())
    assert pod["metadata"]["annotations"] == {"b": "x", "c": "x"}
    bad = good + [{"op": "test", "path": "/metadata/annotations/b", "value": "y"}]
    (patches / "kube-scheduler+json.yaml").write_text(yaml.safe_dump(bad))
    fails = [f for f in kubeadm_findings(handle) if f["kind"] == "kubeadm_patch_fails"]
    assert len(fails) == 1 and fails[0]["component"] == "kube-scheduler", fails


def test_apply_json_patch_is_rfc_6902() -> None:
    doc = {"spec": {"containers": [{"command": ["kube-scheduler", "--v=2"]}]}}
    ops = [{"op": "copy", "from": "/spec/containers/0/command/1", "path": "/spec/containers/0/command/-"},
           {"op": "move", "from": "/spec/containers/0/command/2", "path": "/spec/containers/0/command/1"}]
    assert kc.apply_json_patch(doc, ops) == {"spec": {"containers": [{"command": ["kube-scheduler", "--v=2",
                                                                                   "--v=2"]}]}}
    assert doc == {"spec": {"containers": [{"command": ["kube-scheduler", "--v=2"]}]}}       # a copy is patched
    for bad in ([{"op": "test", "path": "/spec/containers/0/command/7", "value": "--v=7"}],
                [{"op": "test", "path": "/spec/containers/0/command/1", "value": "--v=7"}],
                [{"op": "frobnicate", "path": "/spec"}], [{"path": "/spec"}]):
        with pytest.raises(kc.PatchFailed):
            kc.apply_json_patch(doc, bad)
