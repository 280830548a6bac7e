"""Issue #37: an unknown field in a pod cpctl writes or applies is a doubt with the nearest known name
(the kubelet's lenient decoder drops it without a word: cpctl_lab/decoded.py models that)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Dict

import pytest
import yaml

from cpctl.core import manifests, podfields, podschema

POD: Dict[str, Any] = {
    "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "kube-scheduler", "namespace": "kube-system",
                                                   "creationTimestamp": None, "labels": {"tier": "control-plane"}},
    "spec": {"hostNetwork": True, "priorityClassName": "system-node-critical",
             "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
             "containers": [{"name": "kube-scheduler", "image": "registry.k8s.io/kube-scheduler:v1.30.4",
                             "command": ["kube-scheduler", "--v=2"], "resources": {"requests": {"cpu": "100m"}},
                             "livenessProbe": {"httpGet": {"host": "127.0.0.1", "path": "/livez", "port": 10259,
                                                           "scheme": "HTTPS"}, "failureThreshold": 8},
                             "volumeMounts": [{"mountPath": "/etc/kubernetes/scheduler.conf", "name": "kubeconfig",
                                               "readOnly": True}]}],
             "volumes": [{"name": "kubeconfig", "hostPath": {"path": "/etc/kubernetes/scheduler.conf",
                                                             "type": "FileOrCreate"}}]},
    "status": {},
}


def test_a_kubeadm_pod_has_no_unknown_field() -> None:
    assert podfields.doubts(POD) == []


@pytest.mark.parametrize("path, typo, wanted", [
    (("spec", "containers", 0), "volumeMount", "volumeMounts"),
    (("spec", "containers", 0), "resourcez", "resources"),
    (("spec",), "hostnetwork", "hostNetwork"),
    (("spec", "volumes", 0, "hostPath"), "paht", "path"),
    (("spec", "containers", 0, "livenessProbe", "httpGet"), "shceme", "scheme"),
    (("metadata",), "label", "labels"),
])
def test_a_typo_names_the_nearest_field(path: tuple, typo: str, wanted: str) -> None:
    pod = copy.deepcopy(POD)
    holder: Any = pod
    for step in path:
        holder = holder[step]
    holder[typo] = holder.pop(wanted) if wanted in holder else "x"
    (doubt,) = podfields.doubts(pod)
    where = ".".join(str(p) for p in path).replace(".0", "[0]")
    assert doubt.startswith("%s: unknown field %s (did you mean %s?)" % (where, typo, wanted)), doubt


def test_every_type_of_the_pod_is_judged_in_the_nodes_release() -> None:
    pod = copy.deepcopy(POD)
    pod["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpresions": []}]}}}
    (doubt,) = podfields.doubts(pod)
    assert doubt.startswith("spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
                            ".nodeSelectorTerms[0]: unknown field matchExpresions (did you mean matchExpressions?)")
    pod = copy.deepcopy(POD)
    pod["spec"]["containers"][0]["lifecycle"] = {"preStop": {"sleep": {"seconds": 5}}, "stopSignal": "SIGTERM"}
    assert podfields.doubts(pod, podfields.table_for((1, 33))) == []
    # sleep came in 1.29, stopSignal in 1.33: a 1.28 kubelet drops both without a word
    assert podfields.doubts(pod, podfields.table_for((1, 28))) == [
        "spec.containers[0].lifecycle.preStop: field sleep is not in Kubernetes 1.28 (1.29 and later): the kubelet "
        "drops it without a word",
        "spec.containers[0].lifecycle: field stopSignal is not in Kubernetes 1.28 (1.33 and later): the kubelet "
        "drops it without a word"]
    pod["spec"]["containers"][0]["zzz"] = 1
    assert "spec.containers[0]: unknown field zzz: the kubelet drops it without a word" in podfields.doubts(pod)


@pytest.mark.parametrize("minor", podschema.MINORS)
def test_a_kubeadm_pod_is_clean_in_every_release(minor: int) -> None:
    assert podfields.doubts(POD, podfields.table_for((1, minor))) == []


def test_a_field_of_a_newer_release_is_flagged_for_an_older_node() -> None:
    pod = copy.deepcopy(POD)
    pod["spec"]["hostnameOverride"] = "cp-1"
    pod["spec"]["containers"][0]["restartPolicyRules"] = [{"action": "Restart"}]
    on_130 = podfields.node_release([POD])                 # the kube-scheduler image is v1.30.4
    assert on_130 == podfields.Release(30)
    assert sorted(podfields.doubts(pod, on_130)) == [
        "spec.containers[0]: field restartPolicyRules is not in Kubernetes 1.30 (1.34 and later): the kubelet drops "
        "it without a word",
        "spec: field hostnameOverride is not in Kubernetes 1.30 (1.34 and later): the kubelet drops it without a word"]
    assert podfields.doubts(pod, podfields.table_for((1, 34))) == []
    # a field a release removed: PodResourceClaim.source (1.26-1.30, replaced by resourceClaimName in 1.31)
    pod = copy.deepcopy(POD)
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "source": {"resourceClaimName": "gpu"}}]
    assert podfields.doubts(pod, podfields.table_for((1, 30))) == []
    (doubt,) = podfields.doubts(pod, podfields.table_for((1, 31)))
    assert doubt.startswith("spec.resourceClaims[0]: field source is not in Kubernetes 1.31 (1.26 to 1.30)"), doubt


def test_known_only_leaves_out_what_the_release_drops_and_nothing_else() -> None:
    pod = copy.deepcopy(POD)
    pod["spec"]["hostnameOverride"] = "cp-1"
    pod["spec"]["containers"][0]["volumeMounts"][0]["readOnlyy"] = True           # a typo: no release has it
    pod["spec"]["containers"][0]["volumeMounts"][0]["recursiveReadOnly"] = "Disabled"    # 1.30 and later
    at_130 = podfields.known_only(pod, podfields.Release(30))
    assert "hostnameOverride" not in at_130["spec"]
    assert at_130["spec"]["containers"][0]["volumeMounts"][0] == dict(
        POD["spec"]["containers"][0]["volumeMounts"][0], recursiveReadOnly="Disabled")
    assert at_130["status"] == {} and at_130["metadata"] == POD["metadata"]
    assert pod["spec"]["hostnameOverride"] == "cp-1"                               # the input is unchanged
    assert podfields.known_only(POD, podfields.Release(30)) is POD                 # nothing to leave out: no copy
    assert podfields.known_only(pod, podfields.Release(34))["spec"]["hostnameOverride"] == "cp-1"


def test_a_change_only_in_fields_the_nodes_release_drops_keeps_the_pod() -> None:
    """The kubelet hashes the pod its release decodes: a field that release does not have changes
    nothing there (KEEPS: no new pod to wait for), while the same change on a newer node does."""
    old = yaml.safe_dump(POD).encode()
    pod = copy.deepcopy(POD)
    pod["spec"]["hostnameOverride"] = "cp-1"
    new = yaml.safe_dump(pod).encode()
    assert manifests.pod_effect(old, new, podfields.Release(30)) == manifests.KEEPS
    assert manifests.pod_effect(old, new, podfields.Release(33)) == manifests.KEEPS
    assert manifests.pod_effect(old, new, podfields.Release(34)) == manifests.NEW_POD
    assert manifests.pod_effect(old, new) == manifests.NEW_POD          # no release: only typos are known dropped
    # a table that is not the node's own release's (here: a node newer than the tables, which may know
    # fields they lack) drops nothing more: waiting for a pod that comes is safer than skipping one
    newest = podfields.table_for((1, podschema.MINORS[-1] + 1))
    assert newest.note and manifests.pod_effect(old, new, podfields.Release(30, newest.note)) == manifests.NEW_POD
    # a real change next to the dropped field is still a new pod
    pod["spec"]["containers"][0]["command"] = ["kube-scheduler", "--v=3"]
    assert manifests.pod_effect(old, yaml.safe_dump(pod).encode(), podfields.Release(30)) == manifests.NEW_POD
    # a pinned uid: the same pod (KEEPS), not containers restarted in place
    pinned = copy.deepcopy(POD)
    pinned["metadata"]["uid"] = "u-1"
    both = copy.deepcopy(pinned)
    both["spec"]["containers"][0]["restartPolicyRules"] = [{"action": "Restart"}]
    assert manifests.pod_effect(yaml.safe_dump(pinned).encode(), yaml.safe_dump(both).encode(),
                                podfields.Release(30)) == manifests.KEEPS
    assert manifests.pod_effect(yaml.safe_dump(pinned).encode(), yaml.safe_dump(both).encode(),
                                podfields.Release(34)) == manifests.IN_PLACE


def test_the_release_comes_from_the_control_planes_image_and_an_unknown_one_says_so() -> None:
    def pod(name: str, image: str) -> Dict[str, Any]:
        return {"metadata": {"name": name}, "spec": {"containers": [{"name": name, "image": image}]}}
    etcd = pod("etcd", "registry.k8s.io/etcd:3.5.15-0")
    apiserver = pod("kube-apiserver", "registry.example:5000/kube-apiserver:v1.32.8@sha256:" + "0" * 64)
    scheduler = pod("kube-scheduler", "registry.k8s.io/kube-scheduler:v1.31.12")
    assert podfields.node_release([etcd, scheduler, apiserver]) == podfields.Release(32)   # the API server's
    assert podfields.node_release([etcd, None, scheduler]) == podfields.Release(31)
    newest, oldest = podschema.MINORS[-1], podschema.MINORS[0]
    ahead = podfields.node_release([pod("kube-apiserver", "registry.k8s.io/kube-apiserver:v1.%d.0" % (newest + 1))])
    assert ahead.minor == newest and ("newer than cpctl's pod field tables: checked against 1.%d, the nearest "
                                      "older one" % newest) in ahead.note
    behind = podfields.table_for((1, oldest - 1))
    assert behind.minor == oldest and "older than cpctl's pod field tables" in behind.note
    unknown = podfields.node_release([etcd, pod("kube-scheduler", "my-scheduler:latest")])
    assert unknown.minor == newest and "release is unknown" in unknown.note


def test_the_tables_hold_upstream_facts() -> None:
    """Spot checks against the API's history (k8s.io/api core/v1 types.go, the release notes)."""
    assert podschema.SPANS["Container.resizePolicy"][0] == 27          # in-place resize, alpha in 1.27
    assert podschema.SPANS["Container.restartPolicy"][0] == 28         # sidecar containers, 1.28
    assert podschema.SPANS["VolumeMount.recursiveReadOnly"][0] == 30
    assert podschema.SPANS["PodSpec.hostnameOverride"][0] == 34
    assert "PodSpec.hostUsers" not in podschema.SPANS                  # there in every release described
    assert podschema.TYPES["Container"]["volumeMounts"] == "VolumeMount"


