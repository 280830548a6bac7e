"""A change as one typed value (issue 33): the parts of ``core.plan.Plan`` and the inverse computed with it."""

from __future__ import annotations

import copy
from typing import Any, Dict

from cpctl.core import keptin
from cpctl.core import kubeadmconfig as kc
from cpctl.core.plan import ConfigPlan, FilePart, KeepPlan, MountPart, PatchPlan, Plan, mounts_added
from tests.coreutil import sha


def _pod() -> Dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "kube-apiserver"},
            "spec": {"containers": [{"name": "kube-apiserver", "volumeMounts": [
                {"name": "k8s-certs", "mountPath": "/etc/kubernetes/pki", "readOnly": True}]}],
                     "volumes": [{"name": "k8s-certs", "hostPath": {"path": "/etc/kubernetes/pki",
                                                                   "type": "DirectoryOrCreate"}}]}}


def test_mounts_added_are_the_new_host_paths_with_their_writability() -> None:
    old = _pod()
    new = copy.deepcopy(old)
    spec = new["spec"]
    spec["volumes"] += [{"name": "policy", "hostPath": {"path": "/etc/kubernetes/audit/policy.yaml", "type": "File"}},
                        {"name": "logs", "hostPath": {"path": "/var/log/kubernetes/audit",
                                                      "type": "DirectoryOrCreate"}},
                        {"name": "scratch", "emptyDir": {}}]
    spec["containers"][0]["volumeMounts"] += [
        {"name": "policy", "mountPath": "/etc/kubernetes/audit/policy.yaml", "readOnly": True},
        {"name": "logs", "mountPath": "/var/log/kubernetes/audit"},
        {"name": "scratch", "mountPath": "/tmp"}]
    assert mounts_added(old, new) == [
        MountPart("policy", "/etc/kubernetes/audit/policy.yaml", "/etc/kubernetes/audit/policy.yaml", "File", False),
        MountPart("logs", "/var/log/kubernetes/audit", "/var/log/kubernetes/audit", "DirectoryOrCreate", True)]
    assert mounts_added(new, new) == []
    made_writable = copy.deepcopy(old)
    del made_writable["spec"]["containers"][0]["volumeMounts"][0]["readOnly"]
    assert [m.writable for m in mounts_added(old, made_writable)] == [True], "a mount made writable is a new part"


def _plan(keep: Any = None) -> Plan:
    return Plan("cp1", "kube-apiserver", "kube-apiserver.yaml", "flags", "0123456789abcdef", "new-pod",
                FilePart("/m/kube-apiserver.yaml", 0o600, b"old", b"new"),
                [FilePart("/etc/kubernetes/audit/policy.yaml", 0o600, None, b"policy"),
                 FilePart("/etc/kubernetes/enc.yaml", 0o600, b"enc-old", b"enc-new")],
                [], 3, 4, keep)


def test_the_inverse_is_computed_when_the_plan_is_built_and_swaps_every_part() -> None:
    plan = _plan()
    inverse = plan.inverse
    assert inverse.manifest == FilePart("/m/kube-apiserver.yaml", 0o600, b"new", b"old")
    assert [(c.path, c.before, c.after) for c in inverse.companions] == [
        ("/etc/kubernetes/audit/policy.yaml", b"policy", None), ("/etc/kubernetes/enc.yaml", b"enc-new", b"enc-old")]
    assert inverse.revision == 3 and inverse.config is None and inverse.patch is None
    as_json = plan.to_dict()
    assert as_json["companions"][0] == {"path": "/etc/kubernetes/audit/policy.yaml", "mode": "0600", "before": None,
                                        "after": {"checksum": sha(b"policy"), "size": 6}}
    assert as_json["inverse"]["companions"][0]["after"] is None        # "absent": the undo removes it


def test_the_inverse_of_a_kept_change_is_the_keptin_record_undone_only_over_cpctls_write() -> None:
    configmap: Dict[str, object] = {"metadata": {"name": kc.NAME, "resourceVersion": "41"}, "data": {}}
    config = ConfigPlan(configmap, "text before", "text after", [])
    patch = PatchPlan("/etc/kubernetes/patches/kube-apiserver+json.yaml", None, b"[]\n")
    plan = _plan(KeepPlan("kube-apiserver", "apiServer", kc.FlagChange([("v", "4")]), config, patch))
    undo = plan.inverse.config
    assert undo == keptin.KeptConfig("0123456789abcdef", "kube-apiserver", "kube-apiserver.yaml", sha(b"old"),
                                     sha(b"new"), kc.NAMESPACE, kc.NAME, kc.KEY, "text before", "text after")
    assert undo.resource_version == "", "filled in by the write: the undo goes only over the version it produced"
    assert plan.inverse.patch == keptin.KeptPatch("0123456789abcdef", "kube-apiserver", "kube-apiserver.yaml",
                                                  sha(b"old"), sha(b"new"), patch.path, None, sha(b"[]\n"))
    as_json = plan.to_dict()
    assert as_json["kubeadm_config"]["resource_version"] == "41"        # the version it was read at
    assert as_json["patch"]["before"] is None and as_json["inverse"]["patch"] == {"path": patch.path, "before": None}