def test_the_generator_makes_the_module_from_a_wheel(tmp_path: Path) -> None:
    """tools/gen_podschema.py on a wheel of two releases: fields, spans, and the generated module loads."""
    import json
    import subprocess
    import sys
    import zipfile
    root = "kubernetes_validate/kubernetes-json-schema/"
    ref = "#/$defs/io.k8s.api.core.v1."

    def defs(container: Dict[str, Any]) -> str:
        return json.dumps({"$defs": {
            "io.k8s.api.core.v1.Pod": {"properties": {"spec": {"$ref": ref + "PodSpec"}, "status": {
                "$ref": ref + "PodStatus"}}},
            "io.k8s.api.core.v1.PodStatus": {"properties": {"phase": {"type": "string"}}},
            "io.k8s.api.core.v1.PodSpec": {"properties": {"containers": {"items": {"$ref": ref + "Container"}}}},
            "io.k8s.api.core.v1.Container": {"properties": container}}})
    wheel = tmp_path / "kubernetes_validate-9.9.9-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(root + "v1.30.0-local/_definitions.json", defs({"name": {}, "old": {}}))
        archive.writestr(root + "v1.30.0-local-strict/_definitions.json", defs({"strict": {}}))
        archive.writestr(root + "v1.31.0-local/_definitions.json", defs({"name": {}, "new": {}}))
    script = Path(__file__).resolve().parents[2] / "tools" / "gen_podschema.py"
    out = subprocess.run([sys.executable, str(script), str(wheel)], capture_output=True, text=True, timeout=60,
                         check=True).stdout
    assert "from kubernetes-validate-9.9.9" in out
    space: Dict[str, Any] = {}
    exec(compile(out, "podschema.py", "exec"), space)          # noqa: S102 - the generated module itself
    assert space["MINORS"] == (30, 31)
    assert space["TYPES"] == {"Pod": {"spec": "PodSpec", "status": ""}, "PodSpec": {"containers": "Container"},
                              "Container": {"name": "", "new": "", "old": ""}}
    assert space["SPANS"] == {"Container.new": (31, 31), "Container.old": (30, 30)}


def test_an_apply_on_a_node_newer_than_the_tables_says_which_table_judged_it(tmp_path: Path) -> None:
    """Through the CLI (a dry run of apply): the release comes from the node's kube-apiserver
    manifest, and a release newer than every table is checked against the newest, in a warning."""
    import json

    from tests.coreutil import MANIFESTS, NodeDirs
    newest = podschema.MINORS[-1]
    ahead = b"v1.%d.0" % (newest + 1)
    files = dict(MANIFESTS, **{"kube-apiserver.yaml": MANIFESTS["kube-apiserver.yaml"].replace(b"v1.30.0", ahead)})
    node = NodeDirs(str(tmp_path / "node"), files=files)
    new = tmp_path / "scheduler.yaml"
    new.write_bytes(MANIFESTS["kube-scheduler.yaml"].replace(b"leader-elect=true", b"leader-elect=false"))
    done = json.loads(node.run("-o", "json", "apply", "scheduler", "-f", str(new), "--dry-run").stdout)
    assert done["would_change"] is True
    assert ["the node runs Kubernetes 1.%d (registry.k8s.io/kube-apiserver:%s), newer than cpctl's pod field "
            "tables: checked against 1.%d, the nearest older one" % (newest + 1, ahead.decode(), newest)] == [
        w for w in done["warnings"] if "pod field tables" in w], done["warnings"]
